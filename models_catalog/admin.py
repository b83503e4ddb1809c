from django.contrib import admin

from models_catalog.models import AiModel, Provider, UsageEvent


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    list_display = ("name", "type", "base_url", "api_key_env", "timeout")


@admin.register(AiModel)
class AiModelAdmin(admin.ModelAdmin):
    list_display = ("model_id", "type", "cost", "provider", "enabled")
    list_filter = ("type", "enabled", "provider")
    search_fields = ("model_id", "owned_by")


@admin.register(UsageEvent)
class UsageEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "key", "model", "operation", "status", "input_tokens", "output_tokens",
                    "credits_charged", "latency_ms")
    list_filter = ("operation", "success")
    list_select_related = ("key", "model")
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
