"""Response shapes of the community operations, for the OpenAPI schema."""
from typing import Any

from rest_framework import serializers


class InviteGuildSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    splash = serializers.CharField(allow_null=True)
    banner = serializers.CharField(allow_null=True)
    description = serializers.CharField(allow_null=True)
    icon = serializers.CharField(allow_null=True, help_text="Image hash on the platform's CDN.")
    vanity_url_code = serializers.CharField(allow_null=True)
    features = serializers.ListField(child=serializers.CharField())
    verification_level = serializers.IntegerField(allow_null=True)


class InviteChannelSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField(allow_null=True)
    type = serializers.IntegerField()


class InviterSerializer(serializers.Serializer):
    id = serializers.CharField()
    username = serializers.CharField()
    global_name = serializers.CharField(allow_null=True)
    avatar = serializers.CharField(allow_null=True, help_text="Image hash on the platform's CDN.")


class InviteInformationSerializer(serializers.Serializer):
    code = serializers.CharField()
    type = serializers.IntegerField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True, help_text="Null when the invite never expires.")
    expires_in = serializers.IntegerField(allow_null=True, help_text="Seconds from now; null when it never expires.")
    member_count = serializers.IntegerField(allow_null=True, help_text="The platform's approximate member count.")
    presence_count = serializers.IntegerField(allow_null=True, help_text="The platform's approximate online count.")
    guild = InviteGuildSerializer(allow_null=True)
    channel = InviteChannelSerializer(allow_null=True)
    inviter = InviterSerializer(allow_null=True, help_text="Absent for vanity invites.")


class InviteResultSerializer(serializers.Serializer):
    success = serializers.BooleanField()
    data: Any = InviteInformationSerializer(allow_null=True)  # a field: DRF's metaclass takes it off the class
    error = serializers.CharField(allow_null=True, help_text="Why the lookup failed; null on success.")


class CommunityGuildSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    invite_code = serializers.CharField()
    invite_url = serializers.URLField()
    invite = InviteInformationSerializer(allow_null=True, help_text="Live invite data; null when unavailable.")
    error = serializers.CharField(allow_null=True, help_text="Why the invite data is missing.")


class CommunityGuildListSerializer(serializers.Serializer):
    object = serializers.CharField(default="list")
    data: Any = CommunityGuildSerializer(many=True)  # a field: DRF's metaclass takes it off the class


class PlatformUserSerializer(serializers.Serializer):
    id = serializers.CharField()
    username = serializers.CharField()
    global_name = serializers.CharField(allow_null=True)
    avatar = serializers.URLField(allow_null=True, help_text="The user's avatar, or the platform's default one.")
