"""Fixed-window request counters: several windows counted in one step.

On Redis (a shared cache) one small Lua script increments every window of a name
and sets their expiry: one round trip, atomic, exact across workers and hosts.
Without Redis the counters live in this process, in a dictionary of their own
(not the local-memory cache, whose eviction would let a client reset its own
counters by filling it); that is only correct with one worker process, which is
why gunicorn_conf refuses more than one without REDIS_URL.

Each name's windows are shifted by a stable offset, so windows of different keys
do not all reset on the same second.
"""
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from utils_app import clock, shared, state

# ARGV[1] is the number of windows n. KEYS[1..n] are their counters and ARGV[2..n+1] their
# expiries. With one more name (KEYS[n+1]) its value is returned after the counts; a name with
# no value is given ARGV[n+2] first.
_INCREMENT_ALL = """
local windows = tonumber(ARGV[1])
local counts = {}
for i = 1, windows do
  counts[i] = redis.call('INCR', KEYS[i])
  if counts[i] == 1 then redis.call('EXPIRE', KEYS[i], ARGV[i + 1]) end
end
local name = KEYS[windows + 1]
if name then
  local value = redis.call('GET', name)
  if not value then
    value = ARGV[windows + 2]
    redis.call('SET', name, value)
  end
  counts[windows + 1] = value
end
return counts
"""


@dataclass(frozen=True)
class Window:
    count: int
    reset_seconds: int


def _position(name: str, period: int, now: float) -> tuple[int, int]:
    """(bucket number, seconds until it ends) of ``now`` in ``name``'s window of ``period`` seconds."""
    shifted = int(now) + zlib.crc32(name.encode()) % period
    return shifted // period, period - shifted % period


def seconds_left(name: str, period: int) -> int:
    """Seconds until ``name``'s current window of ``period`` seconds ends."""
    return _position(name, period, clock.now())[1]


class _MemoryCounters:
    def __init__(self):
        self._counts: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def increment(self, slots: list[tuple[str, int, int]], now: float) -> list[int]:
        with self._lock:
            if now > self._next_prune:
                self._prune(now)
            counts = []
            for slot in slots:
                self._counts[slot] = self._counts.get(slot, 0) + 1
                counts.append(self._counts[slot])
            return counts

    def _prune(self, now: float) -> None:
        # A slot is (name, period, bucket): drop the buckets that have ended.
        self._counts = {slot: count for slot, count in self._counts.items()
                        if slot[2] >= _position(slot[0], slot[1], now)[0]}
        self._next_prune = now + 10

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


_memory = _MemoryCounters()


@dataclass(frozen=True)
class Counted:
    windows: list[Window]
    value: str | None  # the value of ``read``: None without a shared cache or without ``read``
    also: list  # the answers of the ``also`` ops (utils_app.shared)


def count_and_read(name: str, periods: tuple[int, ...], read: str | None = None, default: str = "",
                   also: Sequence[shared.Op] = ()) -> Counted | None:
    """Count one event in each window of ``name`` and, in the same round trip, read the shared
    cache's value of ``read`` (set to ``default`` when it has none) and run the ``also`` ops.
    None when the shared cache cannot be reached."""
    now = clock.now()
    positions = [_position(name, period, now) for period in periods]
    value = None
    if not settings.SHARED_CACHE:
        counts = _memory.increment([(name, period, bucket) for period, (bucket, _) in zip(periods, positions)], now)
        answers = shared.memory.run(list(also))
    else:
        backend = shared.shared_cache()
        make_key = backend.make_key
        keys = [make_key(f"w:{name}:{period}:{bucket}") for period, (bucket, _) in zip(periods, positions)]
        args: list[int | str] = [len(periods), *(left + 1 for _, left in positions)]
        if read is not None:
            keys.append(make_key(read))
            args.append(default)
        also = list(also)
        try:
            counts, replies = backend.run_script(_INCREMENT_ALL, keys=keys, args=args,
                                                      commands=shared.commands(also, make_key))
        except Exception as exc:  # a cache outage must never refuse service: limits fail open
            shared.warn_unreachable(exc)
            return None
        answers = shared.answers(also, replies)
        if read is not None:
            value = counts[-1].decode() if isinstance(counts[-1], bytes) else counts[-1]
            counts = counts[:-1]
    return Counted([Window(count=int(n), reset_seconds=left) for n, (_, left) in zip(counts, positions)], value,
                   answers)


@state.on_reset
def reset() -> None:
    """Forget the in-process counters (tests)."""
    _memory.clear()
    shared.reset()
