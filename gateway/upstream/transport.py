"""HTTP to an upstream, whatever its protocol: deadlines, bounded reads, server-sent events, checked
image fetches, and an upstream's error answer turned into the error it means.

Every adapter (one module per provider type in this package) talks through an
``HttpTransport``; an adapter only maps shapes and reads its protocol's error bodies.
Nothing an upstream sends is trusted (docs/hardening.md): a body is read whole only up
to UPSTREAM_MAX_BYTES, a call ends at its deadline however slowly the bytes drip, a
stream ends after STREAM_MAX_SECONDS, a redirect is never followed, no secret the
gateway holds is passed on in upstream text, and an image URL is fetched only from the
provider's own host or from a public address.
"""
import email.utils
import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests
from django.conf import settings

from models_catalog.catalog import secret_env_allowed
from utils_app.errors import (
    GatewayError,
    StreamTooLong,
    UpstreamCredentialRejected,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from utils_app.http import TRANSPORT_ERRORS, Answer, Upstreams, is_timeout, timeouts
from utils_app.logging import current_request_id

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
    """What an adapter read from its protocol's error body: the message and how to treat it."""

    message: str = ""
    code: str | None = None
    param: str | None = None
    out_of_credit: bool = False  # the account has no quota or credit (disables the secret)


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

    def __init__(self, *, name: str, base_url: str, timeout: float, headers: dict, secret: str,
                 read_error: ErrorReader, deadline: Deadline | None = None):
        self.name = name
        self.base_url = base_url
        self.timeout = timeout
        self.headers = headers
        self.secret = secret
        self.read_error = read_error
        self.deadline = deadline or Deadline(timeout)

    # -- calls

    def post(self, path: str, payload: dict) -> Reply:
        """POST JSON and read the whole answer within the deadline and the size cap; an error answer raises."""
        response = self._send(path, payload, stream=False)
        with response:
            if response.status_code >= 300:
                raise self._status_error(response)
            return Reply(response.status_code, response.headers, self.read(response))

    def post_json(self, path: str, payload: dict, what: str = "response") -> dict:
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

    def stream(self, path: str, payload: dict) -> "EventStream":
        """POST for an event stream; the answer is read as it arrives (``EventStream``)."""
        response = self._send(path, payload, stream=True)
        if response.status_code >= 300:
            with response:
                raise self._status_error(response)
        return EventStream(self, response)

    def _send(self, path: str, payload: dict, *, stream: bool) -> Response:
        headers = {"Content-Type": "application/json", **self.headers}
        request_id = current_request_id()
        if request_id:
            headers["X-Request-ID"] = request_id  # the upstream's logs name the same request as ours
        if stream:
            # A compressed event stream would sit in the decompressor instead of flowing.
            headers.update({"Accept": "text/event-stream", "Accept-Encoding": "identity"})
        try:
            # The body is read here, by read(), under the size cap.
            return _upstreams.post(self.base_url, self._url(path), data=json.dumps(payload), headers=headers,
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
        parts, size = [], 0
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
        if status == 429:
            retry_after = retry_after_seconds(headers.get("Retry-After", ""))
            return UpstreamRateLimited(self.clean(refusal.message) or f"The upstream provider '{self.name}' is "
                                                                      f"rate limiting this gateway.",
                                       code=self.clean(refusal.code or "")[:64] or "rate_limit_exceeded",
                                       cooldown_seconds=retry_after,
                                       headers={"Retry-After": str(int(retry_after))} if retry_after else {})
        if status == 408:
            return UpstreamTimeout(f"The upstream provider '{self.name}' timed out (HTTP 408).")
        if status >= 500 or status == 404:
            return UpstreamError(f"The upstream provider '{self.name}' failed (HTTP {status}).")
        return UpstreamRejected(self.clean(refusal.message) or f"The upstream rejected the request (HTTP {status}).",
                                status=status, code=self.clean(refusal.code or "")[:64] or "upstream_rejected",
                                param=self.clean(refusal.param)[:200] if refusal.param else None)

    def clean(self, text: str) -> str:
        """Upstream text made fit to pass on: this provider's address and every secret the gateway
        holds taken out (an upstream may quote the Authorization header it was sent), then cut."""
        return scrub(text, self.secret, self.base_url)[:MAX_UPSTREAM_MESSAGE]

    def too_large(self, limit: int) -> UpstreamError:
        return UpstreamError(f"The upstream provider '{self.name}' sent an answer larger than {limit} bytes.")

    def timed_out(self) -> UpstreamTimeout:
        return UpstreamTimeout(f"The upstream provider '{self.name}' did not answer within "
                               f"{self.deadline.seconds:g} seconds.")

    def transport_error(self, exc: BaseException) -> UpstreamError:
        if is_timeout(exc):
            return self.timed_out()
        return UpstreamError(f"The upstream provider '{self.name}' could not be reached "
                             f"({exc.__class__.__name__}).")

    def malformed(self, what: str) -> UpstreamError:
        return UpstreamError(f"The upstream provider '{self.name}' sent a malformed {what}.")

    # -- images handed out by URL

    def fetch_image(self, url: str) -> tuple[bytes, str]:
        """Download an image the upstream handed out by URL, so the URL the client gets is ours.

        No secret goes with it: the image may live on a third-party host. Redirects are
        followed by hand, each hop checked like the first (``_check_image_url``).
        """
        for _ in range(MAX_IMAGE_REDIRECTS + 1):
            self._check_image_url(url)
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
                content = self.read(response)
            return content, image_type(content)
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
        if _origin(parts) == _origin(urlsplit(self.base_url)):
            return
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            addresses = {info[4][0] for info in socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)}
        except (OSError, ValueError, UnicodeError):
            raise UpstreamError(f"The image host of provider '{self.name}' could not be resolved.") from None
        if not all(is_public(address) for address in addresses):
            raise UpstreamError(f"The upstream provider '{self.name}' pointed an image at an address this gateway "
                                f"does not fetch from.")


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
                raise transport.transport_error(exc) from None
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
    """Upstream text with every held secret, the secret just sent and the upstream's address taken out.

    Runs only on the way out of a failure (an error message, a stream's error event), never per chunk.
    """
    for needle in sorted(held_secrets() | ({secret} if secret else set()), key=len, reverse=True):
        text = text.replace(needle, "[redacted]")
    return text.replace(base_url, "[upstream]") if base_url else text


# ---------------------------------------------------------------- small readers

def json_object(content: bytes | str) -> dict | None:
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


def _origin(parts) -> tuple:
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
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast
