"""Heavy pure-Python work kept off a gevent worker's event loop.

Under a gevent worker all the requests of a process share one thread, and its greenlets take
turns only when one of them waits. So heavy work (the local models' pictures and speech, a long
text's tokens) runs there in a pool of native threads: the request's greenlet waits for the
result as for any I/O, and the others run meanwhile. zlib and hashlib let go of the GIL while
they work; the pure-Python parts hold it, but the interpreter hands it over every few
milliseconds (sys.getswitchinterval), so the event loop still gets its turns. Two threads: the
work is bounded by the cores, not by the threads. A thread worker, a command or a test runs
everything in place.
"""
from collections.abc import Callable
from typing import Any, TypeVar

from gevent import monkey

T = TypeVar("T")

POOL_THREADS = 2
# A hand-off to a thread costs some 20 µs, so small pieces of work are done in place. Each piece
# comes with a rough estimate of its cost in microseconds (measured on one core); once the pieces
# done in place since the last hand-off add up to this, the next one is handed off too, which
# gives the other greenlets their turn: 2048 small embedding inputs cannot stall them either.
IN_PLACE_MICROSECONDS = 5_000


class OffTheEventLoop:
    def __init__(self) -> None:
        self._pool: Any = None
        self._in_place = 0  # estimated microseconds done in place since the last hand-off

    def run(self, work: Callable[..., T], cost: int, *args: Any, **kwargs: Any) -> T:
        if not monkey.is_module_patched("threading"):  # a thread worker, a command, a test: in place
            return work(*args, **kwargs)
        self._in_place += cost
        if self._in_place < IN_PLACE_MICROSECONDS:
            return work(*args, **kwargs)
        self._in_place = 0
        if self._pool is None:
            from gevent.threadpool import ThreadPool

            self._pool = ThreadPool(POOL_THREADS)
        return self._pool.apply(work, args, kwargs)


# One for the process: whatever the pieces are (tokens, pictures, vectors), those done in place add up.
shared = OffTheEventLoop()


def run(work: Callable[..., T], cost: int, *args: Any, **kwargs: Any) -> T:
    """``work(*args, **kwargs)``, in a thread of the pool under gevent when it is heavy (``cost``: its rough
    cost in microseconds), in place otherwise."""
    return shared.run(work, cost, *args, **kwargs)
