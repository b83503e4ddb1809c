"""OpenAPI pieces shared by every view's @extend_schema: the one error body, the key scheme, the hook."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension
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


class BearerKeyScheme(OpenApiAuthenticationExtension):
    """Describes keys.auth.BearerKeyAuthentication (the SPEC's "Api key auth") in the schema."""

    target_class = "keys.auth.BearerKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "Api key auth: send 'Authorization: Bearer <API_KEY>'."}


# Paths whose every error leaves as ErrorBody (CONTRACT §4); the HTML landing page is not among them.
_JSON_ERROR_PATHS = ("/v1/", "/admin/", "/utils/", "/benchmark", "/health")
_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def add_shared_errors(result, generator, request, public):
    """POSTPROCESSING_HOOK: every JSON operation may answer 500 with the shared error body.

    Views list the errors their own logic raises; the unexpected-error case is
    the same everywhere, so it is added here instead of on every view.
    """
    components = result.get("components", {}).get("schemas", {})
    if "ErrorBody" not in components:
        return result
    for path, operations in result.get("paths", {}).items():
        if not path.startswith(_JSON_ERROR_PATHS):
            continue
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            responses = operation.setdefault("responses", {})
            responses.setdefault("500", {
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                "description": _MEANING[500],
            })
    return result
