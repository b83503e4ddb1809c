"""The project's own middleware: request ids, the body size limit, and the browser middleware kept off the API.

Sessions, CSRF, the staff login and flash messages serve the admin UI and the landing
page. The JSON API (API_PATH_PREFIXES: ``/v1/`` and ``/utils/``) authenticates with
bearer keys, sets no cookies and shows no messages, so on its paths these four do
nothing but cost time on every metered request. The subclasses below run Django's
own middleware everywhere else, unchanged; being subclasses, they also satisfy the
admin's checks that the originals are installed.
"""
import time

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrfViewMiddleware

from utils_app import logging as request_log
from utils_app import metrics
from utils_app.errors import RequestTooLarge, json_error
from utils_app.request_ids import request_id


class RequestIdMiddleware:
    """Every request's id on its response and in its log lines; its metrics and summary line when it ends.

    First in MIDDLEWARE, so every answer carries X-Request-ID, the 413 of the size
    limit and the 404 of an unknown path included. A stream ends after this returns:
    its count and summary line wait for its last event, or for the server closing it.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        line = request_log.begin(request_id(request), method=request.method)
        response = self.get_response(request)
        response["X-Request-ID"] = line.request_id
        match = getattr(request, "resolver_match", None)
        line.operation = (match.url_name if match else None) or "other"
        if is_api_path(request):
            # Set by bearer authentication; on these paths nothing else sets request.user.
            line.key = getattr(vars(request).get("user"), "prefix", "") or ""
        metrics.response_ready(operation=line.operation, seconds=time.perf_counter() - line.started,
                               upstream_seconds=line.upstream_seconds)
        if _relayed(response):
            response.streaming_content = _EndsWith(response.streaming_content,
                                                   lambda: _finish(line, response.status_code))
        else:
            _finish(line, response.status_code)
        return response


def _relayed(response) -> bool:
    # A served file (FileResponse) is left alone: wrapping it would cost the server's sendfile.
    return response.streaming and not response.is_async and getattr(response, "file_to_stream", None) is None


def _finish(line: request_log.RequestLine, status: int) -> None:
    status = line.status or status
    metrics.request_answered(operation=line.operation, model=line.model, status=status)
    request_log.write(line, status)


class _EndsWith:
    """A streamed body that calls ``finish`` once: after its last chunk, or when the server closes it early."""

    def __init__(self, chunks, finish):
        self._chunks = iter(chunks)
        self._finish = finish

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._chunks)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        # Django closes the original body (which settles an unfinished stream) before this one.
        finish, self._finish = self._finish, None
        if finish is not None:
            finish()


class BodySizeLimitMiddleware:
    """Answer 413 from the Content-Length alone, before any body byte is read.

    Chunked bodies without a length are caught later by Django's own
    DATA_UPLOAD_MAX_MEMORY_SIZE check, which the error handler also maps to 413.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.limit = settings.MAX_REQUEST_BYTES

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.limit:
            return json_error(RequestTooLarge(f"The request body is larger than {self.limit} bytes."))
        return self.get_response(request)


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
