"""psycopg's waits for the server under gevent, on the hub with one watcher (switch: SPEED_GEVENT_WAITS).

psycopg waits for each statement's answer in a poll loop. A gevent worker patches the select module,
so each of those polls registers watchers with gevent's hub, starts a timeout and collects results,
then closes them again. ``wait_gevent`` instead runs psycopg's I/O generator by waiting on the hub
for the socket with a single watcher per kind of wait, kept with the connection and used again at
its next statement: the least gevent needs to let other greenlets run meanwhile.

The plain twin, with the switch off, is psycopg's own wait (``psycopg.Connection.wait``); a wait with
a deadline or an interval of its own keeps psycopg's either way. The same results either way
(tests/utils_app/test_speed_sockets.py); bench/request_cpu.py measures one against the other served
(``--source .,SPEED_GEVENT_WAITS=0``).
"""
from django.conf import settings
from gevent.monkey import is_module_patched

# psycopg's waits (psycopg.waiting.Wait: R = 1, W = 2, RW = 3) are libev's and libuv's event bits.
_READ, _WRITE = 1, 2


def applies(args: tuple, kwargs: dict) -> bool:
    """Whether a connection's wait, called with these arguments, goes through ``wait_gevent``: the switch
    on, a gevent worker (the select module patched), and no deadline or interval of the caller's own."""
    return settings.SPEED_GEVENT_WAITS and not args and kwargs.get("timeout") is None and is_module_patched("select")


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
