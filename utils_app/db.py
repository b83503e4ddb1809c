"""Database plumbing: SQLite's one writer at a time, and PostgreSQL's pool: telling dead pooled
connections, opening it, and saying in words why the database could not be had.

One writer at a time on SQLite, queued in the process instead of in SQLite's busy handler.

SQLite lets one connection write at a time. A connection that finds the write lock
taken waits in SQLite's busy handler, which sleeps and retries with growing pauses
(1, 2, 5 … 100 ms) rather than waking when the lock is free. With the embedded
default's 32 threads, each with its own connection, 16 concurrent metered requests
made about one write in five wait over 10 ms and some up to a second, although each
write holds the lock for a fraction of a millisecond. The request path's writes
(the charge, a refund, the usage row) therefore take this lock first: threads of
the process queue on it and the next one runs as soon as the lock is free. Writers
in other processes (management commands) still meet SQLite's busy handler, and so
does everything on PostgreSQL, where rows, not the database, are locked.
"""
import re
import threading
import time
from contextlib import contextmanager
from typing import NamedTuple

from gevent.monkey import get_original

# As long as SQLite's own busy timeout (utils_app.env); past it the write goes ahead and
# SQLite decides, as it did without this lock.
WAIT_SECONDS = 20

_sqlite_write = threading.Lock()


@contextmanager
def one_writer_at_a_time(connection):
    """Around one autocommit write statement: on SQLite, wait for this process's other writers."""
    # Inside a transaction the connection may already hold SQLite's write lock (BEGIN
    # IMMEDIATE): waiting here for a thread that waits on that lock would deadlock.
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    acquired = _sqlite_write.acquire(timeout=WAIT_SECONDS)
    try:
        yield
    finally:
        if acquired:
            _sqlite_write.release()


# select's poll as the kernel has it: a gevent worker patches the select module, whose poll then registers
# watchers with gevent's hub and starts a timeout even for a check that must not wait at all.
_poll, _POLLIN = get_original("select", "poll"), get_original("select", "POLLIN")


def readable_now(fileno: int) -> bool:
    """Whether a socket has something to read (data, end of file or an error) right now, asked of the kernel
    in one system call; never waits, needs no cooperation from gevent's hub. Two checks of the request
    path use it: whether a pooled PostgreSQL connection was ended by the server while idle
    (``ended_by_server``), and whether an upstream closed a kept-alive connection
    (utils_app.speed.upstream_pool)."""
    poller = _poll()
    poller.register(fileno, _POLLIN)
    return bool(poller.poll(0))


def ended_by_server(conn) -> bool:
    """Whether an idle PostgreSQL connection was ended by the server (a restart, a terminated backend).

    The server announces the end of a connection (an error message, then end of file), so
    a dead idle connection has bytes waiting on its socket while a healthy one has none: a
    zero-timeout poll tells them apart with no round trip to the server. poll, not select:
    a busy worker's sockets have numbers past select's limit of 1024; and the unpatched one,
    since gevent's monkey-patching removes poll from the select module.
    """
    if conn.closed:
        return True
    return readable_now(conn.fileno())


def release_connection(connection) -> None:
    """Give a PostgreSQL connection back to its pool between a request's statements.

    A request needs the database for a statement or two at a time, and waits in between
    (on Redis, on the upstream, for the CPU among thousands of greenlets): holding a
    pooled connection meanwhile would let a burst of requests starve every other one.
    Inside a transaction (tests) nothing is released. SQLite keeps its connection: it has
    no server connections to spare.
    """
    if connection.connection is None:  # none held: nothing to give back (Django's close would do nothing)
        return
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        connection.close()


def open_whole_pool(connection, *, wait_seconds: float) -> str | None:
    """Open every connection of this process's PostgreSQL pool now, and keep them open.

    For a served worker, before its first request. A pool that starts with one connection
    grows one connection at a time, on demand, from its own background workers: under a
    burst those wait for the CPU with everything else, and requests past
    DATABASE_POOL_TIMEOUT are shed with 503 while the pool is still small
    (docs/performance.md). A fixed-size pool has nothing to grow.

    Waits until all are open, at most ``wait_seconds``, and no longer once the server has
    refused one (it is full, down or refusing: the worker had better start and answer 503s
    that say why). Returns None when all opened, else what is missing and why. The pool is
    never closed here (psycopg's own ``wait()`` closes it when it times out, for good): the
    missing connections keep opening in the background, and once an attempt has given up
    (DATABASE_RECONNECT_SECONDS) the next request that finds none ready starts another.
    """
    if connection.vendor != "postgresql":
        return None
    pool = connection.pool
    if pool is None:
        return None
    began = time.monotonic()
    pool.open()  # Django opens its pool at the first connection; opening twice is a no-op
    pool.resize(min_size=pool.max_size)
    while True:
        opened = pool.get_stats().get("pool_available", 0)
        if opened >= pool.max_size:
            return None
        refused = last_connect_failure()
        if refused is not None and refused.at >= began:
            return f"{opened} of {pool.max_size} connections open: {refused.cause}"
        if time.monotonic() - began >= wait_seconds:
            return f"{opened} of {pool.max_size} connections open after {wait_seconds:g} s"
        time.sleep(0.05)


# What PostgreSQL, libpq and psycopg's pool say when the database cannot be had, and the words
# an operator reads in the log instead (lower case; the first match wins).
_CAUSES = (
    ("too many clients", "too many clients (the server's max_connections is reached)"),
    ("remaining connection slots are reserved", "too many clients (only the server's reserved connections are left)"),
    ("connection refused", "connection refused (no server listening)"),
    ("the database system is starting up", "the server is starting up"),
    ("the database system is shutting down", "the server is shutting down"),
    ("the database system is in recovery mode", "the server is recovering from a crash"),
    ("terminating connection due to administrator command", "connection ended by the server (a restart or a "
                                                             "terminated backend)"),
    ("server closed the connection unexpectedly", "connection closed by the server"),
    ("consuming input failed", "connection closed by the server"),
    ("connection is closed", "connection already closed"),
    ("connection pointer is null", "connection already closed"),  # libpq, asked about a closed one
    ("connection already closed", "connection already closed"),
    ("timeout expired", "connection attempt timed out"),
    ("password authentication failed", "password authentication failed"),
    ("no pg_hba.conf entry", "refused by the server's pg_hba.conf"),
    ("could not translate host name", "host name not found"),
    ("no route to host", "no route to host"),
)
_LIBPQ_PREFIX = re.compile(r"^(?:connection failed: )?(?:connection to server .*? failed: )?(?:FATAL:\s*)?")
_POOL_SECONDS = re.compile(r"after ([0-9.]+) sec")


def failure_cause(error) -> str:
    """Why the database could not be had, in a few words: from an exception (Django's, wrapping
    the driver's own) or from libpq's message text."""
    if isinstance(error, BaseException):
        original = error.__cause__ if isinstance(error.__cause__, Exception) else error
        kind = type(original).__name__
        text = str(original)
        if kind == "PoolTimeout":
            seconds = _POOL_SECONDS.search(text)
            return f"pool timeout after {float(seconds[1]):g} s" if seconds else "pool timeout"
        if kind == "PoolClosed":
            return "pool closed"
    else:
        kind, text = "", str(error)
    lowered = text.lower()
    for needle, words in _CAUSES:
        if needle in lowered:
            return words
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return _LIBPQ_PREFIX.sub("", first_line) or kind or "unknown"


class ConnectFailure(NamedTuple):
    cause: str
    at: float  # time.monotonic()


_last_connect_failure: ConnectFailure | None = None


def note_connect(error: BaseException | None) -> None:
    """Record how this process's latest attempt to open a PostgreSQL connection went."""
    global _last_connect_failure
    _last_connect_failure = None if error is None else ConnectFailure(failure_cause(error), time.monotonic())


def last_connect_failure() -> ConnectFailure | None:
    """Why this process's latest attempt to open a PostgreSQL connection failed; None if it succeeded."""
    return _last_connect_failure


def unavailable_cause(error: BaseException) -> str:
    """What the 503 of a request the database refused logs: the cause, and for a pool that ran out
    of time whether its connections were busy or could not be opened."""
    cause = failure_cause(error)
    if not cause.startswith("pool timeout"):
        return cause
    refused = last_connect_failure()
    if refused is None:
        return f"{cause} (every pooled connection busy)"
    return (f"{cause} (the pool cannot open connections: {refused.cause}, "
            f"{time.monotonic() - refused.at:.1f} s ago)")
