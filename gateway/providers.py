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

Nothing an upstream sends is trusted (docs/hardening.md): a body is read whole
only up to UPSTREAM_MAX_BYTES, a call ends at the provider's ``timeout`` however
slowly the bytes drip, a stream ends after STREAM_MAX_SECONDS, an answer of the
wrong shape is a 502, and an image URL is fetched only from the provider's own
host or from a public address.
"""
import base64
import ipaddress
import json
import logging
import os
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests
from django.conf import settings

from gateway import local_models
from gateway.serializers import IMAGE_DEFAULTS, SPEECH_DEFAULTS, image_dimensions
from models_catalog.catalog import secret_env_allowed
from models_catalog.models import Provider
from utils_app.errors import GatewayError, UpstreamError, UpstreamRateLimited, UpstreamTimeout
from utils_app.http import TRANSPORT_ERRORS, Upstreams, is_timeout, json_object, timeouts
from utils_app.logging import current_request_id

log = logging.getLogger("gateway.upstream")

# Upstream 4xx messages are passed on to the client; they are cut to this length.
MAX_UPSTREAM_MESSAGE = 2000
# Of an upstream's error answer only the message is used: more than this is not read.
MAX_ERROR_BODY = 64 * 1024
CONNECT_TIMEOUT = 10.0
# Hops followed when fetching an image the upstream handed out by URL.
MAX_IMAGE_REDIRECTS = 5
READ_BLOCK = 65536
# How long a finished stream waits for the end of its upstream body before dropping the connection.
STREAM_END_SECONDS = 1.0


class StreamTooLong(UpstreamTimeout):
    """A stream that outlived STREAM_MAX_SECONDS, ended by the gateway however lively it was."""


class UpstreamRejected(GatewayError):
    """The upstream refused the request itself (4xx): retrying elsewhere would be refused too."""

    type = "invalid_request_error"
    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, **kwargs):
        super().__init__(message, **kwargs)
        self.status = status  # the upstream's own 4xx, passed on


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

class Deadline:
    """The time one upstream call has left: its whole budget, not a wait per read."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def timeouts(self) -> tuple[float, float]:
        """(connect, read) timeouts for starting a request now."""
        return timeouts(max(self.left(), 0.001), connect=CONNECT_TIMEOUT)


def _wait_at_most(response: requests.Response, seconds: float) -> None:
    """Make the next read on the response's socket give up after ``seconds``.

    requests sets one timeout per read when the request starts; a body dripping a
    byte just inside it would never time out. Narrowing the socket's timeout before
    each read to the time left is what makes the budget a budget.
    """
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


@dataclass(frozen=True)
class Reply:
    """An upstream's whole answer, read within the size cap and the call's deadline."""

    status: int
    headers: Mapping[str, str]
    content: bytes


# One keep-alive pool per provider base URL (utils_app.http), shared by the threads or greenlets of
# the process, holding a connection for each request the worker serves at once (UPSTREAM_POOL_SIZE).
_upstreams = Upstreams(pool_size=settings.UPSTREAM_POOL_SIZE, hosts=4)


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
        if not secret_env_allowed(variable):
            # Only variables meant for upstream secrets are ever read and sent (docs/hardening.md).
            log.error("provider %s names %s, which may not hold an upstream secret", self.name, variable)
            raise UpstreamError(f"The upstream provider '{self.name}' is not configured on this gateway "
                                f"({variable} is not an allowed secret variable).")
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

    def _post(self, path: str, payload: dict, deadline: Deadline) -> Reply:
        """POST and read the whole answer within the deadline and the size cap."""
        response, secret = self._send(path, payload, deadline, stream=False)
        with response:
            if response.status_code >= 400:
                raise self._status_error(response.status_code, response.headers,
                                         self._error_body(response, deadline), secret)
            return Reply(response.status_code, response.headers, self._read(response, deadline))

    def _open_stream(self, path: str, payload: dict) -> requests.Response:
        """POST for an event stream; the caller reads it as it arrives."""
        deadline = Deadline(self.provider.timeout)
        response, secret = self._send(path, payload, deadline, stream=True)
        if response.status_code >= 400:
            with response:
                raise self._status_error(response.status_code, response.headers,
                                         self._error_body(response, deadline), secret)
        return response

    def _send(self, path: str, payload: dict, deadline: Deadline, *, stream: bool):
        secret = self._secret()
        headers = {"Content-Type": "application/json"}
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        request_id = current_request_id()
        if request_id:
            headers["X-Request-ID"] = request_id  # the upstream's logs name the same request as ours
        if stream:
            # A compressed event stream would sit in the decompressor instead of flowing.
            headers.update({"Accept": "text/event-stream", "Accept-Encoding": "identity"})
        try:
            # stream=True either way: the body is read here, by _read, under the size cap.
            response = _upstreams.post(self.provider.base_url, self.provider.base_url + path,
                                       data=json.dumps(payload), headers=headers, timeout=deadline.timeouts(),
                                       stream=True)
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from None
        return response, secret

    def _read(self, response: requests.Response, deadline: Deadline, limit: int | None = None) -> bytes:
        """The whole body, or a 502 past ``limit`` bytes (decompressed) and a 504 past the deadline.

        read1, one receive at a time: a plain read(n) keeps receiving until it has n
        bytes, each receive with a fresh timeout, so a drip would never reach the check.
        """
        limit = settings.UPSTREAM_MAX_BYTES if limit is None else limit
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(limit)
        parts, size = [], 0
        try:
            while True:
                _wait_at_most(response, deadline.left())
                block = response.raw.read1(READ_BLOCK, decode_content=True)
                if not block:
                    return b"".join(parts)
                size += len(block)
                if size > limit:
                    raise self._too_large(limit)
                parts.append(block)
                if deadline.left() <= 0:
                    raise self._timed_out()
        except TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from None

    def _error_body(self, response: requests.Response, deadline: Deadline) -> bytes:
        """As much of an error answer as is worth reading; nothing when it is too large or too slow."""
        try:
            return self._read(response, deadline, limit=MAX_ERROR_BODY)
        except UpstreamError:
            return b""

    def _too_large(self, limit: int) -> UpstreamError:
        log.warning("upstream %s sent more than %s bytes", self.name, limit)
        return UpstreamError(f"The upstream provider '{self.name}' sent an answer larger than {limit} bytes.")

    def _timed_out(self) -> UpstreamTimeout:
        log.warning("upstream %s timed out after %ss", self.name, self.provider.timeout)
        return UpstreamTimeout(f"The upstream provider '{self.name}' did not answer within "
                               f"{self.provider.timeout:g} seconds.")

    def _transport_error(self, exc: BaseException) -> UpstreamError:
        if is_timeout(exc):
            return self._timed_out()
        log.warning("upstream %s unreachable: %s", self.name, exc.__class__.__name__)
        return UpstreamError(f"The upstream provider '{self.name}' could not be reached.")

    def _status_error(self, status: int, headers: Mapping[str, str], content: bytes, secret: str) -> GatewayError:
        # Not a JSON object (an HTML error page, garbage): only the status is usable.
        error = (json_object(content) or {}).get("error")
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
            retry = {"Retry-After": headers["Retry-After"]} if "Retry-After" in headers else {}
            return UpstreamRateLimited(text, code=code, param=param, headers=retry)
        return UpstreamRejected(text, status=status, code=code, param=param)

    def _json(self, reply: Reply) -> dict:
        body = json_object(reply.content)
        if body is None:
            raise self._malformed("response")
        return body

    def _malformed(self, what: str) -> UpstreamError:
        log.warning("upstream %s sent a malformed %s", self.name, what)
        return UpstreamError(f"The upstream provider '{self.name}' sent a malformed {what}.")

    # -- operations

    def chat(self, payload: dict) -> dict:
        body = self._json(self._post("/chat/completions", payload, Deadline(self.provider.timeout)))
        if not _is_completion(body):
            raise self._malformed("completion")
        return body

    def chat_stream(self, payload: dict) -> ChunkStream:
        response = self._open_stream("/chat/completions", payload)
        finished = False

        def chunks() -> Iterator[dict]:
            nonlocal finished
            yield from self._chunks(response)
            finished = True  # [DONE] arrived: only a failure or an early close ends it otherwise

        def close() -> None:
            if finished:
                self._read_to_end(response)
            response.close()

        return ChunkStream(chunks(), close)

    def _chunks(self, response: requests.Response) -> Iterator[dict]:
        for data in self._events(response):
            if data == "[DONE]":
                return
            chunk = json_object(data)
            if chunk is None or not isinstance(chunk.get("choices") or [], list):
                raise self._malformed("stream event")
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
        keeps the relay chunk by chunk. Each read waits at most the provider's timeout
        (a silent upstream) and never past STREAM_MAX_SECONDS from the start; one event
        may not grow past UPSTREAM_MAX_BYTES.
        """
        ends = time.monotonic() + settings.STREAM_MAX_SECONDS
        buffer = b""
        data: list[str] = []
        pending = 0  # bytes of the event being assembled
        while True:
            left = ends - time.monotonic()
            if left <= 0:
                raise self._stream_too_long()
            _wait_at_most(response, min(self.provider.timeout, left))
            try:
                block = response.raw.read1(READ_BLOCK)
            except TRANSPORT_ERRORS as exc:
                if ends - time.monotonic() <= 0:
                    raise self._stream_too_long() from None
                raise self._transport_error(exc) from None
            if not block:
                break
            pending += len(block)
            if pending > settings.UPSTREAM_MAX_BYTES:
                raise self._too_large(settings.UPSTREAM_MAX_BYTES)
            *lines, buffer = (buffer + block).split(b"\n")
            for line in lines:
                line = line.rstrip(b"\r")
                if not line:
                    if data:
                        yield "\n".join(data)
                        data = []
                    pending = len(buffer)
                elif line.startswith(b"data:"):
                    value = line[5:]
                    data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
        if buffer.startswith(b"data:"):
            data.append(buffer[5:].strip().decode("utf-8", "replace"))
        if data:
            yield "\n".join(data)

    def _read_to_end(self, response: requests.Response) -> None:
        """After [DONE], read what is left of the body: only its end (a chunked body's last, empty
        chunk). urllib3 then gives the connection back to the pool, and the next call skips a new
        connection (and TLS handshake) to the provider. Anything else, or nothing within
        STREAM_END_SECONDS, and ``response.close()`` drops the connection instead, as it does for
        a stream the client left early (which the upstream must see closed, to stop generating).
        The client has its [DONE] already: the WSGI server closes the body after sending it.
        """
        try:
            _wait_at_most(response, STREAM_END_SECONDS)
            response.raw.read1(READ_BLOCK)
        except TRANSPORT_ERRORS:
            pass

    def _stream_too_long(self) -> StreamTooLong:
        log.warning("stream from upstream %s ended after STREAM_MAX_SECONDS", self.name)
        return StreamTooLong(f"The stream was ended after {settings.STREAM_MAX_SECONDS:g} seconds, the longest "
                             f"this gateway relays one.")

    def images(self, payload: dict) -> list[Image]:
        deadline = Deadline(self.provider.timeout)  # the fetches of image URLs included
        body = self._json(self._post("/images/generations", payload, deadline))
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
                content, content_type = self._fetch_image(item["url"], deadline)
                images.append(Image(content, content_type, revised))
            else:
                raise UpstreamError(f"The upstream provider '{self.name}' sent an image without data.")
        return images

    def _fetch_image(self, url: str, deadline: Deadline) -> tuple[bytes, str]:
        """Download an image the upstream handed out by URL, so the URL the client gets is ours.

        No Authorization header goes with it: the image may live on a third-party host.
        Redirects are followed by hand, each hop checked like the first (_check_image_url).
        """
        for _ in range(MAX_IMAGE_REDIRECTS + 1):
            self._check_image_url(url)
            try:
                response = _upstreams.session(self.provider.base_url).get(
                    url, timeout=deadline.timeouts(), stream=True, allow_redirects=False)
            except TRANSPORT_ERRORS as exc:
                raise self._transport_error(exc) from None
            with response:
                if response.is_redirect:
                    url = urljoin(url, response.headers["Location"])
                    continue
                if response.status_code != 200:
                    raise UpstreamError(f"The image from provider '{self.name}' could not be fetched "
                                        f"(HTTP {response.status_code}).")
                content = self._read(response, deadline)
            return content, _image_type(content)
        raise UpstreamError(f"The image from provider '{self.name}' redirected more than {MAX_IMAGE_REDIRECTS} times.")

    def _check_image_url(self, url: str) -> None:
        """Refuse an image URL that would make the gateway fetch from inside its own network.

        The upstream chooses the URL (and every redirect), so without this check it could
        aim the gateway at a loopback or private address. The provider's own host is
        trusted like the provider itself (a self-hosted upstream may live on one).
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(f"The upstream provider '{self.name}' sent an unusable image URL.")
        if _origin(parts) == _origin(urlsplit(self.provider.base_url)):
            return
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            addresses = {info[4][0] for info in socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)}
        except (OSError, ValueError, UnicodeError):
            raise UpstreamError(f"The image host of provider '{self.name}' could not be resolved.") from None
        if not all(_is_public(address) for address in addresses):
            log.warning("upstream %s pointed an image at a non-public address", self.name)
            raise UpstreamError(f"The upstream provider '{self.name}' pointed an image at an address this gateway "
                                f"does not fetch from.")

    def speech(self, payload: dict) -> Audio:
        response = self._post("/audio/speech", payload, Deadline(self.provider.timeout))
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "application/octet-stream"
        content = response.content
        if not content or content_type == "application/json":
            raise UpstreamError(f"The upstream provider '{self.name}' sent no audio.")
        return Audio(content, content_type, payload.get("response_format", SPEECH_DEFAULTS["response_format"]))

    def embeddings(self, payload: dict) -> dict:
        body = self._json(self._post("/embeddings", payload, Deadline(self.provider.timeout)))
        if not _is_embedding_list(body):
            raise self._malformed("list of embeddings")
        return body


def _is_completion(body: dict) -> bool:
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


def _is_embedding_list(body: dict) -> bool:
    """OpenAI's list of embeddings: objects with a vector (or its base64) and, if any, an integer index."""
    data = body.get("data")
    return isinstance(data, list) and all(
        isinstance(item, dict) and isinstance(item.get("embedding"), (list, str))
        and (type(item.get("index", 0)) is int) for item in data)


def _origin(parts) -> tuple:
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.scheme, (parts.hostname or "").lower(), port or (443 if parts.scheme == "https" else 80))


def _is_public(address: str) -> bool:
    """Whether an IP address is on the public internet (not loopback, private, link-local, reserved…)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not part of the address
    except ValueError:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


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
