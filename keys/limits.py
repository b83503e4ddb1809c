"""Per-key request limits (rpm and rph), counted right after authentication.

Both windows are counted in one step (utils_app.windows: one Redis round trip), for
every metered request that authenticated, before its body is even parsed: a request
that then fails validation still used its slot, as with OpenAI, and a flood of
huge invalid bodies is throttled like any other. The counters do not depend on
the limits, so a lowered limit applies to the very next request with the requests
already made still counted. maxConcurrent is not counted here: the charge checks
it under the key's row lock (gateway.metering). The same round trip reads the shared
keys version, which tells whether a key row from the process's cache is still current
(keys.auth_cache); when it may not be, the row is read again before the limits are judged.
"""
from collections.abc import Sequence
from dataclasses import dataclass

from rest_framework.throttling import BaseThrottle

from keys import auth_cache
from keys.models import ApiKey
from utils_app import clock, metrics, windows
from utils_app.errors import AuthenticationError, RateLimited

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


def enforce(key: ApiKey, *, also: Sequence = ()) -> tuple[LimitState, list | None]:
    """Count the request in the key's minute and hour windows; 429 when either is exceeded.

    ``also`` (utils_app.shared ops) ride in the same round trip; their answers come back
    beside the state, None when the shared cache could not be reached.
    """
    asked_at = clock.monotonic()
    answer = windows.count_and_read(f"key:{key.pk}", tuple(PERIODS.values()), read=auth_cache.VERSION,
                                    default=auth_cache.new_version(), also=also)
    # A cached row no longer current is read again here, before anything is judged on it.
    if not auth_cache.current(key, answer.value if answer else None, asked_at=asked_at) and not key.is_active:
        raise AuthenticationError("This API key has been revoked.", code="invalid_api_key")
    if answer is None:  # the shared cache is down: fail open, credits stay exact in the database
        return LimitState(limit=key.rpm, remaining=key.rpm, reset_seconds=60), None
    minute, hour = answer.windows
    state = LimitState(limit=key.rpm, remaining=max(0, key.rpm - minute.count), reset_seconds=minute.reset_seconds)
    for name, window in zip(PERIODS, answer.windows):
        limit = getattr(key, name)
        if window.count > limit:
            metrics.limit_rejected(name)
            raise RateLimited(
                f"Rate limit reached: {limit} requests per {'minute' if name == 'rpm' else 'hour'}.",
                param=name, retry_after=window.reset_seconds, headers=state.headers())
    return state, answer.also


class KeyRequestLimits(BaseThrottle):
    """The limits as a DRF throttle, for views that only count a key's request (the catalog's, when a key
    is sent). The metered views count in their own first step instead (gateway.views), with the reads
    their operation adds to the same round trip. The state is kept on the view (its ``limit_state``, one
    view a request) for the response headers."""

    def allow_request(self, request, view):
        view.limit_state, _ = enforce(request.user)
        return True
