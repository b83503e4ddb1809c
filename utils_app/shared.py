"""Small operations on the shared cache, batched: one round trip on Redis, an in-process store without it.

The request path already makes one Redis round trip (its limits, utils_app.windows);
whatever else it needs from the shared cache (the routing's health of a model's
deployments, the health a process has yet to write) rides in that same round trip as
a list of ``Op``s, and the failure path sends its own batches. Each op is one plain
Redis command. Without Redis (the embedded default, one process) the same ops run on a
dictionary of this process, with the same expiry rules, so the callers never ask which
cache they have.

Keys are the cache's (``cache.make_key``), so they carry its prefix and version.
"""
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.signals import setting_changed
from django.dispatch import receiver

log = logging.getLogger("gateway.cache")


@dataclass(frozen=True)
class Op:
    """One command: what it does (``kind``), on which name, with what."""

    kind: str  # get | hmget | hgetall | incr | hincrby | set | delete
    name: str
    args: tuple = ()


def get(name: str) -> Op:
    """The value (a str), or None."""
    return Op("get", name)


def hmget(name: str, *fields: str) -> Op:
    """The values of a hash's fields (str or None each)."""
    return Op("hmget", name, (fields,))  # args holds the tuple of fields, as the runners read it


def hgetall(name: str) -> Op:
    """A hash as a dict of str to str ({} when there is none)."""
    return Op("hgetall", name)


def incr(name: str, ttl: int) -> Op:
    """Add one and return the new count; a new counter expires after ``ttl`` seconds."""
    return Op("incr", name, (ttl,))


def hincrby(name: str, amounts: dict, ttl: int) -> Op:
    """Add integer amounts to a hash's fields; the hash expires ``ttl`` seconds after this write."""
    return Op("hincrby", name, (tuple(amounts.items()), ttl))


def set(name: str, value: str, ttl: float) -> Op:  # noqa: A001 - the command's name
    return Op("set", name, (value, ttl))


def delete(name: str) -> Op:
    return Op("delete", name)


def key(name: str) -> str:
    return cache.make_key(name)


# ---------------------------------------------------------------- Redis

def commands(ops: list[Op], make_key=None) -> list[tuple]:
    """The ops' Redis commands, for one round trip (utils_app.speed.redis_round_trip: not atomic). ``make_key`` is the
    cache's, when the caller already holds the cache (each use of Django's ``cache`` proxy is a lookup
    in context-local storage)."""
    make_key = make_key or cache.make_key
    sent: list[tuple] = []
    for op in ops:
        name = make_key(op.name)
        if op.kind == "get":
            sent.append(("GET", name))
        elif op.kind == "hmget":
            sent.append(("HMGET", name, *op.args[0]))
        elif op.kind == "hgetall":
            sent.append(("HGETALL", name))
        elif op.kind == "incr":
            # SET NX with the expiry first, so a counter can never be left without one.
            sent.append(("SET", name, 0, "EX", op.args[0], "NX"))
            sent.append(("INCRBY", name, 1))
        elif op.kind == "hincrby":
            amounts, ttl = op.args
            sent.extend(("HINCRBY", name, field, amount) for field, amount in amounts)
            sent.append(("EXPIRE", name, ttl))
        elif op.kind == "set":
            value, ttl = op.args
            sent.append(("SET", name, value, "PX", max(1, int(ttl * 1000))))
        elif op.kind == "delete":
            sent.append(("DEL", name))
        else:
            raise ValueError(f"unknown op {op.kind!r}")
    return sent


def answers(ops: list[Op], replies: list) -> list:
    """Each op's answer from the round trip's replies, in the order of ``commands(ops)`` (several replies
    for some ops); an error reply is raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    found: list = []
    at = 0
    for op in ops:
        if op.kind == "incr":
            found.append(int(replies[at + 1]))
            at += 2
        elif op.kind == "hincrby":
            found.append(None)
            at += len(op.args[0]) + 1
        else:
            found.append(_text(replies[at], op.kind))
            at += 1
    return found


def _text(reply, kind: str):
    if kind == "hmget":
        return [_decode(value) for value in reply]
    if kind == "hgetall":
        if isinstance(reply, list):  # RESP2 answers a hash as a flat list of names and values
            reply = dict(zip(reply[::2], reply[1::2]))
        return {_decode(name): _decode(value) for name, value in (reply or {}).items()}
    if kind == "get":
        return _decode(reply)
    return None


def _decode(value):
    return value.decode() if isinstance(value, bytes) else value


# ---------------------------------------------------------------- this process

class _Memory:
    """The ops on a dictionary: name -> (value, expires at), a hash's value being a dict."""

    def __init__(self):
        self._items: dict[str, tuple[object, float]] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def run(self, ops: list[Op]) -> list:
        now = time.monotonic()
        with self._lock:
            if now > self._next_prune:
                self._items = {name: item for name, item in self._items.items() if item[1] > now}
                self._next_prune = now + 10
            return [self._one(op, now) for op in ops]

    def _live(self, name: str, now: float):
        item = self._items.get(name)
        return item if item is not None and item[1] > now else None

    def _one(self, op: Op, now: float):
        item = self._live(op.name, now)
        if op.kind == "get":
            return None if item is None else str(item[0])
        if op.kind == "hmget":
            values = item[0] if item else {}
            return [None if values.get(field) is None else str(values[field]) for field in op.args[0]]
        if op.kind == "hgetall":
            return {field: str(value) for field, value in (item[0] if item else {}).items()}
        if op.kind == "incr":
            count = (item[0] if item else 0) + 1
            self._items[op.name] = (count, item[1] if item else now + op.args[0])
            return count
        if op.kind == "hincrby":
            amounts, ttl = op.args
            values = dict(item[0]) if item else {}
            for field, amount in amounts:
                values[field] = values.get(field, 0) + amount
            self._items[op.name] = (values, now + ttl)
            return None
        if op.kind == "set":
            value, ttl = op.args
            self._items[op.name] = (value, now + ttl)
            return None
        if op.kind == "delete":
            self._items.pop(op.name, None)
            return None
        raise ValueError(f"unknown op {op.kind!r}")

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


memory = _Memory()
_last_warning = 0.0


_process_cache = None


def shared_cache():
    """The shared (Redis) cache's backend object of this process, built once.

    ``caches[...]`` keeps a backend object per thread, which in a gevent worker is per greenlet:
    every request built one for its limits' round trip (~40 µs of CPU, docs/performance.md). The
    Redis backend (utils_app.speed.redis_round_trip.ScriptedRedisCache) keeps its client and connections per
    process and nothing of a request, so one object serves every thread and greenlet. A change of
    the CACHES setting (tests) builds a new one."""
    global _process_cache
    if _process_cache is None:
        _process_cache = caches.create_connection(DEFAULT_CACHE_ALIAS)
    return _process_cache


@receiver(setting_changed)
def _caches_changed(*, setting: str, **kwargs) -> None:
    global _process_cache
    if setting == "CACHES":
        _process_cache = None


def run(ops: list[Op]) -> list | None:
    """Run the ops in one round trip; their answers in order, or None when the shared cache is unreachable."""
    if not ops:
        return []
    if not settings.SHARED_CACHE:
        return memory.run(ops)
    try:
        backend = shared_cache()
        return answers(ops, backend.round_trip(commands(ops, backend.make_key)))
    except Exception as exc:  # an outage of the shared cache must never fail a request
        warn_unreachable(exc)
        return None


def warn_unreachable(exc: Exception) -> None:
    # One line every ten seconds per process, not a traceback per request.
    global _last_warning
    if time.monotonic() - _last_warning > 10:
        _last_warning = time.monotonic()
        log.warning("shared cache unreachable (%s); limits and routing health are not shared meanwhile",
                    type(exc).__name__)


def reset() -> None:
    """Forget this process's store (tests)."""
    memory.clear()
