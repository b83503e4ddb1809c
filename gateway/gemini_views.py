"""HTTP views of Google's Gemini API, inbound (CONTRACT section 10): ``models``, ``models/{id}`` and the
methods ``models/{id}:generateContent``, ``:streamGenerateContent``, ``:countTokens``, ``:embedContent`` and
``:batchEmbedContents``, under /v1beta/ and under /v1/ (google-genai's default version).

The codec is gateway.gemini_api; these views only parse, pick the method and answer. The key comes as
``x-goog-api-key``, ``?key=`` (these views alone take it there) or ``Authorization: Bearer``; every error is
in Google's shape.

``GET /v1/models`` and ``GET /v1/models/{id}`` are also the OpenAI-shaped catalog (models_catalog.views):
a request whose key came the way Google's SDKs send it (``x-goog-api-key`` or ``?key=``, and no
``Authorization`` header) gets Google's shape, any other the catalog's.
"""
from typing import Any

from django.conf import settings
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers as drf_serializers
from rest_framework.response import Response

from gateway import pipeline, routing, services
from gateway.chat_serializers import ChatCompletionRequest
from gateway.gemini_api import model_list as google_models
from gateway.gemini_api.dialect import GeminiDialect
from gateway.gemini_api.embeddings import embed, embed_request, embedding_params
from gateway.gemini_api.errors import exception_handler, status_word
from gateway.gemini_api.request import chat_request, counting_request
from gateway.media_serializers import EmbeddingsRequest
from gateway.notes import RequestNotes
from gateway.views import KeyLimitedView, MeteredView
from models_catalog import catalog
from models_catalog.views import ModelDetailView, ModelListView
from utils_app.errors import AccessDenied, GatewayError, InvalidRequest, NotFound, RequestTooLarge
from utils_app.json_body import parse_json_object
from utils_app.schema import ErrorBody

VERSIONS = ("v1beta", "v1")
CHAT_METHODS = ("generateContent", "streamGenerateContent")
EMBED_METHODS = ("embedContent", "batchEmbedContents")
METHODS = (*CHAT_METHODS, "countTokens", *EMBED_METHODS)

GoogleErrorBody = inline_serializer(name="GoogleErrorBody", fields={
    "error": inline_serializer(name="GoogleErrorDetail", fields={
        "code": drf_serializers.IntegerField(help_text="The HTTP status."),
        "message": drf_serializers.CharField(),
        "status": drf_serializers.CharField(help_text="Google's status word: INVALID_ARGUMENT, UNAUTHENTICATED, "
                                                      "PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED, INTERNAL, "
                                                      "UNAVAILABLE, DEADLINE_EXCEEDED")})})
GOOGLE_ERRORS = {status: OpenApiResponse(GoogleErrorBody,
                                          description=f"Google's status {status_word(status)}")
                 for status in (400, 401, 402, 403, 404, 405, 409, 413, 422, 429, 500, 502, 503, 504)}
# Under v1/, which the OpenAI-shaped API shares, a model looked up by a client that did not send its key the way
# Google's SDKs do is the catalog's 404, in the service's own shape; under v1beta/ every 404 is Google's, a path
# that matches no route included (gateway.urls.handler404).
GOOGLE_ERRORS[404] = OpenApiResponse(
    PolymorphicProxySerializer(component_name="GoogleOrGatewayErrorBody", serializers=[GoogleErrorBody, ErrorBody],
                               resource_type_field_name=None),
    description="Google's status NOT_FOUND (a model, method or path not served); under v1/, a model the "
                "OpenAI-shaped catalog does not list gets the service's own error body")


class GeminiViewMixin:
    """What every Gemini view shares: the key also as ?key=, and errors in Google's shape."""

    accepts_query_key = True  # keys.auth reads ?key= for these views only

    def get_exception_handler(self):
        return exception_handler


@extend_schema_view(get=extend_schema(
    operation_id="gemini_list_models", tags=["gemini"], summary="Google's Gemini API: the key's models",
    description="`{\"models\": [...]}`: the chat and embedding models the key may use, as Google's Model resource "
                "(`name: \"models/<id>\"`, `displayName`, `supportedGenerationMethods`, `inputTokenLimit`, "
                "`outputTokenLimit`). Also `GET /v1/models` when the key comes as `x-goog-api-key` or `?key=`.",
    responses={200: OpenApiTypes.OBJECT, **{s: GOOGLE_ERRORS[s] for s in (401, 429, 500)}}))
class GeminiModelListView(GeminiViewMixin, KeyLimitedView):
    def get(self, request):
        return Response({"models": google_models.model_list(catalog.snapshot().models.values(), request.user)})


@extend_schema_view(get=extend_schema(
    operation_id="gemini_get_model", tags=["gemini"], summary="Google's Gemini API: one model",
    description="The model as Google's Model resource; 404 NOT_FOUND for an unknown model or one of another type "
                "than chat or embedding, 403 PERMISSION_DENIED for a model the key's tier may not use.",
    responses={200: OpenApiTypes.OBJECT, **{s: GOOGLE_ERRORS[s] for s in (401, 403, 404, 429, 500)}}))
class GeminiModelView(GeminiViewMixin, KeyLimitedView):
    def get(self, request, model_id: str):
        model = catalog.get_model(model_id.removeprefix("models/"))
        if model is None or model.type not in google_models.METHODS:
            raise NotFound(f"models/{model_id} is not found: no chat or embedding model of that name is served "
                           f"here.", code="model_not_found", param="model")
        if not request.user.can_use(model):
            raise AccessDenied(f"Keys of the '{request.user.tier}' tier may not use the model '{model_id}'.",
                               param="model")
        return Response(google_models.model_entry(model))


@extend_schema_view(post=extend_schema(
    operation_id="gemini_model_method", tags=["gemini"],
    summary="Google's Gemini API: generateContent, streamGenerateContent, countTokens, embedContent, "
            "batchEmbedContents",
    description="Google's request and answer shapes, for clients built on Google's SDKs; the key as "
                "`x-goog-api-key`, `?key=` or `Authorization: Bearer`. `generateContent` and "
                "`streamGenerateContent` serve every chat model and are metered exactly like a chat completion; "
                "`streamGenerateContent` answers server-sent events with `?alt=sse`, else one JSON array. "
                "`countTokens` is free (it counts against rpm and rph). `embedContent` and `batchEmbedContents` "
                "serve embedding models, metered like /v1/embeddings. Errors are "
                "`{\"error\": {\"code\", \"message\", \"status\"}}`.",
    request={"application/json": OpenApiTypes.OBJECT},
    parameters=[OpenApiParameter("version", str, OpenApiParameter.PATH, enum=VERSIONS),
                OpenApiParameter("model", str, OpenApiParameter.PATH, description="A chat or embedding model's id."),
                OpenApiParameter("method", str, OpenApiParameter.PATH, enum=METHODS),
                OpenApiParameter("alt", str, OpenApiParameter.QUERY, enum=["json", "sse"], required=False,
                                 description="sse: streamGenerateContent answers server-sent events; json (the "
                                             "default): one JSON answer, or one array of them; any other "
                                             "value is a 400."),
                OpenApiParameter("key", str, OpenApiParameter.QUERY, required=False,
                                 description="The key, when not sent in a header.")],
    responses={(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/event-stream"): OpenApiTypes.STR,
               **GOOGLE_ERRORS}))
class GeminiMethodView(GeminiViewMixin, MeteredView):
    """POST models/{model}:{method}. The chat methods are translated into a chat request (gateway.gemini_api),
    validated as every chat request is, and run through the same pipeline with Google's dialect."""

    request_serializer = ChatCompletionRequest

    def dispatch(self, request, *args: Any, **kwargs: Any):
        if request.method in ("GET", "HEAD") and kwargs.get("method") not in METHODS:
            # Not a method: the last part of a model id with a colon in it (OpenAI names its fine-tunes so).
            model_id = f"{kwargs['model']}:{kwargs['method']}"
            if kwargs.get("version") == "v1":
                return model_detail(request, model_id=model_id)
            if kwargs.get("version") == "v1beta":
                return _gemini_model(request, model_id=model_id)
        return super().dispatch(request, *args, **kwargs)

    def shared_reads(self, notes: RequestNotes, request) -> list:
        """The path names the model; the health of its deployments rides with the limits' round trip. The body
        is parsed here once (countTokens' only after its size is checked, in its own handler)."""
        name = self.kwargs.get("model", "")
        notes.model_name, notes.model = name, catalog.get_model(name)
        if self.kwargs.get("method") != "countTokens":
            try:
                notes.body = parse_json_object(request.body)
            except GatewayError as exc:
                notes.body = exc
        self.health_read = routing.HealthRead(notes.model)
        return self.health_read.ops

    def post(self, request, *args: Any, **kwargs: Any):
        model, method = self.kwargs["model"], self.kwargs["method"]
        self.model_id, self.method = model, method
        self.sse = request.query_params.get("alt") == "sse"
        if self.kwargs["version"] not in VERSIONS or method not in METHODS:
            raise NotFound(f"{self.kwargs['version']}/models/{model}:{method} is not found: this gateway serves "
                           f"generateContent, streamGenerateContent, countTokens, embedContent and "
                           f"batchEmbedContents, under v1beta/ and v1/.", code="method_not_found")
        if method == "countTokens":
            return self.count_tokens(request)
        self.operation = "embedding" if method in EMBED_METHODS else "chat"  # the model type the method serves
        response = super().post(request)
        if method == "streamGenerateContent" and not self.sse and response.status_code == 200:
            # Without alt=sse Google answers one JSON array, written item by item as the stream goes.
            response["Content-Type"] = "application/json; charset=UTF-8"
        return response

    def validate(self, body: dict) -> tuple[dict, set]:
        self.gemini_body = body  # passed through as it is to a gemini deployment
        check_alt(self.request)
        if self.method in EMBED_METHODS:
            self.embed_request = embed_request(body, self.model_id, self.method)
            return EmbeddingsRequest.with_data(
                embedding_params(self.embed_request, self.model_id)).validated()
        self.decoded = chat_request(body, self.model_id, stream=self.method == "streamGenerateContent")
        return super().validate(self.decoded.params)

    def operate(self, request, params, sent):
        if self.method in EMBED_METHODS:
            return embed(request=request, key=request.user, model_id=self.model_id,
                                    embed_request=self.embed_request, body=self.gemini_body, params=params)
        return services.chat_completion(request=request, key=request.user, params=params,
                                        dialect=GeminiDialect(self.gemini_body, self.decoded, sse=self.sse))

    def count_tokens(self, request):
        """Free of charge, but a request like any other to the key's rpm and rph (no charge, no ledger row)."""
        # Free, so bounded before any parsing, as /v1/messages/count_tokens is (docs/hardening.md).
        if len(request.body) > settings.COUNT_TOKENS_MAX_BYTES:
            raise RequestTooLarge(f"The request body is larger than {settings.COUNT_TOKENS_MAX_BYTES} bytes, the "
                                  f"most countTokens takes.")
        body = parse_json_object(request.body)
        # A model the gateway does not serve is what the client learns first, whatever else its body holds.
        pipeline.resolve_model(key=request.user, operation="chat", model_id=self.model_id)
        check_alt(request)
        params = counting_request(body, self.model_id)
        params, _ = ChatCompletionRequest(data=params).validated()
        return Response({"totalTokens": services.estimate_chat_tokens(params)})


def check_alt(request) -> None:
    """``?alt=``, the answer's format: ``json`` (the default) or ``sse`` (events, read by streamGenerateContent
    alone). Google's other formats (``proto``, ``media``) are ones the gateway cannot write: a client asking
    for one is told so, as part of validating its request, rather than handed JSON it cannot read."""
    alt = request.query_params.get("alt")
    if alt not in (None, "json", "sse"):
        raise InvalidRequest("alt: must be json or sse; this gateway answers no other format.", param="alt")


# ---------------------------------------------------------------- /v1/models, shared with the catalog

_catalog_list, _catalog_model = ModelListView.as_view(), ModelDetailView.as_view()
_gemini_list, _gemini_model = GeminiModelListView.as_view(), GeminiModelView.as_view()


def google_keyed(request) -> bool:
    """Whether the key came the way Google's SDKs send it (x-goog-api-key or ?key=, no Authorization header):
    OpenAI's SDKs send Authorization: Bearer, and a keyless call is the public catalog."""
    return "HTTP_AUTHORIZATION" not in request.META and (
        bool(request.META.get("HTTP_X_GOOG_API_KEY")) or "key" in request.GET)


@csrf_exempt
def model_list(request):
    """GET /v1/models: Google's list for a Google client, else the catalog's (models_catalog.views)."""
    return (_gemini_list if google_keyed(request) else _catalog_list)(request)


@csrf_exempt
def model_detail(request, model_id: str):
    """GET /v1/models/{id}: Google's Model resource for a Google client, else the catalog's entry."""
    return (_gemini_model if google_keyed(request) else _catalog_model)(request, model_id=model_id)

