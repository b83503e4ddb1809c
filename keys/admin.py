from django.contrib import admin

from keys.models import ApiKey, AuditLog


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "tier", "credits", "max_credits", "rpm", "rph", "is_admin", "is_active",
                    "last_used_at")
    list_filter = ("tier", "is_active", "is_admin")
    search_fields = ("prefix", "name", "owner_platform_id", "owner_platform_username", "owner_category")
    readonly_fields = ("prefix", "created_at", "updated_at", "last_used_at")
    exclude = ("digest",)

    def has_add_permission(self, request):
        # Keys are issued through keys.services.issue_key so the secret is shown once and audited.
        return False


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor", "action", "key_prefix")
    list_filter = ("action",)
    search_fields = ("actor", "key_prefix")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
