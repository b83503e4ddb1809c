"""Errors as Google's API shapes them: ``{"error": {"code", "message", "status"}}``."""
from utils_app.error_handler import shaped_exception_handler
from utils_app.errors import GatewayError

# Google's status word for each HTTP status the gateway answers with (section 4's statuses are kept; a 402
# keeps its status and says RESOURCE_EXHAUSTED, as Google says of a spent quota).
STATUS_WORDS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                504: "DEADLINE_EXCEEDED"}


def status_word(status: int) -> str:
    if status in STATUS_WORDS:
        return STATUS_WORDS[status]
    return "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"


def error_body(error: GatewayError) -> dict:
    error.body()  # the request's summary line learns its reason there
    return {"error": {"code": error.status, "message": error.message, "status": status_word(error.status)}}


# The views' DRF exception handler: every error of section 4, in Google's shape and with its status.
exception_handler = shaped_exception_handler(error_body)
