"""Talking to upstreams: OpenAI-compatible HTTP APIs and the in-process local models.

Both kinds offer the same five calls, each taking the OpenAI request body the
gateway forwards (``model`` already set to the upstream's name):

    chat(payload) -> dict                  a chat.completion object
    chat_stream(payload) -> ChunkStream    chat.completion.chunk objects, first one already received
    images(payload) -> list[Image]         the image bytes, whatever form the upstream sent them in
    speech(payload) -> Audio               the audio bytes and their content type
    embeddings(payload) -> dict            OpenAI's list of embeddings

Failures are raised as gateway errors the pipeline understands:
``UpstreamRejected`` (the upstream said the request is bad: passed on, no
fallback), ``UpstreamError`` (502, the next provider is tried) and
``UpstreamTimeout`` (504, the next provider is tried).
"""
import base64
import json
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from gateway import local_models
from gateway.serializers import IMAGE_DEFAULTS, SPEECH_DEFAULTS, image_dimensions
from models_catalog.models import Provider
from utils_app.errors import GatewayError, UpstreamError

log = logging.getLogger("gateway.upstream")

# Upstream 4xx messages are passed on to the client; they are cut to this length.
MAX_UPSTREAM_MESSAGE = 2000
# An image handed out by URL is fetched and stored by the gateway; larger ones are refused.
MAX_FETCHED_IMAGE_BYTES = 50 * 1024 * 1024
# One pooled connection per thread of a gunicorn worker is enough (gateway/gunicorn_conf.py).
POOL_SIZE = 64
CONNECT_TIMEOUT = 10.0


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamRejected(GatewayError):
    """The upstream refused the request itself (4xx): retrying elsewhere would be refused too."""

    type = "invalid_request_error"
    code = "upstream_rejected"


@dataclass(frozen=True)
class Image:
    content: bytes
    content_type: str
    revised_prompt: str | None = None


@dataclass(frozen=True)
class Audio:
    content: bytes
    content_type: str
    format: str  # the file format of ``content``, used as the stored file's extension


class ChunkStream:
    """Chat chunks from an upstream, with the first one already received.

    Receiving the first chunk before the gateway answers means an upstream that
    fails early (refused, down, silent) still gets an ordinary JSON error, a
    refund and the next fallback, instead of a broken 200 stream.
    """

    def __init__(self, chunks: Iterator[dict], close: Callable[[], None]):
        self._chunks = chunks
        self._close = close
        try:
            self._first = next(chunks)
        except StopIteration:
            close()
            raise UpstreamError("The upstream ended the stream without sending anything.") from None
        except BaseException:
            close()
            raise

    def __iter__(self) -> Iterator[dict]:
        yield self._first
        yield from self._chunks

    def close(self) -> None:
        self._close()


# ---------------------------------------------------------------- HTTP upstreams

_sessions: dict[tuple[str, str], requests.Session] = {}
_sessions_lock = threading.Lock()


def _session(provider: Provider) -> requests.Session:
    """One keep-alive pool per provider, shared by the threads of the process."""
    key = (provider.name, provider.base_url)
    session = _sessions.get(key)
    if session is None:
        with _sessions_lock:
            session = _sessions.get(key)
            if session is None:
                session = requests.Session()
                # Proxy settings are read from the environment once, here, instead of on every
                # call: with trust_env on, requests re-reads them and stats ~/.netrc per request.
                session.trust_env = False
                session.proxies.update(requests.utils.get_environ_proxies(provider.base_url or "http://localhost"))
                # No automatic retries: the fallback chain decides what happens after a failure.
                adapter = HTTPAdapter(pool_connections=4, pool_maxsize=POOL_SIZE, max_retries=0)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
                _sessions[key] = session
    return session


def _is_timeout(exc: BaseException) -> bool:
    # requests reports a read timeout while loading a body as a ConnectionError
    # wrapping urllib3's ReadTimeoutError, so look one level down as well.
    if isinstance(exc, (requests.Timeout, ReadTimeoutError)):
        return True
    return any(isinstance(arg, ReadTimeoutError) for arg in getattr(exc, "args", ()))


class HttpProvider:
    """Any OpenAI-compatible API at ``provider.base_url``."""

    def __init__(self, provider: Provider):
        self.provider = provider
        self.name = provider.name

    # -- plumbing

    def _secret(self) -> str:
        variable = self.provider.api_key_env
        if not variable:
            return ""  # an upstream without authentication (a local OpenAI-compatible server)
        secret = os.environ.get(variable, "").strip()
        if not secret:
            # Fail before any network traffic: without the secret the call cannot succeed.
            raise UpstreamError(f"The upstream provider '{self.name}' is not configured on this gateway "
                                f"({variable} is not set).")
        return secret

    def _clean(self, message: str, secret: str) -> str:
        """An upstream message with this provider's address and secret taken out."""
        for needle in (secret, self.provider.base_url):
            if needle:
                message = message.replace(needle, "[upstream]")
        return message[:MAX_UPSTREAM_MESSAGE]

    def _post(self, path: str, payload: dict, *, stream: bool = False) -> requests.Response:
        secret = self._secret()
        headers = {"Content-Type": "application/json"}
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        if stream:
            # A compressed event stream would sit in the decompressor instead of flowing.
            headers.update({"Accept": "text/event-stream", "Accept-Encoding": "identity"})
        timeout = self.provider.timeout
        try:
            response = _session(self.provider).post(
                self.provider.base_url + path, data=json.dumps(payload), headers=headers,
                timeout=(min(CONNECT_TIMEOUT, timeout), timeout), stream=stream)
        except requests.RequestException as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 400:
            try:
                raise self._status_error(response, secret)
            finally:
                response.close()
        return response

    def _transport_error(self, exc: BaseException) -> UpstreamError:
        if _is_timeout(exc):
            log.warning("upstream %s timed out after %ss", self.name, self.provider.timeout)
            return UpstreamTimeout(f"The upstream provider '{self.name}' did not answer within "
                                   f"{self.provider.timeout:g} seconds.")
        log.warning("upstream %s unreachable: %s", self.name, exc.__class__.__name__)
        return UpstreamError(f"The upstream provider '{self.name}' could not be reached.")

    def _status_error(self, response: requests.Response, secret: str) -> GatewayError:
        status = response.status_code
        try:
            error = response.json().get("error")
        except Exception:  # an HTML error page or garbage: only the status is usable
            error = None
        if not isinstance(error, dict):
            error = {"message": error} if isinstance(error, str) else {}
        message = error.get("message") if isinstance(error.get("message"), str) else ""
        if status >= 500:
            log.warning("upstream %s answered %s", self.name, status)
            return UpstreamError(f"The upstream provider '{self.name}' failed (HTTP {status}).")
        if status in (401, 403):
            # The gateway's own upstream credential was refused: a configuration fault of
            # this service, not the client's, so it must not look like a bad client key.
            log.error("upstream %s refused the gateway's credential (HTTP %s)", self.name, status)
            return UpstreamError(f"The upstream provider '{self.name}' refused this gateway's credentials.")
        code = error.get("code") if isinstance(error.get("code"), str) else "upstream_rejected"
        param = error.get("param") if isinstance(error.get("param"), str) else None
        text = self._clean(message, secret) or f"The upstream rejected the request (HTTP {status})."
        if status == 429:
            # The upstream's own rate limit: worth trying a fallback, so it is an UpstreamError
            # that keeps the upstream's status when it is the last word.
            headers = {"Retry-After": response.headers["Retry-After"]} if "Retry-After" in response.headers else {}
            return UpstreamError(text, status=429, type="invalid_request_error", code=code, param=param,
                                 headers=headers)
        return UpstreamRejected(text, status=status, code=code, param=param)

    def _json(self, response: requests.Response) -> dict:
        try:
            body = response.json()
        except ValueError:  # requests' JSONDecodeError is a ValueError
            body = None
        if not isinstance(body, dict):
            raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed response.")
        return body

    # -- operations

    def chat(self, payload: dict) -> dict:
        body = self._json(self._post("/chat/completions", payload))
        if not isinstance(body.get("choices"), list):
            raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed completion.")
        return body

    def chat_stream(self, payload: dict) -> ChunkStream:
        response = self._post("/chat/completions", payload, stream=True)
        return ChunkStream(self._chunks(response), response.close)

    def _chunks(self, response: requests.Response) -> Iterator[dict]:
        for data in self._events(response):
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed stream event.") from None
            if not isinstance(chunk, dict):
                raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed stream event.")
            if chunk.get("error"):
                error = chunk["error"]
                detail = error.get("message") if isinstance(error, dict) else str(error)
                raise UpstreamError(f"The upstream provider '{self.name}' failed during the stream: "
                                    f"{self._clean(str(detail), '')}")
            yield chunk
        raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")

    def _events(self, response: requests.Response) -> Iterator[str]:
        """The data of each server-sent event, as soon as its blank line arrives.

        read1 returns whatever bytes have arrived (up to 64 KiB) instead of waiting
        for a full buffer, for chunked and close-delimited bodies alike: this is what
        keeps the relay chunk by chunk.
        """
        buffer = b""
        data: list[str] = []
        while True:
            try:
                block = response.raw.read1(65536)
            except (ReadTimeoutError, ProtocolError, OSError, requests.RequestException) as exc:
                raise self._transport_error(exc) from None
            if not block:
                break
            *lines, buffer = (buffer + block).split(b"\n")
            for line in lines:
                line = line.rstrip(b"\r")
                if not line:
                    if data:
                        yield "\n".join(data)
                        data = []
                elif line.startswith(b"data:"):
                    value = line[5:]
                    data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
        if buffer.startswith(b"data:"):
            data.append(buffer[5:].strip().decode("utf-8", "replace"))
        if data:
            yield "\n".join(data)

    def images(self, payload: dict) -> list[Image]:
        body = self._json(self._post("/images/generations", payload))
        items = body.get("data")
        if not isinstance(items, list) or not items:
            raise UpstreamError(f"The upstream provider '{self.name}' sent no images.")
        images = []
        for item in items:
            if not isinstance(item, dict):
                raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed image.")
            revised = item.get("revised_prompt") if isinstance(item.get("revised_prompt"), str) else None
            if isinstance(item.get("b64_json"), str):
                try:
                    content = base64.b64decode(item["b64_json"], validate=True)
                except ValueError:
                    raise UpstreamError(f"The upstream provider '{self.name}' sent a malformed image.") from None
                images.append(Image(content, _image_type(content), revised))
            elif isinstance(item.get("url"), str):
                content, content_type = self._fetch_image(item["url"])
                images.append(Image(content, content_type, revised))
            else:
                raise UpstreamError(f"The upstream provider '{self.name}' sent an image without data.")
        return images

    def _fetch_image(self, url: str) -> tuple[bytes, str]:
        """Download an image the upstream handed out by URL, so the URL the client gets is ours.

        No Authorization header goes with it: the image may live on a third-party host.
        """
        if not url.startswith(("https://", "http://")):
            raise UpstreamError(f"The upstream provider '{self.name}' sent an unusable image URL.")
        try:
            with _session(self.provider).get(url, timeout=(CONNECT_TIMEOUT, self.provider.timeout),
                                             stream=True) as response:
                if response.status_code != 200:
                    raise UpstreamError(f"The image from provider '{self.name}' could not be fetched "
                                        f"(HTTP {response.status_code}).")
                parts, size = [], 0
                for part in response.iter_content(65536):
                    size += len(part)
                    if size > MAX_FETCHED_IMAGE_BYTES:
                        raise UpstreamError(f"The image from provider '{self.name}' is too large.")
                    parts.append(part)
        except requests.RequestException as exc:
            raise self._transport_error(exc) from None
        content = b"".join(parts)
        return content, _image_type(content)

    def speech(self, payload: dict) -> Audio:
        response = self._post("/audio/speech", payload)
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "application/octet-stream"
        content = response.content  # already loaded (and timed) by _post
        if not content or content_type == "application/json":
            raise UpstreamError(f"The upstream provider '{self.name}' sent no audio.")
        return Audio(content, content_type, payload.get("response_format", SPEECH_DEFAULTS["response_format"]))

    def embeddings(self, payload: dict) -> dict:
        body = self._json(self._post("/embeddings", payload))
        data = body.get("data")
        if not isinstance(data, list) or not all(isinstance(item, dict) and "embedding" in item for item in data):
            raise UpstreamError(f"The upstream provider '{self.name}' sent malformed embeddings.")
        return body


def _image_type(content: bytes) -> str:
    """The content type of image bytes, from their signature (upstream headers are often generic)."""
    if content.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if content.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "image/webp"
    if content[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    raise UpstreamError("The upstream sent image data in an unknown format.")


# ---------------------------------------------------------------- local models

def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def content_text(content) -> str:
    """The text of a message's content: a string, or the text parts of an array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content if isinstance(part.get("text"), str))
    return ""


def prompt_text(messages: list[dict]) -> str:
    """All the text of a conversation, for token estimates."""
    return "\n".join(content_text(message.get("content")) for message in messages)


class LocalProvider:
    """The in-process development models (gateway.local_models) behind the provider calls.

    Speech: the local model writes WAV or raw PCM only. ``pcm`` gets raw 16-bit
    24 kHz samples; every other format (mp3, opus, aac, flac, wav) gets a WAV file
    with an honest ``audio/wav`` content type rather than mislabelled bytes.
    """

    def __init__(self, provider: Provider):
        self.provider = provider
        self.name = provider.name

    def chat(self, payload: dict) -> dict:
        messages = payload["messages"]
        reply = local_models.chat_reply(messages)
        prompt_tokens = local_models.count_tokens(prompt_text(messages))
        completion_tokens = local_models.count_tokens(reply)
        choices = [{"index": index, "message": {"role": "assistant", "content": reply, "refusal": None},
                    "logprobs": None, "finish_reason": "stop"} for index in range(payload.get("n", 1))]
        return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
                "model": payload["model"], "choices": choices, "system_fingerprint": None,
                "usage": _chat_usage(prompt_tokens, completion_tokens * len(choices))}

    def chat_stream(self, payload: dict) -> ChunkStream:
        return ChunkStream(self._chunks(payload), lambda: None)

    def _chunks(self, payload: dict) -> Iterator[dict]:
        messages = payload["messages"]
        reply = local_models.chat_reply(messages)
        choices = payload.get("n", 1)
        head = {"id": _completion_id(), "object": "chat.completion.chunk", "created": int(time.time()),
                "model": payload["model"], "system_fingerprint": None}

        def chunk(index, delta, finish_reason=None):
            return {**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                         "finish_reason": finish_reason}]}

        for index in range(choices):
            yield chunk(index, {"role": "assistant", "content": ""})
            for piece in local_models.chat_pieces(reply):
                yield chunk(index, {"content": piece})
            yield chunk(index, {}, "stop")
        if (payload.get("stream_options") or {}).get("include_usage"):
            usage = _chat_usage(local_models.count_tokens(prompt_text(messages)),
                                local_models.count_tokens(reply) * choices)
            yield {**head, "choices": [], "usage": usage}

    def images(self, payload: dict) -> list[Image]:
        width, height = image_dimensions(payload.get("size", IMAGE_DEFAULTS["size"]))
        return [Image(local_models.render_png(width, height, payload["prompt"], seed=seed), "image/png")
                for seed in range(payload.get("n", IMAGE_DEFAULTS["n"]))]

    def speech(self, payload: dict) -> Audio:
        voice = payload["voice"]
        voice = voice["id"] if isinstance(voice, dict) else voice
        speed = payload.get("speed", SPEECH_DEFAULTS["speed"])
        if payload.get("response_format") == "pcm":
            return Audio(local_models.synthesize_pcm(payload["input"], voice=voice, speed=speed), "audio/pcm", "pcm")
        return Audio(local_models.synthesize_wav(payload["input"], voice=voice, speed=speed), "audio/wav", "wav")

    def embeddings(self, payload: dict) -> dict:
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        dimensions = payload.get("dimensions", local_models.EMBEDDING_DIMENSIONS)
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = local_models.embed(text, dimensions)
            if as_base64:
                # OpenAI's base64 form: the vector packed as little-endian float32.
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(local_models.count_tokens(text) for text in texts)
        return {"object": "list", "data": data, "model": payload["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _chat_usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def client_for(provider: Provider) -> HttpProvider | LocalProvider:
    return LocalProvider(provider) if provider.type == "local" else HttpProvider(provider)
