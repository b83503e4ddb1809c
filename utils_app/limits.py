"""The limit on keyless operations: PUBLIC_RATE_LIMIT requests per client address."""
import logging

from django.conf import settings
from django_ratelimit.core import get_usage
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from utils_app.errors import RateLimited

log = logging.getLogger("gateway.limits")


def client_address(request) -> str:
    # REMOTE_ADDR only: trusting X-Forwarded-For without a known proxy would let
    # any client pick its own bucket. Behind a proxy, set REMOTE_ADDR there.
    return request.META.get("REMOTE_ADDR", "") or "unknown"


class PublicRateThrottle(BaseThrottle):
    """Counts keyless requests per address in the shared cache; 429 in the contract's shape."""

    def allow_request(self, request, view):
        try:
            usage = get_usage(request, group="public", key=lambda group, req: client_address(req),
                              rate=settings.PUBLIC_RATE_LIMIT, increment=True)
        except Exception:  # a cache outage must not take the public pages down
            log.warning("public rate-limit cache unreachable; not enforced", exc_info=True)
            return True
        if usage is not None and usage["should_limit"]:
            raise RateLimited(f"Too many requests from this address: the limit is {settings.PUBLIC_RATE_LIMIT}.",
                              retry_after=usage["time_left"])
        return True


class PublicAPIView(APIView):
    """Base for operations that need no key: limited per client address instead."""

    throttle_classes = [PublicRateThrottle]
