"""JSON shapes of the admin API.

Parsing is strict on purpose: an administrator who sends ``"rpm": "100"``,
``"credits": true`` or a misspelt member gets a 400 naming the member instead
of a silent coercion or a change that never happened. The strict fields and base
are utils_app.serializers, shared with the metered operations. Value rules (tier
names, ranges, credits <= maxCredits) are not repeated here:
keys.services.check_config owns them and reports the same dotted ``param``.
"""
from rest_framework import serializers

from keys.models import OWNER_FIELDS, ApiKey
from utils_app.serializers import StrictBooleanField, StrictCharField, StrictIntegerField, StrictSerializer

SECRET_MAX_LENGTH = 200


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
    credits = StrictIntegerField(required=False, bigint=True, help_text=">= 0 and <= maxCredits.")
    maxCredits = StrictIntegerField(required=False, bigint=True, help_text=">= 0.")
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
