"""HTTP to an upstream, whatever its protocol: deadlines, bounded reads, server-sent events, checked
image fetches, and an upstream's error answer turned into the error it means.

Every adapter (one module per provider type in this package) talks through an
``HttpTransport``; an adapter only maps shapes and reads its protocol's error bodies.
Nothing an upstream sends is trusted (docs/hardening.md): a body is read whole only up
to UPSTREAM_MAX_BYTES, a call ends at its deadline however slowly the bytes drip, a
stream ends after STREAM_MAX_SECONDS, a redirect is never followed, no secret the
gateway holds is passed on in upstream text, and an image URL is fetched only from a public
address (or, for an image URL the upstream itself handed out, from the provider's own host).
The server-sent events reader is in gateway.upstream.sse, the scrubber of upstream text in
gateway.upstream.scrub, what an image URL may point at in gateway.upstream.images, and what an
error answer says (Refusal) in gateway.upstream.refusals.
"""
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import requests
from django.conf import settings

from gateway.upstream.images import check_image_url, image_type
from gateway.upstream.refusals import ErrorReader, Refusal, retry_after_seconds
from gateway.upstream.scrub import scrub
from gateway.upstream.sse import READ_BLOCK, EventStream, wait_at_most
from utils_app.errors import (
    GatewayError,
    SLOW_ANSWER,
    UpstreamCredentialRejected,
    UpstreamDeclined,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from utils_app.http import TRANSPORT_ERRORS, Answer, Upstreams, is_timeout, json_object, timeouts
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

    def stream(self, path: str, payload: dict[str, Any]) -> EventStream:
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
                wait_at_most(response, self.deadline.left())
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
        (SLOW_ANSWER, applied by gateway.deployment_health)."""
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
        followed by hand, each hop checked like the first (``images.check_image_url``). At most
        ``limit`` bytes are read (UPSTREAM_MAX_BYTES unless told): more is AnswerTooLarge,
        before a byte of the body is read when its Content-Length says so.
        """
        for _ in range(MAX_IMAGE_REDIRECTS + 1):
            check_image_url(url, name=self.name, base_url=self.base_url, client=client)
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


class AnswerTooLarge(UpstreamError):
    """An answer (or fetched image) past the bytes it may have, ``limit``."""

    def __init__(self, message: str, *, limit: int):
        super().__init__(message)
        self.limit = limit
