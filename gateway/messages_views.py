"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the metered views
(gateway.views), its request translated by gateway.messages, and the request bodies the OpenAPI schema
declares for it."""
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers as drf_serializers
from rest_framework.response import Response

from gateway import pipeline, services
from gateway.chat_serializers import MODEL_ID_MAX, ChatCompletionRequest
from gateway.messages import dialect as messages_dialect
from gateway.messages import errors as messages_errors
from gateway.messages import request as messages_request
from gateway.notes import notes_of
from gateway.views import METERED_HEADERS, KeyLimitedView, MeteredView, body_example
from utils_app.errors import RequestTooLarge
from utils_app.json_body import parse_json_object


AnthropicErrorBody = inline_serializer(name="AnthropicErrorBody", fields={
    "type": drf_serializers.CharField(help_text='Always "error".'),
    "error": inline_serializer(name="AnthropicErrorDetail", fields={
        "type": drf_serializers.CharField(help_text="Anthropic's error type: invalid_request_error, "
                                                    "authentication_error, billing_error, permission_error, "
                                                    "not_found_error, request_too_large, rate_limit_error, "
                                                    "api_error, overloaded_error"),
        "message": drf_serializers.CharField()}),
})
ANTHROPIC_ERRORS = {status: OpenApiResponse(AnthropicErrorBody, description=f"Anthropic's error type "
                                                                           f"{messages_errors.error_type(status)}")
                    for status in (400, 401, 402, 403, 404, 405, 409, 413, 422, 429, 500, 502, 503, 504)}

# Anthropic's request body as gateway.messages.request.translate reads it: the members it requires, with their
# types; the translated request is then held to ChatCompletionRequest's ranges. An optional member sent as
# null counts as left out. A member it does not translate goes on to an anthropic deployment as it is and is
# left out and named (X-Gateway-Ignored) by any other, so both bodies stay open; count_tokens counts the
# conversation, the system prompt and the tools.
ANTHROPIC_MESSAGE = {
    "type": "object", "required": ["role", "content"],
    "properties": {
        "role": {"type": "string", "enum": ["user", "assistant", "system"],
                 "description": "A system message among the turns (Claude Code's reminders) stands where it is."},
        "content": {"oneOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "description": "Content blocks: text, image, document, "
                                                             "search_result and tool_result in user turns, text "
                                                             "and tool_use in assistant turns; other blocks "
                                                             "(thinking, server tools') reach anthropic "
                                                             "deployments only.",
             "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}}]},
    },
}
ANTHROPIC_COMMON = {
    "model": {"type": "string", "minLength": 1, "maxLength": MODEL_ID_MAX, "pattern": "^[^\\u0000]+$",
              "description": "A chat model's id (GET /v1/models)."},
    "messages": {"type": "array", "minItems": 1, "maxItems": settings.MAX_CHAT_MESSAGES, "items": ANTHROPIC_MESSAGE},
    "system": {"nullable": True, "oneOf": [
        {"type": "string"},
        {"type": "array", "description": "Text blocks (a block of another type is left out).",
         "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}},
                   "anyOf": [{"properties": {"type": {"not": {"enum": ["text"]}}}},
                             {"required": ["text"], "properties": {"text": {"type": "string"}}}]}}]},
    "tools": {"type": "array", "nullable": True,
              "description": "Client tools (name, description, input_schema); tools of Anthropic's own types and "
                             "tools marked defer_loading reach anthropic deployments only.",
              "items": {"type": "object", "anyOf": [{"required": ["name", "input_schema"]},
                                                    {"required": ["type"], "properties": {"type": {"type": "string",
                                                                                          "not": {"enum": ["custom"]}}}}]}},
    "tool_choice": {"type": "object", "nullable": True, "required": ["type"],
                    "properties": {"type": {"type": "string", "enum": ["auto", "any", "tool", "none"]},
                                   "name": {"type": "string", "minLength": 1,
                                            "description": "The tool to call (with type tool)."},
                                   "disable_parallel_tool_use": {"type": "boolean"}}},
    "thinking": {"type": "object", "nullable": True},
}
MESSAGES_REQUEST = {
    "type": "object", "required": ["model", "messages", "max_tokens"],
    "description": "Anthropic's Messages request. Members not listed reach the model's anthropic deployments as "
                   "they are; a deployment of another type goes without them and names them in the answer's "
                   "X-Gateway-Ignored header.",
    "properties": {
        **ANTHROPIC_COMMON,
        "max_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean", "nullable": True},
        "temperature": {"type": "number", "nullable": True, "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "nullable": True, "minimum": 0, "maximum": 1},
        "stop_sequences": {"type": "array", "nullable": True, "items": {"type": "string"}},
        "metadata": {"type": "object", "nullable": True,
                     "description": "A string user_id is passed on as the request's user."},
    },
}
COUNT_TOKENS_REQUEST = {
    "type": "object", "required": ["model", "messages"],
    "description": "Anthropic's count_tokens request: a Messages request without max_tokens and the generation "
                   "members.",
    "properties": ANTHROPIC_COMMON,
}
HELLO = [{"role": "user", "content": "Hello!"}]


@extend_schema_view(post=extend_schema(
    operation_id="create_message", tags=["models"],
    summary="Anthropic Messages API (optionally streamed as server-sent events)",
    description="Anthropic's request and answer shapes, for clients built on Anthropic's SDK; the key as "
                "`x-api-key` or `Authorization: Bearer`. Served by every chat model and metered exactly like "
                "a chat completion (costs the model's `cost`). With `stream: true` the answer is Anthropic's "
                "event stream (`message_start` … `message_stop`). Errors are "
                "`{\"type\": \"error\", \"error\": {\"type\", \"message\"}}`. " + METERED_HEADERS,
    request={"application/json": MESSAGES_REQUEST},
    examples=body_example(model="local-chat", max_tokens=256, messages=HELLO),
    responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/event-stream"): OpenApiTypes.STR,
               **ANTHROPIC_ERRORS},
))
class MessagesView(MeteredView):
    """POST /v1/messages: the Anthropic request translated into a chat request (gateway.messages), validated
    as every chat request is, and run through the same pipeline with Anthropic's dialect."""

    request_serializer = ChatCompletionRequest

    def get_exception_handler(self):
        return messages_errors.exception_handler

    def validate(self, body):
        self.anthropic_body = body  # passed through as it is to an anthropic deployment
        params, self.translation = messages_request.translate(body)  # and what the other types cannot honour
        return super().validate(params)

    def operate(self, request, params, sent):
        beta = messages_request.beta_header(request.META.get("HTTP_ANTHROPIC_BETA", ""))
        model = notes_of(request).model
        if model is not None:  # what no deployment of the pool can serve is refused before the charge
            messages_dialect.refuse_before_charge(model, params, self.translation)
        dialect = messages_dialect.AnthropicDialect(self.anthropic_body, beta=beta, params=params,
                                            translation=self.translation)
        return services.chat_completion(request=request, key=request.user, params=params, dialect=dialect)


@extend_schema_view(post=extend_schema(
    operation_id="count_message_tokens", tags=["models"], summary="Anthropic Messages API: count input tokens",
    description="`{\"input_tokens\": N}` from the gateway's own estimate of the request's input; free of "
                "charge, but the key must be valid and allowed the model, and the request counts against its "
                "rpm and rph. A body larger than the service's COUNT_TOKENS_MAX_BYTES (2 MiB unless set) is a "
                "413 `request_too_large`.",
    request={"application/json": COUNT_TOKENS_REQUEST}, examples=body_example(model="local-chat", messages=HELLO),
    # Free: never 402, and so no Idempotency-Key (409, 422) either.
    responses={200: OpenApiTypes.OBJECT,
               **{status: answer for status, answer in ANTHROPIC_ERRORS.items() if status not in (402, 409, 422)}},
))
class CountTokensView(KeyLimitedView):
    """Free of charge, but a request like any other to the key's rpm and rph (no charge, no ledger row)."""

    def get_exception_handler(self):
        return messages_errors.exception_handler

    def post(self, request):
        # Free, so bounded before any parsing: a 15 MB body took 1.9 s of CPU to count (docs/hardening.md).
        if len(request.body) > settings.COUNT_TOKENS_MAX_BYTES:
            raise RequestTooLarge(f"The request body is larger than {settings.COUNT_TOKENS_MAX_BYTES} bytes, the "
                                  f"most /v1/messages/count_tokens takes.")
        body = parse_json_object(request.body)
        if isinstance(body.get("model"), str):
            # A model the gateway does not serve is what the client learns first, whatever else its body holds.
            pipeline.resolve_model(key=request.user, operation="chat", model_id=body["model"])
        params = messages_request.chat_params(body, counting=True)
        params, _ = ChatCompletionRequest(data=params).validated()
        return Response({"input_tokens": services.estimate_chat_tokens(params)})
