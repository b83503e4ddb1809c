from django.contrib import admin

from utils_app.models import Fact


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    list_display = ("text", "topic", "enabled", "updated_at")
    list_editable = ("enabled",)
    list_filter = ("topic", "enabled")
    search_fields = ("text",)
