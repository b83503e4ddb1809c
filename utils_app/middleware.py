"""The project's own middleware: the body size limit, and the browser middleware kept off the API.

Sessions, CSRF, the staff login and flash messages serve the admin UI and the landing
page. The JSON API (API_PATH_PREFIXES: ``/v1/`` and ``/utils/``) authenticates with
bearer keys, sets no cookies and shows no messages, so on its paths these four do
nothing but cost time on every metered request. The subclasses below run Django's
own middleware everywhere else, unchanged; being subclasses, they also satisfy the
admin's checks that the originals are installed.
"""
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware as DjangoCsrfViewMiddleware

from utils_app.errors import GatewayError, json_error


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
            return json_error(GatewayError(
                f"The request body is larger than {self.limit} bytes.", status=413,
                type="invalid_request_error", code="request_too_large"))
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
