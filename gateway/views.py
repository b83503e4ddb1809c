"""HTTP views of the metered model operations: parse, call one service, answer.

The rules live in gateway.serializers (what a valid request is) and
gateway.pipeline (the metering pipeline); these views only translate.
"""
from django.conf import settings
from django.http import FileResponse, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view, inline_serializer
from rest_framework import serializers as drf_serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway import idempotency, media, pipeline, routing, serializers, services
from gateway.messages import dialect as messages_dialect
from gateway.messages import errors as messages_errors
from gateway.messages import request as messages_request
from keys.auth import BearerKeyAuthentication, HasApiKey
from gateway.notes import RequestNotes, notes_of
from gateway.upstream import honour
from keys import limits
from keys.models import ApiKey
from models_catalog import catalog
from utils_app.error_handler import json_error
from utils_app.errors import GatewayError, MethodNotAllowed, NotFound, RequestTooLarge
from utils_app.json_body import parse_json_object
from utils_app.schema import error_responses
from utils_app.serializers import StrictSerializer

ERRORS = error_responses(400, 401, 402, 403, 404, 409, 413, 422, 429, 500, 502, 503, 504)
METERED_HEADERS = ("Every answer also carries X-Remaining-Credits and X-RateLimit-Limit-Requests, "
                   "X-RateLimit-Remaining-Requests, X-RateLimit-Reset-Requests (the minute window).")


def body_example(**body) -> list[OpenApiExample]:
    """An operation's request example. Its model is one of the shipped catalog's local models of the
    operation's type, which every server has: a model of another type would be refused (model_type_mismatch)
    and a paid one answers 502 until its secret is set (tests/gateway/test_schema.py holds them to it)."""
    return [OpenApiExample("A local model", request_only=True, value=body)]


class JsonNegotiation(BaseContentNegotiation):
    """JSON whatever the Accept header says.

    Speech sends raw audio and chat an event stream on their own terms, and errors
    are JSON for everyone; DRF's default negotiation would instead refuse an
    ``Accept: application/octet-stream`` client with 406 before even authenticating.
    """

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def wants_raw_audio(accept: str) -> bool:
    """Whether a speech answer is the audio itself: yes unless the Accept header names application/json
    with a q-value above 0 and no lower than that of any audio type it names (audio/*, octet-stream).

    A client that names no type (no Accept, or ``*/*`` as curl sends) gets the bytes, as OpenAI answers
    and as ``curl --output speech.mp3`` expects; the JSON with the stored file's URL is for a client
    that asks for JSON.
    """
    raw_q = json_q = 0.0
    for part in accept.split(","):
        media_type, *params = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        media_type = media_type.lower()
        if media_type == "application/octet-stream" or media_type.startswith("audio/"):
            raw_q = max(raw_q, quality)
        elif media_type == "application/json":
            json_q = max(json_q, quality)
    return not (json_q > 0 and json_q >= raw_q)


def respond(outcome: pipeline.Outcome):
    response: HttpResponseBase
    if outcome.stream is not None:
        response = StreamingHttpResponse(outcome.stream, content_type="text/event-stream; charset=utf-8",
                                         status=outcome.status)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # asks an nginx-style proxy in front not to buffer the events
    elif outcome.content is not None:
        response = HttpResponse(outcome.content, content_type=outcome.content_type, status=outcome.status)
    elif outcome.body is not None:
        # The bytes DRF's Response would render (its JSONRenderer, JsonNegotiation's plain
        # application/json: no indent), without the template response around them and its render
        # pass; what DRF adds to any response (Allow) finalize_response still adds.
        response = HttpResponse(idempotency.rendered(outcome.body), content_type="application/json",
                                status=outcome.status)
    else:
        response = Response(None, status=outcome.status)  # no body, no Content-Type, as DRF answers it
    for name, value in outcome.headers.items():
        response[name] = value
    return response


class KeyLimitedView(APIView):
    """A view for keys: authenticated, counted against the key's limits right after authentication, and
    answered with the key's balance and limits in headers.

    The request's record (gateway.notes) is built here in the contract's order: DRF authenticates the
    key (keys.auth) and checks it is there, then ``count`` reads what the limits' one Redis round trip
    also asks for (``shared_reads``) and counts the request (keys.limits.enforce)."""

    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [HasApiKey]
    content_negotiation_class = JsonNegotiation
    # keys.auth: the limits' round trip checks that a cached key row is still current.
    counts_key_limits = True

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication and permission: the key is there
        self.count(request)

    def count(self, request) -> None:
        notes = notes_of(request)
        notes.key = request.user
        notes.limits, answers = limits.enforce(request.user, also=self.shared_reads(notes, request))
        self.read_shared(notes, answers)

    def shared_reads(self, notes: RequestNotes, request) -> list:
        """What the limits' round trip also asks the shared cache (utils_app.shared ops)."""
        return []

    def read_shared(self, notes: RequestNotes, answers: list | None) -> None:
        """Take the answers to ``shared_reads`` (None when the shared cache could not be reached)."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # Refusals before the charge (400, 403, 404…) still tell an authenticated client its balance
        # and its limits. The key as authentication left it: touching request.user after a refused
        # key would run the lookup again.
        notes = notes_of(request)
        if notes.key is not None and "X-Remaining-Credits" not in response:
            response["X-Remaining-Credits"] = str(notes.key.credits)
        if "X-RateLimit-Limit-Requests" not in response:
            for name, value in notes.limit_headers().items():
                response[name] = value
        return response


class MeteredView(KeyLimitedView):
    """One metered request, in the contract's order (section 4): authenticate, count the limits and read the
    model's health (one round trip), parse the body, resolve the model and the tier, validate the rest,
    then replay an Idempotency-Key retry or run the operation (charge, call, settle: gateway.pipeline)."""

    request_serializer: type[StrictSerializer]
    # The model type the operation serves (a model of another type is model_type_mismatch).
    operation = "chat"

    def shared_reads(self, notes: RequestNotes, request) -> list:
        """The health of the requested model's deployments (gateway.routing). The body is parsed here for its
        model; a body that does not parse is refused after the request was counted, as the contract orders."""
        try:
            notes.body = parse_json_object(request.body)
        except GatewayError as exc:
            notes.body = exc
        model_name = notes.body.get("model") if isinstance(notes.body, dict) else None
        if isinstance(model_name, str):
            notes.model_name, notes.model = model_name, catalog.get_model(model_name)
        self.health_read = routing.HealthRead(notes.model)
        return self.health_read.ops

    def read_shared(self, notes: RequestNotes, answers: list | None) -> None:
        notes.health = self.health_read.health(answers)

    def post(self, request):
        notes = notes_of(request)
        if isinstance(notes.body, GatewayError):
            raise notes.body
        if notes.model_name is not None:
            # A model the gateway does not serve is what the client learns first, whatever else its body holds.
            pipeline.resolve_model(key=request.user, operation=self.operation, model_id=notes.model_name)
        params, sent = self.validate(notes.body)
        replay = services.previous_answer(request=request, key=request.user)
        return respond(replay or self.operate(request, params, sent))

    def validate(self, body: dict) -> tuple[dict, set]:
        """(validated parameters, the names the client sent)."""
        return self.request_serializer.with_data(body).validated()

    def operate(self, request, params: dict, sent: set) -> pipeline.Outcome:
        raise NotImplementedError


@extend_schema_view(post=extend_schema(
    operation_id="create_chat_completion", tags=["models"],
    summary="Chat completion (optionally streamed as server-sent events)",
    description="Costs the model's `cost`. With `stream: true` the answer is `text/event-stream`: "
                "`data: {chunk}` events then `data: [DONE]`. " + METERED_HEADERS,
    request=serializers.ChatCompletionRequest,
    examples=body_example(model="local-chat", messages=[{"role": "user", "content": "Hello!"}]),
    responses={(200, "application/json"): serializers.ChatCompletion,
               (200, "text/event-stream"): OpenApiTypes.STR, **ERRORS},
))
class ChatCompletionsView(MeteredView):
    request_serializer = serializers.ChatCompletionRequest

    def operate(self, request, params, sent):
        model = notes_of(request).model
        if model is not None:  # what no deployment of the pool can serve is refused before the charge (section 8)
            honour.refuse_before_charge(model, params)
        return services.chat_completion(request=request, key=request.user, params=params)


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
    "model": {"type": "string", "minLength": 1, "maxLength": serializers.MODEL_ID_MAX, "pattern": "^[^\\u0000]+$",
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

    request_serializer = serializers.ChatCompletionRequest

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
        params, _ = serializers.ChatCompletionRequest(data=params).validated()
        return Response({"input_tokens": services.estimate_chat_tokens(key=request.user, params=params)})


@extend_schema_view(post=extend_schema(
    operation_id="create_image", tags=["models"], summary="Image generation",
    description="Costs the model's `cost` times `n`. `url` results are stored by the service and "
                "served from /media/. " + METERED_HEADERS,
    request=serializers.ImageGenerationRequest,
    examples=body_example(model="local-image", prompt="A lighthouse at dusk", size="256x256"),
    responses={200: serializers.ImageGenerationResult, **ERRORS},
))
class ImageGenerationsView(MeteredView):
    request_serializer = serializers.ImageGenerationRequest
    operation = "image"

    def operate(self, request, params, sent):
        return services.generate_images(request=request, key=request.user, params=params, sent=sent)


@extend_schema_view(post=extend_schema(
    operation_id="create_speech", tags=["models"], summary="Speech synthesis",
    description="The raw audio bytes with their real content type by default; JSON with `audio_url` (the "
                "file kept in media storage) when `Accept` names `application/json` and prefers it to "
                "`audio/*` and `application/octet-stream`. The local model writes WAV for every format but "
                "`pcm` (`audio/wav`). " + METERED_HEADERS,
    request=serializers.SpeechRequest,
    examples=body_example(model="local-speech", input="Hello from the gateway.", voice="alloy"),
    responses={(200, "audio/*"): OpenApiResponse(OpenApiTypes.BINARY, description="Audio"),
               (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="Audio"),
               (200, "application/json"): serializers.SpeechResult,
               **ERRORS},
))
class SpeechView(MeteredView):
    request_serializer = serializers.SpeechRequest
    operation = "speech"

    def operate(self, request, params, sent):
        raw = wants_raw_audio(request.META.get("HTTP_ACCEPT", ""))
        return services.synthesize_speech(request=request, key=request.user, params=params, sent=sent, raw=raw)

    def post(self, request):
        response = super().post(request)
        patch_vary_headers(response, ("Accept",))  # JSON or audio bytes, by the Accept header
        return response


@extend_schema_view(post=extend_schema(
    operation_id="create_embeddings", tags=["models"], summary="Embeddings",
    description="`embedding` is one vector for a string input and a list of vectors for an array; "
                "`data`, `model` and `usage` follow OpenAI's shape. " + METERED_HEADERS,
    request=serializers.EmbeddingsRequest,
    examples=body_example(model="local-embedding", input="Hello from the gateway."),
    responses={200: serializers.EmbeddingsResult, **ERRORS},
))
class EmbeddingsView(MeteredView):
    request_serializer = serializers.EmbeddingsRequest
    operation = "embedding"

    def operate(self, request, params, sent):
        return services.create_embeddings(request=request, key=request.user, params=params, sent=sent)


def serve_media(request, name: str):
    """A generated image or audio file. The random name is the credential; no key is needed."""
    if request.method not in ("GET", "HEAD"):
        return json_error(MethodNotAllowed(f"Method {request.method} is not allowed here."))
    found = media.open_file(name)  # opened at once: a purge between a lookup and the open is a 404
    if found is None:
        return json_error(NotFound("No such media file (it may have expired).", code="media_not_found"))
    handle, content_type = found
    response = FileResponse(handle, content_type=content_type)
    # The name never points at other content, so caches may keep it for as long as it exists.
    response["Cache-Control"] = "public, max-age=86400, immutable"
    return response
