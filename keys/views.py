"""The admin API: change, create and revoke keys. Admin keys only (401 admin_required otherwise).

Every operation goes through keys.services, the same functions the staff UI and
the management commands use, so the rules and the audit log are the same
whichever door a change comes through. The serializers read a body into the
model's field names, and name the member of a broken rule on the way back. No
throttle: admin keys are few and trusted, and a guessed secret is out of reach
(256 random bits).
"""
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from keys import serializers as s
from keys.auth import BearerKeyAuthentication, IsAdminKey
from keys.services import find_key, issue_key, set_active, update_key
from utils_app.json_body import parse_json_object
from utils_app.schema import error_responses


def _parse(serializer_class, request) -> dict:
    serializer = serializer_class(data=parse_json_object(request.body))
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _actor(request) -> str:
    # The audit log names the admin key by its display prefix, never by its secret.
    return f"key {request.user.prefix}…"


class AdminView(APIView):
    authentication_classes = [BearerKeyAuthentication]
    fresh_key_lookup = True
    permission_classes = [IsAdminKey]


class UpdateKeyView(AdminView):
    @extend_schema(
        operation_id="admin_update_key", tags=["admin"],
        summary="Change the configuration of a key",
        description=("Strict partial update: members left out keep their value, `owner` is merged member by "
                     "member, an unknown member is a 400 naming it (`update.<name>`). The change applies to the "
                     "key's very next request and is written to the audit log."),
        request=s.UpdateKeyRequest,
        responses={200: s.ApiKeyResponse, **error_responses(400, 401, 404, 500)},
        examples=[OpenApiExample("Upgrade a key", request_only=True, value={
            "key": "sk-…", "update": {"tier": "premium", "maxCredits": 500, "owner": {"category": "partner"}}})],
    )
    def post(self, request):
        data = _parse(s.UpdateKeyRequest, request)
        with s.naming_rule_errors(s.UpdateKeyRequest):
            key = update_key(key=find_key(data["key"]), changes=data["update"], actor=_actor(request))
        return Response(s.ApiKeyResponse({"key": data["key"], "api_key": key}).data)


class CreateKeyView(AdminView):
    @extend_schema(
        operation_id="admin_create_key", tags=["admin"],
        summary="Issue a new key (beyond the spec)",
        description=("Creates a key and returns its secret in `apiKey.key`: this is the only time it is "
                     "shown, the service keeps a digest. Same rules and errors as update-key (`config.<name>`)."),
        request=s.CreateKeyRequest,
        responses={201: s.IssuedKeyResponse, **error_responses(400, 401, 500)},
    )
    def post(self, request):
        data = _parse(s.CreateKeyRequest, request)
        with s.naming_rule_errors(s.CreateKeyRequest):
            key, secret = issue_key(actor=_actor(request), **data)
        return Response(s.IssuedKeyResponse({"key": secret, "api_key": key}).data, status=201)


class RevokeKeyView(AdminView):
    @extend_schema(
        operation_id="admin_revoke_key", tags=["admin"],
        summary="Revoke a key (beyond the spec)",
        description=("The key gets 401 invalid_api_key on every operation from its next request on. "
                     "Revoking a revoked key is a no-op that answers the same."),
        request=s.RevokeKeyRequest,
        responses={200: s.RevokedKeyResponse, **error_responses(400, 401, 404, 500)},
    )
    def post(self, request):
        data = _parse(s.RevokeKeyRequest, request)
        key = set_active(key=find_key(data["key"]), active=False, actor=_actor(request))
        return Response(s.RevokedKeyResponse({"key": data["key"], "api_key": key}).data)
