"""Many callers' work done by one call, the way a database groups commits: one statement per group.

Each caller hands its item to ``Coalescer.run`` and blocks until its own result is there. While no
group is running, a caller runs a group of one (its own item) at once: nothing waits, and a lone
request pays no latency. While a group runs, the items that arrive queue; when it ends, the first
of them leads the next group, which takes everything queued that fits (up to ``max_size``, one
item per ``group_key``), and any item left over waits for the group after. So groups grow with
the load by themselves: a caller waits at most for the group running when it arrived, and one
call serves the whole next group.

Whatever the group's work raises, every caller of the group raises. The lead is always handed to
a queued caller under the lock, before the leader returns, and a caller that stops waiting
(a killed greenlet) passes on a lead it was given: no item is ever left queued without a leader.

Threads or greenlets: the lock and the events are threading's, which gevent's monkey-patching makes
cooperative in a gevent worker. They are made at the first ``run`` of each process, after the
worker has patched them and after any fork.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupInterrupted(RuntimeError):
    """The caller that ran the group was interrupted (its greenlet killed) before the group's work ended:
    whether the work took effect is not known."""


class _Waiting(Generic[T]):
    __slots__ = ("item", "result", "error", "lead", "woken")

    def __init__(self, item: T):
        self.item = item
        self.result = None
        self.error: BaseException | None = None
        self.lead = False  # set under the lock when this caller is to run the next group
        self.woken = threading.Event()


class Coalescer(Generic[T, R]):
    """Runs ``work(items) -> results`` (one result per item, in order) for the items of concurrent callers.

    ``group_key(item)``, when given, names what two items of one group must not share (a row each
    of them updates, say): an item whose key is already in the group waits for a later group.
    """

    def __init__(self, work: Callable[[Sequence[T]], Sequence[R]], *, max_size: int,
                 group_key: Callable[[T], Hashable] | None = None):
        if max_size < 1:
            raise ValueError("max_size must be at least 1")
        self.work = work
        self.max_size = max_size
        self.group_key = group_key
        self._pid = None
        self._lock = None
        self._queue: list[_Waiting[T]] = []
        self._running = False

    def run(self, item: T) -> R:
        """``item``'s result, computed in a group with whatever else is queued; raises what the group raised."""
        if self._pid != os.getpid():  # the first run in this process: its own lock and an empty queue
            self._lock, self._queue, self._running, self._pid = threading.Lock(), [], False, os.getpid()
        me = _Waiting(item)
        with self._lock:
            self._queue.append(me)
            lead = not self._running
            self._running = True
        if not lead:
            try:
                me.woken.wait()
            except BaseException:
                self._leave(me)
                raise
            if not me.lead:
                return self._outcome(me)
        # The leader is the first queued item (a group starts only when the queue was empty, and a lead
        # goes to the first queued), so the group it takes holds its own item.
        self._run_group()
        return self._outcome(me)

    def _run_group(self) -> None:
        group = self._take()
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

    def _take(self) -> list[_Waiting[T]]:
        with self._lock:
            if self.group_key is None:
                group, self._queue = self._queue[:self.max_size], self._queue[self.max_size:]
                return group
            group, left, seen = [], [], set()
            for waiting in self._queue:
                key = self.group_key(waiting.item)
                if len(group) < self.max_size and key not in seen:
                    seen.add(key)
                    group.append(waiting)
                else:
                    left.append(waiting)
            self._queue = left
            return group

    def _hand_over(self) -> None:
        """Wake the first queued caller to lead the next group, or note that no group runs."""
        with self._lock:
            successor = self._queue[0] if self._queue else None
            if successor is None:
                self._running = False
            else:
                successor.lead = True
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
            successor = self._queue[0] if self._queue else None
            if successor is None:
                self._running = False
            else:
                successor.lead = True
        if successor is not None:
            successor.woken.set()

    @staticmethod
    def _outcome(me: _Waiting[T]) -> R:
        if me.error is not None:
            raise me.error
        return me.result
