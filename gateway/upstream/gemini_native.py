"""Google's own requests, passed through a gemini deployment.

Google's Gemini API inbound (gateway.gemini_api) hands a gemini deployment the client's own request: these
send it as it came, under the deployment's name for the model (the path's), and hand back Google's answer
or events passed through beside their chat translation, which only feeds the metering.
"""
import time
from collections.abc import Iterator
from typing import Any

from gateway.conversation import PassedThrough
from gateway.upstream.gemini import GeminiAdapter
from gateway.upstream.gemini_answer import StreamTranslation, blocked, completion, completion_id, usage
from gateway.upstream.shapes import ChunkStream, Malformed
from gateway.upstream.sse import EventStream
from utils_app.errors import UpstreamError
from utils_app.http import json_object


def native_body(adapter: GeminiAdapter, body: dict[str, Any]) -> dict[str, Any]:
    """The client's request with only the model replaced (a body names it only where Google's API lets it)."""
    return {**body, "model": adapter.resource} if "model" in body else body


def _native_translation(answer: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    """The chat translation of Google's answer, for the metering. A prompt Google refused to answer is relayed
    as Google answered it (promptFeedback, no candidates): it translates to no choice."""
    if blocked(answer) is not None:
        return {"id": completion_id(answer), "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [], "usage": usage(answer.get("usageMetadata")).to_chat()}
    return completion(answer, model=model, malformed=malformed)


def generate_native(adapter: GeminiAdapter, body: dict[str, Any]) -> PassedThrough:
    answer = adapter.transport.post_json(adapter.path("generateContent"), native_body(adapter, body))
    return PassedThrough(_native_translation(answer, model=adapter.upstream_model,
                                             malformed=adapter.transport.malformed), answer)


def stream_native(adapter: GeminiAdapter, body: dict[str, Any]) -> ChunkStream:
    events = adapter.transport.stream(adapter.path("streamGenerateContent") + "?alt=sse", native_body(adapter, body))
    config = body.get("generationConfig") or body.get("generation_config")
    count = (config.get("candidateCount") or config.get("candidate_count")) if isinstance(config, dict) else None
    return ChunkStream(_native_chunks(adapter, events, candidates=count if type(count) is int and count > 0 else 1),
                       events.close)


def _native_chunks(adapter: GeminiAdapter, events: EventStream, *, candidates: int) -> Iterator[dict[str, Any]]:
    """Each of Google's events passed through beside the chunk that translates it (no choice for an event
    that says nothing to the metering, a thought summary say), with its usage where it carries usageMetadata."""
    stream = StreamTranslation(model=adapter.upstream_model, candidates=candidates)
    for data in events:
        event = json_object(data)
        if event is None:
            raise adapter.transport.malformed("stream event")
        if "error" in event:
            raise adapter._stream_error(event, data)
        chunk = stream.translate(event, malformed=adapter.transport.malformed) or stream.piece([])
        counted = usage(event.get("usageMetadata")).to_chat()
        if counted:
            chunk["usage"] = counted
        yield PassedThrough(chunk, event)
        if stream.done:
            events.finished()
            break
    if not stream.finished_any:
        raise UpstreamError(f"The upstream provider '{adapter.name}' closed the stream before it finished.")


def embed_native(adapter: GeminiAdapter, method: str, body: dict[str, Any]) -> tuple[list[list[float]], int | None]:
    """embedContent or batchEmbedContents as the client sent it: (the vectors in order, the input tokens
    Google reported, or None)."""
    if method == "batchEmbedContents":
        requests = body.get("requests")
        request = {**body, "requests": [{**item, "model": adapter.resource}
                                        for item in (requests if isinstance(requests, list) else ())]}
    else:
        request = native_body(adapter, body)
    answer = adapter.transport.post_json(adapter.path(method), request)
    found = answer.get("embeddings") if method == "batchEmbedContents" else [answer.get("embedding")]
    if not isinstance(found, list):
        raise adapter.transport.malformed("list of embeddings")
    vectors = []
    for item in found:
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list) or not all(type(value) in (int, float) for value in values):
            raise adapter.transport.malformed("list of embeddings")
        vectors.append([float(value) for value in values])
    meta = answer.get("usageMetadata")
    tokens = meta.get("promptTokenCount") if isinstance(meta, dict) else None
    return vectors, tokens if type(tokens) is int and tokens >= 0 else None
