"""Forms of the staff UI for keys.

The rules live on the model (ApiKey.check_rules and the ranges beside it), the workflows in
keys.services (issue_key, update_key, set_active). A form's fields are the model's fields
under the model's names, so what it hands to keys.services needs no translation, and a
KeyRuleError goes onto the field it names.
"""
import copy

from django import forms
from django.db import transaction
from django.forms.models import construct_instance

from keys.models import BIGINT_MAX, CONFIG_FIELDS, RANGES, TIER_CHOICES, ApiKey, KeyRuleError, column
from keys.services import issue_key, update_key


def _verbose_name(field: str) -> str:
    return str(column(field).verbose_name)


def _range(field: str) -> str:
    least, most = RANGES[field]
    return f"({least}–{most:,})" if most is not None and most >= 10**6 else f"({least}–{most})"


class KeyForm(forms.ModelForm):
    """What the issue form and the edit page share: the model's fields, their labels, the rules."""

    class Meta:
        model = ApiKey
        fields = CONFIG_FIELDS
        # The SPEC's spelling, which the default label (the capitalised verbose name) would spoil.
        labels = {**{field: _verbose_name(field) for field in ("max_credits", "rpm", "rph", "max_concurrent", "tpm")},
                  "budget_credits": "Budget", "budget_period": "Budget period"}
        help_texts = {"max_credits": "Credit ceiling, and what a refill restores.",
                      "rpm": f"Requests per minute {_range('rpm')}.",
                      "rph": f"Requests per hour {_range('rph')}.",
                      "max_concurrent": f"Requests in flight at once, streams included {_range('max_concurrent')}.",
                      "budget_credits": ("The most the key may be charged per period, holds included (1 or more; "
                                         "empty: no budget). A refill does not renew it: a new period does."),
                      "budget_period": "UTC calendar day, week (from Monday) or month; none with an empty budget.",
                      "tpm": f"Tokens per minute, input plus output {_range('tpm')}; empty: no limit."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, (_, most) in RANGES.items():
            if name not in self.fields:  # a view-only user gets no editable fields
                continue
            # Plain integers: the ranges are check_rules', whose messages name the field, and
            # the column types' own bounds would only repeat them with a vaguer message. Where
            # the rule sets no ceiling the column's limit stays, so no figure reaches the database
            # that it cannot hold.
            field = self.fields[name]
            self.fields[name] = forms.IntegerField(label=field.label, help_text=field.help_text,
                                                   initial=field.initial, required=field.required,
                                                   max_value=BIGINT_MAX if most is None else None)

    def check_rules(self) -> None:
        """Raise KeyRuleError if the key this form makes would break a rule."""
        raise NotImplementedError

    def _post_clean(self):
        # Instead of Django's model validation, which would check the database constraints
        # again with generic messages (and a query each): the key's own rules.
        if self.errors:
            return
        try:
            self.check_rules()
        except KeyRuleError as broken:
            self.add_error(broken.field if broken.field in self.fields else None, broken.message)


# The credits an unedited issue form gives a key: enough to try every model, as the demo key of `make
# run` has. The model's default of 0 suits a key made in code, not a form whose key should work at once.
ISSUE_FORM_CREDITS = 1000


class IssueKeyForm(KeyForm):
    """Everything `manage.py issue_key` takes, as a form."""

    class Meta(KeyForm.Meta):
        fields = ("name", *CONFIG_FIELDS, "is_admin")
        labels = {**KeyForm.Meta.labels, "is_admin": "Admin key"}
        help_texts = {
            **KeyForm.Meta.help_texts,
            "name": "A label for staff, e.g. who asked for it.",
            "max_credits": f"{KeyForm.Meta.help_texts['max_credits']} Empty: same as credits.",
            "max_concurrent": (f"{KeyForm.Meta.help_texts['max_concurrent']} "
                               f"Empty: {column('max_concurrent').default}."),
            "is_admin": "May call the /admin API operations (a flag, not a tier).",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Left empty, both take their defaults (ApiKey.new).
        self.fields["max_credits"].required = self.fields["max_concurrent"].required = False
        self.fields["max_credits"].initial = None
        self.fields["credits"].initial = ISSUE_FORM_CREDITS

    def check_rules(self):
        self.instance = ApiKey.new(**self.cleaned_data)

    def issue(self, *, actor: str) -> tuple[ApiKey, str]:
        return issue_key(actor=actor, **self.cleaned_data)


class ApiKeyChangeForm(KeyForm):
    """The key's edit page. Saving sends only what staff changed to update_key.

    Every field carries a hidden copy of the value shown when the page was
    rendered, so "changed" means "changed by this staff member": credits spent
    by the key while the page was open are not written back over.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.show_hidden_initial = True

    def changes(self) -> dict:
        """What staff changed, as update_key takes it."""
        return {field: self.cleaned_data[field] for field in self.changed_data}


    def check_rules(self):
        # The merge update_key makes: the stored row with the changed fields on top. Checked on a
        # copy: the instance is the key the page shows beside the form (its title, the ledger's
        # balance), which must stay the stored row when the save is refused; update_key writes it.
        construct_instance(self, copy.copy(self.instance), fields=self.changed_data).check_rules()


# ------------------------------------------------------------------ bulk actions on the key list

class ChangeTierForm(forms.Form):
    tier = forms.ChoiceField(choices=TIER_CHOICES)

    def apply(self, key: ApiKey, *, actor: str) -> bool:
        if key.tier == self.cleaned_data["tier"]:
            return False
        update_key(key=key, changes={"tier": self.cleaned_data["tier"]}, actor=actor)
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
                update_key(key=locked, changes={"credits": target}, actor=actor)
        return locked.credits + amount > locked.max_credits


class RefillForm(forms.Form):
    """No input: sets each selected key's credits to its maxCredits, as refill_credits does for all."""

    def apply(self, key: ApiKey, *, actor: str) -> bool:
        with transaction.atomic():
            locked = ApiKey.objects.select_for_update().get(pk=key.pk)
            if locked.credits == locked.max_credits:
                return False
            update_key(key=locked, changes={"credits": locked.max_credits}, actor=actor)
        return True
