"""Per-key request limits (rpm and rph), counted right after authentication.

Both windows are counted in one step (utils_app.windows: one Redis round trip), for
every metered request that authenticated, before its body is even parsed: a request
that then fails validation still used its slot, as with OpenAI, and a flood of
huge invalid bodies is throttled like any other. The counters do not depend on
the limits, so a lowered limit applies to the very next request with the requests
already made still counted. maxConcurrent is not counted here: the charge checks
it under the key's row lock (gateway.metering). The same round trip reads the shared
keys version, which tells the process's key cache whether its row is still current
(keys.auth_cache).
"""
import time

from dataclasses import dataclass

from rest_framework.throttling import BaseThrottle

from keys import auth_cache
from keys.models import ApiKey
from utils_app import metrics, windows
from utils_app.errors import RateLimited

PERIODS = {"rpm": 60, "rph": 3600}


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


def enforce(key: ApiKey) -> LimitState:
    """Count the request in the key's minute and hour windows; 429 when either is exceeded."""
    asked_at = time.monotonic()
    answer = windows.count_and_read(f"key:{key.pk}", tuple(PERIODS.values()), read=auth_cache.VERSION,
                                    default=auth_cache.new_version())
    if answer is None:  # the shared cache is down: fail open, credits stay exact in the database
        auth_cache.confirm(key.digest, None, asked_at=asked_at)
        return LimitState(limit=key.rpm, remaining=key.rpm, reset_seconds=60)
    counted, version = answer
    auth_cache.confirm(key.digest, version, asked_at=asked_at)
    minute, hour = counted
    state = LimitState(limit=key.rpm, remaining=max(0, key.rpm - minute.count), reset_seconds=minute.reset_seconds)
    for name, window in zip(PERIODS, counted):
        limit = getattr(key, name)
        if window.count > limit:
            metrics.limit_rejected(name)
            raise RateLimited(
                f"Rate limit reached: {limit} requests per {'minute' if name == 'rpm' else 'hour'}.",
                param=name, retry_after=window.reset_seconds, headers=state.headers())
    return state


class KeyRequestLimits(BaseThrottle):
    """DRF runs throttles right after authentication: the place the contract counts a request.
    The state is kept on the request for the response headers."""

    def allow_request(self, request, view):
        request.limit_state = None
        request.limit_state = enforce(request.user)
        return True
