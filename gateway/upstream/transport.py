"""HTTP to an upstream, whatever its protocol: deadlines, bounded reads, server-sent events, checked
image fetches, and an upstream's error answer turned into the error it means.

Every adapter (one module per provider type in this package) talks through an
``HttpTransport``; an adapter only maps shapes and reads its protocol's error bodies.
Nothing an upstream sends is trusted (docs/hardening.md): a body is read whole only up
to UPSTREAM_MAX_BYTES, a call ends at its deadline however slowly the bytes drip, a
stream ends after STREAM_MAX_SECONDS, a redirect is never followed, no secret the
gateway holds is passed on in upstream text, and an image URL is fetched only from a public
address (or, for an image URL the upstream itself handed out, from the provider's own host).
"""
import base64
import ctypes
import ctypes.util
import email.utils
import functools
import ipaddress
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import SplitResult, urljoin, urlsplit

import requests
from django.conf import settings
from django.core.signals import request_finished

from models_catalog.catalog import secret_env_allowed
from utils_app.errors import (
    GatewayError,
    StreamTooLong,
    SLOW_ANSWER,
    UpstreamCredentialRejected,
    UpstreamDeclined,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from utils_app.http import TRANSPORT_ERRORS, Answer, Upstreams, is_timeout, timeouts
from utils_app.logging import current_request_id, one_line

log = logging.getLogger("gateway.upstream")

# An upstream's answer, its body not read yet: a model call's comes through urllib3's pool (utils_app.http),
# a GET's (probes, image fetches) and any call through a proxy through requests.
Response = Answer | requests.Response

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
# The longest cooldown an upstream's Retry-After can ask for (CONTRACT section 7).
MAX_RETRY_AFTER = 300
# Shorter values are not looked for in upstream text: replacing every "1" or "abc" would garble it,
# and a secret that short protects nothing anyway.
MIN_SCRUBBED_SECRET = 8
# How far past MAX_UPSTREAM_MESSAGE the scrubber reads: a character of a quoted secret's base64 may take up
# to 19 (percent-encoded, then split by escaped line breaks), so this covers a secret of some 300 characters
# begun just before the cut, however it is written out.
SCRUB_LOOKAHEAD = 8192


class Deadline:
    """The time one upstream attempt has left: its whole budget, not a wait per read."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def timeouts(self) -> tuple[float, float]:
        """(connect, read) timeouts for starting a request now."""
        return timeouts(max(self.left(), 0.001), connect=CONNECT_TIMEOUT)


@dataclass(frozen=True)
class Reply:
    """An upstream's whole answer, read within the size cap and the call's deadline."""

    status: int
    headers: Mapping[str, str]
    content: bytes


@dataclass(frozen=True)
class Refusal:
    """What an adapter read from its protocol's error body: the message and how to treat it.

    The flags come only from the protocol's machine-readable fields (an error type or code, a
    status word, a reason), never from the message's words: an upstream's message may quote the
    request, so words in it are the client's to choose (docs/routing.md, "Whose failure is it").
    """

    message: str = ""
    code: str | None = None
    param: str | None = None
    out_of_credit: bool = False  # the secret is refused, or its account has no quota or credit: disabled
    token_limit: bool = False  # a 429 of a limit on tokens, which the request's own size counts against
    declined: bool = False  # a refusal another deployment may not repeat: the request moves on, no health change


@dataclass(frozen=True)
class Demand:
    """What a request asked of the upstream, read from the body as sent: its size in bytes (no token of it
    is smaller than a byte, so this bounds its input tokens from above) and the output tokens it allows."""

    body_bytes: int = 0
    output_tokens: int = 0

    @property
    def token_bound(self) -> int:
        return self.body_bytes + self.output_tokens


def requested_output(payload: dict[str, Any]) -> int:
    """The output tokens a request allows, in any of the protocols sent upstream (OpenAI's max_completion_tokens
    or max_tokens times n, Anthropic's max_tokens, Gemini's maxOutputTokens times candidateCount); 0 if unsaid."""
    config = payload.get("generationConfig")
    if not isinstance(config, dict):
        config = {}
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens") or config.get("maxOutputTokens")
    choices = payload.get("n") or config.get("candidateCount") or 1
    if type(limit) is not int or type(choices) is not int:
        return 0
    return max(limit, 0) * max(choices, 1)


# The error body reader an adapter gives its transport: (status, body) -> Refusal.
ErrorReader = Callable[[int, bytes], Refusal]


def _wait_at_most(response: Response, seconds: float) -> None:
    """Make the next read on the response's socket give up after ``seconds``.

    requests sets one timeout per read when the request starts; a body dripping a
    byte just inside it would never time out. Narrowing the socket's timeout before
    each read to the time left is what makes the budget a budget.
    """
    connection = getattr(response.raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


# One keep-alive pool per provider base URL (utils_app.http), shared by the threads or greenlets of
# the process, holding a connection for each request the worker serves at once (UPSTREAM_POOL_SIZE).
_upstreams = Upstreams(pool_size=settings.UPSTREAM_POOL_SIZE, hosts=4)


class HttpTransport:
    """One attempt's HTTP calls to one provider: ``base_url``, the headers that carry its secret, a deadline."""

    def __init__(self, *, name: str, base_url: str, timeout: float, headers: dict[str, Any], secret: str,
                 read_error: ErrorReader, deadline: Deadline | None = None):
        self.name = name
        self.base_url = base_url
        self.timeout = timeout
        self.headers = headers
        self.secret = secret
        self.read_error = read_error
        self.deadline = deadline or Deadline(timeout)
        self.demand = Demand()  # what the last request sent asked for (whose failure a refusal or timeout is)

    # -- calls

    def post(self, path: str, payload: dict[str, Any]) -> Reply:
        """POST JSON and read the whole answer within the deadline and the size cap; an error answer raises."""
        response = self._send(path, payload, stream=False)
        with response:
            if response.status_code >= 300:
                raise self._status_error(response)
            return Reply(response.status_code, response.headers, self.read(response))

    def post_json(self, path: str, payload: dict[str, Any], what: str = "response") -> dict[str, Any]:
        body = json_object(self.post(path, payload).content)
        if body is None:
            raise self.malformed(what)
        return body

    def get(self, path: str) -> Reply:
        """GET (a probe's cheapest call) and read the answer; an error answer raises."""
        headers = {**self.headers, "Accept": "application/json"}
        try:
            response = _upstreams.session(self.base_url).get(self._url(path), headers=headers, stream=True,
                                                             timeout=self.deadline.timeouts(), allow_redirects=False)
        except TRANSPORT_ERRORS as exc:
            raise self.transport_error(exc) from None
        with response:
            if response.status_code >= 300:
                raise self._status_error(response)
            return Reply(response.status_code, response.headers, self.read(response))

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.base_url + path

    def stream(self, path: str, payload: dict[str, Any]) -> "EventStream":
        """POST for an event stream; the answer is read as it arrives (``EventStream``)."""
        response = self._send(path, payload, stream=True)
        if response.status_code >= 300:
            with response:
                raise self._status_error(response)
        return EventStream(self, response)

    def _send(self, path: str, payload: dict[str, Any], *, stream: bool) -> Response:
        headers = {"Content-Type": "application/json", **self.headers}
        request_id = current_request_id()
        if request_id:
            headers["X-Request-ID"] = request_id  # the upstream's logs name the same request as ours
        if stream:
            # A compressed event stream would sit in the decompressor instead of flowing.
            headers.update({"Accept": "text/event-stream", "Accept-Encoding": "identity"})
        data = json.dumps(payload)
        self.demand = Demand(len(data), requested_output(payload))
        try:
            # The body is read here, by read(), under the size cap.
            return _upstreams.post(self.base_url, self._url(path), data=data, headers=headers,
                                   timeout=self.deadline.timeouts())
        except TRANSPORT_ERRORS as exc:
            raise self.transport_error(exc) from None

    def read(self, response: Response, limit: int | None = None) -> bytes:
        """The whole body, or a 502 past ``limit`` bytes (decompressed) and a 504 past the deadline.

        read1, one receive at a time: a plain read(n) keeps receiving until it has n
        bytes, each receive with a fresh timeout, so a drip would never reach the check.
        """
        limit = settings.UPSTREAM_MAX_BYTES if limit is None else limit
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self.too_large(limit)
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                _wait_at_most(response, self.deadline.left())
                block = response.raw.read1(READ_BLOCK, decode_content=True)
                if not block:
                    return b"".join(parts)
                size += len(block)
                if size > limit:
                    raise self.too_large(limit)
                parts.append(block)
                if self.deadline.left() <= 0:
                    raise self.timed_out()
        except TRANSPORT_ERRORS as exc:
            raise self.transport_error(exc) from None

    # -- errors

    def _status_error(self, response: Response) -> GatewayError:
        status = response.status_code
        if status < 400:
            # A redirect on a model call is never followed (utils_app.http): the provider failed.
            return UpstreamError(f"The upstream provider '{self.name}' answered with a redirect (HTTP {status}), "
                                 f"which this gateway does not follow.")
        try:
            content = self.read(response, limit=MAX_ERROR_BODY)
        except UpstreamError:
            content = b""  # too large or too slow: only the status is usable
        return self.refused(status, response.headers, self.read_error(status, content))

    def refused(self, status: int, headers: Mapping[str, str], refusal: Refusal) -> GatewayError:
        """The error an upstream's error answer means, for the request and for the deployment
        (CONTRACT section 7's table)."""
        if status in (401, 402, 403) or refusal.out_of_credit:
            return UpstreamCredentialRejected(f"The upstream provider '{self.name}' refused this gateway's "
                                              f"credentials or has no credit left (HTTP {status}).")
        if 400 <= status < 500 and (refusal.declined or status == 429 and refusal.token_limit
                                    and self._too_large_for_a_token_limit(headers)):
            return UpstreamDeclined(self.clean(refusal.message) or f"The upstream refused the request (HTTP {status}).",
                                    status=status, code=self.clean_code(refusal.code)
                                    or ("rate_limit_exceeded" if status == 429 else "upstream_rejected"),
                                    param=one_line(self.clean(refusal.param))[:200] if refusal.param else None)
        if status == 429:
            retry_after = retry_after_seconds(headers.get("Retry-After", ""))
            return UpstreamRateLimited(self.clean(refusal.message) or f"The upstream provider '{self.name}' is "
                                                                      f"rate limiting this gateway.",
                                       code=self.clean_code(refusal.code) or "rate_limit_exceeded",
                                       cooldown_seconds=retry_after,
                                       headers={"Retry-After": str(int(retry_after))} if retry_after else {})
        if status == 408:
            return UpstreamTimeout(f"The upstream provider '{self.name}' timed out (HTTP 408).")
        if status >= 500 or status == 404:
            return UpstreamError(f"The upstream provider '{self.name}' failed (HTTP {status}).")
        return UpstreamRejected(self.clean(refusal.message) or f"The upstream rejected the request (HTTP {status}).",
                                status=status, code=self.clean_code(refusal.code) or "upstream_rejected",
                                param=one_line(self.clean(refusal.param))[:200] if refusal.param else None)

    def _too_large_for_a_token_limit(self, headers: Mapping[str, str]) -> bool:
        """Whether a 429 of a token limit is the request's: it may hold more tokens than a small request
        (UPSTREAM_SMALL_REQUEST_TOKENS), and the upstream does not say that it has fewer than that left
        (OpenAI's and Azure's x-ratelimit-remaining-tokens): it could still serve a small request."""
        small = settings.UPSTREAM_SMALL_REQUEST_TOKENS
        if self.demand.token_bound <= small:
            return False  # even a small request was refused: the deployment is out of tokens
        remaining = next((str(value).strip() for name, value in headers.items()
                          if name.lower() == "x-ratelimit-remaining-tokens"), "")
        return not (remaining.isdigit() and int(remaining) < small)

    def clean(self, text: str) -> str:
        """Upstream text made fit to pass on: this provider's address and every secret the gateway
        holds taken out (an upstream may quote the Authorization header it was sent), then cut.

        Only the start that can reach the client is scrubbed, with room past the cut for a secret that
        begins before it however it is written out (SCRUB_LOOKAHEAD): a 64 KiB error body would cost
        the scrubber tens of milliseconds for text nobody sees."""
        return scrub(text[:MAX_UPSTREAM_MESSAGE + SCRUB_LOOKAHEAD], self.secret, self.base_url)[:MAX_UPSTREAM_MESSAGE]

    def clean_code(self, code: str | None) -> str:
        """An upstream's error code, scrubbed and on one line: it is passed on as the error's code and named
        in the request's summary line (failed_attempts)."""
        return one_line(self.clean(code or ""))[:64].strip()

    def too_large(self, limit: int) -> "AnswerTooLarge":
        return AnswerTooLarge(f"The upstream provider '{self.name}' sent an answer larger than {limit} bytes.",
                              limit=limit)

    def timed_out(self, *, connected: bool = True, seconds: float | None = None) -> UpstreamTimeout:
        """A timeout, and whose it is: one that struck before a connection was made is the deployment's;
        one that struck while the upstream was writing an answer the request allowed to be longer than
        ``seconds`` (the attempt's deadline, or a stream's longest silence) could carry at
        UPSTREAM_MIN_TOKENS_PER_SECOND is the request's unless the deployment serves nothing else
        (SLOW_ANSWER, applied by gateway.routing)."""
        seconds = self.deadline.seconds if seconds is None else seconds
        long_answer = self.demand.output_tokens > seconds * settings.UPSTREAM_MIN_TOKENS_PER_SECOND
        return UpstreamTimeout(f"The upstream provider '{self.name}' did not answer within {seconds:g} seconds.",
                               health=SLOW_ANSWER if connected and long_answer else None)

    def transport_error(self, exc: BaseException, *, seconds: float | None = None) -> UpstreamError:
        if is_timeout(exc):
            return self.timed_out(connected=not isinstance(exc, requests.ConnectTimeout), seconds=seconds)
        return UpstreamError(f"The upstream provider '{self.name}' could not be reached "
                             f"({exc.__class__.__name__}).")

    def malformed(self, what: str) -> UpstreamError:
        return UpstreamError(f"The upstream provider '{self.name}' sent a malformed {what}.")

    # -- images handed out by URL

    def fetch_image(self, url: str, *, limit: int | None = None, client: bool = False) -> tuple[bytes, str]:
        """Download an image by URL: one the upstream handed out (so the URL the client gets is ours), or
        with ``client`` one a client gave, for an upstream that takes images inline only.

        No secret goes with it: the image may live on a third-party host. Redirects are
        followed by hand, each hop checked like the first (``_check_image_url``). At most
        ``limit`` bytes are read (UPSTREAM_MAX_BYTES unless told): more is AnswerTooLarge,
        before a byte of the body is read when its Content-Length says so.
        """
        for _ in range(MAX_IMAGE_REDIRECTS + 1):
            self._check_image_url(url, client=client)
            try:
                response = _upstreams.session(self.base_url).get(
                    url, timeout=self.deadline.timeouts(), stream=True, allow_redirects=False)
            except TRANSPORT_ERRORS as exc:
                raise self.transport_error(exc) from None
            with response:
                if response.is_redirect:
                    url = urljoin(url, response.headers["Location"])
                    continue
                if response.status_code != 200:
                    raise UpstreamError(f"The image from provider '{self.name}' could not be fetched "
                                        f"(HTTP {response.status_code}).")
                content = self.read(response, limit)
            return content, image_type(content)
        raise UpstreamError(f"The image from provider '{self.name}' redirected more than {MAX_IMAGE_REDIRECTS} times.")

    def _check_image_url(self, url: str, *, client: bool = False) -> None:
        """Refuse an image URL that would make the gateway fetch from inside its own network.

        The upstream chooses the URL (and every redirect), so without this check it could
        aim the gateway at a loopback or private address. The provider's own host is
        trusted like the provider itself (a self-hosted upstream may live on one) for the
        upstream's own image URLs; a client's URL (``client``) is trusted nowhere: every hop
        must be on a public address, the provider's host included, or a client could make
        the gateway read any path of a provider on a private network.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(f"The upstream provider '{self.name}' sent an unusable image URL.")
        if not client and _origin(parts) == _origin(urlsplit(self.base_url)):
            return
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            addresses = {cast(str, info[4][0])  # for IPv4 and IPv6, getaddrinfo gives the address as a str
                         for info in socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)}
        except (OSError, ValueError, UnicodeError):
            raise UpstreamError(f"The image host of provider '{self.name}' could not be resolved.") from None
        if not all(is_public(address) for address in addresses):
            raise UpstreamError(f"The upstream provider '{self.name}' pointed an image at an address this gateway "
                                f"does not fetch from.")


class AnswerTooLarge(UpstreamError):
    """An answer (or fetched image) past the bytes it may have, ``limit``."""

    def __init__(self, message: str, *, limit: int):
        super().__init__(message)
        self.limit = limit


# ---------------------------------------------------------------- memory after large fetches

# Bytes of client images fetched by this process since its heap was last handed back (give_back_memory).
_fetched_bytes = 0
# After this many, the end of the request hands the process's free heap back to the system.
GIVE_BACK_AFTER_BYTES = 4 * 1024 * 1024


def note_fetched(size: int) -> None:
    global _fetched_bytes
    _fetched_bytes += size


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_trim = _malloc_trim()


def give_back_memory(**_: Any) -> None:
    """At the end of a request, once images of several megabytes were fetched (and dropped): give the
    freed heap back to the system.

    An image goes through a few copies (the bytes, base64, the JSON sent upstream), each freed
    when the call is over; but glibc keeps freed blocks below its mmap threshold in the heap, and
    raises that threshold (up to 32 MiB) after freeing a larger block, so a worker that once held a
    request's images stayed that large. ``malloc_trim`` hands the free pages back; the work is a
    walk over the heap, done only after such requests. Elsewhere (no glibc) nothing happens.
    """
    global _fetched_bytes
    if _fetched_bytes < GIVE_BACK_AFTER_BYTES or _trim is None:
        return
    _fetched_bytes = 0
    _trim(0)


request_finished.connect(give_back_memory, dispatch_uid="gateway.upstream.transport.give_back_memory")


class EventStream:
    """The data of each server-sent event of an upstream answer, as soon as its blank line arrives.

    read1 returns whatever bytes have arrived (up to 64 KiB) instead of waiting for a full
    buffer, for chunked and close-delimited bodies alike: this is what keeps the relay event
    by event. Each read waits at most the provider's timeout (a silent upstream) and never
    past STREAM_MAX_SECONDS from the start; one event may not grow past UPSTREAM_MAX_BYTES.
    Call ``finished()`` once the protocol's last event arrived: ``close()`` then reads the
    body's end, so the connection goes back to the pool for the next call.
    """

    def __init__(self, transport: HttpTransport, response: Response):
        self.transport = transport
        self.response = response
        self.ends = time.monotonic() + settings.STREAM_MAX_SECONDS
        self._finished = False

    def __iter__(self) -> Iterator[str]:
        response, transport = self.response, self.transport
        buffer = b""
        data: list[str] = []
        pending = 0  # bytes of the event being assembled
        while True:
            left = self.ends - time.monotonic()
            if left <= 0:
                raise self._too_long()
            _wait_at_most(response, min(transport.timeout, left))
            try:
                block = response.raw.read1(READ_BLOCK)
            except TRANSPORT_ERRORS as exc:
                if self.ends - time.monotonic() <= 0:
                    raise self._too_long() from None
                raise transport.transport_error(exc, seconds=transport.timeout) from None
            if not block:
                break
            pending += len(block)
            if pending > settings.UPSTREAM_MAX_BYTES:
                raise transport.too_large(settings.UPSTREAM_MAX_BYTES)
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

    def _too_long(self) -> StreamTooLong:
        return StreamTooLong(f"The stream was ended after {settings.STREAM_MAX_SECONDS:g} seconds, the longest "
                             f"this gateway relays one.")

    def finished(self) -> None:
        self._finished = True

    def close(self) -> None:
        """Drop the connection, or after a finished stream read the body's end first.

        Only its end (a chunked body's last, empty chunk) is read: urllib3 then gives the
        connection back to the pool, and the next call skips a new connection (and TLS
        handshake). Anything else, or nothing within STREAM_END_SECONDS, and the connection is
        dropped instead, as for a stream the client left early (which the upstream must see
        closed, to stop generating). The client has its last event already: the WSGI server
        closes the body after sending it.
        """
        if self._finished:
            try:
                _wait_at_most(self.response, STREAM_END_SECONDS)
                self.response.raw.read1(READ_BLOCK)
            except TRANSPORT_ERRORS:
                pass
        self.response.close()


# ---------------------------------------------------------------- secrets

def held_secrets() -> set[str]:
    """Every secret this gateway holds that an upstream could have seen or guessed: each upstream
    secret variable's value (every provider's, not only the one called) and the service's own."""
    values = {value for name, value in os.environ.items() if secret_env_allowed(name)}
    database = settings.DATABASES["default"].get("PASSWORD") or ""
    values |= {settings.SECRET_KEY, settings.DISCORD_BOT_TOKEN, settings.METRICS_TOKEN, database}
    return {value.strip() for value in values if len(value.strip()) >= MIN_SCRUBBED_SECRET}


def scrub(text: str, secret: str = "", base_url: str = "") -> str:
    """Upstream text with every held secret, the secret just sent and the upstream's address taken out,
    in the forms an upstream may quote them in (``_secret_forms``, ``_address_forms``).

    Runs only on the way out of a failure (an error message, a stream's error event), never per chunk;
    each secret's pattern and each address's is compiled once.
    """
    secrets = held_secrets() | {value.strip() for value in (secret, _url_password(base_url))
                                if len(value.strip()) >= MIN_SCRUBBED_SECRET}
    for needle in sorted(secrets, key=len, reverse=True):  # a secret that holds another goes whole
        text = _secret_pattern(needle).sub("[redacted]", text)
    pattern = _address_pattern(base_url) if base_url else None
    return pattern.sub("[upstream]", text) if pattern is not None else text


# Between two characters of a quoted secret: what splits it without being part of it (whitespace and line
# breaks, escaped ones too, quotes and the + that joins quoted pieces), up to 8 at a time. A character of the
# secret itself is left out, so that each run of them can be read one way only: the pattern never
# backtracks, whatever text an upstream crafts.
_SPLIT_CHARACTERS = " \t\r\n\f\v\"'`+"
# Between two characters of base64: a line break (MIME wraps base64 at 76 characters), or an escaped one.
_BASE64_BREAK = r"(?:\r?\n|\\r?\\n)?"
# A host name shorter than this is not looked for alone (its host:port and URL still are).
MIN_SCRUBBED_HOST = 4


def _written(character: str, *, escaped: bool = True) -> str:
    """A pattern for one character as it is (the patterns are case-insensitive), percent-encoded, or
    (``escaped``) as a JSON escape."""
    ways = [re.escape(character), "".join(f"%{byte:02x}" for byte in character.encode())]
    if escaped and ord(character) < 0x10000:
        ways.append(f"\\\\u{ord(character):04x}")
    return f"(?:{'|'.join(ways)})"


def _secret_forms(secret: str) -> list[str]:
    """Patterns for the secret written out, longest first (where two start at the same place, the whole of
    the longer one goes): the secret itself, each character in any of its ways and the secret split anywhere;
    and its base64 in both alphabets, each symbol as it is or percent-encoded and the text wrapped anywhere:
    alone (its padding says nothing), and the symbols that encode only its bytes where it stands inside a
    longer base64 text (as in a Basic header), at each of the three places a byte can take in a 3-byte group."""
    separators = re.escape("".join(character for character in _SPLIT_CHARACTERS if character not in secret))
    split = rf"(?:[{separators}]|\\[nrt]){{0,8}}" if separators else r"(?:\\[nrt]){0,8}"
    raw = secret.encode()
    encodings = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encodings.add(encode(raw).decode().rstrip("="))
        for offset in (0, 1, 2):
            encoded = encode(bytes(offset) + raw).decode()
            encodings.add(encoded[-(-8 * offset // 6):8 * (offset + len(raw)) // 6])
    forms = [(len(secret), split.join(_written(character) for character in secret))]
    forms += [(len(encoded), _BASE64_BREAK.join(symbol if symbol.isalnum() else _written(symbol, escaped=False)
                                                for symbol in encoded)) for encoded in encodings]
    return [pattern for _, pattern in sorted(forms, key=lambda form: -form[0])]


@functools.lru_cache(maxsize=64)
def _secret_pattern(secret: str) -> re.Pattern[str]:
    """One secret's forms as one case-insensitive pattern, compiled once per process."""
    return re.compile("|".join(_secret_forms(secret)), re.IGNORECASE)


def _address_forms(base_url: str) -> set[str]:
    """The upstream's base URL, its origin, its host:port (the default port too) and its host name."""
    parts = urlsplit(base_url.strip())
    forms = {base_url.strip().rstrip("/")}
    host = parts.hostname or ""
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    if host:
        netloc = f"[{host}]" if ":" in host else host
        forms |= {f"{parts.scheme}://{netloc}", f"{netloc}:{port}" if port else netloc}
        if len(host) >= MIN_SCRUBBED_HOST:
            forms.add(host)
    return {form for form in forms if form}


@functools.lru_cache(maxsize=32)
def _address_pattern(base_url: str) -> re.Pattern[str] | None:
    forms = _address_forms(base_url)
    if not forms:
        return None
    return re.compile("|".join("".join(_written(character, escaped=False) for character in form)
                               for form in sorted(forms, key=len, reverse=True)), re.IGNORECASE)


def _url_password(url: str) -> str:
    """The password of a base URL that carries one (``https://user:pass@host``): a secret too."""
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


# ---------------------------------------------------------------- small readers

def json_object(content: bytes | str) -> dict[str, Any] | None:
    """An upstream's answer as a JSON object, or None when it is anything else (the caller's 502)."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def retry_after_seconds(value: str) -> float | None:
    """An upstream's Retry-After (seconds or an HTTP date) as seconds, at most MAX_RETRY_AFTER."""
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = moment.timestamp() - time.time()
    if seconds != seconds or seconds <= 0:  # NaN, or already past
        return None
    return min(seconds, MAX_RETRY_AFTER)


def image_type(content: bytes) -> str:
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


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.scheme, (parts.hostname or "").lower(), port or (443 if parts.scheme == "https" else 80))


def is_public(address: str) -> bool:
    """Whether an IP address is on the public internet (not loopback, private, link-local, reserved…)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not part of the address
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # an IPv6 address may carry an IPv4 one
    if mapped:
        ip = mapped
    return ip.is_global and not ip.is_multicast
