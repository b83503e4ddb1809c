"""The limit on keyless operations: PUBLIC_RATE_LIMIT requests per client address."""
import ipaddress
import logging

from django.conf import settings
from django_ratelimit.core import get_usage
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from utils_app.errors import RateLimited

log = logging.getLogger("gateway.limits")


def client_address(request) -> str:
    """The address a keyless client is counted under.

    REMOTE_ADDR, unless it is one of TRUSTED_PROXIES: then the right-most
    X-Forwarded-For entry that is not a trusted proxy itself. Entries further left
    were written by the client and could name any bucket; the right-most ones
    were appended by our own proxies, each naming the peer it saw.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    if not settings.TRUSTED_PROXIES or not _is_trusted(remote):
        return remote or "unknown"
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed(hops):
        if hop and not _is_trusted(hop):
            return hop
    # Only trusted proxies (or nothing) were named: the request started inside the proxy tier.
    return next((hop for hop in hops if hop), remote) or "unknown"


def _is_trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in settings.TRUSTED_PROXIES)


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
