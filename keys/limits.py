"""Per-key request limits (rpm and rph) counted with django-ratelimit in the shared cache.

The counters are asked for with a fixed, very large rate and compared with the
key's own rpm/rph here. django-ratelimit puts the rate into its cache key, so
passing the key's rpm would start a fresh counter whenever staff change the
limit; this way a lowered limit applies to the very next request with the
requests already made still counted.

On Redis both windows are counted in one round trip (utils_app.cache): the same
counters under the same keys, windows and expiries as django-ratelimit's
get_usage, which costs two round trips per window. Local memory uses get_usage.
"""
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django_ratelimit import ALL
from django_ratelimit.core import EXPIRATION_FUDGE, _get_window, _make_cache_key, get_usage

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


def _counted_at_once(cache, key: ApiKey) -> list:
    """What _count gives for each window, in one round trip; None for a window not counted.

    Like enforce() with get_usage, counting stops at the first window over its limit: a
    request refused for its minute does not also use up its hour.
    """
    if not getattr(settings, "RATELIMIT_ENABLE", True):
        return [None] * len(WINDOWS)
    value = str(key.pk)
    # get_usage's own window edges, cache keys and expiries, so these are its counters.
    edges = [_get_window(value, period) for _, period in WINDOWS]
    counters = [(_make_cache_key(f"key-{window}", edge, (_COUNTER_CEILING, period), value, ALL),
                 period + EXPIRATION_FUDGE, getattr(key, window))
                for (window, period), edge in zip(WINDOWS, edges)]
    try:
        counts = cache.count_in_windows(counters)
    except Exception:  # a cache outage must never refuse service: credits stay exact in the DB
        log.warning("rate-limit cache unreachable; rpm and rph limits not enforced", exc_info=True)
        return [None] * len(WINDOWS)
    now = int(time.time())
    usages = [{"count": count, "time_left": edge - now} for count, edge in zip(counts, edges)]
    return usages + [None] * (len(WINDOWS) - len(usages))


def enforce(request, key: ApiKey) -> LimitState:
    """Count the request in the key's minute and hour windows; 429 when either is exceeded."""
    cache = caches[getattr(settings, "RATELIMIT_USE_CACHE", "default")]
    counted = _counted_at_once(cache, key) if hasattr(cache, "count_in_windows") else None
    state = LimitState(limit=key.rpm, remaining=key.rpm, reset_seconds=60)
    for index, (window, period) in enumerate(WINDOWS):
        usage = counted[index] if counted is not None else _count(request, key.pk, window, period)
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
