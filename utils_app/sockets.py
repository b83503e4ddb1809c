"""Socket readiness for the request path's connections, at the cost of one system call under gevent.

A gevent worker patches the select module: its ``poll`` and ``select`` become objects that
register watchers with gevent's hub, start a timeout and collect results, even for a check that
must not wait at all. psycopg (waiting for each statement's answer), urllib3 (checking, at each
checkout, that a kept-alive upstream connection was not closed) and this project's pool check
all poll sockets that way: some 0.1 ms of CPU per statement or call under load, against a few
microseconds for the system call itself (docs/performance.md). Here:

- ``readable_now`` asks the kernel directly, with the original poll and a zero timeout: it
  never waits, so it needs no cooperation from the hub;
- ``wait_gevent`` runs one of psycopg's I/O generators by waiting on the hub for the socket
  with a single watcher, the least gevent needs to let other greenlets run meanwhile.
"""
from gevent.monkey import get_original, is_module_patched

_poll, _POLLIN = get_original("select", "poll"), get_original("select", "POLLIN")

# psycopg's waits (psycopg.waiting.Wait: R = 1, W = 2, RW = 3) are libev's and libuv's event bits.
_READ, _WRITE = 1, 2


def readable_now(fileno: int) -> bool:
    """Whether the socket has something to read (data, end of file or an error) right now; never waits."""
    poller = _poll()
    poller.register(fileno, _POLLIN)
    return bool(poller.poll(0))


def gevent_patched() -> bool:
    """Whether this process runs under gevent's monkey-patching (a gevent worker)."""
    return is_module_patched("select")


def wait_gevent(gen, fileno: int, watchers: dict | None = None):
    """Run a psycopg I/O generator to its end, waiting for its socket on gevent's hub.

    The generator yields what it waits for (read, write or both) and is sent what is ready.
    It is sent what it waited for once the watcher fires: for a wait on both, one of the two
    may not be ready yet, which psycopg's generators allow (their reads and writes do not block
    and retry). A greenlet killed meanwhile leaves the statement unfinished: its connection is
    not in a state to reuse, which the pool sees when it is given back, and closes it.

    ``watchers``, kept by the caller with its socket (one connection's), holds the watchers of
    earlier waits on ``fileno`` by what they waited for, to be used again instead of each wait
    building and closing its own on the hub's loop.
    """
    from gevent import get_hub

    hub = get_hub()
    try:
        waiting = next(gen)
        while True:
            events = waiting & (_READ | _WRITE)
            watcher = watchers.get(events) if watchers is not None else None
            if watcher is None or watcher.loop is not hub.loop:  # another thread's hub made that one
                watcher = hub.loop.io(fileno, events)
                if watchers is not None:
                    watchers[events] = watcher
            try:
                hub.wait(watcher)  # started for this wait, stopped after it, however it ends
            finally:
                if watchers is None:
                    watcher.close()
            waiting = gen.send(waiting)
    except StopIteration as done:
        return done.value
