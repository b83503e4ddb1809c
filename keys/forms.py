"""Forms of the staff UI for keys.

The rules themselves live in keys.services (check_config, issue_key, update_key,
set_active): a form parses what staff typed, asks the same function the admin
API uses, and puts that function's error next to the field it names.
"""
from django import forms
from django.db import transaction

from keys.models import OWNER_FIELDS, TIER_CHOICES, ApiKey
from keys.services import check_config, issue_key, update_key
from utils_app.errors import InvalidRequest

# The largest value a BigIntegerField column holds: a storage limit, not a business rule.
BIGINT_MAX = 2**63 - 1

# keys.services speaks the API's names (maxCredits); the forms speak the model's.
FIELD_OF_PARAM = {"tier": "tier", "credits": "credits", "maxCredits": "max_credits", "rpm": "rpm", "rph": "rph",
                  "maxConcurrent": "max_concurrent"}
API_NAME_OF_FIELD = {field: param for param, field in FIELD_OF_PARAM.items()}
OWNER_MEMBER_OF_FIELD = {field: member for member, field in OWNER_FIELDS.items()}
CONFIG_FIELDS = ("tier", "credits", "max_credits", "rpm", "rph", "max_concurrent")


def add_service_error(form: forms.BaseForm, exc: InvalidRequest) -> None:
    """Show a keys.services error on the field its ``param`` names (``update.maxCredits`` -> max_credits)."""
    field = FIELD_OF_PARAM.get((exc.param or "").rsplit(".", 1)[-1])
    form.add_error(field if field in form.fields else None, exc.message)


def _owner_fields():
    return {
        "owner_platform_id": forms.CharField(label="Owner platform id", max_length=64, required=False),
        "owner_platform_username": forms.CharField(label="Owner platform username", max_length=120,
                                                   required=False),
        "owner_platform_img": forms.CharField(label="Owner platform image", max_length=500, required=False),
        "owner_category": forms.CharField(label="Owner category", max_length=120, required=False),
    }


class IssueKeyForm(forms.Form):
    """Everything `manage.py issue_key` takes, as a form."""

    name = forms.CharField(max_length=120, required=False, help_text="A label for staff, e.g. who asked for it.")
    tier = forms.ChoiceField(choices=TIER_CHOICES, initial="free")
    credits = forms.IntegerField(initial=0, max_value=BIGINT_MAX)
    max_credits = forms.IntegerField(label="maxCredits", required=False, max_value=BIGINT_MAX,
                                     help_text="Credit ceiling, and what a refill restores. Empty: same as credits.")
    rpm = forms.IntegerField(label="rpm", initial=60, help_text="Requests per minute (1–1000).")
    rph = forms.IntegerField(label="rph", initial=1000, help_text="Requests per hour (1–10000).")
    max_concurrent = forms.IntegerField(label="maxConcurrent", initial=16, required=False,
                                        help_text="Requests in flight at once, streams included (1–1000). "
                                                  "Empty: 16.")
    is_admin = forms.BooleanField(label="Admin key", required=False,
                                  help_text="May call the /admin API operations (a flag, not a tier).")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Owner members go after the limits, in the order of the SPEC's owner object.
        admin_field = self.fields.pop("is_admin")
        self.fields.update(_owner_fields())
        self.fields["is_admin"] = admin_field

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if data.get("max_credits") is None:
            data["max_credits"] = data["credits"]
        if data.get("max_concurrent") is None:
            data["max_concurrent"] = ApiKey._meta.get_field("max_concurrent").default
        try:
            check_config(tier=data["tier"], credits=data["credits"], max_credits=data["max_credits"],
                         rpm=data["rpm"], rph=data["rph"], max_concurrent=data["max_concurrent"])
        except InvalidRequest as exc:
            add_service_error(self, exc)
        return data

    def issue(self, *, actor: str) -> tuple[ApiKey, str]:
        data = self.cleaned_data
        owner = {member: data[field] for field, member in OWNER_MEMBER_OF_FIELD.items()}
        return issue_key(actor=actor, tier=data["tier"], credits=data["credits"], max_credits=data["max_credits"],
                         rpm=data["rpm"], rph=data["rph"], max_concurrent=data["max_concurrent"], owner=owner,
                         is_admin=data["is_admin"],
                         name=data["name"])


class ApiKeyChangeForm(forms.ModelForm):
    """The key's edit page. Saving sends only what staff changed to update_key.

    Every field carries a hidden copy of the value shown when the page was
    rendered, so "changed" means "changed by this staff member": credits spent
    by the key while the page was open are not written back over.
    """

    class Meta:
        model = ApiKey
        fields = [*CONFIG_FIELDS, *OWNER_FIELDS.values()]
        labels = {"max_credits": "maxCredits", "rpm": "rpm", "rph": "rph", "max_concurrent": "maxConcurrent"}
        help_texts = {"max_credits": "Credit ceiling, and what a refill restores.",
                      "rpm": "Requests per minute (1–1000).", "rph": "Requests per hour (1–10000).",
                      "max_concurrent": "Requests in flight at once, streams included (1–1000)."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("credits", "max_credits", "rpm", "rph", "max_concurrent"):
            if name not in self.fields:  # a view-only user gets no editable fields
                continue
            # Plain integers: the ranges are keys.services' rules, and the column
            # types' own bounds would only repeat them with a vaguer message.
            model_field = self.fields[name]
            self.fields[name] = forms.IntegerField(label=model_field.label, help_text=model_field.help_text,
                                                   max_value=BIGINT_MAX)
        for field in self.fields.values():
            field.show_hidden_initial = True

    def api_changes(self) -> dict:
        """What staff changed, in the admin API's shape (owner merged member by member)."""
        changes, owner = {}, {}
        for field in self.changed_data:
            if field in API_NAME_OF_FIELD:
                changes[API_NAME_OF_FIELD[field]] = self.cleaned_data[field]
            elif field in OWNER_MEMBER_OF_FIELD:
                owner[OWNER_MEMBER_OF_FIELD[field]] = self.cleaned_data[field]
        if owner:
            changes["owner"] = owner
        return changes

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        # The same merge update_key makes: the stored row with the changed fields on top.
        merged = {field: getattr(self.instance, field) for field in CONFIG_FIELDS}
        merged.update({field: data[field] for field in self.changed_data if field in CONFIG_FIELDS})
        try:
            check_config(**merged)
        except InvalidRequest as exc:
            add_service_error(self, exc)
        return data

    def _post_clean(self):
        # Model validation would re-check the database constraints with generic
        # messages after check_config has already named the field; the instance is
        # not saved from this form anyway (update_key writes the row).
        pass


# ------------------------------------------------------------------ bulk actions on the key list

class ChangeTierForm(forms.Form):
    tier = forms.ChoiceField(choices=TIER_CHOICES)

    def apply(self, key: ApiKey, *, actor: str) -> bool:
        if key.tier == self.cleaned_data["tier"]:
            return False
        update_key(key=key, changes={"tier": self.cleaned_data["tier"]}, actor=actor, param_prefix="")
        return True


class AddCreditsForm(forms.Form):
    """Top a balance up by a number of credits, never past the key's maxCredits.

    The ceiling is the key's plan and what the daily refill restores, so raising
    it is an edit of the key, not a side effect of a top-up: a key already near
    its ceiling gets only what fits, and the result says how many were capped.
    """

    amount = forms.IntegerField(min_value=1, max_value=BIGINT_MAX, help_text="Credits to add to each key.")

    def apply(self, key: ApiKey, *, actor: str) -> bool:
        """Returns whether the key hit its ceiling (got less than the amount)."""
        amount = self.cleaned_data["amount"]
        # Lock the row before reading the balance, so a charge made meanwhile is
        # not overwritten by the absolute value update_key writes.
        with transaction.atomic():
            locked = ApiKey.objects.select_for_update().get(pk=key.pk)
            target = min(locked.credits + amount, locked.max_credits)
            if target != locked.credits:
                update_key(key=locked, changes={"credits": target}, actor=actor, param_prefix="")
        return locked.credits + amount > locked.max_credits


class RefillForm(forms.Form):
    """No input: sets each selected key's credits to its maxCredits, as refill_credits does for all."""

    def apply(self, key: ApiKey, *, actor: str) -> bool:
        with transaction.atomic():
            locked = ApiKey.objects.select_for_update().get(pk=key.pk)
            if locked.credits == locked.max_credits:
                return False
            update_key(key=locked, changes={"credits": locked.max_credits}, actor=actor, param_prefix="")
        return True
