"""Authenticated keys kept in the process, so a metered request needs no SELECT to authenticate.

A row read from the database is trusted for KEY_CACHE_SECONDS (default 1 s). With a shared
cache (Redis) it can stay trusted for longer, up to KEY_CACHE_MAX_SECONDS (default 60 s),
while no key has changed anywhere:

- every change of a key through keys.services (an edit, a revocation) gives the shared
  *keys version* a new random value once its transaction has committed (``changed``);
- each metered request's limits script (keys.limits) reads that version in the same round
  trip that counts the request, so checking it costs nothing;
- a cached row remembers the version this process had seen before it read the row. When a
  request's script answers with that same version, no key has changed since the row was
  read, and the row is trusted for KEY_CACHE_SECONDS more from the moment the script was
  sent. Any other answer drops the row: the key's next request reads it again.

So a change reaches every instance within KEY_CACHE_SECONDS of the version moving, as it
did when every row expired after that second, and a key in steady use is read once a
minute rather than once a second per process. When the shared cache is unreachable, was
emptied, or the new version could not be written, nothing is confirmed: rows then expire
after KEY_CACHE_SECONDS, or at worst (a version that failed to move) after
KEY_CACHE_MAX_SECONDS, and the failure is logged. Without a shared cache (the embedded
default, one process) rows expire after KEY_CACHE_SECONDS, and a change made in the
process applies at once.

Whatever the cache holds, revocation, tier and maxConcurrent are checked again by the
charge statement itself (gateway.metering), so no credit is ever taken for a key that may
no longer use the model. Only immutable field values are kept: each request gets its own
ApiKey, since the pipeline updates ``credits`` on it.
"""
import logging
import time
import uuid

from django.conf import settings
from django.core.cache import cache
from django.db import connection, router, transaction

from keys.models import ApiKey
from utils_app.db import release_connection

log = logging.getLogger("gateway.keys")

# The shared cache's name for the keys version (under the cache's key prefix).
VERSION = "keys:version"
_SET_VERSION = "return redis.call('SET', KEYS[1], ARGV[1])"

_FIELDS = [field.attname for field in ApiKey._meta.concrete_fields]
_CREDITS = _FIELDS.index("credits")
_MAX_ENTRIES = 10_000  # beyond it the cache starts over: a bound on memory, not an eviction policy


class _Entry:
    __slots__ = ("trusted_until", "expires", "version", "values")

    def __init__(self, now: float, version: str | None, values: tuple):
        self.trusted_until = now + settings.KEY_CACHE_SECONDS
        self.expires = now + max(settings.KEY_CACHE_MAX_SECONDS, settings.KEY_CACHE_SECONDS)
        self.version = version
        self.values = values


_entries: dict[str, _Entry] = {}
# The keys version of the latest limits script this process ran; None when not known.
_seen: str | None = None


def key_with_digest(digest: str) -> ApiKey | None:
    """The key with this secret digest, active or not; from the process cache when trusted."""
    now = time.monotonic()
    entry = _entries.get(digest)
    if entry is not None and entry.trusted_until > now:
        return ApiKey.from_db(router.db_for_read(ApiKey), _FIELDS, entry.values)
    # Taken before the read: a change committed after the read moves the version past this one.
    version = _seen
    key = ApiKey.objects.filter(digest=digest).first()
    release_connection(connection)  # the charge takes one again when it is due
    if key is None:
        _entries.pop(digest, None)
        return None
    if settings.KEY_CACHE_SECONDS > 0:
        if len(_entries) >= _MAX_ENTRIES:
            _entries.clear()
        _entries[digest] = _Entry(now, version, tuple(getattr(key, name) for name in _FIELDS))
    return key


def confirm(digest: str, version: str | None, *, asked_at: float) -> None:
    """What a limits script sent at ``asked_at`` (time.monotonic) answered as the keys version."""
    global _seen
    _seen = version
    entry = _entries.get(digest)
    if entry is None or version is None or entry.version is None:
        return  # nothing known: the row keeps its own expiry
    if entry.version != version:
        _entries.pop(digest, None)  # some key changed since the row was read
    else:
        entry.trusted_until = min(max(entry.trusted_until, asked_at + settings.KEY_CACHE_SECONDS), entry.expires)


def note_credits(digest: str, credits: int) -> None:
    """The balance a charge left: what a refusal before the next charge reports (X-Remaining-Credits)."""
    entry = _entries.get(digest)
    if entry is not None:
        values = list(entry.values)
        values[_CREDITS] = credits
        entry.values = tuple(values)


def new_version() -> str:
    return uuid.uuid4().hex


def changed(digest: str) -> None:
    """A key's row changed: forget it here now, and move the shared version once the change commits."""
    forget(digest)
    if settings.SHARED_CACHE:
        transaction.on_commit(_move_version)


def _move_version() -> None:
    try:
        cache.run_script(_SET_VERSION, keys=[cache.make_key(VERSION)], args=[new_version()])
    except Exception as exc:
        log.error("could not publish a key change to the shared cache (%s): other instances apply it within "
                  "KEY_CACHE_MAX_SECONDS (%ss) instead of KEY_CACHE_SECONDS", type(exc).__name__,
                  settings.KEY_CACHE_MAX_SECONDS)


def forget(digest: str) -> None:
    """Drop a key from this process's cache, so its next request reads the row again."""
    _entries.pop(digest, None)


def clear() -> None:
    global _seen
    _entries.clear()
    _seen = None
