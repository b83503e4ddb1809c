from django.conf import settings

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
