"""The one error body of the service and the family of errors that produce it.

Every failure of a /v1, /admin or /utils operation leaves as
``{"error": {"message", "type", "param", "code"}}``. Code raises a
``GatewayError``: its class carries the status and the type, the instance the
code, message and param. DRF's own exceptions, Django's 404/405/413 and anything
unexpected are turned into one by utils_app.error_handler, so no view ever
builds an error by hand.
"""
from utils_app import logging as request_log


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code = "internal_error"
    failure_kind = "internal"  # the upstream-errors metric's fixed word for it (``failure_kind``)

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


def failure_kind(error: Exception) -> str:
    """The upstream-errors metric's kind of a failure: its class's fixed word, never the upstream's own code;
    an error of no class of ours is "internal"."""
    return error.failure_kind if isinstance(error, GatewayError) else "internal"


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
    failure_kind = "unavailable"


# What an upstream error does to the deployment that answered (UpstreamError.health). SLOW_ANSWER: a timeout
# of a request that asked for more output than its time could carry, a failure only of a deployment that has
# served nothing lately (docs/routing.md, "Whose failure is it").
FAILURE, COOLDOWN, DISABLE, SLOW_ANSWER = "failure", "cooldown", "disable", "slow_answer"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    outcome = "timeout"
    failure_kind = "timeout"

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
    failure_kind = "rate_limited"

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
    failure_kind = "rejected"

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
    failure_kind = "rejected"


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
