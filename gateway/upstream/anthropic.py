"""Anthropic's Messages API: OpenAI-shaped chat translated to ``POST {base_url}/v1/messages``, and the
answer (a message object, or its event stream) translated back.

``base_url`` is the API's root without a version (default https://api.anthropic.com); the
deployment's upstream name is the model (``claude-sonnet-4-5``). The secret travels in the
``x-api-key`` header only, with ``anthropic-version``. Anthropic requires ``max_tokens``: a
request without one gets the provider's ``max_tokens_default``.

What translates and what is refused is listed in docs/providers.md. Tool call ids go both
ways unchanged (Anthropic's ``toolu_…`` ids reach the client, the client's ids come back as
``tool_use_id``), except that characters Anthropic refuses in an id are replaced, the same way
in the call and in its result, so they still pair.
"""
from collections.abc import Iterator
from typing import Any

from gateway.conversation import PassedThrough
from gateway.upstream import register
from gateway.upstream.anthropic_answer import CONTENT_DELTA, StreamTranslation, completion
from gateway.upstream.anthropic_request import messages_request
from gateway.upstream.base import HttpAdapter
from gateway.upstream.shapes import EVENT_NAME, ChunkStream
from gateway.upstream.refusals import Refusal
from gateway.upstream.sse import EventStream
from models_catalog.provider_types import DEFAULT_MAX_TOKENS
from utils_app.errors import GatewayError, UpstreamError
from utils_app.http import json_object

API_VERSION = "2023-06-01"
MESSAGES_PATH = "/v1/messages"
# The status each of Anthropic's error types comes with: an error event in a stream carries only its type.
ERROR_STATUSES = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                  "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                  "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529}
# Anthropic's error types that refuse the secret itself, whatever the status they come with. A 400
# invalid_request_error never does, whatever its words: its message quotes what the client sent (an unknown
# member, a header's value), so "credit balance is too low" in it may be the client's own text.
SECRET_REFUSED = {"authentication_error", "billing_error"}


# ---------------------------------------------------------------- errors

def anthropic_refusal(status: int, content: bytes | str) -> Refusal:
    """Anthropic's error body, ``{"type": "error", "error": {"type", "message"}}``. Only its type decides what
    it means for the deployment: an authentication or billing error refuses the secret (it is disabled)."""
    error = (json_object(content) or {}).get("error")
    if not isinstance(error, dict):
        error = {"message": error} if isinstance(error, str) else {}
    message = error["message"] if isinstance(error.get("message"), str) else ""
    kind = error["type"] if isinstance(error.get("type"), str) else None
    return Refusal(message=message, code=kind, out_of_credit=kind in SECRET_REFUSED)


# ---------------------------------------------------------------- the adapter

@register("anthropic")
class AnthropicAdapter(HttpAdapter):
    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"x-api-key": secret}

    def read_error(self, status: int, content: bytes) -> Refusal:
        return anthropic_refusal(status, content)

    type_headers = {"anthropic-version": API_VERSION}

    def request(self, payload: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        default = getattr(self.provider, "max_tokens_default", None) or DEFAULT_MAX_TOKENS
        request = messages_request(payload, model=self.upstream_model, max_tokens_default=default,
                                   ignored=self.ignored)
        if stream:
            request["stream"] = True
        return request

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(MESSAGES_PATH, self.request(payload, stream=False))
        return completion(body, model=self.upstream_model, malformed=self.transport.malformed)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        events = self.transport.stream(MESSAGES_PATH, self.request(payload, stream=True))
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        return ChunkStream(self._chunks(events, usage=usage), events.close)

    # -- Anthropic's own requests, passed through (/v1/messages: gateway.messages)

    passes_through = True

    def messages(self, body: dict[str, Any], *, headers: dict[str, Any] | None = None) -> PassedThrough:
        """A Messages request as the client sent it, under the deployment's model name (``headers``: the
        client's own that go with it, anthropic-beta). The answer is its chat translation, for the
        metering, passed through with Anthropic's message itself beside it."""
        self.transport.headers.update(headers or {})
        message = self.transport.post_json(MESSAGES_PATH, {**body, "model": self.upstream_model, "stream": False})
        return PassedThrough(completion(message, model=self.upstream_model, malformed=self.transport.malformed),
                             message)

    def messages_stream(self, body: dict[str, Any], *, headers: dict[str, Any] | None = None) -> ChunkStream:
        """The stream of a Messages request sent as it came: every event of Anthropic's passed through
        beside the chunk that translates it (empty for the events that say nothing to the metering)."""
        self.transport.headers.update(headers or {})
        events = self.transport.stream(MESSAGES_PATH, {**body, "model": self.upstream_model, "stream": True})
        return ChunkStream(self._chunks(events, usage=True, passed_through=True), events.close)

    def _chunks(self, events: EventStream, *, usage: bool, passed_through: bool = False) -> Iterator[dict[str, Any]]:
        stream = StreamTranslation(model=self.upstream_model)
        for data in events:
            event = json_object(data)
            if event is None:
                raise self.transport.malformed("stream event")
            if event.get("type") == "error":
                raise self._stream_error(event, data)
            chunk = stream.translate(event, malformed=self.transport.malformed)
            if passed_through:
                if not (isinstance(event.get("type"), str) and EVENT_NAME.fullmatch(event["type"])):
                    raise self.transport.malformed("stream event")  # its type would name the client's event
                # A content block's delta is output, thinking included (the client sees it, and Anthropic
                # bills it as output), though a thinking delta translates to no content.
                chunk = PassedThrough(chunk or {}, event, carries_output=event["type"] == CONTENT_DELTA)
            if chunk is not None:
                yield chunk
            if stream.done:
                events.finished()
                break
        if not stream.done:
            raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")
        if usage:
            yield stream.usage_chunk()

    def _stream_error(self, event: dict[str, Any], data: str) -> GatewayError:
        """An error Anthropic sends as an event once the stream is under way (``overloaded_error``, say):
        read as the error answer of its type's status would be."""
        error = event.get("error")
        kind = error.get("type", "") if isinstance(error, dict) else ""
        status = ERROR_STATUSES.get(kind, 502)
        return self.transport.refused(status, {}, anthropic_refusal(status, data))
