"""The staff page of upstream pools: every deployment's state and last hour, with disable, enable and probe.

It reads the routing's shared health (gateway.deployment_health), so it lives on the top floor,
served under the staff site's prefix (gateway/urls.py includes these URLs before the
admin's own, whose catch-all would swallow them) and wrapped by admin.site.admin_view,
which sends anyone who is not signed-in staff to the login page and checks CSRF. Seeing
it takes the model view permission, pressing its buttons the model change permission:
a model's pool is part of the model. The buttons call gateway.deployments, as the admin
API does, so each change has its audit entry.
"""
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from gateway import deployments
from keys.admin import staff_actor
from models_catalog.models import AiModel
from utils_app.errors import NotFound

VIEW_PERMISSION = "models_catalog.view_aimodel"
CHANGE_PERMISSION = "models_catalog.change_aimodel"


class DisableForm(forms.Form):
    reason = forms.CharField(max_length=deployments.REASON_MAX_LENGTH, required=False, strip=True)


def deployments_page(request):
    """All deployments, or one model's (``?model=ID``)."""
    if not request.user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied
    model_id = request.GET.get("model") or None
    try:
        found = deployments.listing(model_id=model_id)
    except NotFound as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(reverse("staff_deployments"))
    model = AiModel.objects.get(model_id=model_id) if model_id else None
    return TemplateResponse(request, "admin/models_catalog/deployment/deployments.html", {
        **admin.site.each_context(request), "opts": AiModel._meta, "model": model, "rows": found,
        "title": f"Deployments of {model_id}" if model else "Deployments",
        "can_change": request.user.has_perm(CHANGE_PERMISSION), "here": request.get_full_path(),
        "reason_max_length": deployments.REASON_MAX_LENGTH,
    })


def _act(request, deployment_id, act):
    if not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied
    back = request.POST.get("next", "")
    if not back.startswith(reverse("staff_deployments")) or not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = reverse("staff_deployments")
    try:
        deployment = deployments.find(deployment_id)
    except NotFound as exc:
        messages.error(request, exc.message)
    else:
        act(request, deployment, f"#{deployment.pk} ({deployment.model.model_id}, {deployment.provider.name}"
                                 f"{', ' + deployment.secret_env if deployment.secret_env else ''})")
    return HttpResponseRedirect(back)


@require_POST
def disable(request, deployment_id):
    def act(request, deployment, name):
        form = DisableForm(request.POST)
        if not form.is_valid():
            messages.error(request, f"{name} not disabled: {form.errors['reason'][0]}")
            return
        was = deployment.disabled
        deployments.disable(deployment=deployment, reason=form.cleaned_data["reason"], actor=staff_actor(request))
        if was:
            messages.info(request, f"{name} was already disabled.")
        else:
            messages.success(request, f"{name} disabled: it gets no traffic until it is enabled.")
    return _act(request, deployment_id, act)


@require_POST
def enable(request, deployment_id):
    def act(request, deployment, name):
        row = deployments.enable(deployment=deployment, actor=staff_actor(request))
        messages.success(request, f"{name} is {row.health.state}.")
    return _act(request, deployment_id, act)


@require_POST
def probe(request, deployment_id):
    def act(request, deployment, name):
        probed = deployments.probe(deployment=deployment, actor=staff_actor(request))
        if not probed.result.ok:
            messages.error(request, f"Probe of {name} failed: {probed.result.detail}")
        elif probed.enabled:
            others = len(probed.enabled) - 1
            messages.success(request, f"Probe of {name} answered: enabled again"
                                      + (f", with {others} more sharing its secret." if others else "."))
        else:
            messages.success(request, f"Probe of {name} answered.")
    return _act(request, deployment_id, act)


def _page(view):
    return admin.site.admin_view(view)


# Included at admin/models_catalog/deployment/ by gateway/urls.py.
urlpatterns = [
    path("", _page(deployments_page), name="staff_deployments"),
    path("<int:deployment_id>/disable/", _page(disable), name="staff_deployment_disable"),
    path("<int:deployment_id>/enable/", _page(enable), name="staff_deployment_enable"),
    path("<int:deployment_id>/probe/", _page(probe), name="staff_deployment_probe"),
]
