"""JSON shapes of the admin API.

Parsing is strict on purpose: an administrator who sends ``"rpm": "100"``,
``"credits": true`` or a misspelt member gets a 400 naming the member instead
of a silent coercion or a change that never happened. The strict fields and base
are utils_app.serializers, shared with the metered operations.

The fields state each member's own range with the model's constants (TIERS,
RPM_RANGE, RPH_RANGE, MAX_CONCURRENT_RANGE), so the OpenAPI schema says exactly what is accepted; the
rule across members and the key's current state (credits <= maxCredits) is
keys.services.check_config's, which reports the same dotted ``param``.
"""
from rest_framework import serializers

from keys.models import MAX_CONCURRENT_RANGE, OWNER_FIELDS, RPH_RANGE, RPM_RANGE, TIERS, ApiKey
from utils_app.serializers import (
    BIGINT_MAX,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
)

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

    tier = StrictChoiceField(choices=TIERS, required=False)
    credits = StrictIntegerField(required=False, min_value=0, max_value=BIGINT_MAX,
                                 help_text="At most maxCredits (the one sent, or the key's own).")
    maxCredits = StrictIntegerField(required=False, min_value=0, max_value=BIGINT_MAX)
    rpm = StrictIntegerField(required=False, min_value=RPM_RANGE[0], max_value=RPM_RANGE[1],
                             help_text="Requests per minute.")
    rph = StrictIntegerField(required=False, min_value=RPH_RANGE[0], max_value=RPH_RANGE[1],
                             help_text="Requests per hour.")
    maxConcurrent = StrictIntegerField(required=False, min_value=MAX_CONCURRENT_RANGE[0],
                                       max_value=MAX_CONCURRENT_RANGE[1],
                                       help_text="Requests in flight at once, streams included.")
    owner = OwnerSerializer(required=False, help_text="Merged member by member into the current owner.")


class UpdateKeyRequest(StrictSerializer):
    key = StrictCharField(max_length=SECRET_MAX_LENGTH, help_text="The secret of the key to change.")
    update = ApiKeyConfigSerializer()


class CreateKeyRequest(StrictSerializer):
    config = ApiKeyConfigSerializer(required=False, help_text=(
        "Defaults: tier free, credits 0, maxCredits = credits, rpm 60, rph 1000, maxConcurrent 16, empty owner."))
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
    maxConcurrent = serializers.IntegerField()
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
