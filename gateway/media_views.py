"""The image, speech and embedding operations' views on the metered views (gateway.views), and the media
files their results are stored as."""
from django.http import FileResponse
from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view

from gateway import media, services
from gateway.media_serializers import EmbeddingsRequest, ImageGenerationRequest, SpeechRequest
from gateway.output_serializers import EmbeddingsResult, ImageGenerationResult, SpeechResult
from gateway.views import ERRORS, METERED_HEADERS, MeteredView, body_example
from utils_app.error_handler import json_error
from utils_app.errors import MethodNotAllowed, NotFound


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


@extend_schema_view(post=extend_schema(
    operation_id="create_image", tags=["models"], summary="Image generation",
    description="Costs the model's `cost` times `n`. `url` results are stored by the service and "
                "served from /media/. " + METERED_HEADERS,
    request=ImageGenerationRequest,
    examples=body_example(model="local-image", prompt="A lighthouse at dusk", size="256x256"),
    responses={200: ImageGenerationResult, **ERRORS},
))
class ImageGenerationsView(MeteredView):
    request_serializer = ImageGenerationRequest
    operation = "image"

    def operate(self, request, params, sent):
        return services.generate_images(request=request, key=request.user, params=params, sent=sent)


@extend_schema_view(post=extend_schema(
    operation_id="create_speech", tags=["models"], summary="Speech synthesis",
    description="The raw audio bytes with their real content type by default; JSON with `audio_url` (the "
                "file kept in media storage) when `Accept` names `application/json` and prefers it to "
                "`audio/*` and `application/octet-stream`. The local model writes WAV for every format but "
                "`pcm` (`audio/wav`). " + METERED_HEADERS,
    request=SpeechRequest,
    examples=body_example(model="local-speech", input="Hello from the gateway.", voice="alloy"),
    responses={(200, "audio/*"): OpenApiResponse(OpenApiTypes.BINARY, description="Audio"),
               (200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY, description="Audio"),
               (200, "application/json"): SpeechResult,
               **ERRORS},
))
class SpeechView(MeteredView):
    request_serializer = SpeechRequest
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
    request=EmbeddingsRequest,
    examples=body_example(model="local-embedding", input="Hello from the gateway."),
    responses={200: EmbeddingsResult, **ERRORS},
))
class EmbeddingsView(MeteredView):
    request_serializer = EmbeddingsRequest
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
