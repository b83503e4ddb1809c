"""The one error body of the service and everything that produces it.

Every failure of a /v1, /admin or /utils operation leaves as
``{"error": {"message", "type", "param", "code"}}``. Code raises a
``GatewayError``; DRF's own exceptions, Django's 404/405/413 and anything
unexpected are translated here, so no view ever builds an error by hand.
"""
import json
import logging
import re
from collections.abc import Callable

from django import db
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpResponse
from rest_framework import exceptions as drf
from rest_framework.renderers import JSONRenderer

from utils_app import logging as request_log

log = logging.getLogger("gateway.errors")


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"

    # Status and type belong to the class: one class per kind of error (the code may vary within it).
    def __init__(self, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param
        self.headers = headers or {}
        if retry_after is not None:  # when the client may try again (429, 503)
            self.headers["Retry-After"] = str(max(1, int(retry_after)))

    def body(self) -> dict:
        """What the client is answered with: an error response's body, or a stream's error event.

        Every error answer is built here, so here the request's summary line learns its reason.
        """
        request_log.record_error(self.code, self.message)
        return error_body(self.message, self.type, self.code, self.param)


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_value"


class AuthenticationError(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"

    def __init__(self, message: str, **kwargs):
        kwargs.setdefault("headers", {"WWW-Authenticate": 'Bearer realm="api"'})
        super().__init__(message, **kwargs)


class AccessDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class Forbidden(GatewayError):
    """Signed in, but not allowed here (staff and admin permissions; a model is AccessDenied)."""

    status = 403
    type = "permission_error"
    code = "permission_denied"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class ClientError(GatewayError):
    """Any other 4xx that DRF raises (406 and the like), keeping DRF's status and code."""

    type = "invalid_request_error"

    def __init__(self, message: str, *, status: int, code: str):
        super().__init__(message, code=code)
        self.status = status


class InsufficientCredits(GatewayError):
    status = 402
    type = "insufficient_credits_error"
    code = "insufficient_credits"


class BudgetExceeded(InsufficientCredits):
    """The request's hold would take the key past its budget for the period (CONTRACT section 12); its headers
    say what is left (X-Budget-Remaining) and when the period ends (X-Budget-Reset)."""

    code = "budget_exceeded"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: int, **kwargs):
        super().__init__(message, retry_after=retry_after, **kwargs)


class ConcurrencyLimited(RateLimited):
    code = "concurrency_limit"


class IdempotencyConflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "idempotency_conflict"


class IdempotencyMismatch(GatewayError):
    status = 422
    type = "invalid_request_error"
    code = "idempotency_mismatch"


class ServiceUnavailable(GatewayError):
    """The database is unreachable or its pool is exhausted: try again shortly."""

    status = 503
    type = "server_error"
    code = "service_unavailable"

    def __init__(self, message: str = "The service is briefly unable to reach its database; retry shortly.",
                 *, retry_after: int = 2, **kwargs):
        super().__init__(message, retry_after=retry_after, **kwargs)


class UpstreamError(GatewayError):
    """An upstream failed the request: the next deployment may serve it (CONTRACT section 7).

    Each upstream error says what it means for the request and for the deployment that
    answered, so the router reads the class, not the status:

    - ``retry``: whether the request moves on to another deployment;
    - ``health``: what it does to the deployment: ``FAILURE`` (counts towards a cooldown),
      ``COOLDOWN`` (cooled at once, for ``cooldown_seconds`` when given), ``DISABLE`` (its
      secret is bad for every model: disabled in the database), or ``None`` (not its fault).
    """

    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"
    retry = True
    health: str | None = "failure"
    cooldown_seconds: float | None = None
    outcome = "failure"  # the attempts metric's word for it


# What an upstream error does to the deployment that answered (UpstreamError.health). SLOW_ANSWER: a timeout
# of a request that asked for more output than its time could carry, a failure only of a deployment that has
# served nothing lately (docs/routing.md, "Whose failure is it").
FAILURE, COOLDOWN, DISABLE, SLOW_ANSWER = "failure", "cooldown", "disable", "slow_answer"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    outcome = "timeout"

    def __init__(self, message: str, *, health: str | None = None, **kwargs):
        super().__init__(message, **kwargs)
        if health is not None:  # SLOW_ANSWER for a request that asked for a long answer; else the class's
            self.health = health


class StreamTooLong(UpstreamTimeout):
    """A stream that outlived STREAM_MAX_SECONDS, ended by the gateway however lively it was: the
    deployment did nothing wrong."""

    health = None
    outcome = "too_long"


class UpstreamRateLimited(UpstreamError):
    """The upstream's own 429: the deployment is cooled down at once (for its Retry-After), and the
    upstream's code and Retry-After are passed on when no other deployment answered."""

    status = 429
    type = "invalid_request_error"
    code = "rate_limit_exceeded"
    health = COOLDOWN
    outcome = "rate_limited"

    def __init__(self, message: str, *, cooldown_seconds: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.cooldown_seconds = cooldown_seconds


class UpstreamCredentialRejected(UpstreamError):
    """The upstream refused this gateway's secret, or its account has no quota or credit left (401, 403,
    402, OpenAI's insufficient_quota): bad for every model using that secret, so its deployments are
    disabled. The client sees a 502: a configuration fault of this service, never a bad client key."""

    health = DISABLE
    outcome = "credential_rejected"


class UpstreamNotConfigured(UpstreamError):
    """The deployment's secret is not set on this gateway: no call was made, and nothing is wrong with
    the upstream itself."""

    health = None
    outcome = "not_configured"


class UpstreamRejected(GatewayError):
    """The upstream refused the request itself (a 4xx other than those above): another deployment would
    refuse it too, so it is passed on as it is and says nothing about the deployment."""

    type = "invalid_request_error"
    code = "upstream_rejected"
    retry = False
    health = None
    outcome = "rejected"

    def __init__(self, message: str, *, status: int, **kwargs):
        super().__init__(message, **kwargs)
        self.status = status  # the upstream's own 4xx, passed on


class UpstreamDeclined(UpstreamRejected):
    """A refusal that says more about the request than about the deployment, yet that another deployment
    may not repeat: a request too large for this deployment's tokens-per-minute limit, a precondition of
    this deployment's project. The request moves on; the deployment's health is untouched; when no
    deployment served it, the refusal is passed on like any other (its status, code and message)."""

    retry = True


class UnsupportedParameter(InvalidRequest):
    """A parameter the chosen deployment's protocol cannot honour: refused, never silently dropped. In a
    pool that mixes provider types another deployment may honour it, so the request moves on; when none
    did, this 400 is the answer. It says nothing about the deployment's health."""

    code = "unsupported_parameter"
    retry = True
    health = None
    outcome = "unsupported"


class PlatformNotConfigured(GatewayError):
    """A community lookup that needs the bot token, on a service without one."""

    status = 503
    type = "server_error"
    code = "platform_not_configured"


class PlatformTokenRejected(GatewayError):
    status = 503
    type = "server_error"
    code = "platform_token_rejected"


def error_body(message: str, type: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


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


def json_error(exc: GatewayError) -> HttpResponse:
    """The same body for plain Django views (handler404 and the like), byte for byte as an API view's
    error renders (DRF's JSON renderer: no spaces, UTF-8 as it is)."""
    response = HttpResponse(_JSON.render(exc.body()), content_type="application/json", status=exc.status)
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


# UTF-8 cannot carry a UTF-16 surrogate, so one can only arrive as a \uD800-\uDFFF escape.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json_object(raw: bytes) -> dict:
    """Strictly parse a request body that must be a JSON object."""
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest("The request body is not valid UTF-8.", code="invalid_json") from None
    except RecursionError:
        # Python's parser descends one level per nested array or object: past a few hundred it stops,
        # whether or not the rest would parse. Saying "not valid JSON" would send the client looking
        # for a typo.
        raise InvalidRequest("The request body nests arrays or objects too deeply to be read: it may be valid "
                             "JSON, but this service reads JSON nested at most a few hundred levels deep.",
                             code="invalid_json") from None
    except ValueError:
        raise InvalidRequest("The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) and any(_SURROGATE.search(text) for text in _strings(data)):
        # A lone surrogate is no character: it cannot be stored, sent upstream or even written
        # back in an error message as UTF-8. (A pair, such as an escaped emoji, parses into one.)
        raise InvalidRequest("The request body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff), "
                             "which is not a character.", code="invalid_json")
    return data


def _strings(data):
    """Every string in parsed JSON, member names included (iteratively: bodies may nest deeply)."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
