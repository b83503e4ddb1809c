"""JSON shapes of the admin API.

Parsing is strict on purpose: an administrator who sends ``"rpm": "100"``,
``"credits": true`` or a misspelt member gets a 400 naming the member instead
of a silent coercion or a change that never happened. Value rules (tier names,
ranges, credits <= maxCredits) are not repeated here: keys.services.check_config
owns them and reports the same dotted ``param``.
"""
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError

from keys.models import OWNER_FIELDS, ApiKey

# PostgreSQL bigint: a larger credit figure would fail in the database as a 500.
BIGINT_MAX = 2**63 - 1
SECRET_MAX_LENGTH = 200


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses members it does not declare (code unknown_parameter)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            for name in data:
                if name not in self.fields:
                    raise ValidationError({name: [ErrorDetail("Unknown parameter.", code="unknown_parameter")]})
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: no booleans, no numeric strings, no 5.0."""

    default_error_messages = {"invalid": "Must be an integer.", "too_large": "Must be at most {limit}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        if abs(data) > BIGINT_MAX:
            self.fail("too_large", limit=BIGINT_MAX)
        return data


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField would turn 5 into "5"."""

    default_error_messages = {"invalid": "Must be a string."}

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false only: DRF's BooleanField would accept "yes" and 1."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


def _owner_field(member: str) -> StrictCharField:
    # The column's own max_length, so an over-long value is a 400 and never a database error.
    return StrictCharField(required=False, allow_blank=True,
                           max_length=ApiKey._meta.get_field(OWNER_FIELDS[member]).max_length)


class OwnerSerializer(StrictSerializer):
    platform_id = _owner_field("platform_id")
    platform_username = _owner_field("platform_username")
    platform_img = _owner_field("platform_img")
    category = _owner_field("category")


class ApiKeyConfigSerializer(StrictSerializer):
    """The SPEC's ApiKeyConfig; every member optional. Only the members sent end up in validated_data."""

    tier = StrictCharField(required=False, max_length=32,
                           help_text="free, augmented, premium, cool, partner, limited, exclusive or special.")
    credits = StrictIntegerField(required=False, help_text=">= 0 and <= maxCredits.")
    maxCredits = StrictIntegerField(required=False, help_text=">= 0.")
    rpm = StrictIntegerField(required=False, help_text="Requests per minute, 1 to 1000.")
    rph = StrictIntegerField(required=False, help_text="Requests per hour, 1 to 10000.")
    owner = OwnerSerializer(required=False, help_text="Merged member by member into the current owner.")


class UpdateKeyRequest(StrictSerializer):
    key = StrictCharField(max_length=SECRET_MAX_LENGTH, help_text="The secret of the key to change.")
    update = ApiKeyConfigSerializer()


class CreateKeyRequest(StrictSerializer):
    config = ApiKeyConfigSerializer(required=False, help_text=(
        "Defaults: tier free, credits 0, maxCredits = credits, rpm 60, rph 1000, empty owner."))
    name = StrictCharField(required=False, allow_blank=True, max_length=ApiKey._meta.get_field("name").max_length,
                           help_text="A label for staff.")
    isAdmin = StrictBooleanField(required=False, default=False, help_text="May the new key call /admin operations.")


class RevokeKeyRequest(StrictSerializer):
    key = StrictCharField(max_length=SECRET_MAX_LENGTH, help_text="The secret of the key to revoke.")


# ---------------------------------------------------------------- response shapes (OpenAPI only)

class OwnerOut(serializers.Serializer):
    platform_id = serializers.CharField()
    platform_username = serializers.CharField()
    platform_img = serializers.CharField()
    category = serializers.CharField()


class ApiKeyConfigOut(serializers.Serializer):
    tier = serializers.CharField()
    credits = serializers.IntegerField()
    maxCredits = serializers.IntegerField()
    rpm = serializers.IntegerField()
    rph = serializers.IntegerField()
    owner = OwnerOut()


class ApiKeyRecordOut(serializers.Serializer):
    key = serializers.CharField(help_text="The key as sent (create-key: the new secret, shown only this once).")
    config = ApiKeyConfigOut()


class ApiKeyResponse(serializers.Serializer):
    apiKey = ApiKeyRecordOut()


class IssuedKeyRecordOut(ApiKeyRecordOut):
    prefix = serializers.CharField(help_text="The display prefix the audit log and the admin UI show.")
    name = serializers.CharField()
    isAdmin = serializers.BooleanField()


class IssuedKeyResponse(serializers.Serializer):
    apiKey = IssuedKeyRecordOut()


class RevokedKeyRecordOut(ApiKeyRecordOut):
    active = serializers.BooleanField()


class RevokedKeyResponse(serializers.Serializer):
    apiKey = RevokedKeyRecordOut()
