"""Errors as Anthropic's Messages API shapes them: ``{"type": "error", "error": {"type", "message"}}``."""
from utils_app.error_handler import shaped_exception_handler
from utils_app.errors import GatewayError

# Anthropic's error type for each status the gateway answers with (section 4's statuses are kept).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(error: GatewayError) -> dict:
    error.body()  # the request's summary line learns its reason there
    return {"type": "error", "error": {"type": error_type(error.status), "message": error.message}}


# The views' DRF exception handler: every error of section 4, in Anthropic's shape and with its status.
exception_handler = shaped_exception_handler(error_body)
