"""Limits per client address: keyless operations (PUBLIC_RATE_LIMIT) and failed authentications."""
import ipaddress
import logging

from django.conf import settings
from django_ratelimit.core import get_usage
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from utils_app import clock, state, windows
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


# ---------------------------------------------------------------- failed authentications

# Addresses this process saw go over AUTH_FAILURES_PER_MINUTE: address -> clock.monotonic() at which
# their minute ends. Only the failures are counted in the shared cache; this map is what lets the
# next guesses be refused without a round trip or a key lookup.
_guessing: dict[str, float] = {}
_MAX_GUESSING = 10_000  # beyond it the map starts over: a bound on memory, not an eviction policy


def guessing_addresses() -> bool:
    """Whether any address is refused here at all: when not, nothing else needs to be looked at."""
    return bool(_guessing)


def refuse_known_guesser(request) -> None:
    """429 when the client's address went over the failed-authentication limit in its current minute."""
    address = client_address(request)
    until = _guessing.get(address)
    if until is None:
        return
    left = until - clock.monotonic()
    if left <= 0:
        _guessing.pop(address, None)
        return
    raise _too_many_failures(left)


def count_failed_authentication(request) -> None:
    """Count a failed authentication of the client's address (one round trip); 429 once over the limit.

    The counter is shared by every worker and instance; a cache outage counts nothing.
    """
    address = client_address(request)
    answer = windows.count_and_read(f"auth-failures:{address}", (60,))
    if answer is None:
        return
    [minute] = answer.windows
    if minute.count > settings.AUTH_FAILURES_PER_MINUTE:
        if len(_guessing) >= _MAX_GUESSING:
            _guessing.clear()
        _guessing[address] = clock.monotonic() + minute.reset_seconds
        raise _too_many_failures(minute.reset_seconds)


def _too_many_failures(seconds_left: float) -> RateLimited:
    return RateLimited(f"Too many failed authentications from this address: the limit is "
                       f"{settings.AUTH_FAILURES_PER_MINUTE} a minute.", code="too_many_failed_authentications",
                       retry_after=max(1, round(seconds_left)))


@state.on_reset
def forget_guessers() -> None:
    """Forget the refused addresses of this process (tests)."""
    _guessing.clear()
