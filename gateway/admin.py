"""Staff pages of the gateway's own records: the Responses API's stored responses, read-only."""
import json

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from gateway.models import StoredResponse
from keys.admin import KeyFilter
from utils_app.admin import ReadOnlyAdmin


@admin.register(StoredResponse)
class StoredResponseAdmin(ReadOnlyAdmin):
    """A key's stored responses (``?key=<id>``, as its ledger links them), found by the request id its ledger
    and usage rows carry, by the response id, or by the key's prefix."""

    list_display = ("created_at", "id", "key_link", "model_name", "status", "request_id")
    list_filter = (KeyFilter,)
    search_fields = ("=id", "=request_id", "^key__prefix")
    search_help_text = "Response id (resp_…), request id, or key prefix (sk-…)."
    list_select_related = ("key",)
    list_per_page = 100
    show_full_result_count = False
    fields = ("id", "key_link", "created_at", "request_id", "response_json", "input_items_json")
    readonly_fields = fields

    @admin.display(description="key")
    def key_link(self, stored):
        return format_html('<a href="{}">{}…</a>', reverse("admin:keys_apikey_change", args=[stored.key_id]),
                           stored.key.prefix)

    @admin.display(description="model")
    def model_name(self, stored):
        return stored.model_name

    @admin.display(description="status")
    def status(self, stored):
        return stored.response.get("status")

    @admin.display(description="response")
    def response_json(self, stored):
        return format_html("<pre>{}</pre>", json.dumps(stored.response, indent=2, ensure_ascii=False))

    @admin.display(description="input items")
    def input_items_json(self, stored):
        return format_html("<pre>{}</pre>", json.dumps(stored.input_items, indent=2, ensure_ascii=False))
