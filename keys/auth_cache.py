"""Authenticated keys kept in the process, so a metered request needs no SELECT to authenticate.

Without a shared cache (the embedded default: one process) a row read from the database is
used for KEY_CACHE_SECONDS (default 1 s), and a change made in the process applies at once.

With a shared cache (Redis) a metered request may use a row read up to KEY_CACHE_MAX_SECONDS
(default 60 s) ago, because the request itself checks that the row is still current:

- every change of a key through keys.services (an edit, a revocation) gives the shared
  *keys version* a new random value once its transaction has committed (``changed``);
- a cached row remembers the version this process had seen before it read the row;
- the request's limits script (keys.limits) reads the version in the round trip that counts
  the request. The same version means no key has changed since the row was read; another
  makes the request read the row again (``current``) before its limits, tier and balance are
  judged. The request counts do not depend on the limits, so judging them after that read is
  exact. Without a version to compare (Redis unreachable, or a row read before this process
  had seen one) a row older than KEY_CACHE_SECONDS is read again.

So once the version has moved, a change applies at the key's next request on every instance,
and a key in steady use costs one read per KEY_CACHE_MAX_SECONDS per process instead of one
per KEY_CACHE_SECONDS. If the new
version cannot be written (Redis down while a key changes), the failure is logged and the other
instances apply the change when their rows reach KEY_CACHE_MAX_SECONDS. An emptied Redis gets a
new version from the next script, so every process reads its keys again.

Whatever the cache holds, revocation, tier and maxConcurrent are checked again by the charge
statement itself (gateway.metering), so no credit is ever taken for a key that may no longer
use the model. Each request gets its own ApiKey, since the pipeline updates ``credits`` on it.
"""
import logging
import uuid
import weakref
from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.core.cache import cache
from django.db import connection, connections, router, transaction
from django.db.models import signals
from django.db.models.base import ModelState

from keys.models import ApiKey
from utils_app import clock, state
from utils_app.db import release_connection

if TYPE_CHECKING:
    from utils_app.speed.redis_round_trip import ScriptedRedisCache

log = logging.getLogger("gateway.keys")

# The shared cache's name for the keys version (under the cache's key prefix).
VERSION = "keys:version"
_SET_VERSION = "return redis.call('SET', KEYS[1], ARGV[1])"

_FIELDS = [field.attname for field in ApiKey._meta.concrete_fields]
_MAX_ENTRIES = 10_000  # beyond it the cache starts over: a bound on memory, not an eviction policy


class _Entry:
    __slots__ = ("read_at", "version", "attrs")

    def __init__(self, read_at: float, version: str | None, attrs: dict):
        self.read_at = read_at
        self.version = version  # the keys version seen before the row was read; None when not known
        self.attrs = attrs  # the row's values by attribute name; replaced, never changed in place


def _key_from(attrs: dict, db: str) -> ApiKey:
    """The ApiKey ``ApiKey.from_db`` would build from a whole row, built the short way.

    Every column of the row is a plain attribute (DeferredAttribute descriptors only read), so
    Model.__init__'s loop of setattr over twenty fields comes to filling the instance's dict, which
    one update does. The pre_init and post_init signals have no receivers in the service; should one
    be connected, Django's own construction runs, so it is sent.
    """
    if signals.pre_init.receivers or signals.post_init.receivers:
        return ApiKey.from_db(db, _FIELDS, [attrs[name] for name in _FIELDS])
    key = ApiKey.__new__(ApiKey)
    key.__dict__.update(attrs)
    state = key._state = ModelState()
    state.adding = False
    state.db = db
    return key


_entries: dict[str, _Entry] = {}
# The keys version the latest limits script of this process answered; None when not known.
_seen: str | None = None


def longest_seconds() -> float:
    """How long ago a row may have been read for a request that checks the version (``current``)."""
    if not settings.SHARED_CACHE:
        return settings.KEY_CACHE_SECONDS
    return max(settings.KEY_CACHE_MAX_SECONDS, settings.KEY_CACHE_SECONDS)


def key_with_digest(digest: str, *, within: float | None = None) -> ApiKey | None:
    """The key with this secret digest, active or not: a cached row read at most ``within`` seconds
    ago (default KEY_CACHE_SECONDS), else the row as it is now.

    A caller that passes more than KEY_CACHE_SECONDS must check the key with ``current`` before
    relying on it (keys.limits does, for every metered request).
    """
    now = clock.monotonic()
    entry = _entries.get(digest)
    if entry is not None and now - entry.read_at < (settings.KEY_CACHE_SECONDS if within is None else within):
        key = _key_from(entry.attrs, router.db_for_read(ApiKey))
        key.cached_row = entry
        return key
    return _read(digest, version=_seen, now=now)


def _read(digest: str, *, version: str | None, now: float) -> ApiKey | None:
    # ``version`` must have been seen before this read: a change committed after the read then
    # shows as another version.
    alias = router.db_for_read(ApiKey)
    attrs = _select_row(connections[alias], digest)
    release_connection(connection)  # the charge takes one again when it is due
    if attrs is None:
        _entries.pop(digest, None)
        return None
    if settings.KEY_CACHE_SECONDS > 0:
        if len(_entries) >= _MAX_ENTRIES:
            _entries.clear()
        _entries[digest] = _Entry(now, version, attrs)
    key = _key_from(attrs, alias)
    key.cached_row = None
    return key


class _Select:
    """``ApiKey.objects.filter(digest=...).first()`` compiled once for a database wrapper: its SQL, the
    attribute each column fills and the converters the ORM applies to each (a SQLite datetime's text,
    a boolean's integer).

    Compiling the query is most of what the ORM spends on that read (three quarters of it on SQLite,
    docs/performance.md), and a key read is frequent where keys are trusted for a second only (the
    embedded default: a key used about every second is read again about every other request)."""

    __slots__ = ("sql", "names", "converters")

    PROBE = "\x00digest\x00"  # stands for the digest while compiling; no digest holds NUL

    def __init__(self, wrapper):
        queryset = ApiKey.objects.using(wrapper.alias).filter(digest=self.PROBE)
        queryset = (queryset if queryset.ordered else queryset.order_by("pk"))[:1]  # as first() orders it
        compiler = queryset.query.get_compiler(connection=wrapper)
        self.sql, params = compiler.as_sql()
        if list(params) != [self.PROBE]:
            raise ValueError(f"the key read compiled to unexpected parameters: {params!r}")
        columns = [column for column, _, _ in compiler.select]
        self.names = [column.target.attname for column in columns]
        if sorted(self.names) != sorted(_FIELDS):
            raise ValueError("the key read does not select every field of the row")
        self.converters = list(compiler.get_converters(columns).items())

    def row(self, wrapper, digest: str) -> dict | None:
        with wrapper.cursor() as cursor:
            cursor.execute(self.sql, [digest])
            found = cursor.fetchone()
        if found is None:
            return None
        values = list(found)
        for position, (converters, expression) in self.converters:
            value = values[position]
            for converter in converters:
                value = converter(value, expression, wrapper)
            values[position] = value
        return dict(zip(self.names, values))


_selects: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # database wrapper -> its _Select


def _select_row(wrapper, digest: str) -> dict | None:
    """The row of the key with ``digest`` as the ORM reads it (each attribute of the model), or None."""
    select = _selects.get(wrapper)
    if select is None:
        select = _selects[wrapper] = _Select(wrapper)
    return select.row(wrapper, digest)


def current(key: ApiKey, version: str | None, *, asked_at: float) -> bool:
    """Whether ``key`` is as current as its row, given the keys version a limits script sent at
    ``asked_at`` (clock.monotonic) answered (None: no answer). When it may not be, the row is read
    again, ``key`` updated in place, and False returned."""
    global _seen
    _seen = version
    entry = getattr(key, "cached_row", None)
    if entry is None:
        return True  # read from the database by this very request
    if version is not None and entry.version is not None:
        if entry.version == version:
            return True  # no key has changed since the row was read
    elif asked_at - entry.read_at < settings.KEY_CACHE_SECONDS:
        return True  # no version to compare: the plain expiry decides, as without a shared cache
    fresh = _read(key.digest, version=version, now=asked_at)
    if fresh is None:  # deleted meanwhile: as good as revoked
        key.is_active = False
    else:
        for name in _FIELDS:
            setattr(key, name, getattr(fresh, name))
    key.cached_row = None
    return False


def note_credits(digest: str, credits: int) -> None:
    """The balance a charge left: what a refusal before the next charge reports (X-Remaining-Credits)."""
    entry = _entries.get(digest)
    if entry is not None:
        entry.attrs = {**entry.attrs, "credits": credits}


def new_version() -> str:
    return uuid.uuid4().hex


def changed(digest: str) -> None:
    """A key's row changed: forget it here now, and move the shared version once the change commits."""
    forget(digest)
    if settings.SHARED_CACHE:
        transaction.on_commit(_move_version)


def changed_all() -> None:
    """Many keys' rows changed (a refill): forget them all here, and move the shared version."""
    _entries.clear()
    if settings.SHARED_CACHE:
        transaction.on_commit(_move_version)


def _move_version() -> None:
    try:
        cast("ScriptedRedisCache", cache).run_script(_SET_VERSION, keys=[cache.make_key(VERSION)], args=[new_version()])
    except Exception as exc:
        log.error("could not publish a key change to the shared cache (%s): other instances apply it within "
                  "KEY_CACHE_MAX_SECONDS (%ss)", type(exc).__name__, settings.KEY_CACHE_MAX_SECONDS)


def is_cached(digest: str) -> bool:
    """Whether this process holds the row of the key with this digest (however old)."""
    return digest in _entries


def forget(digest: str) -> None:
    """Drop a key from this process's cache, so its next request reads the row again."""
    _entries.pop(digest, None)


@state.on_reset
def clear() -> None:
    global _seen
    _entries.clear()
    _seen = None
