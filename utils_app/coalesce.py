"""Many callers' work done by one call, the way a database groups commits: one call per group.

Each caller hands its item to ``Coalescer.run`` and blocks until its own result is there. While no
group is running, a caller runs a group of one (its own item) at once: nothing waits, and a lone
request pays no latency. While a group runs, the items that arrive queue; when it ends, the first
of them leads the next group, which takes everything queued that fits (up to ``max_size``, no two
items whose locks conflict), and any item left over waits for the group after. So groups grow with
the load by themselves: a caller waits at most for the group running when it arrived, and one
call serves the whole next group.

Under load, a caller that finds no group running yields once before it takes its group
(``gather``): the other greenlets or threads ready to run go first, and those that reach ``run``
meanwhile join its group instead of waiting for the next. It does so only when the group before
it had company; a lone request at a quiet moment never waits.

Whatever the group's work raises, every caller of the group raises. The lead is always handed to
a queued caller under the lock, before the leader returns, and a caller that stops waiting
(a killed greenlet) passes on a lead it was given: no item is ever left queued without a leader.

Threads or greenlets: a caller waits on a threading event, which gevent's monkey-patching makes
cooperative in a gevent worker. The queue's lock is the operating system's own, also under gevent:
nothing ever waits or switches while holding it, so gevent's lock (Python code) would only cost
more. The lock is made at the first ``run`` of each process, after any fork.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from gevent.monkey import get_original

if TYPE_CHECKING:
    from _thread import LockType

# The unpatched lock: gevent's monkey-patching leaves the original here.
_system_lock = get_original("_thread", "allocate_lock")

T = TypeVar("T")
R = TypeVar("R")


class GroupInterrupted(RuntimeError):
    """The caller that ran the group was interrupted (its greenlet killed) before the group's work ended:
    whether the work took effect is not known."""


class _Waiting(Generic[T]):
    __slots__ = ("item", "result", "error", "lead", "woken")

    def __init__(self, item: T):
        self.item = item
        self.result: Any = None  # what the group's work gave for this item
        self.error: BaseException | None = None
        self.lead = False  # set under the lock when this caller is to run the next group
        # Only a caller that waits needs one (set under the lock); a leader never touches it.
        self.woken = cast("threading.Event", None)


class Coalescer(Generic[T, R]):
    """Runs ``work(items) -> results`` (one result per item, in order) for the items of concurrent callers.

    ``lock_of(item)``, when given, says what an item needs of the group, as a lock would: (a name,
    whether it needs it to itself). Two items of one group may share a name only when neither needs
    it to itself; an item that conflicts with the group waits for a later one.
    """

    def __init__(self, work: Callable[[Sequence[T]], Sequence[R]], *, max_size: int,
                 lock_of: Callable[[T], tuple[Hashable, bool]] | None = None,
                 gather: Callable[[], None] | None = None):
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.work = work
        self.max_size = max_size
        self.lock_of = lock_of
        self.gather = gather
        self._company = False  # whether the last group found others queued with its leader
        self._pid: int | None = None
        self._lock = cast("LockType", None)  # made by the first run in each process
        self._queue: list[_Waiting[T]] = []
        self._led = False  # whether a caller holds the lead (a group running, or the lead handed on)

    def run(self, item: T) -> R:
        """``item``'s result, computed in a group with whatever else is queued; raises what the group raised."""
        if self._pid != os.getpid():  # the first run in this process: its own lock and an empty queue
            self._lock, self._queue, self._led, self._pid = _system_lock(), [], False, os.getpid()
        me = _Waiting(item)
        with self._lock:
            self._queue.append(me)
            if self._led:
                me.woken = threading.Event()
            else:
                self._led = me.lead = True
        if not me.lead:
            try:
                me.woken.wait()
            except BaseException:
                self._leave(me)
                raise
            if not me.lead:
                return self._outcome(me)
        elif self.gather is not None and self._company:
            try:
                self.gather()
            except BaseException:
                self._leave(me)
                raise
        self._run_group(me)
        return self._outcome(me)

    def _run_group(self, me: _Waiting[T]) -> None:
        group = self._take(me)
        ended = False
        try:
            results = self.work([waiting.item for waiting in group])
            if len(results) != len(group):
                raise RuntimeError(f"a group of {len(group)} got {len(results)} results")
            for waiting, result in zip(group, results):
                waiting.result = result
            ended = True
        except Exception as exc:
            for waiting in group:
                waiting.error = exc
            ended = True
        finally:
            if not ended:  # the leader itself is being killed: the others cannot know what happened
                interrupted = GroupInterrupted("the statement of this request's group was interrupted")
                for waiting in group[1:]:
                    waiting.error = interrupted
            for waiting in group[1:]:
                waiting.woken.set()
            self._hand_over()

    def _take(self, me: _Waiting[T]) -> list[_Waiting[T]]:
        """The leader's group: its own item first, then every queued one that fits, in the order they came."""
        with self._lock:
            self._company = len(self._queue) > 1
            self._queue.remove(me)
            group, left, held = [me], [], {}  # each name held by the group: whether to itself
            if self.lock_of is not None:
                name, alone = self.lock_of(me.item)
                held[name] = alone
            for waiting in self._queue:
                fits = len(group) < self.max_size
                if fits and self.lock_of is not None:
                    name, alone = self.lock_of(waiting.item)
                    fits = name not in held or not (alone or held[name])
                    if fits:
                        held[name] = alone
                if fits:
                    group.append(waiting)
                else:
                    left.append(waiting)
            self._queue = left
            return group

    def _next_lead(self) -> _Waiting[T] | None:
        """Under the lock: hand the lead on to the first queued caller, or give it up."""
        successor = self._queue[0] if self._queue else None
        if successor is None:
            self._led = False
        else:
            successor.lead = True
        return successor

    def _hand_over(self) -> None:
        """A group ended: wake the first queued caller to lead the next one, or note that none runs."""
        with self._lock:
            successor = self._next_lead()
        if successor is not None:
            successor.woken.set()

    def _leave(self, me: _Waiting[T]) -> None:
        """A queued caller stops waiting: out of the queue, and a lead it was given goes to the next."""
        with self._lock:
            if me in self._queue:
                self._queue.remove(me)
            if not me.lead:
                return
            me.lead = False
            successor = self._next_lead()
        if successor is not None:
            successor.woken.set()

    @staticmethod
    def _outcome(me: _Waiting[T]) -> R:
        if me.error is not None:
            raise me.error
        return me.result
