"""JSON shapes of the admin API.

Parsing is strict on purpose: an administrator who sends ``"rpm": "100"``,
``"credits": true`` or a misspelt member gets a 400 naming the member instead
of a silent coercion or a change that never happened. The strict fields and base
are utils_app.serializers, shared with the metered operations.

Each member reads into an ApiKey field (its ``source`` where the SPEC's name differs),
so the validated data is in the model's terms and goes to keys.services as it is. The
members' ranges are the model's (keys.models.bounds), so the OpenAPI schema says exactly
what is accepted. The rule across members and the key's current state (credits <=
maxCredits) is ApiKey.check_rules'; its KeyRuleError names a model field, and
naming_rule_errors turns that back into the member's dotted ``param`` through the same
declared sources.
"""
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

from keys.models import BUDGET_PERIODS, TIERS, ApiKey, KeyRuleError, bounds, column
from utils_app.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
)

SECRET_MAX_LENGTH = 200


def _number(field: str, **kwargs) -> StrictIntegerField:
    """A member for one of a key's numbers, within the range the model states for ``field``."""
    least, most = bounds(field)
    kwargs.setdefault("required", False)
    return StrictIntegerField(min_value=least, max_value=most, **kwargs)


def _text(field: str, **kwargs) -> StrictCharField:
    # The column's own max_length, so an over-long value is a 400 and never a database error.
    return StrictCharField(required=False, allow_blank=True, max_length=column(field).max_length,
                           **kwargs)


class OwnerSerializer(StrictSerializer):
    platform_id = _text("owner_platform_id", source="owner_platform_id")
    platform_username = _text("owner_platform_username", source="owner_platform_username")
    platform_img = _text("owner_platform_img", source="owner_platform_img")
    category = _text("owner_category", source="owner_category")


class BudgetSerializer(StrictSerializer):
    """The most the key may be charged per UTC calendar period (weeks from Monday), holds included."""

    credits = _number("budget_credits", source="budget_credits", required=True,
                      help_text="Credits per period.")
    period = StrictChoiceField(choices=BUDGET_PERIODS, source="budget_period")

    def run_validation(self, data=empty):
        # null clears the budget: nothing here, ApiKeyConfigSerializer writes the cleared columns (its
        # members' values are merged into the key's fields, and an empty budget is no value to merge).
        if data is None:
            return {}
        return super().run_validation(data)


# The members whose null means "clear it" (no budget, no token limit), and the fields that clearing sets.
CLEARED_BY_NULL = {"budget": {"budget_credits": None, "budget_period": ""}, "tpm": {"tpm": None}}


class ApiKeyConfigSerializer(StrictSerializer):
    """The SPEC's ApiKeyConfig; every member optional. Only the members sent end up in validated_data."""

    tier = StrictChoiceField(choices=TIERS, required=False)
    credits = _number("credits", help_text="At most maxCredits (the one sent, or the key's own).")
    maxCredits = _number("max_credits", source="max_credits")
    rpm = _number("rpm", help_text="Requests per minute.")
    rph = _number("rph", help_text="Requests per hour.")
    maxConcurrent = _number("max_concurrent", source="max_concurrent",
                            help_text="Requests in flight at once, streams included.")
    # Its members are columns of the key itself, hence source "*".
    owner = OwnerSerializer(source="*", required=False, help_text="Merged member by member into the current owner.")
    budget = BudgetSerializer(source="*", required=False, allow_null=True,
                              help_text="Both members, or null to remove the budget.")
    tpm = _number("tpm", allow_null=True, help_text="Tokens per minute, input plus output; null: no limit.")

    def to_internal_value(self, data):
        validated = super().to_internal_value(data)
        # StrictSerializer reads null as "not given"; for these members it means "clear it".
        if isinstance(data, Mapping):
            for member, cleared in CLEARED_BY_NULL.items():
                if member in data and data[member] is None:
                    validated.update(cleared)
        return validated


class UpdateKeyRequest(StrictSerializer):
    key = StrictCharField(max_length=SECRET_MAX_LENGTH, help_text="The secret of the key to change.")
    update: Any = ApiKeyConfigSerializer()  # a field: DRF's metaclass takes it off the class, .update stays


def _defaults() -> str:
    default = {field: column(field).default for field in ("tier", "credits", "rpm", "rph", "max_concurrent")}
    return (f"Defaults: tier {default['tier']}, credits {default['credits']}, maxCredits = credits, "
            f"rpm {default['rpm']}, rph {default['rph']}, maxConcurrent {default['max_concurrent']}, empty owner, "
            "no budget, no tpm.")


class CreateKeyRequest(StrictSerializer):
    # Its members are the new key's fields, hence source "*"; those left out take the model's defaults.
    config = ApiKeyConfigSerializer(source="*", required=False, help_text=_defaults())
    name = _text("name", help_text="A label for staff.")
    isAdmin = StrictBooleanField(source="is_admin", required=False, default=False,
                                 help_text="May the new key call /admin operations.")


class RevokeKeyRequest(StrictSerializer):
    key = StrictCharField(max_length=SECRET_MAX_LENGTH, help_text="The secret of the key to revoke.")


def member_path(serializer: serializers.Serializer, field: str) -> str | None:
    """The dotted path of the member that ``serializer`` reads into the ApiKey field ``field``."""
    for name, member in serializer.fields.items():
        if isinstance(member, serializers.Serializer):
            inner = member_path(member, field)
            if inner is not None:
                return f"{name}.{inner}"
        elif member.source == field:
            return name
    return None


@contextmanager
def naming_rule_errors(request_class: type[serializers.Serializer]):
    """A KeyRuleError raised inside gets, as its ``param``, the member of ``request_class`` it concerns."""
    try:
        yield
    except KeyRuleError as broken:
        broken.param = member_path(request_class(), broken.field)
        raise


# ---------------------------------------------------------------- responses
# The admin operations' bodies, rendered by these same serializers that the schema declares.
# A record renders {"key": the key as sent (or the new secret), "api_key": the ApiKey}.

class OwnerOut(serializers.Serializer):
    platform_id = serializers.CharField()
    platform_username = serializers.CharField()
    platform_img = serializers.CharField()
    category = serializers.CharField()


class BudgetOut(serializers.Serializer):
    # Renders a key's budget, or null when it has none.
    credits = serializers.IntegerField(source="budget_credits")
    period = serializers.ChoiceField(choices=BUDGET_PERIODS, source="budget_period")

    def to_representation(self, instance):
        if instance.budget_credits is None:
            return None
        return super().to_representation(instance)


class ApiKeyConfigOut(serializers.Serializer):
    # A key's ApiKeyConfig, with maxConcurrent (docs/admin-api.md); also what the audit log keeps.
    tier = serializers.CharField()
    credits = serializers.IntegerField()
    maxCredits = serializers.IntegerField(source="max_credits")
    rpm = serializers.IntegerField()
    rph = serializers.IntegerField()
    maxConcurrent = serializers.IntegerField(source="max_concurrent")
    owner = OwnerOut()
    budget = BudgetOut(source="*", allow_null=True, help_text="null: no budget.")
    tpm = serializers.IntegerField(allow_null=True, help_text="Tokens per minute; null: no limit.")


class ApiKeyRecordOut(serializers.Serializer):
    key = serializers.CharField(help_text="The key as sent (create-key: the new secret, shown only this once).")
    config = ApiKeyConfigOut(source="api_key")


class ApiKeyResponse(serializers.Serializer):
    apiKey = ApiKeyRecordOut(source="*")


class IssuedKeyRecordOut(ApiKeyRecordOut):
    prefix = serializers.CharField(source="api_key.prefix",
                                   help_text="The display prefix the audit log and the admin UI show.")
    name = serializers.CharField(source="api_key.name")
    isAdmin = serializers.BooleanField(source="api_key.is_admin")


class IssuedKeyResponse(serializers.Serializer):
    apiKey = IssuedKeyRecordOut(source="*")


class RevokedKeyRecordOut(ApiKeyRecordOut):
    active = serializers.BooleanField(source="api_key.is_active")


class RevokedKeyResponse(serializers.Serializer):
    apiKey = RevokedKeyRecordOut(source="*")
