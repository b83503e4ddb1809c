import re

from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from utils_app.models import Fact

_ROW_ID_NAME = re.compile(r"form-[0-9]+-id")
_NUMBER = re.compile(r"\s*[-+]?([0-9]+)\s*")  # one way to match a text: no backtracking over its digits


def _past_a_bigint(value: str) -> bool:
    # By its digits first: int() refuses a text of more than 4,300 of them (a ValueError, so a 500 here).
    found = _NUMBER.fullmatch(value)
    digits = found[1].lstrip("0") if found else ""
    return len(digits) > 19 or (digits != "" and int(digits) >= 2**63)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records written only by the changes they record (ledger, audit log, usage): staff look, never touch."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class EditableListAdmin(admin.ModelAdmin):
    """A list whose rows staff edit in place (``list_editable``). The rows' ids come back in the POST; a
    number past a bigint made the admin's own lookup of the edited rows a 500 on SQLite (the embedded
    default), which cannot bind one: such a list is sent back to be reloaded. Any other id that names no
    row is the admin's own error on the page."""

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and "_save" in request.POST and any(
                _ROW_ID_NAME.fullmatch(name) and any(_past_a_bigint(value) for value in request.POST.getlist(name))
                for name in request.POST):
            self.message_user(request, "The list sent back rows it does not have; reload it and try again.",
                              messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().changelist_view(request, extra_context)


@admin.register(Fact)
class FactAdmin(EditableListAdmin):
    list_display = ("text", "topic", "enabled", "updated_at")
    list_editable = ("enabled",)
    list_filter = ("topic", "enabled")
    search_fields = ("text",)
