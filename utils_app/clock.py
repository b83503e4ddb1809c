"""The product's clock: the time read by everything a test must be able to move.

Fixed windows (utils_app.windows), routing's cooldowns and minute buckets (gateway.routing), the
ages of the process's caches (keys.auth_cache, models_catalog.catalog, utils_app.limits) and the
dates of usage and statistics read the time here, always as ``clock.now()``, ``clock.monotonic()``
or ``clock.utcnow()`` through the module, never as a name imported from it. In service ``now`` and
``monotonic`` *are* time.time and time.monotonic: a read costs what it did before.

A test stops the clock (``stop``, the ``clock`` fixture of tests/conftest.py) and moves it by hand,
so nothing waits for a minute, a cooldown or a day to turn; ``start`` gives the real clocks back.
Durations that are measured rather than compared with a window or an age (time.perf_counter) stay
on the real clocks.
"""
import time
from collections.abc import Callable
from datetime import date, datetime, timezone

from utils_app import state

now: Callable[[], float] = time.time  # seconds since the epoch
monotonic: Callable[[], float] = time.monotonic  # seconds, for ages within this process only


def utcnow() -> datetime:
    """The aware UTC datetime of ``now()``."""
    return datetime.fromtimestamp(now(), timezone.utc)


def today() -> date:
    """The UTC date of ``now()``."""
    return utcnow().date()


class Stopped:
    """A clock that moves only when told to; its monotonic reading moves with its epoch."""

    def __init__(self, at: float | None = None):
        self._epoch = time.time() if at is None else float(at)
        self._start = self._epoch
        self._monotonic_start = time.monotonic()

    def now(self) -> float:
        return self._epoch

    def monotonic(self) -> float:
        return self._monotonic_start + (self._epoch - self._start)

    def set(self, epoch: float) -> None:
        """Move to ``epoch`` (seconds since the epoch), forward or back."""
        self._epoch = float(epoch)

    def advance(self, seconds: float) -> None:
        self._epoch += seconds


def stop(at: float | None = None) -> Stopped:
    """Stop the clock at ``at`` (default: the real time now) until ``start``; for tests."""
    global now, monotonic
    stopped = Stopped(at)
    now, monotonic = stopped.now, stopped.monotonic
    return stopped


@state.on_reset
def start() -> None:
    """The real clocks again."""
    global now, monotonic
    now, monotonic = time.time, time.monotonic
