"""Per-key request limits (rpm and rph) counted with django-ratelimit in the shared cache.

The counters are asked for with a fixed, very large rate and compared with the
key's own rpm/rph here. django-ratelimit puts the rate into its cache key, so
passing the key's rpm would start a fresh counter whenever staff change the
limit; this way a lowered limit applies to the very next request with the
requests already made still counted.
"""
import logging
from dataclasses import dataclass

from django_ratelimit.core import get_usage

from keys.models import ApiKey
from utils_app.errors import RateLimited

log = logging.getLogger("gateway.limits")

_COUNTER_CEILING = 10**9
WINDOWS = (("rpm", 60), ("rph", 3600))


@dataclass(frozen=True)
class LimitState:
    limit: int
    remaining: int
    reset_seconds: int

    def headers(self) -> dict:
        return {
            "X-RateLimit-Limit-Requests": str(self.limit),
            "X-RateLimit-Remaining-Requests": str(self.remaining),
            "X-RateLimit-Reset-Requests": f"{self.reset_seconds}s",
        }


def _count(request, key_id: int, window: str, period: int):
    """Count this request in one window; None when the cache is unreachable (fail open)."""
    try:
        return get_usage(request, group=f"key-{window}", key=lambda group, req: str(key_id),
                         rate=(_COUNTER_CEILING, period), increment=True)
    except Exception:  # a cache outage must never refuse service: credits stay exact in the DB
        log.warning("rate-limit cache unreachable; %s limit not enforced", window, exc_info=True)
        return None


def enforce(request, key: ApiKey) -> LimitState:
    """Count the request in the key's minute and hour windows; 429 when either is exceeded."""
    state = LimitState(limit=key.rpm, remaining=key.rpm, reset_seconds=60)
    for window, period in WINDOWS:
        usage = _count(request, key.pk, window, period)
        if usage is None:
            continue
        limit = getattr(key, window)
        if window == "rpm":
            state = LimitState(limit=limit, remaining=max(0, limit - usage["count"]),
                               reset_seconds=max(0, usage["time_left"]))
        if usage["count"] > limit:
            raise RateLimited(
                f"Rate limit reached: {limit} requests per {'minute' if window == 'rpm' else 'hour'}.",
                param=window, retry_after=usage["time_left"], headers=state.headers())
    return state
