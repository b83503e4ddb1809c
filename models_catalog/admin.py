"""Staff pages for providers, models, the tier x model access matrix, usage and the dashboard.

Edits are audited like key changes (keys.services.audit). Providers hold only
the *name* of the environment variable with the upstream secret, never the
secret. Usage pages read the rollups for aggregates and page through events
without counting ten million rows.
"""
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import ShowFacets
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.forms.models import model_to_dict
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html

from keys.admin import ApiKeyAdmin, KeyFilter, staff_actor
from keys.models import TIER_CHOICES, TIERS, ApiKey
from keys.services import audit
from models_catalog import dashboard
from models_catalog.access import access_matrix, set_access
from models_catalog.catalog import secret_env_allowed, secret_env_problem
from models_catalog.models import AiModel, Provider, UsageEvent
from utils_app.admin import ReadOnlyAdmin
from utils_app.env import env_str
from utils_app.errors import InvalidRequest

class AuditedAdmin(admin.ModelAdmin):
    """Writes an audit entry for every create and edit made in the staff UI."""

    audit_name = ""

    def save_model(self, request, obj, form, change):
        before = self._snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        after = self._snapshot(obj)
        if before != after:
            audit(actor=staff_actor(request), action=f"{'update' if change else 'create'}_{self.audit_name}",
                  key=None, before=before, after=after)

    def _snapshot(self, obj) -> dict:
        data = model_to_dict(obj)
        data.pop("id", None)
        if "provider" in data:
            data["provider"] = str(obj.provider)
        return data

    def has_delete_permission(self, request, obj=None):
        # Usage records and models point here: disable or repoint instead of deleting.
        return False


# ------------------------------------------------------------------ providers

class ProviderForm(forms.ModelForm):
    base_url = forms.URLField(max_length=300, required=False, assume_scheme="https",
                              help_text="OpenAI-compatible base URL, e.g. https://api.openai.com/v1 "
                                        "(empty for local).")

    class Meta:
        model = Provider
        fields = ("name", "type", "base_url", "api_key_env", "timeout")
        labels = {"api_key_env": "API key environment variable"}
        help_texts = {"api_key_env": "The NAME of the environment variable that holds the upstream secret, "
                                     "e.g. OPENAI_API_KEY. The secret itself is never stored here."}

    def clean_api_key_env(self):
        value = self.cleaned_data["api_key_env"].strip()
        problem = secret_env_problem(value)
        if problem:
            raise forms.ValidationError(problem)
        return value

    def clean(self):
        data = super().clean()
        if data.get("type") != "local" and not data.get("base_url") and "base_url" not in self.errors:
            self.add_error("base_url", "An HTTP provider needs a base URL.")
        if data.get("base_url"):
            data["base_url"] = data["base_url"].rstrip("/")
        return data


@admin.register(Provider)
class ProviderAdmin(AuditedAdmin):
    form = ProviderForm
    audit_name = "provider"
    list_display = ("name", "type", "base_url", "api_key_env", "secret_present", "timeout")
    list_filter = ("type",)

    @admin.display(description="secret in environment", boolean=True)
    def secret_present(self, provider):
        # Whether the variable is set in this process, never its value; and only for variables a
        # provider may use, so the list cannot be used to probe the rest of the environment.
        if not provider.api_key_env or not secret_env_allowed(provider.api_key_env):
            return None
        return bool(env_str(provider.api_key_env))

    # A provider decides where its secret is sent: only superusers add or change one.
    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser


# ------------------------------------------------------------------ models

class ProviderNames(forms.CharField):
    """An ordered, comma-separated list of provider names."""

    def to_python(self, value):
        return [name.strip() for name in (value or "").split(",") if name.strip()]

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list) else value


class AiModelForm(forms.ModelForm):
    tiers = forms.MultipleChoiceField(choices=TIER_CHOICES, widget=forms.CheckboxSelectMultiple, required=False,
                                      label="Access", help_text="Tiers allowed to use the model.")
    fallbacks = ProviderNames(required=False, help_text="Further providers tried in order when the main one "
                                                        "fails, comma-separated, e.g. backup, local.")

    class Meta:
        model = AiModel
        fields = ("model_id", "type", "owned_by", "enabled", "cost", "provider", "upstream_model", "fallbacks",
                  "tiers")

    def clean_tiers(self):
        chosen = set(self.cleaned_data["tiers"])
        return [tier for tier in TIERS if tier in chosen]

    def clean_fallbacks(self):
        names = self.cleaned_data["fallbacks"]
        known = set(Provider.objects.filter(name__in=names).values_list("name", flat=True))
        unknown = [name for name in names if name not in known]
        if unknown:
            raise forms.ValidationError(f"Unknown provider(s): {', '.join(unknown)}.")
        if len(set(names)) != len(names):
            raise forms.ValidationError("A provider is listed twice.")
        return names

    def clean(self):
        data = super().clean()
        provider = data.get("provider")
        if provider and provider.name in (data.get("fallbacks") or []):
            self.add_error("fallbacks", "The model's own provider cannot be its fallback.")
        return data


@admin.register(AiModel)
class AiModelAdmin(AuditedAdmin):
    form = AiModelForm
    audit_name = "model"
    list_display = ("model_id", "type", "cost", "enabled", "provider", "upstream_model", "access_summary")
    list_filter = ("type", "enabled", "provider")
    search_fields = ("model_id", "owned_by", "upstream_model")
    list_select_related = ("provider",)
    fieldsets = (
        (None, {"fields": ("model_id", "type", "owned_by", "enabled", "cost")}),
        ("Upstream", {"fields": ("provider", "upstream_model", "fallbacks")}),
        ("Access", {"fields": ("tiers",)}),
    )

    @admin.display(description="tiers")
    def access_summary(self, model):
        if len(model.tiers) == len(TIERS):
            return "all tiers"
        return ", ".join(model.tiers) or "none"

    def get_urls(self):
        return [path("access/", self.admin_site.admin_view(self.access_view),
                     name="models_catalog_aimodel_access"), *super().get_urls()]

    def access_view(self, request):
        """The tier x model matrix: rows are models, columns the tiers."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        can_change = self.has_change_permission(request)
        if request.method == "POST":
            if not can_change:
                raise PermissionDenied
            try:
                changed = set_access(changes=matrix_changes(request.POST), actor=staff_actor(request))
            except InvalidRequest as exc:
                self.message_user(request, f"Not saved: {exc.message}", messages.ERROR)
            else:
                if changed:
                    self.message_user(request, f"Access saved for {', '.join(changed)}.", messages.SUCCESS)
                else:
                    self.message_user(request, "Nothing changed.", messages.INFO)
            return HttpResponseRedirect(request.path)
        return TemplateResponse(request, "admin/models_catalog/aimodel/access_matrix.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "title": "Model access by tier",
            "tiers": TIERS, "rows": access_matrix(), "can_change": can_change,
        })


def matrix_changes(post) -> dict[int, dict[str, bool]]:
    """The cells staff toggled: the posted checkboxes compared with the state the page was drawn with."""
    def cells(name):
        found = set()
        for value in post.getlist(name):
            pk, _, tier = value.partition(":")
            if not pk.isdigit():
                raise InvalidRequest("The matrix form is malformed; reload the page.", param=name)
            found.add((int(pk), tier))
        return found

    shown = {int(pk) for pk in post.getlist("model") if pk.isdigit()}
    was, now = cells("was"), cells("access")
    changes = {}
    for pk, tier in was ^ now:
        if pk in shown:
            changes.setdefault(pk, {})[tier] = (pk, tier) in now
    return changes


# ------------------------------------------------------------------ usage

class CappedCountPaginator(Paginator):
    """Counts at most CAP rows: an exact COUNT(*) over millions of events costs more than the page itself.

    Beyond the cap the list says "more than", and older rows are reached by
    narrowing the filters (time range, model, key) rather than by page number.
    """

    cap = 10_000

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.capped = False

    @cached_property
    def count(self):
        counted = self.object_list.order_by()[: self.cap + 1].count()
        self.capped = counted > self.cap
        return min(counted, self.cap)


class SinceFilter(admin.SimpleListFilter):
    title = "time"
    parameter_name = "since"
    periods = {"1h": ("last hour", timedelta(hours=1)), "24h": ("last 24 hours", timedelta(hours=24)),
               "7d": ("last 7 days", timedelta(days=7)), "30d": ("last 30 days", timedelta(days=30))}

    def lookups(self, request, model_admin):
        return [(value, label) for value, (label, _) in self.periods.items()]

    def queryset(self, request, queryset):
        period = self.periods.get(self.value())
        if period:
            return queryset.filter(created_at__gte=timezone.now() - period[1])
        return queryset


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status_class"

    def lookups(self, request, model_admin):
        return [("2", "2xx"), ("4", "4xx"), ("5", "5xx")]

    def queryset(self, request, queryset):
        if self.value() in ("2", "4", "5"):
            low = int(self.value()) * 100
            return queryset.filter(status__gte=low, status__lt=low + 100)
        return queryset


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "key_link", "model", "operation", "status", "success", "input_tokens",
                    "output_tokens", "credits_charged", "latency_ms", "provider")
    list_filter = (SinceFilter, "model", "operation", "success", StatusFilter, KeyFilter)
    list_select_related = ("key", "model")
    search_fields = ("key__prefix",)  # replaced below: prefix lookups go through the key index
    search_help_text = "Key prefix (sk-…)."
    sortable_by = ("created_at",)
    list_per_page = 100
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER

    @admin.display(description="key", ordering="key")
    def key_link(self, event):
        return format_html('<a href="{}">{}…</a>', reverse("admin:keys_apikey_change", args=[event.key_id]),
                           event.key.prefix)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        # Resolve the prefix on the small, indexed key table first, then filter
        # events by key id over the (key, created_at) index.
        key_ids = list(ApiKey.objects.filter(prefix__startswith=term[:16]).values_list("pk", flat=True)[:1000])
        return queryset.filter(key_id__in=key_ids), False

    def get_urls(self):
        return [path("dashboard/", self.admin_site.admin_view(self.dashboard_view),
                     name="models_catalog_dashboard"), *super().get_urls()]

    def dashboard_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        days = request.GET.get("days", "30")
        days = int(days) if days.isdigit() and int(days) in dashboard.WINDOWS else 30
        return TemplateResponse(request, "admin/models_catalog/usageevent/dashboard.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "title": "Usage dashboard",
            "d": dashboard.overview(days=days),
        })


# A key's page with its usage panel. Usage is this app's, and keys sits a floor below and may not
# import it, so this floor takes over the key admin that keys registered and adds the panel.
admin.site.unregister(ApiKey)


@admin.register(ApiKey)
class ApiKeyWithUsageAdmin(ApiKeyAdmin):
    def key_page_context(self, request, key) -> dict:
        return {
            "usage": dashboard.key_usage(key),
            "usage_url": reverse("admin:models_catalog_usageevent_changelist") + f"?key={key.pk}",
            **super().key_page_context(request, key),
        }
