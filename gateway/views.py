"""The metered views' machinery and the chat completion's view: the key authenticated and counted, the
body parsed and validated, one service called, its outcome answered (``respond``), JSON whatever the
Accept header says.

The rules live in the request serializers (gateway.chat_serializers, gateway.media_serializers: what a
valid request is) and gateway.pipeline (the metering pipeline); the views only translate. The other
operations' views build on these: gateway.messages_views (Anthropic's Messages), gateway.media_views
(images, speech, embeddings and the media files), gateway.responses_views, gateway.gemini_views.
"""
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from gateway import idempotency, pipeline, routing, services
from gateway.chat_serializers import ChatCompletionRequest
from gateway.notes import RequestNotes, notes_of
from gateway.output_serializers import ChatCompletion
from gateway.upstream.base import refuse_before_charge
from keys import limits
from keys.auth import BearerKeyAuthentication, HasApiKey
from models_catalog import catalog
from utils_app.errors import GatewayError
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
            notes.resolved = pipeline.resolve_model(key=request.user, operation=self.operation,
                                                    model_id=notes.model_name)
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
    request=ChatCompletionRequest,
    examples=body_example(model="local-chat", messages=[{"role": "user", "content": "Hello!"}]),
    responses={(200, "application/json"): ChatCompletion,
               (200, "text/event-stream"): OpenApiTypes.STR, **ERRORS},
))
class ChatCompletionsView(MeteredView):
    request_serializer = ChatCompletionRequest

    def operate(self, request, params, sent):
        model = notes_of(request).model
        if model is not None:  # what no deployment of the pool can serve is refused before the charge (section 8)
            refuse_before_charge(model, params)
        return services.chat_completion(request=request, key=request.user, params=params)
