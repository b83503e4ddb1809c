"""Staff pages for API keys and the audit log.

Every change goes through keys.services (issue_key, update_key, set_active),
the functions the admin API and the management commands call, so the rules and
the audit entries are the same whichever door a change comes through. The
secret is shown once, on the page that answers the issue form, and never again.
"""
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from keys import ledger
from keys.forms import AddCreditsForm, ApiKeyChangeForm, ChangeTierForm, IssueKeyForm, RefillForm
from keys.models import SECRET_PREFIX, ApiKey, AuditLog, LedgerEntry, digest_secret
from keys.services import set_active, update_key
from utils_app import clock
from utils_app.admin import ReadOnlyAdmin
from utils_app.errors import InvalidRequest

admin.site.site_header = "Model gateway staff"
admin.site.site_title = "Model gateway staff"
admin.site.index_title = "Gateway administration"
# The index (its shortcuts and app list) and the breadcrumbs lead everywhere; the admin's navigation
# sidebar beside every page would take a quarter of a laptop's width from the lists (the key list's
# columns would scroll out of sight at 1280 px).
admin.site.enable_nav_sidebar = False


def staff_actor(request) -> str:
    return f"staff {request.user.username}"


class CreditsFilter(admin.SimpleListFilter):
    title = "credits"
    parameter_name = "credits"

    def lookups(self, request, model_admin):
        return [("zero", "at zero"), ("partial", "between zero and maxCredits"), ("full", "at maxCredits")]

    def queryset(self, request, queryset):
        if self.value() == "zero":
            return queryset.filter(credits=0)
        if self.value() == "partial":
            return queryset.filter(credits__gt=0, credits__lt=F("max_credits"))
        if self.value() == "full":
            return queryset.filter(credits=F("max_credits"))
        return queryset


class KeyFilter(admin.SimpleListFilter):
    """Narrows a list to one key (``?key=<id>``); offered as a choice only once a key is picked.

    Listing every key as a choice would not scale, so a key's page links here instead.
    """

    title = "API key"
    parameter_name = "key"

    def lookups(self, request, model_admin):
        value = self.value()
        if value and value.isdigit():
            key = ApiKey.objects.filter(pk=value).first()
            if key:
                return [(str(key.pk), str(key))]
        return []

    def has_output(self):
        return bool(self.value())

    def queryset(self, request, queryset):
        value = self.value()
        if value:
            return queryset.filter(key_id=value if value.isdigit() else None)
        return queryset


BULK_ACTIONS: dict[str, tuple[type[ChangeTierForm | AddCreditsForm | RefillForm], str, str]] = {
    "change_tier": (ChangeTierForm, "Change the tier of the selected keys", "Changed the tier of {changed} key(s)."),
    "add_credits": (AddCreditsForm, "Add credits to the selected keys",
                    "Added credits to {changed} key(s); {capped} reached their maxCredits."),
    "refill_credits": (RefillForm, "Refill the selected keys to their maxCredits", "Refilled {changed} key(s)."),
}


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyChangeForm
    # Nine columns fit beside the filters at 1280 px (tests/staff/test_browser.py): the balance with its
    # ceiling and the two request limits share a column each.
    list_display = ("display_prefix", "name", "owner_label", "tier", "balance", "limits", "admin_flag",
                    "active_flag", "last_used")
    list_display_links = ("display_prefix",)
    list_filter = ("tier", "is_active", "is_admin", CreditsFilter)
    search_fields = ("^prefix", "name", "=owner_platform_id", "owner_platform_username", "owner_category")
    search_help_text = ("Prefix (sk-…), name, owner id, owner username or category. "
                        "To find a key by its whole secret, use the form above the list.")
    sortable_by = ("display_prefix", "name", "tier", "balance", "limits", "admin_flag", "active_flag", "last_used")
    ordering = ("-created_at",)
    list_per_page = 50
    readonly_fields = ("display_prefix", "name", "is_admin", "is_active", "created_at", "updated_at",
                       "last_used_at")
    fieldsets = (
        (None, {"fields": ("display_prefix", "name", ("is_active", "is_admin"),
                           ("created_at", "last_used_at"))}),
        ("Tier, credits and limits", {"fields": ("tier", ("credits", "max_credits"), ("rpm", "rph"),
                                                 "max_concurrent")}),
        ("Budget and tokens", {"fields": (("budget_credits", "budget_period"), "tpm")}),
        ("Owner", {"fields": ("owner_platform_id", "owner_platform_username", "owner_platform_img",
                              "owner_category")}),
    )
    actions = ("change_tier", "add_credits", "refill_credits", "revoke_keys", "reactivate_keys")

    @admin.display(description="key", ordering="prefix")
    def display_prefix(self, key):
        return f"{key.prefix}…"

    @admin.display(description="owner")
    def owner_label(self, key):
        return key.owner_platform_username or key.owner_platform_id or ""

    @admin.display(description="credits / max", ordering="credits")
    def balance(self, key):
        return f"{key.credits} / {key.max_credits}"

    @admin.display(description="rpm / rph", ordering="rpm")
    def limits(self, key):
        return f"{key.rpm} / {key.rph}"

    @admin.display(description="admin", boolean=True, ordering="is_admin")
    def admin_flag(self, key):
        return key.is_admin

    @admin.display(description="active", boolean=True, ordering="is_active")
    def active_flag(self, key):
        return key.is_active

    @admin.display(description="last used (UTC)", ordering="last_used_at")
    def last_used(self, key):
        return f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"

    def has_delete_permission(self, request, obj=None):
        # Usage history refers to keys; revoke instead.
        return False

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if term.startswith(SECRET_PREFIX) and len(term) > 20:
            # A whole secret in a GET URL ends up in access logs and browser history: refuse it
            # and point to the form that posts it instead.
            self.message_user(request, "That looks like a whole secret: secrets do not belong in a URL. Use "
                                       "“Find a key by its secret” above, which sends it in a POST.",
                              messages.WARNING)
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def find_by_secret_view(self, request):
        """POST a whole secret; go to its key's page. Looked up by digest, as authentication does."""
        if request.method != "POST" or not self.has_view_permission(request):
            raise PermissionDenied
        secret = request.POST.get("secret", "").strip()
        key = ApiKey.objects.filter(digest=digest_secret(secret)).only("pk").first() if secret else None
        if key is None:
            self.message_user(request, "No key has that secret.", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:keys_apikey_changelist"))
        return HttpResponseRedirect(reverse("admin:keys_apikey_change", args=[key.pk]))

    # -------------------------------------------------------------- issuing a key

    def get_urls(self):
        wrap = self.admin_site.admin_view
        info = self.opts.app_label, self.opts.model_name
        return [
            path("find/", wrap(self.find_by_secret_view), name="%s_%s_find" % info),
            path("<path:object_id>/revoke/", wrap(self.revoke_view), name="%s_%s_revoke" % info),
            path("<path:object_id>/reactivate/", wrap(self.reactivate_view), name="%s_%s_reactivate" % info),
            *super().get_urls(),
        ]

    def add_view(self, request, form_url="", extra_context=None):
        """The issue form. The answer to a valid POST is the only page that ever shows the secret."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = IssueKeyForm(request.POST or None)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Issue an API key",
                   "form": form, "has_view_permission": True}
        if request.method == "POST" and form.is_valid():
            key, secret = form.issue(actor=staff_actor(request))
            self.log_addition(request, key, [{"added": {}}])
            response = TemplateResponse(request, "admin/keys/apikey/key_issued.html", {
                **context, "title": "API key issued", "key": key, "secret": secret,
                "key_url": reverse("admin:keys_apikey_change", args=[key.pk])})
            # The secret must not outlive this response in any cache.
            response["Cache-Control"] = "no-store"
            return response
        return TemplateResponse(request, "admin/keys/apikey/issue_key.html", context)

    # -------------------------------------------------------------- editing a key

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except InvalidRequest as exc:
            # The form's check ran against the row as it was a moment ago; if a
            # concurrent change made update_key refuse, say so instead of a 500.
            self.message_user(request, f"Not saved: {exc.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request, obj, form, change):
        changes = form.changes()
        if changes:
            update_key(key=obj, changes=changes, actor=staff_actor(request))
        obj.refresh_from_db()

    def key_page_context(self, request, key) -> dict:
        """What a key's page shows beside its form. An app above keys extends this in a subclass
        (models_catalog/admin.py adds the usage panel), since keys may not import it."""
        return {
            "audit_url": reverse("admin:keys_auditlog_changelist") + f"?key={key.pk}",
            # Judged by the clock the charge statement reads, so the page agrees with the next 402.
            "budget": key.budget_state(clock.utcnow()),
            "ledger": ledger.for_key(key),
            "ledger_url": reverse("admin:keys_ledgerentry_changelist") + f"?key={key.pk}",
            "can_change": self.has_change_permission(request, key),
        }

    def change_view(self, request, object_id, form_url="", extra_context=None):
        key = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if key is not None:
            extra.update(self.key_page_context(request, key))
        # "Add another" would lead to the issue page, which is not a form to save into.
        extra["show_save_and_add_another"] = False
        return super().change_view(request, object_id, form_url, extra)

    def _set_active_view(self, request, object_id, active: bool):
        key = self.get_object(request, object_id)
        if key is None:
            raise Http404("No such key.")
        if request.method != "POST" or not self.has_change_permission(request, key):
            raise PermissionDenied
        set_active(key=key, active=active, actor=staff_actor(request))
        self.message_user(request, f"{key.prefix}… is {'active again' if active else 'revoked'}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:keys_apikey_change", args=[key.pk]))

    def revoke_view(self, request, object_id):
        return self._set_active_view(request, object_id, False)

    def reactivate_view(self, request, object_id):
        return self._set_active_view(request, object_id, True)

    # -------------------------------------------------------------- bulk actions

    def _bulk(self, request, queryset, action: str):
        form_class, title, summary = BULK_ACTIONS[action]
        # An action that takes no input (refill) runs at once; the others ask first.
        confirmed = "apply" in request.POST or not form_class.base_fields
        form = form_class(request.POST if confirmed else None)
        if confirmed and form.is_valid():
            changed = capped = 0
            failures = []
            for key in queryset.order_by("pk"):
                try:
                    outcome = form.apply(key, actor=staff_actor(request))
                except InvalidRequest as exc:
                    failures.append(f"{key.prefix}…: {exc.message}")
                    continue
                if action == "add_credits":
                    capped += outcome
                    changed += 1
                else:
                    changed += outcome
            self.message_user(request, summary.format(changed=changed, capped=capped),
                              messages.SUCCESS)
            for failure in failures:
                self.message_user(request, f"Not changed: {failure}", messages.ERROR)
            return None  # back to the list
        return TemplateResponse(request, "admin/keys/apikey/bulk_action.html", {
            **self.admin_site.each_context(request), "opts": self.opts, "title": title, "form": form,
            "action": action, "keys": queryset.order_by("pk")[:200], "count": queryset.count(),
            "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
        })

    @admin.action(description="Change tier of selected keys…", permissions=["change"])
    def change_tier(self, request, queryset):
        return self._bulk(request, queryset, "change_tier")

    @admin.action(description="Add credits to selected keys (up to maxCredits)…", permissions=["change"])
    def add_credits(self, request, queryset):
        return self._bulk(request, queryset, "add_credits")

    @admin.action(description="Refill selected keys to maxCredits", permissions=["change"])
    def refill_credits(self, request, queryset):
        return self._bulk(request, queryset, "refill_credits")

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request, queryset):
        changed = 0
        for key in queryset.filter(is_active=True):
            set_active(key=key, active=False, actor=staff_actor(request))
            changed += 1
        self.message_user(request, f"Revoked {changed} key(s).", messages.SUCCESS)

    @admin.action(description="Reactivate selected keys", permissions=["change"])
    def reactivate_keys(self, request, queryset):
        changed = 0
        for key in queryset.filter(is_active=False):
            set_active(key=key, active=True, actor=staff_actor(request))
            changed += 1
        self.message_user(request, f"Reactivated {changed} key(s).", messages.SUCCESS)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "key_link", "kind", "signed_amount", "balance_after", "status", "operation",
                    "model", "request_id", "actor")
    list_filter = ("kind", "status", KeyFilter)
    search_fields = ("=request_id", "^key__prefix")
    search_help_text = "Request id, or key prefix (sk-…)."
    list_select_related = ("key",)
    list_per_page = 100
    show_full_result_count = False
    readonly_fields = [field.name for field in LedgerEntry._meta.fields]

    @admin.display(description="key")
    def key_link(self, entry):
        return format_html('<a href="{}">{}…</a>', reverse("admin:keys_apikey_change", args=[entry.key_id]),
                           entry.key.prefix)

    @admin.display(description="amount", ordering="amount")
    def signed_amount(self, entry):
        return f"{entry.amount:+d}"


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor", "action", "key_link", "summary")
    list_filter = ("action", KeyFilter)
    search_fields = ("actor", "^key_prefix")
    search_help_text = "Actor (e.g. 'staff alice', 'key sk-…') or key prefix."
    list_select_related = ("key",)
    list_per_page = 100
    show_full_result_count = False
    fields = ("created_at", "actor", "action", "key_link", "summary", "before", "after")
    readonly_fields = fields

    @admin.display(description="key")
    def key_link(self, entry):
        if entry.key_id:
            return format_html('<a href="{}">{}…</a>', reverse("admin:keys_apikey_change", args=[entry.key_id]),
                               entry.key_prefix)
        return entry.key_prefix or "—"

    @admin.display(description="change")
    def summary(self, entry):
        return describe_change(entry.before, entry.after)


def describe_change(before, after) -> str:
    """'credits: 10 → 50; tier: free → premium' for the members that differ."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return ", ".join(f"{name}: {value}" for name, value in (after or {}).items()) if isinstance(after, dict) \
            else ""
    parts = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            parts += [f"{name}.{member}: {old.get(member)!r} → {new.get(member)!r}"
                      for member in sorted(set(old) | set(new)) if old.get(member) != new.get(member)]
        else:
            parts.append(f"{name}: {old} → {new}")
    return "; ".join(parts)
