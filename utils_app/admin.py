from django.contrib import admin

from utils_app.models import Fact


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written only by the changes they record (ledger, audit log, usage): staff look, never touch."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    list_display = ("text", "topic", "enabled", "updated_at")
    list_editable = ("enabled",)
    list_filter = ("topic", "enabled")
    search_fields = ("text",)
