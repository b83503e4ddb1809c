"""The one exception handler: every exception of an API view, and Django's own 400/403/404/500, leaves as the
error body of utils_app.errors.

DRF's exceptions, Django's 404/405/413, a database that cannot be reached and anything unexpected are
translated into a ``GatewayError`` here (``as_gateway_error``); ``exception_handler`` is DRF's
EXCEPTION_HANDLER, ``handler400``-``handler500`` Django's, ``shaped_exception_handler`` the one of an
inbound API with an error shape of its own.
"""
import logging
from collections.abc import Callable

from django import db
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpResponse
from rest_framework import exceptions as drf
from rest_framework.renderers import JSONRenderer

from utils_app.errors import (
    AuthenticationError,
    ClientError,
    Forbidden,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    RequestTooLarge,
    ServiceUnavailable,
)

log = logging.getLogger("gateway.errors")


def error_response(exc: GatewayError, body: dict | None = None):
    """The error's answer: its status and headers, and its body in the contract's shape, or ``body`` where
    an inbound API of another vendor's shape renders it (gateway.messages, gateway.gemini_api)."""
    from rest_framework.response import Response

    response = Response(exc.body() if body is None else body, status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


def shaped_exception_handler(render: Callable[[GatewayError], dict]):
    """A DRF exception handler for the views of an inbound API with its own error shape: every error of
    section 4, with its status and headers, its body made by ``render``."""

    def handler(exc, context):
        error = as_gateway_error(exc)
        return error_response(error, render(error))

    return handler


def _first_validation_error(detail, path=()):
    """Walk DRF's nested error detail to the first leaf: (dotted path, ErrorDetail)."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            found = _first_validation_error(value, path if key == "non_field_errors" else (*path, str(key)))
            if found:
                return found
    elif isinstance(detail, list):
        for index, value in enumerate(detail):
            # A list of ErrorDetails is several messages for one field; a list of
            # dicts/lists is a list-valued field whose items are indexed.
            nested = isinstance(value, (dict, list))
            found = _first_validation_error(value, (*path, str(index)) if nested else path)
            if found:
                return found
    elif detail is not None:
        return ".".join(path) or None, detail
    return None


VALIDATION_CODES = {"required": "missing_field", "null": "missing_field", "blank": "missing_field",
                    "unknown_parameter": "unknown_parameter", "invalid_json": "invalid_json"}


def validation_error(exc: drf.ValidationError) -> InvalidRequest:
    found = _first_validation_error(exc.detail)
    if not found:
        return InvalidRequest("Invalid request.")
    param, detail = found
    code = VALIDATION_CODES.get(getattr(detail, "code", ""), "invalid_value")
    message = str(detail)
    if param and code != "invalid_json":
        message = f"{param}: {message}"
    return InvalidRequest(message, code=code, param=param)


def as_gateway_error(exc: Exception) -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, drf.ValidationError):
        return validation_error(exc)
    if isinstance(exc, drf.ParseError):
        return InvalidRequest("The request body is not valid JSON.", code="invalid_json")
    if isinstance(exc, drf.UnsupportedMediaType):
        return InvalidRequest("The request body must be JSON.", code="invalid_json")
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge("The request body is too large.")
    if isinstance(exc, drf.NotAuthenticated):
        return AuthenticationError("Missing API key: send 'Authorization: Bearer <key>'.", code="missing_api_key")
    if isinstance(exc, drf.AuthenticationFailed):
        return AuthenticationError("Invalid API key.", code="invalid_api_key")
    if isinstance(exc, drf.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, (drf.NotFound, Http404)):
        return NotFound("Not found.")
    if isinstance(exc, (drf.PermissionDenied, PermissionDenied)):
        return Forbidden("Permission denied.")
    if isinstance(exc, drf.Throttled):
        # DRF sets Throttled.wait in __init__; the stubs leave the attribute out.
        return RateLimited("Too many requests.", retry_after=exc.wait or 1)  # type: ignore[attr-defined]
    if isinstance(exc, drf.APIException):
        return ClientError(str(exc.detail), status=exc.status_code, code=exc.default_code)
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # The database restarting, down, full, or every pooled connection busy (psycopg_pool's
        # PoolTimeout arrives wrapped as OperationalError): the client may retry. The log says
        # which, in words: the operator's fix differs for each.
        from utils_app.db import unavailable_cause

        log.warning("database unavailable: %s", unavailable_cause(exc))
        return ServiceUnavailable()
    log.exception("unexpected error", exc_info=exc)
    return GatewayError("The server failed to handle the request.")


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: every exception in an API view ends here."""
    return error_response(as_gateway_error(exc))


_JSON = JSONRenderer()


def json_error(exc: GatewayError, body: dict | None = None) -> HttpResponse:
    """The same body for plain Django views (handler404 and the like), byte for byte as an API view's
    error renders (DRF's JSON renderer: no spaces, UTF-8 as it is); ``body`` as in error_response."""
    response = HttpResponse(_JSON.render(exc.body() if body is None else body), content_type="application/json",
                            status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


def handler400(request, exception=None):
    if isinstance(exception, RequestDataTooBig):
        return json_error(as_gateway_error(exception))
    return json_error(InvalidRequest("Bad request.", code="bad_request"))


def handler403(request, exception=None):
    return json_error(Forbidden("Permission denied."))


def handler404(request, exception=None):
    return json_error(NotFound(f"No operation at {request.path}."))


def handler500(request):
    return json_error(GatewayError("The server failed to handle the request."))
