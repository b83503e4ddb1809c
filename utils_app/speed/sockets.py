"""Whether a socket has something to read, asked of the kernel at the cost of one system call.

A gevent worker patches the select module: its ``poll`` becomes an object that registers watchers
with gevent's hub, starts a timeout and collects results, even for a check that must not wait at
all. Two checks of the request path never wait: whether a pooled PostgreSQL connection was ended
by the server while idle (utils_app.db.ended_by_server, at each checkout), and whether an upstream
closed a kept-alive connection (utils_app.speed.upstream_pool, at each checkout). ``readable_now``
asks the kernel directly, with the original poll and a zero timeout, so it needs no cooperation from
the hub. Not a switch of its own: it is the check itself, not a faster way of one the libraries make.
"""
from gevent.monkey import get_original

_poll, _POLLIN = get_original("select", "poll"), get_original("select", "POLLIN")


def readable_now(fileno: int) -> bool:
    """Whether the socket has something to read (data, end of file or an error) right now; never waits."""
    poller = _poll()
    poller.register(fileno, _POLLIN)
    return bool(poller.poll(0))
