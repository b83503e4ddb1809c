from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.response import Response

from community import lookups
from community.serializers import CommunityGuildListSerializer, InviteResultSerializer, PlatformUserSerializer
from utils_app.limits import PublicAPIView
from utils_app.schema import ErrorBody, error_responses


def _invite_failure(description: str) -> OpenApiResponse:
    return OpenApiResponse(InviteResultSerializer, description=f"{description} (success false, data null).")


class InviteView(PublicAPIView):
    @extend_schema(
        operation_id="community_invite",
        tags=["community"],
        summary="Look up a community invite",
        description="Accepts a bare code or discord.gg/CODE, discord.com/invite/CODE, discordapp.com/invite/CODE "
                    "(scheme, www., query, fragment and a trailing slash optional). Results are cached for a few "
                    "minutes. Failures keep this operation's own body shape.",
        parameters=[OpenApiParameter("link", str, required=True, description="Invite link or code.")],
        responses={
            200: InviteResultSerializer,
            400: _invite_failure("Missing or malformed link"),
            404: _invite_failure("Unknown or expired invite"),
            429: OpenApiResponse(
                PolymorphicProxySerializer(component_name="InviteRateLimited",
                                           serializers=[InviteResultSerializer, ErrorBody],
                                           resource_type_field_name=None),
                description="The platform's rate limit (invite body) or this service's per-address limit "
                            "(error body); Retry-After says when to retry."),
            502: _invite_failure("The platform could not be reached"),
            504: _invite_failure("The platform did not answer in time"),
        },
    )
    def get(self, request):
        try:
            data = lookups.invite_for_link(request.query_params.get("link"))
        except lookups.InviteFailure as failure:
            # This operation reports failures in its own {success, data, error} shape (docs/community.md).
            return Response({"success": False, "data": None, "error": failure.message},
                            status=failure.status, headers=failure.headers)
        return Response({"success": True, "data": data, "error": None})


class GuildsView(PublicAPIView):
    @extend_schema(
        operation_id="community_guilds",
        tags=["community"],
        summary="The service's community guilds",
        description="Guilds kept by staff in the admin, each with live (cached) invite data; a guild whose invite "
                    "cannot be looked up is listed with invite null and the reason in error.",
        responses={200: CommunityGuildListSerializer, **error_responses(429)},
    )
    def get(self, request):
        return Response({"object": "list", "data": lookups.community_guilds()})


class UserView(PublicAPIView):
    @extend_schema(
        operation_id="community_user",
        tags=["community"],
        summary="Look up a community platform user",
        parameters=[OpenApiParameter("id", str, required=True, description="The user's numeric id.")],
        responses={200: PlatformUserSerializer, **error_responses(400, 404, 429, 502, 503, 504)},
    )
    def get(self, request):
        return Response(lookups.platform_user(request.query_params.get("id")))
