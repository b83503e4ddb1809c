"""Authenticated keys kept in the process for KEY_CACHE_SECONDS, so a metered request needs no SELECT.

What a stale entry could get wrong is bounded:
- revocation, tier and maxConcurrent are checked again by the charge statement
  itself (gateway.metering), so no credit is ever taken for a key that may no
  longer use the model, whatever this cache holds;
- rpm, rph and a revocation seen by unmetered operations follow within
  KEY_CACHE_SECONDS (default 1 s) on every instance, and at once in the process
  that made the change (keys.services calls ``forget``).
Only immutable field values are kept: each request gets its own ApiKey, since the
pipeline updates ``credits`` on it.
"""
import time

from django.conf import settings
from django.db import connection, router

from keys.models import ApiKey
from utils_app.db import release_connection

_FIELDS = [field.attname for field in ApiKey._meta.concrete_fields]
_MAX_ENTRIES = 10_000  # beyond it the cache starts over: a bound on memory, not an eviction policy
_entries: dict[str, tuple[float, tuple]] = {}


def key_with_digest(digest: str) -> ApiKey | None:
    """The key with this secret digest, active or not; from the process cache when fresh."""
    now = time.monotonic()
    hit = _entries.get(digest)
    if hit is not None and hit[0] > now:
        return ApiKey.from_db(router.db_for_read(ApiKey), _FIELDS, hit[1])
    key = ApiKey.objects.filter(digest=digest).first()
    release_connection(connection)  # the charge takes one again when it is due
    if key is None:
        _entries.pop(digest, None)
        return None
    if settings.KEY_CACHE_SECONDS > 0:
        if len(_entries) >= _MAX_ENTRIES:
            _entries.clear()
        _entries[digest] = (now + settings.KEY_CACHE_SECONDS, tuple(getattr(key, name) for name in _FIELDS))
    return key


def forget(digest: str) -> None:
    """Drop a key this process changed, so its next request reads the row again."""
    _entries.pop(digest, None)


def clear() -> None:
    _entries.clear()
