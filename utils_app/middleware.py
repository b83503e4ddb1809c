"""The project's own middleware: request ids, reading the body, and the browser middleware kept off the API.

The gateway makes an id for every request (32 hex digits), and that id names the request
everywhere: the X-Request-ID answer header, every log line, the ledger charge row, the usage
record and the upstream call. A client's own X-Request-ID cannot be that name: any client
may send any value, so records of different requests (of different keys, even) would share
one, and a client could make its request look like another's. When it is a sane token it is
kept beside the gateway's id instead: answered as X-Client-Request-ID and written on the
request's summary line, so either id leads to the other.

Sessions, CSRF, the staff login and flash messages serve the admin UI and the landing
page. The JSON API (API_PATH_PREFIXES: ``/v1/`` and ``/utils/``) authenticates with
bearer keys, sets no cookies and shows no messages, so on its paths these four do
nothing but cost time on every metered request. The subclasses below run Django's
own middleware everywhere else, unchanged; being subclasses, they also satisfy the
admin's checks that the originals are installed.
"""
import io
import re
import socket
import time
import uuid

import gevent
from corsheaders.middleware import CorsMiddleware as LibraryCorsMiddleware
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.core.handlers.wsgi import LimitedStream
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrfViewMiddleware
from django.utils.cache import patch_vary_headers
from gevent import monkey

from utils_app import logging as request_log
from utils_app import metrics
from utils_app.error_handler import json_error
from utils_app.errors import ClientError, InvalidRequest, RequestTooLarge
from utils_app.limits import client_address

_SANE = re.compile(r"^[\x21-\x7e]{1,128}$")  # printable ASCII without spaces, at most 128 characters
_META = "gateway.request_id"


def request_id(request) -> str:
    """The gateway's id of the request, the same for its whole life (``request`` may be Django's or DRF's)."""
    meta = request.META
    found = meta.get(_META)
    if found is None:
        found = meta[_META] = uuid.uuid4().hex
    return found


def client_request_id(request) -> str:
    """The client's own X-Request-ID when it is a sane token, else ""."""
    offered = request.META.get("HTTP_X_REQUEST_ID", "")
    return offered if _SANE.match(offered) else ""


class RequestIdMiddleware:
    """Every request's id on its response and in its log lines; its metrics and summary line when it ends.

    First in MIDDLEWARE, so every answer carries X-Request-ID, the 413 of the size
    limit and the 404 of an unknown path included. A stream ends after this returns:
    its count and summary line wait for its last event, or for the server closing it.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        line = request_log.begin(request_id(request), method=request.method,
                                 client_request_id=client_request_id(request))
        response = self.get_response(request)
        response["X-Request-ID"] = line.request_id
        if line.client_request_id:
            response["X-Client-Request-ID"] = line.client_request_id
        match = getattr(request, "resolver_match", None)
        line.operation = (match.url_name if match else None) or "other"
        line.client = client_address(request)
        if is_api_path(request):
            # Set by bearer authentication; on these paths nothing else sets request.user. A 404 for a
            # path without a view names the key on the line itself (gateway.urls.handler404).
            line.key = getattr(vars(request).get("user"), "prefix", "") or line.key
        metrics.response_ready(operation=line.operation, seconds=time.perf_counter() - line.started,
                               upstream_seconds=line.upstream_seconds)
        if _relayed(response):
            response.streaming_content = _EndsWith(response.streaming_content,
                                                   lambda sent: _finish(line, response.status_code, sent))
        else:
            _finish(line, response.status_code, 0 if request.method == "HEAD" else _body_bytes(response))
        return response


def _relayed(response) -> bool:
    # A served file (FileResponse) is left alone: wrapping it would cost the server's sendfile.
    return response.streaming and not response.is_async and getattr(response, "file_to_stream", None) is None


def _body_bytes(response) -> int | None:
    if response.streaming:  # a served file: the length FileResponse found for it, if it could
        length = response.get("Content-Length")
        return int(length) if length and length.isdigit() else None
    return len(response.content)


def _finish(line: request_log.RequestLine, status: int, sent: int | None) -> None:
    status = line.status or status
    metrics.request_answered(operation=line.operation, model=line.model, status=status)
    request_log.write(line, status, sent=sent)


class _EndsWith:
    """A streamed body that calls ``finish`` once with the bytes it gave: after its last chunk, or when
    the server closes it early."""

    def __init__(self, chunks, finish):
        self._chunks = iter(chunks)
        self._finish = finish
        self._sent = 0

    def __iter__(self):
        return self

    def __next__(self):
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self.close()
            raise
        self._sent += len(chunk)
        return chunk

    def close(self) -> None:
        # Django closes the original body (which settles an unfinished stream) before this one.
        finish, self._finish = self._finish, None
        if finish is not None:
            finish(self._sent)


class BodySizeLimitMiddleware:
    """Read the request body here, whole, bounded in size and in time, before anything else does.

    - A Content-Length over MAX_REQUEST_BYTES is a 413 before any body byte is read.
    - A body sent with ``Transfer-Encoding: chunked`` has no Content-Length, and Django
      alone reads such a body as empty. It is read here, at most MAX_REQUEST_BYTES + 1
      bytes (that one more is a 413), and handed on with its length like any other.
    - The whole body must arrive within BODY_READ_SECONDS (408): a client that sends less
      than it announced, or drips it, must not hold a worker's connection. A body that
      ends before its Content-Length, or a malformed chunk, is a 400.

    Django reads the body from the request's ``_stream``; what was read is put there.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.limit = settings.MAX_REQUEST_BYTES
        self.seconds = settings.BODY_READ_SECONDS

    def __call__(self, request):
        meta = request.META
        try:
            length = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.limit:
            return json_error(RequestTooLarge(f"The request body is larger than {self.limit} bytes."))
        chunked = not meta.get("CONTENT_LENGTH") and "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
        if length <= 0 and not chunked:
            return self.get_response(request)
        source, wanted = (meta["wsgi.input"], self.limit + 1) if chunked else (request._stream, length)
        try:
            body = _read_within(request, source, wanted, seconds=self.seconds)
        except TimeoutError:
            _stop_reading(request)
            return json_error(ClientError(f"The request body did not arrive within {self.seconds:g} seconds.",
                                          status=408, code="request_timeout"))
        # A reset connection, or the server's own parse error for a malformed chunk (which has no
        # common base to name without importing the server): the client's bytes are unusable.
        except Exception:  # noqa: BLE001
            _stop_reading(request)
            return json_error(InvalidRequest("The request body could not be read.", code="invalid_body"))
        if len(body) > self.limit:
            return json_error(RequestTooLarge(f"The request body is larger than {self.limit} bytes."))
        if not chunked and len(body) < length:
            _stop_reading(request)
            return json_error(InvalidRequest(f"The request body ended after {len(body)} of the {length} bytes its "
                                             "Content-Length announced.", code="invalid_body"))
        request._stream = LimitedStream(io.BytesIO(body), len(body))
        meta["CONTENT_LENGTH"] = str(len(body))
        return self.get_response(request)


_READ_SIZE = 64 * 1024


def _read_within(request, source, wanted: int, *, seconds: float) -> bytes:
    """Up to ``wanted`` bytes of ``source``, all of them within ``seconds`` (TimeoutError otherwise)."""
    deadline = time.monotonic() + seconds
    parts, got = [], 0
    while got < wanted:
        part = _one_read(request, source, min(_READ_SIZE, wanted - got), deadline)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _one_read(request, source, size: int, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if monkey.is_module_patched("socket"):
        # A gevent worker: the timeout interrupts this greenlet's wait wherever it is, so the
        # deadline holds for the whole body however it is dripped.
        with gevent.Timeout(left, TimeoutError):
            return source.read(size)
    sock = request.META.get("gunicorn.socket")
    if sock is None:  # not served by gunicorn (the test client): the bytes are all there
        return source.read(size)
    # A thread worker: the socket waits at most until the deadline for each piece. A client
    # dripping bytes into one read can outlast it by that read only; the next one is refused.
    previous = sock.gettimeout()
    sock.settimeout(left)
    try:
        return source.read(size)
    finally:
        sock.settimeout(previous)


def _stop_reading(request) -> None:
    """After an unfinished body, the server must not read its rest as the next request: end the reading side."""
    sock = request.META.get("gunicorn.socket")
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass


def is_api_path(request) -> bool:
    return request.path_info.startswith(settings.API_PATH_PREFIXES)


class _OffTheApi:
    """Skips the Django middleware it is mixed into on API paths."""

    def __call__(self, request):
        if is_api_path(request):
            return self.get_response(request)
        return super().__call__(request)


class SessionMiddleware(_OffTheApi, DjangoSessionMiddleware):
    pass


class AuthenticationMiddleware(_OffTheApi, DjangoAuthenticationMiddleware):
    pass


class MessageMiddleware(_OffTheApi, DjangoMessageMiddleware):
    pass


class CsrfViewMiddleware(_OffTheApi, DjangoCsrfViewMiddleware):
    def process_view(self, request, callback, callback_args, callback_kwargs):
        # The handler calls process_view apart from __call__; on the API there is no token to check
        # (bearer keys, no cookies), and its views are csrf_exempt anyway as DRF views.
        if is_api_path(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class CorsMiddleware(LibraryCorsMiddleware):
    """django-cors-headers' middleware, for a request without an Origin header (every client but a
    browser: the SDKs, curl, other services) answered as the library answers it, without building
    ``request.headers`` (a dict of every header, 1 % of a served metered request's CPU) to find none.

    The library's answer then is ``Vary: origin`` where CORS is on and nothing else
    (tests/utils_app/test_cors.py holds the two to the same headers); a request with an Origin goes
    to the library unchanged."""

    def add_response_headers(self, request, response):
        if "HTTP_ORIGIN" in request.META:
            return super().add_response_headers(request, response)
        enabled = getattr(request, "_cors_enabled", None)
        if enabled is None:
            enabled = self.is_enabled(request)
        if enabled:
            patch_vary_headers(response, ("origin",))
        return response
