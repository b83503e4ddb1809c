from django.contrib import admin

from community.models import Guild
from utils_app.admin import EditableListAdmin


@admin.register(Guild)
class GuildAdmin(EditableListAdmin):
    list_display = ("name", "invite_code", "position", "listed", "updated_at")
    list_editable = ("position", "listed")
    list_filter = ("listed",)
    search_fields = ("name", "invite_code", "description")
