"""Staff pages for providers, models, the tier x model access matrix, usage and the dashboard.

Edits are audited like key changes (keys.services.audit). Providers hold only
the *name* of the environment variable with the upstream secret, never the
secret. Usage pages read the rollups for aggregates and page through events
without counting ten million rows.
"""
import json
import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import ShowFacets
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.forms.models import BaseInlineFormSet, model_to_dict
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode

from keys.admin import ApiKeyAdmin, KeyFilter, staff_actor
from keys.models import TIER_CHOICES, TIERS, ApiKey
from keys.services import audit
from models_catalog import dashboard
from models_catalog.access import access_matrix, set_access
from models_catalog.catalog import (
    CatalogError,
    check_model,
    check_names,
    check_pool,
    check_provider,
    names_in_use,
    save_pool,
    secret_env_allowed,
    sync_secrets,
)
from models_catalog.models import AiModel, Deployment, Provider, UsageEvent
from models_catalog.provider_types import DEFAULT_MAX_TOKENS, MODEL_TYPES, TYPES
from utils_app.admin import ReadOnlyAdmin
from utils_app.errors import InvalidRequest

class AuditedAdmin(admin.ModelAdmin):
    """Writes an audit entry for every create and edit made in the staff UI.

    The entry is written once the related rows (a model's pool) are saved too, so it shows
    the whole change; the admin saves a form and its inlines in one transaction.
    """

    audit_name = ""

    def save_model(self, request, obj, form, change):
        form.audit_before = self._snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        after = self._snapshot(form.instance)
        if form.audit_before != after:
            audit(actor=staff_actor(request), action=f"{'update' if change else 'create'}_{self.audit_name}",
                  key=None, before=form.audit_before, after=after)

    def _snapshot(self, obj) -> dict:
        data = model_to_dict(obj)
        data.pop("id", None)
        # A price is kept as its exact text ("0.5"), which JSON holds and a float would round.
        return {name: f"{value.normalize():f}" if isinstance(value, Decimal) else value for name, value in data.items()}

    def has_delete_permission(self, request, obj=None):
        # Usage records and models point here: disable or repoint instead of deleting.
        return False


class CatalogRulesForm(forms.ModelForm):
    """A form whose values are checked by the catalog's one rule checker (models_catalog.catalog), in its words.

    Django's own checks of the same columns (a positive field's lower bound, the tables'
    check constraints) are left out for ``catalog_fields``, or a bad value would be refused
    twice in two wordings; the constraints stay in the database as the backstop.
    """

    catalog_fields: tuple[str, ...] = ()

    def _get_validation_exclusions(self):
        return super()._get_validation_exclusions() | set(self.catalog_fields)

    def add_catalog_error(self, exc: CatalogError) -> None:
        """The checker's message, on the field it names (the form's names are the catalog's)."""
        self.add_error(exc.field if exc.field in self.fields else None, str(exc))


# The largest value each kind of column holds; the checker states only the lower bounds.
SMALL_MAX, INTEGER_MAX = 32767, 2147483647


# ------------------------------------------------------------------ providers

class NamesField(forms.CharField):
    """Several names in one text input, separated by commas or spaces; the catalog file's list (["A", "B"]) is
    understood too, so one can be pasted from the other."""

    what = "names"

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value):
        text = super().to_python(value)
        if text.startswith("["):
            try:
                names = json.loads(text)
            except ValueError:
                names = None
            if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
                raise forms.ValidationError(f"Enter {self.what} separated by commas, or a list such as "
                                            '["A", "B"].')
            return names
        return [name for name in re.split(r"[\s,]+", text) if name]


class SecretNamesField(NamesField):
    """The names of the environment variables that hold a provider's secrets."""

    what = "variable names"


class ProviderForm(CatalogRulesForm):
    catalog_fields = ("type", "base_url", "api_key_env", "api_key_envs", "timeout", "api_version",
                      "max_tokens_default")

    type = forms.ChoiceField(choices=[(kind.name, f"{kind.name}: {kind.description}") for kind in TYPES.values()])
    base_url = forms.URLField(max_length=300, required=False, assume_scheme="https",
                              help_text="Where its API lives, e.g. https://api.openai.com/v1. Empty: the type's "
                                        "default (anthropic, gemini); a local provider has none.")
    api_key_env = forms.CharField(max_length=100, required=False, label="Secret variable",
                                  help_text="The NAME of the environment variable that holds the upstream secret, "
                                            "e.g. OPENAI_API_KEY. The secret itself is never stored here.")
    api_key_envs = SecretNamesField(max_length=1000, required=False, label="Several secret variables",
                                    help_text="Instead of one: names separated by commas, each secret its own "
                                              "deployment wherever a model lists this provider.")
    timeout = forms.FloatField(help_text="Seconds to wait for the upstream.")
    api_version = forms.CharField(max_length=40, required=False,
                                  help_text="Azure only: the api-version sent (empty: the gateway's default).")
    max_tokens_default = forms.IntegerField(max_value=INTEGER_MAX, initial=DEFAULT_MAX_TOKENS,
                                            help_text="Anthropic only: max_tokens sent when the client gives none.")

    class Meta:
        model = Provider
        fields = ("name", "type", "base_url", "api_key_env", "api_key_envs", "timeout", "api_version",
                  "max_tokens_default")

    def clean(self):
        data = super().clean()
        if any(name in self.errors for name in ("name", *self.catalog_fields)):
            return data  # the checker reads them all; each error is already on its field
        kind = TYPES[data["type"]]
        entry = {name: data[name] for name in ("type", "base_url", "api_key_env", "api_key_envs", "timeout")}
        # The fields of one type only: the checker refuses them, set, on another type (the page always has them).
        if data["api_version"] or "api_version" in kind.fields:
            entry["api_version"] = data["api_version"]
        if data["max_tokens_default"] != DEFAULT_MAX_TOKENS or "max_tokens_default" in kind.fields:
            entry["max_tokens_default"] = data["max_tokens_default"]
        try:
            checked = check_provider(data["name"], entry)
        except CatalogError as exc:
            self.add_catalog_error(exc)
            return data
        try:
            self._check_pools(kind.name)
        except CatalogError as exc:
            self.add_error("type", str(exc))
            return data
        data.update({name: checked[name] for name in self.catalog_fields})
        return data

    def _check_pools(self, new_type: str) -> None:
        """A provider's new type must still serve every model that lists it: each pool checked as the loader would."""
        if not self.instance.pk or new_type == self.instance.type:
            return
        types = {provider.name: provider.type for provider in Provider.objects.all()}
        types[self.instance.name] = new_type
        models = AiModel.objects.filter(deployments__provider=self.instance).distinct()
        for model in models.prefetch_related("deployments__provider"):
            check_pool(model.model_id, model.type, pool_entries(model), types)


def pool_entries(model: AiModel) -> list[dict]:
    """A model's pool as the catalog lists it: one entry per provider and upstream name, whatever its secrets."""
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for deployment in sorted(model.deployments.all(), key=lambda d: (d.priority, d.pk)):
        entries.setdefault((deployment.provider.name, deployment.upstream_model), {
            "provider": deployment.provider.name, "upstream_model": deployment.upstream_model,
            "priority": deployment.priority, "weight": deployment.weight, "rpm": deployment.rpm})
    return list(entries.values())


@admin.register(Provider)
class ProviderAdmin(AuditedAdmin):
    form = ProviderForm
    audit_name = "provider"
    list_display = ("name", "type", "base_url", "secrets", "secrets_present", "timeout")
    list_filter = ("type",)

    class Media:
        css = {"all": ("staff/pools.css",)}
        js = ("staff/provider_form.js",)

    @admin.display(description="secret variables")
    def secrets(self, provider):
        return ", ".join(name for name in provider.secret_envs() if name) or "—"

    @admin.display(description="secrets in environment", boolean=True)
    def secrets_present(self, provider):
        # Whether the variables are set in this process, never their values; and only for variables a
        # provider may use, so the list cannot be used to probe the rest of the environment.
        names = [name for name in provider.secret_envs() if name]
        if not names or not all(secret_env_allowed(name) for name in names):
            return None
        return all(provider.secret_configured(name) for name in names)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if change and {"api_key_env", "api_key_envs"} & set(form.changed_data):
            sync_secrets(obj)  # every pool listing it gets one deployment per secret again

    # A provider decides where its secret is sent: only superusers add or change one.
    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser


# ------------------------------------------------------------------ models and their pools

def _price_field(kind: str, help_text: str) -> forms.DecimalField:
    # No bounds of its own: the catalog's checker states them (catalog.check_pricing), in its words.
    return forms.DecimalField(required=False, label=f"{kind} price", help_text=help_text,
                              widget=forms.NumberInput(attrs={"step": "any", "placeholder": "—"}))


class AiModelForm(CatalogRulesForm):
    catalog_fields = ("cost", "allowed_fails", "cooldown_seconds", "pricing_input", "pricing_cached_input",
                      "pricing_output", "max_output_tokens", "aliases")

    tiers = forms.MultipleChoiceField(choices=TIER_CHOICES, widget=forms.CheckboxSelectMultiple, required=False,
                                      label="Access", help_text="Tiers allowed to use the model.")
    cost = forms.IntegerField(max_value=INTEGER_MAX, help_text=AiModel._meta.get_field("cost").help_text)
    allowed_fails = forms.IntegerField(max_value=SMALL_MAX, initial=3,
                                       help_text=AiModel._meta.get_field("allowed_fails").help_text)
    cooldown_seconds = forms.IntegerField(max_value=INTEGER_MAX, initial=30,
                                          help_text=AiModel._meta.get_field("cooldown_seconds").help_text)
    pricing_input = _price_field("Input", "Credits per million input tokens (chat and embedding models). Empty: "
                                          "priced by the cost per request alone.")
    pricing_cached_input = _price_field("Cached input", "Credits per million cached input tokens (chat models). "
                                                        "Empty: the input price.")
    pricing_output = _price_field("Output", "Credits per million output tokens, reasoning included (chat models).")
    max_output_tokens = forms.IntegerField(required=False, max_value=INTEGER_MAX,
                                           help_text="Chat models: the output cap a request that names none is "
                                                     "held for; required with token prices.")
    aliases = NamesField(max_length=2000, required=False,
                         help_text="Other names the model answers to, separated by commas: exact names, none "
                                   "another model's id or alias. The answer names the model as the client did.")

    class Meta:
        model = AiModel
        fields = ("model_id", "type", "owned_by", "enabled", "cost", "pricing_input", "pricing_cached_input",
                  "pricing_output", "max_output_tokens", "aliases", "routing", "allowed_fails", "cooldown_seconds",
                  "tiers")

    def clean_tiers(self):
        chosen = set(self.cleaned_data["tiers"])
        return [tier for tier in TIERS if tier in chosen]


# The catalog's names of a model's fields, where they differ from the form's.
MODEL_FORM_FIELDS = {"id": "model_id", "access": "tiers", "pricing": "pricing_input", "pricing.input": "pricing_input",
                     "pricing.cached_input": "pricing_cached_input", "pricing.output": "pricing_output"}
PRICE_FIELDS = {"input": "pricing_input", "cached_input": "pricing_cached_input", "output": "pricing_output"}


class DeploymentForm(CatalogRulesForm):
    """One entry of a model's pool: a provider with several secrets stands for one deployment per secret."""

    catalog_fields = ("priority", "weight", "rpm")

    # Declared, so the admin does not wrap it with add and change links: a provider has its own page.
    provider = forms.ModelChoiceField(queryset=Provider.objects.all())
    upstream_model = forms.CharField(max_length=120, required=False,
                                     widget=forms.TextInput(attrs={"placeholder": "the model's id"}))
    priority = forms.IntegerField(max_value=SMALL_MAX, initial=1)
    weight = forms.IntegerField(max_value=INTEGER_MAX, initial=1)
    rpm = forms.IntegerField(max_value=INTEGER_MAX, initial=0, label="rpm cap")

    class Meta:
        model = Deployment
        fields = ("provider", "upstream_model", "priority", "weight", "rpm")

    def entry(self) -> dict:
        data = self.cleaned_data
        return {"provider": data["provider"].name, "upstream_model": data["upstream_model"],
                "priority": data["priority"], "weight": data["weight"], "rpm": data["rpm"]}


class DeploymentFormSet(BaseInlineFormSet):
    """The model's pool, one row per entry; checked with the model by the loader's check_model and saved by
    catalog.save_pool, which expands each entry into one deployment per secret of its provider and keeps the
    rows that stay (their ids, and a disabled one disabled)."""

    # BaseFormSet's own, which the stubs leave out: whether a form is marked for deletion.
    _should_delete_form: Callable[[forms.BaseForm], bool]

    def get_queryset(self):
        if not hasattr(self, "_queryset"):
            rows = super().get_queryset()
            first = {}
            for pk, provider, upstream_model in rows.order_by("id").values_list("pk", "provider_id", "upstream_model"):
                first.setdefault((provider, upstream_model), pk)
            self._queryset = rows.filter(pk__in=first.values())
        return self._queryset

    def kept_forms(self) -> list[DeploymentForm]:
        """The rows that make the pool: every listed one and every new one filled in, less those marked for
        deletion."""
        kept = []
        for index, form in enumerate(self.forms):  # DeploymentForms (DeploymentInline.form)
            listed = index < self.initial_form_count()
            if (listed or form.has_changed()) and not self._should_delete_form(form):
                kept.append(form)
        return cast("list[DeploymentForm]", kept)

    def clean(self):
        super().clean()
        self.model_error = None
        if any(form.errors for form in self.kept_forms()):
            return  # every row must read before the pool can be checked
        model = self.instance
        fields = {name: getattr(model, name) for name in ("model_id", "type", "owned_by", "cost", "tiers",
                                                            "enabled", "routing", "allowed_fails", "cooldown_seconds")}
        if None in fields.values() or model.type not in MODEL_TYPES:
            return  # the model's own fields did not read: the form above says why
        forms_in_order = self.kept_forms()
        entry = {"id": fields.pop("model_id"), "access": fields.pop("tiers"), **fields,
                 "deployments": [form.entry() for form in forms_in_order]}
        # The catalog file's form of the token prices: the prices set, under their names there.
        pricing = {kind: getattr(model, name) for kind, name in PRICE_FIELDS.items() if getattr(model, name) is not None}
        if pricing:
            entry["pricing"] = pricing
        if model.max_output_tokens is not None:
            entry["max_output_tokens"] = model.max_output_tokens
        if model.aliases:
            entry["aliases"] = model.aliases
        types = {provider.name: provider.type for provider in Provider.objects.all()}
        try:
            checked = check_model(entry, types, where=f"model {model.model_id!r}")
            check_names([(checked["model_id"], checked["aliases"])],
                        names_in_use(AiModel.objects.exclude(pk=model.pk) if model.pk else AiModel.objects.all()))
        except CatalogError as exc:
            self._place(exc, forms_in_order)
            return
        self.pool = checked["deployments"]
        # What the checker made of them (an empty cached price is the input price) is what gets saved.
        for name in ("pricing_input", "pricing_cached_input", "pricing_output", "max_output_tokens", "aliases"):
            setattr(model, name, checked[name])

    def _place(self, exc: CatalogError, forms_in_order: list) -> None:
        row = re.search(r", deployment #(\d+)$", exc.where)
        if row:
            forms_in_order[int(row.group(1)) - 1].add_catalog_error(exc)
        elif exc.field == "deployments":
            raise forms.ValidationError(str(exc))
        else:
            # A rule of the model's own fields: shown on that field (AiModelAdmin.render_change_form) too.
            self.model_error = exc
            raise forms.ValidationError(f"Not saved: {exc}")

    def save(self, commit=True):
        providers = {provider.name: provider for provider in Provider.objects.all()}
        save_pool(self.instance, [{**entry, "provider": providers[entry["provider"]]} for entry in self.pool])
        # What the admin's change message reads; the audit entry has the whole pool before and after.
        self.new_objects, self.changed_objects, self.deleted_objects = [], [], []
        return []


class DeploymentInline(admin.TabularInline):
    model = Deployment
    form = DeploymentForm
    formset = DeploymentFormSet
    fields = ("provider", "upstream_model", "priority", "weight", "rpm", "secrets", "state")
    readonly_fields = ("secrets", "state")
    extra = 0
    verbose_name = "deployment"
    verbose_name_plural = "deployments (a provider with several secrets: one deployment per secret)"

    @admin.display(description="secrets")
    def secrets(self, deployment):
        if not deployment.pk:
            return "—"
        return ", ".join(name for name in deployment.provider.secret_envs() if name) or "none needed"

    @admin.display(description="state")
    def state(self, deployment):
        if not deployment.pk:
            return "—"
        rows = Deployment.objects.filter(model_id=deployment.model_id, provider_id=deployment.provider_id,
                                         upstream_model=deployment.upstream_model)
        disabled = [row for row in rows if row.disabled]
        if not disabled:
            return "enabled"
        return f"{len(disabled)} of {len(rows)} disabled: {disabled[0].disabled_reason}"

    # The pool is part of the model: whoever may change the model may change its pool.
    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("models_catalog.change_aimodel")

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("models_catalog.change_aimodel")

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm("models_catalog.change_aimodel")

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("models_catalog.view_aimodel")


@admin.register(AiModel)
class AiModelAdmin(AuditedAdmin):
    form = AiModelForm
    audit_name = "model"
    inlines = [DeploymentInline]
    list_display = ("model_id", "type", "cost", "token_prices", "alias_list", "enabled", "routing", "pool_summary",
                    "configured", "access_summary")
    list_filter = ("type", "enabled")
    search_fields = ("model_id", "owned_by", "aliases")
    fieldsets = (
        (None, {"fields": ("model_id", "aliases", "type", "owned_by", "enabled", "cost")}),
        ("Token prices (credits per million tokens)", {"fields": (
            ("pricing_input", "pricing_cached_input", "pricing_output"), "max_output_tokens")}),
        ("Routing", {"fields": ("routing", "allowed_fails", "cooldown_seconds")}),
        ("Access", {"fields": ("tiers",)}),
    )

    class Media:
        css = {"all": ("staff/pools.css",)}

    def get_queryset(self, request):
        # With their providers, for the "secret set" column: two queries a page, not one a row.
        return super().get_queryset(request).prefetch_related("deployments__provider")

    @admin.display(description="secret set", boolean=True)
    def configured(self, model):
        # False: no deployment of the model has its secret in this server's environment, so calls fail (502).
        return model.is_configured(model.deployments.all())

    @admin.display(description="price per M tokens (in / cached / out)")
    def token_prices(self, model):
        if model.pricing_input is None:
            return "—"
        return " / ".join("—" if price is None else f"{price.normalize():f}" for price in
                          (model.pricing_input, model.pricing_cached_input, model.pricing_output))

    @admin.display(description="aliases")
    def alias_list(self, model):
        return ", ".join(model.aliases) if model.aliases else "—"

    @admin.display(description="tiers")
    def access_summary(self, model):
        if len(model.tiers) == len(TIERS):
            return "all tiers"
        return ", ".join(model.tiers) or "none"

    @admin.display(description="deployments")
    def pool_summary(self, model):
        deployments = model.deployments.all()
        disabled = sum(1 for deployment in deployments if deployment.disabled)
        text = f"{len(deployments)}" + (f" ({disabled} disabled)" if disabled else "")
        return format_html('<a href="{}?{}">{}</a>', reverse("staff_deployments"), urlencode({"model": model.model_id}),
                           text)

    def _snapshot(self, obj) -> dict:
        data = super()._snapshot(obj)
        data["deployments"] = [
            {"provider": deployment.provider.name, "secret_env": deployment.secret_env,
             "upstream_model": deployment.upstream_model, "priority": deployment.priority,
             "weight": deployment.weight, "rpm": deployment.rpm}
            for deployment in Deployment.objects.filter(model_id=obj.pk).select_related("provider").order_by("id")]
        return data

    def render_change_form(self, request, context, *args, **kwargs):
        # A rule of the model's own fields, found while checking it with its pool, goes on its field as well.
        form = context["adminform"].form
        for inline in context.get("inline_admin_formsets", []):
            exc = getattr(inline.formset, "model_error", None)
            name = MODEL_FORM_FIELDS.get(exc.field, exc.field) if exc else None
            if name in form.fields and name not in form.errors:
                form.add_error(name, str(exc))
        return super().render_change_form(request, context, *args, **kwargs)

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


# A model's primary key as the page writes it: ASCII digits a bigint holds (str.isdigit also takes "²", which int()
# refuses, and a number past the column's range is a database error on PostgreSQL).
MATRIX_PK = re.compile(r"[0-9]{1,18}")


def matrix_changes(post) -> dict[int, dict[str, bool]]:
    """The cells staff toggled: the posted checkboxes compared with the state the page was drawn with."""
    def cells(name):
        found = set()
        for value in post.getlist(name):
            pk, _, tier = value.partition(":")
            if not MATRIX_PK.fullmatch(pk):
                raise InvalidRequest("The matrix form is malformed; reload the page.", param=name)
            found.add((int(pk), tier))
        return found

    shown = {int(pk) for pk in post.getlist("model") if MATRIX_PK.fullmatch(pk)}
    was, now = cells("was"), cells("access")
    changes: dict[int, dict[str, bool]] = {}
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
