"""OpenAPI pieces shared by every view's @extend_schema: the one error body."""
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

ErrorBody = inline_serializer(
    name="ErrorBody",
    fields={
        "error": inline_serializer(
            name="ErrorDetail",
            fields={
                "message": serializers.CharField(),
                "type": serializers.CharField(),
                "param": serializers.CharField(allow_null=True),
                "code": serializers.CharField(allow_null=True),
            },
        )
    },
)

_MEANING = {
    400: "Bad request (invalid_json, missing_field, invalid_value, unknown_parameter, model_type_mismatch)",
    401: "Missing, invalid or revoked key (missing_api_key, invalid_api_key, admin_required)",
    402: "Not enough credits (insufficient_credits)",
    403: "The key's tier may not use the model (model_not_allowed)",
    404: "Not found (model_not_found, key_not_found, …)",
    405: "Method not allowed",
    413: "Request body too large (request_too_large)",
    429: "Rate limit exceeded (rate_limit_exceeded; Retry-After header)",
    500: "Unexpected server error (internal_error)",
    502: "Upstream unavailable (upstream_unavailable)",
    503: "A dependency is not configured or down",
    504: "Upstream timed out (upstream_timeout)",
}


def error_responses(*statuses: int) -> dict:
    """``responses=`` entries for @extend_schema: each status with the shared error body."""
    return {status: OpenApiResponse(ErrorBody, description=_MEANING.get(status, "Error")) for status in statuses}
