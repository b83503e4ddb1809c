"""Database plumbing: SQLite's one writer at a time, and telling dead pooled PostgreSQL connections.

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
import threading
from contextlib import contextmanager

from gevent.monkey import get_original

_poll, _POLLIN = get_original("select", ["poll", "POLLIN"])

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
    poller = _poll()
    poller.register(conn.fileno(), _POLLIN)
    return bool(poller.poll(0))


def release_connection(connection) -> None:
    """Give a PostgreSQL connection back to its pool between a request's statements.

    A request needs the database for a statement or two at a time, and waits in between
    (on Redis, on the upstream, for the CPU among thousands of greenlets): holding a
    pooled connection meanwhile would let a burst of requests starve every other one.
    Inside a transaction (tests) nothing is released. SQLite keeps its connection: it has
    no server connections to spare.
    """
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        connection.close()


def open_whole_pool(connection, *, wait_seconds: float) -> bool:
    """Open every connection of this process's PostgreSQL pool now and keep them open.

    For a served worker, before its first request. A pool that starts with one connection
    grows one connection at a time, on demand, from its own background workers: under a
    burst those wait for the CPU with everything else, and requests past
    DATABASE_POOL_TIMEOUT are shed with 503 while the pool is still small
    (docs/performance.md). A fixed-size pool has nothing to grow. Returns whether all
    opened within ``wait_seconds``; the rest keep opening in the background (a database
    still down at start-up is retried there, and the health check reports it meanwhile).
    """
    if connection.vendor != "postgresql":
        return True
    pool = connection.pool
    if pool is None:
        return True
    from psycopg_pool import PoolClosed, PoolTimeout  # here: the embedded default never needs psycopg

    pool.open()  # Django opens its pool at the first connection; opening twice is a no-op
    pool.resize(min_size=pool.max_size)
    try:
        pool.wait(timeout=wait_seconds)
    except (PoolTimeout, PoolClosed):
        return False
    return True
