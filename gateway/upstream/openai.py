"""OpenAI's API, and any OpenAI-compatible one: the request goes as the client sent it, under the
deployment's upstream name, and the answer comes back as it is once its shape is checked."""
import base64
from urllib.parse import quote
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gateway.serializers import SPEECH_DEFAULTS
from gateway.upstream import register
from gateway.upstream.base import HttpAdapter
from gateway.upstream.shapes import EVENT_NAME, PASSED_THROUGH, Audio, ChunkStream, Image, tool_call_id
from gateway.upstream.transport import EventStream, image_type, json_object
from utils_app.errors import UpstreamError, UpstreamRejected

_T = TypeVar("_T")
# Members of OpenAI's API that some of its models refuse as unsupported (a 400 naming the member).
MODEL_DEPENDENT = ("reasoning_effort", "verbosity")


@register("openai")
class OpenAIAdapter(HttpAdapter):
    """Paths are relative to ``base_url`` (e.g. https://api.openai.com/v1); the secret is a bearer token."""

    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"Authorization": f"Bearer {secret}"}

    def path(self, operation: str) -> str:
        """Where an operation is posted; Azure puts the deployment and api-version in it."""
        return {"chat": "/chat/completions", "image": "/images/generations", "speech": "/audio/speech",
                "embedding": "/embeddings"}[operation]

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "model": self.upstream_model}

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._honoured(self._chat, payload)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        return self._honoured(self._chat_stream, payload)

    def _chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(self.path("chat"), self.body(payload))
        if not is_completion(body):
            raise self.transport.malformed("completion")
        return body

    def _chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        events = self.transport.stream(self.path("chat"), self.body(payload))
        return ChunkStream(self._chunks(events), events.close)

    def _honoured(self, call: Callable[[dict[str, Any]], _T], payload: dict[str, Any]) -> _T:
        """The call, asked again without a member the deployment's model refuses although the API has it (a
        model without reasoning refuses reasoning_effort, which /v1/messages sends for Claude Code's
        thinking): left out and named, as CONTRACT section 8 has it. Any other refusal is the answer."""
        while True:
            try:
                return call(payload)
            except UpstreamRejected as refused:
                param = refused.param
                if refused.status != 400 or refused.retry or param not in MODEL_DEPENDENT or param not in payload:
                    raise
                self.ignored.append(param)
                payload = {name: value for name, value in payload.items() if name != param}

    def _chunks(self, events: EventStream) -> Iterator[dict[str, Any]]:
        for data in events:
            if data == "[DONE]":
                events.finished()
                return
            chunk = json_object(data)
            if chunk is None or not isinstance(chunk.get("choices") or [], list):
                raise self.transport.malformed("stream event")
            if chunk.get("error"):
                error = chunk["error"]
                detail = error.get("message") if isinstance(error, dict) else str(error)
                raise UpstreamError(f"The upstream provider '{self.name}' failed during the stream: "
                                    f"{self.transport.clean(str(detail))}")
            yield chunk
        raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")

    def images(self, payload: dict[str, Any]) -> list[Image]:
        body = self.transport.post_json(self.path("image"), self.body(payload))
        items = body.get("data")
        if not isinstance(items, list) or not items:
            raise UpstreamError(f"The upstream provider '{self.name}' sent no images.")
        images = []
        for item in items:
            if not isinstance(item, dict):
                raise self.transport.malformed("image")
            revised = item.get("revised_prompt") if isinstance(item.get("revised_prompt"), str) else None
            if isinstance(item.get("b64_json"), str):
                try:
                    content = base64.b64decode(item["b64_json"], validate=True)
                except ValueError:
                    raise self.transport.malformed("image") from None
                images.append(Image(content, image_type(content), revised))
            elif isinstance(item.get("url"), str):
                content, content_type = self.transport.fetch_image(item["url"])  # within the same deadline
                images.append(Image(content, content_type, revised))
            else:
                raise UpstreamError(f"The upstream provider '{self.name}' sent an image without data.")
        return images

    def speech(self, payload: dict[str, Any]) -> Audio:
        reply = self.transport.post(self.path("speech"), self.body(payload))
        content_type = reply.headers.get("Content-Type", "").split(";")[0].strip() or "application/octet-stream"
        if not reply.content or content_type == "application/json":
            raise UpstreamError(f"The upstream provider '{self.name}' sent no audio.")
        return Audio(reply.content, content_type, payload.get("response_format", SPEECH_DEFAULTS["response_format"]))

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(self.path("embedding"), self.body(payload))
        if not is_embedding_list(body):
            raise self.transport.malformed("list of embeddings")
        return body

    def probe_image(self) -> None:
        # Retrieving the model proves the secret and the model without generating (and paying for) an image.
        # The name is one path segment whatever it holds ("org/model", "..", "?"): it can lead nowhere else.
        self.transport.get(f"/models/{quote(self.upstream_model, safe='')}")


def is_completion(body: dict[str, Any]) -> bool:
    """A chat.completion the gateway can read: choices are objects, a message is an object,
    its content a string, null or a list of content-part objects."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        message = choice.get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            return False
        content = message.get("content")
        if not (content is None or isinstance(content, str)
                or isinstance(content, list) and all(isinstance(part, dict) for part in content)):
            return False
    return True


def is_embedding_list(body: dict[str, Any]) -> bool:
    """OpenAI's list of embeddings: objects with a vector (or its base64) and, if any, an integer index."""
    data = body.get("data")
    return isinstance(data, list) and all(
        isinstance(item, dict) and isinstance(item.get("embedding"), (list, str))
        and (type(item.get("index", 0)) is int) for item in data)
