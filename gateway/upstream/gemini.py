"""Google's Gemini API: OpenAI-shaped chat and embeddings translated to ``generateContent``,
``streamGenerateContent?alt=sse`` and ``batchEmbedContents``, and the answers translated back.

``base_url`` is the API's root with its version (default https://generativelanguage.googleapis.com/v1beta);
the deployment's upstream name is the model (``gemini-2.5-flash``, or a full resource name such as
``tunedModels/x``). The secret travels in the ``x-goog-api-key`` header only: Google also takes it
as ``?key=``, which is how Gemini keys end up in logs and error messages, so no URL built here
ever carries it.

What translates and what is refused is listed in docs/providers.md; the choices that need a
reason have it next to the code. Gemini has no tool call ids (and refuses ``id`` on the parts sent
to it), so ids live on the client's side only: a call gets Google's id when it sends one, else one
made up here, and a ``tool`` message is matched back to its call's name and position through the
assistant message that made the call, which the client sends along with the results.

The adapter and Google's error answers are here; the request in gemini_request (its settings, tools
and schemas), the conversation both ways in gemini_messages, the answer and its stream in
gemini_answer, and Google's own requests passed through in gemini_native.
"""
import base64
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings

from gateway.upstream import register
from gateway.upstream.base import HttpAdapter
from gateway.upstream.gemini_answer import StreamTranslation, completion, embedding_list
from gateway.upstream.gemini_request import generate_request
from gateway.upstream.images import note_fetched
from gateway.upstream.refusals import Refusal
from gateway.upstream.shapes import ChunkStream
from gateway.upstream.sse import EventStream
from gateway.upstream.transport import AnswerTooLarge, HttpTransport
from utils_app.errors import GatewayError, InvalidRequest, UpstreamError
from utils_app.http import json_object

# The reasons of Google's ErrorInfo detail that say the key or its project cannot be served at all: its key,
# its billing, the API on its project. Google answers an invalid key with 400 API_KEY_INVALID, not 401. Only
# these machine-readable fields decide: a message may quote the request (docs/routing.md).
SECRET_REFUSED = {"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED", "API_KEY_IP_ADDRESS_BLOCKED",
                  "API_KEY_HTTP_REFERRER_BLOCKED", "BILLING_DISABLED", "CONSUMER_SUSPENDED", "CONSUMER_INVALID",
                  "SERVICE_DISABLED"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"


# ---------------------------------------------------------------- errors

@dataclass(frozen=True)
class GeminiRefusal(Refusal):
    retry_delay: float | None = None  # RetryInfo's retryDelay: Google's Retry-After, sent in the body


def gemini_refusal(status: int, content: bytes | str) -> GeminiRefusal:
    """Google's error body, ``{"error": {"code", "message", "status", "details": [...]}}``.

    Only machine-readable fields decide what it means for the deployment. An ErrorInfo reason that
    refuses the key or its project (whatever the HTTP status: an invalid key comes as 400), or the
    status UNAUTHENTICATED or PERMISSION_DENIED, disables the secret. FAILED_PRECONDITION (no billing
    in the project's country, but also a file of the request not ready yet) is declined: the request
    moves on and the deployment's health is untouched. RESOURCE_EXHAUSTED is a rate limit, even when its
    message says "quota"; with a QuotaFailure on a token metric, a limit the request's size counts against.
    """
    error = (json_object(content) or {}).get("error")
    if not isinstance(error, dict):
        error = {"message": error} if isinstance(error, str) else {}
    message = error["message"] if isinstance(error.get("message"), str) else ""
    state = error["status"] if isinstance(error.get("status"), str) else ""
    reasons, delay, token_limit = set(), None, False
    details = error.get("details")
    for detail in details if isinstance(details, list) else ():
        if not isinstance(detail, dict):
            continue
        if detail.get("@type") == ERROR_INFO and isinstance(detail.get("reason"), str):
            reasons.add(detail["reason"])
        if detail.get("@type") == QUOTA_FAILURE and isinstance(detail.get("violations"), list):
            token_limit = token_limit or any(
                "token" in str(violation.get(name, "")).lower() for violation in detail["violations"]
                if isinstance(violation, dict) for name in ("quotaMetric", "quotaId"))
        if isinstance(detail.get("retryDelay"), str):
            delay = _seconds(detail["retryDelay"])
    refused = bool(reasons & SECRET_REFUSED) or state in ("UNAUTHENTICATED", "PERMISSION_DENIED")
    return GeminiRefusal(message=message, code=(state.lower() or None) if status != 429 else None,
                         out_of_credit=refused, token_limit=token_limit,
                         declined=state == "FAILED_PRECONDITION" and not refused, retry_delay=delay)


def _seconds(duration: str) -> float | None:
    """A protobuf Duration in JSON ("13s", "0.5s") as seconds."""
    try:
        seconds = float(duration.removesuffix("s"))
    except ValueError:
        return None
    return seconds if seconds > 0 and math.isfinite(seconds) else None


class GeminiTransport(HttpTransport):
    """Google sends its retry hint in a 429's body (RetryInfo), not as Retry-After: read as if it were one,
    so the deployment cools down for as long as Google asks."""

    def refused(self, status: int, headers: Mapping[str, str], refusal: Refusal) -> GatewayError:
        delay = getattr(refusal, "retry_delay", None)
        if status == 429 and delay and not headers.get("Retry-After"):
            headers = {**headers, "Retry-After": f"{delay:g}"}
        return super().refused(status, headers, refusal)


# ---------------------------------------------------------------- the adapter

@register("gemini")
class GeminiAdapter(HttpAdapter):
    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"x-goog-api-key": secret}

    def read_error(self, status: int, content: bytes) -> Refusal:
        return gemini_refusal(status, content)

    transport_class = GeminiTransport

    @property
    def resource(self) -> str:
        """The model's resource name: a bare model name is under models/; "tunedModels/…" is kept as it is."""
        name = self.upstream_model
        return name if "/" in name else f"models/{name}"

    def path(self, method: str) -> str:
        return f"/{quote(self.resource)}:{method}"

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = generate_request(payload, self.fetch_image, self.ignored)
        body = self.transport.post_json(self.path("generateContent"), request)
        return completion(body, model=self.upstream_model, malformed=self.transport.malformed)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        request = generate_request(payload, self.fetch_image, self.ignored)
        events = self.transport.stream(self.path("streamGenerateContent") + "?alt=sse", request)
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        return ChunkStream(self._chunks(events, candidates=payload.get("n") or 1, usage=usage), events.close)

    def _chunks(self, events: EventStream, *, candidates: int, usage: bool) -> Iterator[dict[str, Any]]:
        stream = StreamTranslation(model=self.upstream_model, candidates=candidates)
        for data in events:
            event = json_object(data)
            if event is None:
                raise self.transport.malformed("stream event")
            if "error" in event:
                raise self._stream_error(event, data)
            chunk = stream.translate(event, malformed=self.transport.malformed)
            if chunk is not None:
                yield chunk
            if stream.done:
                events.finished()
                break
        if not stream.finished_any:
            raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")
        if usage and stream.usage is not None:
            yield stream.usage_chunk()

    def _stream_error(self, event: dict[str, Any], data: str) -> GatewayError:
        """An error Google sends as an event once the stream is under way: read like an error answer."""
        error = event.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        status = code if type(code) is int and 400 <= code <= 599 else 502
        return self.transport.refused(status, {}, gemini_refusal(status, data))

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        dimensions = payload.get("dimensions")
        request = {"requests": [{"model": self.resource, "content": {"parts": [{"text": text}]},
                                 **({"outputDimensionality": dimensions} if dimensions else {})} for text in texts]}
        body = self.transport.post_json(self.path("batchEmbedContents"), request)
        return embedding_list(body, model=self.upstream_model, normalise=bool(dimensions),
                              base64_encoded=payload.get("encoding_format") == "base64",
                              malformed=self.transport.malformed)

    def fetch_image(self, url: str, where: str) -> dict[str, Any]:
        """An image the client gave by URL, fetched by the gateway and sent inline.

        Gemini's fileData takes only URIs of Google's own Files API (and a few hosts), so
        any other URL has to travel as bytes. The fetch is SSRF-checked like every image
        fetch, on public addresses only (transport.fetch_image with ``client``), and counts
        against the attempt's deadline. The attempt's images together may come to
        MAX_IMAGE_FETCH_BYTES: the fetch that would pass it stops there (before reading the
        body when its Content-Length says so). A URL that cannot be used is the client's
        fault (400, refunded), never the deployment's.
        """
        left = settings.MAX_IMAGE_FETCH_BYTES - self._image_bytes
        limit = min(left, settings.UPSTREAM_MAX_BYTES)
        too_many = InvalidRequest(f"The images this request gives by URL come to more than "
                                  f"{settings.MAX_IMAGE_FETCH_BYTES} bytes (MAX_IMAGE_FETCH_BYTES), the most this "
                                  f"gateway fetches for one request; the one at {where} passed it. Send smaller "
                                  f"images, or fewer.", param=where)
        if left <= 0:
            raise too_many
        try:
            content, content_type = self.transport.fetch_image(url, limit=limit, client=True)
        except AnswerTooLarge:
            if limit < left:
                raise InvalidRequest(f"The image at {where} is larger than {limit} bytes (UPSTREAM_MAX_BYTES), the "
                                     f"largest image this gateway fetches.", param=where) from None
            raise too_many from None
        except UpstreamError:
            raise InvalidRequest(f"The image at {where} could not be fetched: it must be a public http(s) URL of a "
                                 f"PNG, JPEG, WebP or GIF image, answering within the request's time.",
                                 param=where) from None
        self._image_bytes += len(content)
        note_fetched(len(content))
        data = base64.b64encode(content).decode("ascii")
        del content  # only the base64 travels on
        return {"inlineData": {"mimeType": content_type, "data": data}}

    _image_bytes = 0  # fetched by this adapter, which serves one attempt
