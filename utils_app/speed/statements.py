"""The metered request's statements alone on pooled connections (switch: SPEED_STATEMENTS_ALONE).

A metered request runs a statement or two (its charge and its settlement, or its share of a
group's: gateway.metering), each needing a pooled connection for that statement only. Through
Django, each costs a database wrapper for the request's context (a gevent worker's greenlet: its
features, operations and introspection objects), then a checkout with its set-up (autocommit set
again, the connection's signals and checks), a cursor wrapper, and a close that gives the
connection back. Here:

- ``statements_wrapper``: one wrapper per process serves the statements of every context that has
  none of its own (it never holds a connection, a transaction or an execute wrapper, so all may use
  it at once); a context with its own wrapper keeps it (it may hold a connection, be in a
  transaction, and its query log is the one tests read). It reads Django's private store of
  wrappers (``context_wrapper``);
- ``run_alone``: the statement on a connection taken straight from the wrapper's pool and given
  back at once, sent through libpq (utils_app.speed.libpq, its own switch) or psycopg's cursor.

The plain twin, with the switch off, is Django's own: the context's wrapper (``connections[alias]``)
and its cursor, closed after the statement (utils_app.postgresql.base.DatabaseWrapper.run_alone).
The same statements and answers either way (tests/utils_app/test_speed.py); bench/pieces_cpu.py
measures one against the other.
"""
import time

import psycopg
from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, connections
from django.dispatch import receiver

# The backend imports this module: the module, not its names, so either may be imported first.
from utils_app.postgresql import base as backend
from utils_app.speed import libpq


def enabled() -> bool:
    """Whether statements run alone on the pool (SPEED_STATEMENTS_ALONE), else through Django's wrapper."""
    return settings.SPEED_STATEMENTS_ALONE


def context_wrapper(alias: str = DEFAULT_DB_ALIAS):
    """The database wrapper this context (thread, greenlet) has made for ``alias``, or None when it has made none.

    One lookup in Django's context-local store of wrappers, which is what ``connections.all(initialized_only=True)``
    does for every alias, twice for each one it finds, and building a list besides; a metered request asks
    this two or three times."""
    # Django's private store (BaseConnectionHandler._connections), which the stubs leave out.
    return getattr(connections._connections, alias, None)  # type: ignore[attr-defined]


_statement_wrappers: dict = {}  # alias -> this process's wrapper for statements alone, or None where there is none


def statements_wrapper(alias: str = DEFAULT_DB_ALIAS):
    """The database wrapper a request's single statements go through: the context's own when it has one,
    else, on pooled PostgreSQL with the switch on, one wrapper of the process that only ever runs
    statements alone. Otherwise the context's wrapper, made now if need be (``connections[alias]``)."""
    own = context_wrapper(alias)
    if own is not None:
        return own
    if not enabled():
        return connections[alias]
    try:
        shared = _statement_wrappers[alias]
    except KeyError:
        shared = connections.create_connection(alias)
        # PostgreSQL's wrapper has a pool (None when not configured); the stubs know only the base wrapper.
        if shared.vendor != "postgresql" or getattr(shared, "pool", None) is None or not hasattr(shared, "run_alone"):
            shared = None
        _statement_wrappers[alias] = shared
    return connections[alias] if shared is None else shared


@receiver(setting_changed)
def _databases_changed(*, setting: str, **kwargs) -> None:
    if setting == "DATABASES":
        _statement_wrappers.clear()


def run_alone(wrapper, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int]:
    """``wrapper.run_alone`` straight on its pool: a live connection taken for the statement (the wait for
    one the request's), the statement through psycopg's own cursor, the connection given back at
    once. Errors are Django's (the 503 and the settlement's retry read them); the query log records
    the statement when Django would (tests count statements by it). A connection whose statement
    did not finish (a killed greenlet) goes back mid-statement: the pool closes it."""
    pool = wrapper.pool
    started = time.monotonic()
    with wrapper.wrap_database_errors:
        if pool.closed:  # nothing else opened it yet (Django opens it at its first connection)
            pool.open()
        conn = wrapper._live_pooled(pool.getconn)
        try:
            if not conn.autocommit:
                conn.autocommit = True
            answer = libpq.run(conn, sql, params, every_row=every_row) if libpq.enabled() else None
            if answer is None:  # the switch off, or a parameter only psycopg knows how to send
                cursor = psycopg.Cursor(conn)  # binds on the server, whatever the connection's cursor_factory
                backend.execute_prepared(conn, cursor.execute, sql, params)
                if cursor.description is None:
                    answer = ([] if every_row else None), cursor.rowcount
                else:
                    answer = (cursor.fetchall() if every_row else cursor.fetchone()), cursor.rowcount
            row, count = answer
        finally:
            pool.putconn(conn)
    if wrapper.queries_logged:
        wrapper.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return row, count
