"""OpenAPI pieces shared by every view's @extend_schema: the one error body, the key scheme, the hook.

The schema is a promise to generated clients and to the fuzz test (tests/utils_app/test_fuzz_schema.py):
whatever it calls a valid request is served, whatever it calls invalid is refused with a 4xx, and
every status an operation can answer is listed. Rules that hold for many operations at once (the
database being down, the body size limit, the per-address limit, Idempotency-Key) are added here
by the postprocessing hook instead of on every view.
"""
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.plumbing import get_class
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
    400: "Bad request (invalid_json, invalid_body, missing_field, invalid_value, unknown_parameter, "
         "model_type_mismatch)",
    401: "Missing, invalid or revoked key (missing_api_key, invalid_api_key, admin_required)",
    402: "Not enough credits (insufficient_credits)",
    403: "The key's tier may not use the model (model_not_allowed)",
    404: "Not found (model_not_found, key_not_found, …)",
    405: "Method not allowed",
    408: "The request body did not arrive within BODY_READ_SECONDS (request_timeout)",
    409: "The request with this Idempotency-Key is still in flight (idempotency_conflict)",
    413: "Request body too large (request_too_large)",
    422: "This Idempotency-Key was used with a different body (idempotency_mismatch)",
    429: "Rate limit exceeded (rate_limit_exceeded, too_many_failed_authentications; Retry-After header)",
    500: "Unexpected server error (internal_error)",
    502: "Upstream unavailable (upstream_unavailable)",
    503: "A dependency is not configured or down (service_unavailable: the database; Retry-After header)",
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


# Where a component keeps its serializer's schema_rules until the hook below merges them in.
_RULES = "x-schema-rules"


class SchemaRulesExtension(OpenApiSerializerExtension):
    """Carries a serializer's ``schema_rules`` (JSON-schema keywords) into its component.

    For what validation enforces beyond the fields: unknown members refused
    (``additionalProperties: false``), rules across members (``anyOf``), so the
    schema calls valid exactly what the service accepts. They are merged by
    ``add_shared_errors``, after drf-spectacular's enum hook, which would otherwise
    fold the enums inside the rules into the fields' own enum components.
    """

    target_class = "rest_framework.serializers.Serializer"
    match_subclasses = True

    @classmethod
    def _matches(cls, target) -> bool:
        return super()._matches(target) and getattr(get_class(target), "schema_rules", None) is not None

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, _RULES: get_class(self.target).schema_rules}


# Paths whose every error leaves as ErrorBody (docs/foundation.md, "Errors and limits on input"); the HTML landing page is not among them.
_JSON_ERROR_PATHS = ("/v1/", "/admin/", "/utils/", "/benchmark", "/health")
_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
IDEMPOTENCY_KEY = {
    "in": "header", "name": "Idempotency-Key", "required": False,
    "description": "Any 1 to 255 printable ASCII characters. The same key with the same body within 24 hours "
                   "is charged once and answered with the first result; 409 while the first is in flight, "
                   "422 with a different body.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\u0020-\\u007e]+$"},
}


# One server-sent event of a stream (text/event-stream), as a client's SSE parser sees it.
SSE_EVENT = {
    "type": "object", "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "description": "A JSON object per event (for chat, a chat.completion.chunk; "
                                                  "after a failure mid-stream, the error body), then [DONE]."},
    },
}


def _error(status: int) -> dict:
    return {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            "description": _MEANING[status]}


def _views(generator) -> dict:
    """(path, method) -> the view class serving it."""
    return {(path, method.lower()): getattr(callback, "cls", None)
            for path, _, method, callback in getattr(generator, "endpoints", None) or ()}


def add_shared_errors(result, generator, request, public):
    """POSTPROCESSING_HOOK: the errors every JSON operation of a kind may answer, with the shared body.

    Views list the errors their own logic raises; these are the same everywhere:
    500 (anything unexpected) and 503 (the database down or its pool exhausted) on
    every JSON operation, 408 and 413 where there is a body, 429 where a throttle runs or a key is
    authenticated (unknown keys are limited per client address, utils_app.limits), and
    Idempotency-Key with its 409 and 422 on every operation that charges credits (402).
    It also merges the serializers' schema_rules into their components.
    """
    components = result.get("components", {}).get("schemas", {})
    for component in components.values():
        component.update(component.pop(_RULES, {}))
    if "ErrorBody" not in components:
        return result
    views = _views(generator)
    for path, operations in result.get("paths", {}).items():
        if not path.startswith(_JSON_ERROR_PATHS):
            continue
        for method, operation in operations.items():
            if method not in _METHODS:
                continue
            responses = operation.setdefault("responses", {})
            statuses = [500, 503]
            if "requestBody" in operation:
                # Every body is parsed as a JSON object; an absent one is invalid_json, even where
                # all its members are optional, unless the view says it may be left out.
                optional = getattr(views.get((path, method)), "optional_body", False)
                operation["requestBody"]["required"] = not optional
                statuses += [408, 413]
            view = views.get((path, method))
            if getattr(view, "throttle_classes", None) or getattr(view, "authentication_classes", None):
                statuses.append(429)
            if "402" in responses:
                statuses += [409, 422]
                _add_parameter(operation, IDEMPOTENCY_KEY)
            for status in statuses:
                responses.setdefault(str(status), _error(status))
            _describe_event_streams(responses)
            operation["responses"] = dict(sorted(responses.items()))
    return result


def _describe_event_streams(responses: dict) -> None:
    """An event stream is validated event by event: describe one event, not the whole body as a string."""
    for response in responses.values():
        stream = (response.get("content") or {}).get("text/event-stream")
        if stream is not None and stream.get("schema", {}).get("type") == "string":
            stream["schema"] = SSE_EVENT


def _add_parameter(operation: dict, parameter: dict) -> None:
    parameters = operation.setdefault("parameters", [])
    if not any(p.get("in") == parameter["in"] and p.get("name", "").lower() == parameter["name"].lower()
               for p in parameters):
        parameters.append(dict(parameter))
