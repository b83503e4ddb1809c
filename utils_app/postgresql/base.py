"""Django's PostgreSQL backend, with three changes for the metered request path.

A pooled connection the server has ended is never used. After a database restart every
idle connection in the pool is dead, and the first use of each would fail a request.
Django's CONN_HEALTH_CHECKS would ping the server at every checkout, a round trip per
request on the hot path; here a dead connection is told apart without one
(utils_app.db.ended_by_server), closed, and given back so the pool drops it, and the next
one is taken.

A cursor may send its parameters apart from the statement (``server_bound_cursor``).
Django binds parameters on the client by default: the values are quoted into the
statement's text, which is what every ORM query here still gets. The two statements of
a metered request (gateway.metering) instead travel as text plus parameters, which
costs PostgreSQL about half the CPU per request and psycopg less quoting
(docs/performance.md). Those two are also prepared on their first use on each pooled
connection (``prepare_threshold`` 0, utils_app.env; DATABASE_PREPARED_STATEMENTS=0 for a
pooler that cannot keep them), which takes another third off PostgreSQL's CPU for them;
the ORM's client-side binding never prepares.

A statement may run alone on a pooled connection (``run_alone``): taken from the pool for that
statement and given back at once, without Django's connection wrapper around it. The two
statements of a metered request do, outside a transaction.

The pool says why it cannot connect. Each attempt to open a connection is recorded
(utils_app.db.note_connect), so a request's 503 names the cause even when all it met was
the pool's timeout, and psycopg's pool warnings name theirs in words instead of a libpq
message over several lines or a connection's repr.

Everything else is Django's backend unchanged.
"""
import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from django.db.backends.postgresql import base, operations
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.generators import execute as _execute

from utils_app.db import ended_by_server, failure_cause, last_connect_failure, note_connect
from utils_app.sockets import gevent_patched, wait_gevent

ENDED_BY_SERVER = "ended by the server while idle in the pool (a restart or a terminated backend)"
log = logging.getLogger(__name__)


class Connection(psycopg.Connection):
    """What the pool opens: a psycopg connection that records how each attempt to open one went."""

    closed_because = ""  # set when the gateway closes it for a reason the pool's warning should tell

    def wait(self, gen, *args, **kwargs):
        # Under gevent, each statement's wait on the server is on the hub, through this connection's
        # own watchers, instead of psycopg's poll loop through gevent's patched poll
        # (utils_app.sockets); a wait with a deadline or an interval of its own keeps psycopg's.
        if not args and kwargs.get("timeout") is None and gevent_patched():
            watchers = self.__dict__.get("_watchers")
            if watchers is None:
                watchers = self._watchers = {}  # this connection's socket's, for the life of the connection
            return wait_gevent(gen, self.pgconn.socket, watchers)
        return super().wait(gen, *args, **kwargs)

    @classmethod
    def connect(cls, *args, **kwargs):
        try:
            conn = super().connect(*args, **kwargs)
        except psycopg.Error as exc:
            note_connect(exc)
            raise
        note_connect(None)
        return conn


class PoolWarnings(logging.Filter):
    """psycopg's pool warnings with their cause in words, on one line.

    An exception becomes its cause ("error connecting in 'pool-1': too many clients (...)"), a
    connection what ended it, and a warning with neither ("reconnection attempt ... failed")
    gets the cause of the last failed connect.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not isinstance(record.args, tuple):
            return True
        args = tuple(self._in_words(arg) for arg in record.args)
        if args == record.args and (refused := last_connect_failure()) is not None:
            record.msg = f"{record.msg}: last connect failed: %s"
            args += (refused.cause,)
        record.args = args
        return True

    @staticmethod
    def _in_words(arg):
        if isinstance(arg, BaseException):
            return failure_cause(arg)
        if isinstance(arg, psycopg.Connection):
            if because := getattr(arg, "closed_because", ""):
                return because
            try:
                message = arg.pgconn.error_message.decode(errors="replace").strip()
            except Exception:  # a log line must never fail the pool's task that writes it
                return arg
            if message:
                return failure_cause(message)  # what libpq last said on it: the server ended it, say
        return arg


logging.getLogger("psycopg.pool").addFilter(PoolWarnings())


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        # psycopg keeps no text of a statement it ran by its prepared name: the statement is the text
        # (the query log, and tests counting statements, name it by that).
        return super().last_executed_query(cursor, sql, params) or sql


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
    _binds_on_server = False

    @property
    def pool(self):
        options = self.settings_dict["OPTIONS"].get("pool")
        if isinstance(options, dict) and "connection_class" not in options:
            # Django builds the pool from these options once per process; the class it opens
            # connections with is this backend's, so it is added here rather than in settings.
            options["connection_class"] = Connection
        return super().pool

    def get_new_connection(self, conn_params):
        if self.pool is None:
            return super().get_new_connection(conn_params)
        return self._live_pooled(lambda: super(DatabaseWrapper, self).get_new_connection(conn_params))

    def _live_pooled(self, getconn):
        """A connection from the pool (``getconn`` takes one) that the server has not ended."""
        pool = self.pool
        pool.timeout = self._pool_wait()  # getconn() waits the pool's timeout
        conn = getconn()
        # Bounded: at most every connection the pool can hold is dead, then it opens new ones.
        for _ in range(pool.max_size):
            if not ended_by_server(conn):
                return conn
            conn.closed_because = ENDED_BY_SERVER
            conn.close()
            pool.putconn(conn)  # closed: the pool discards it and opens a replacement
            # The server may be down rather than restarted: wait for the replacement no longer
            # than for a server that refuses.
            pool.timeout = self._pool_wait(server_ended_one=True)
            conn = getconn()
        return conn

    def run_one(self, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int]:
        """Run one statement with its parameters bound on the server; (its first row or None, its row
        count), or with ``every_row`` (the list of its rows, its row count). Alone on a pooled
        connection when it can (``run_alone``), else on this wrapper's connection through
        ``server_bound_cursor`` (a transaction's, a test's)."""
        if self.can_run_alone():
            return self.run_alone(sql, params, every_row=every_row)
        with self.server_bound_cursor() as cursor:
            cursor.execute(sql, params)
            if cursor.description is None:
                return ([] if every_row else None), cursor.rowcount
            return (cursor.fetchall() if every_row else cursor.fetchone()), cursor.rowcount

    def can_run_alone(self) -> bool:
        """Whether ``run_alone`` applies now: a pool, no connection held by this wrapper, no transaction
        and no execute wrapper (a test's) that must see the statement."""
        return (self.connection is None and self.pool is not None and not self.in_atomic_block
                and not self.execute_wrappers)

    def run_alone(self, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int]:
        """Run one statement in autocommit on a pooled connection taken for it alone, and give the
        connection back at once; returns (its first row or None, its row count), or with
        ``every_row`` (the list of its rows, its row count).

        The metered request's two statements (gateway.metering) each need a connection for one
        statement. Through Django's wrapper that is a checkout with its set-up (autocommit set
        again, the connection's signals and checks), a cursor wrapper, then a close that gives it
        back: 0.08 ms of CPU a statement that this path does not spend (docs/performance.md).
        What stays the same: only a live connection is used (``_live_pooled``), the wait for one
        is the request's (``_pool_wait``), the parameters travel apart from the text and the
        statement is prepared as the connection's ``prepare_threshold`` says, errors are Django's
        (the 503 and the settlement's retry read them), and the query log records the statement
        when Django would (tests count statements by it). A connection whose statement did not
        finish (a killed greenlet) goes back mid-statement: the pool closes it.
        """
        pool = self.pool
        started = time.monotonic()
        with self.wrap_database_errors:
            if pool.closed:  # nothing else opened it yet (Django opens it at its first connection)
                pool.open()
            conn = self._live_pooled(pool.getconn)
            try:
                if not conn.autocommit:
                    conn.autocommit = True
                answer = run_on_libpq(conn, sql, params, every_row=every_row)
                if answer is None:  # a parameter only psycopg knows how to send
                    cursor = psycopg.Cursor(conn)  # binds on the server, whatever the connection's cursor_factory
                    cursor.execute(sql, params)
                    if cursor.description is None:
                        answer = ([] if every_row else None), cursor.rowcount
                    else:
                        answer = (cursor.fetchall() if every_row else cursor.fetchone()), cursor.rowcount
                row, count = answer
            finally:
                pool.putconn(conn)
        if self.queries_logged:
            self.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
        return row, count

    def _pool_wait(self, *, server_ended_one: bool = False) -> float:
        """How long a request may wait for a pooled connection before it is answered 503.

        While the server accepts connections, a request that finds every one busy waits its
        turn (POOL_QUEUE_TIMEOUT): in a burst that saturates the CPU, each connection is held
        until its greenlet gets the CPU back after its statement, so a few connections serve
        the burst slowly, and shedding what waits past a few seconds would refuse most of it
        (docs/performance.md). Once the server refuses connections (down, full) waiting long
        only delays the 503: then DATABASE_POOL_TIMEOUT, the pool's own timeout in settings;
        likewise once the server has ended a pooled connection, until a new one opens.
        """
        options = self.settings_dict["OPTIONS"]["pool"]
        refused: float = options.get("timeout", 30.0) if isinstance(options, dict) else 30.0  # psycopg's default
        if server_ended_one or last_connect_failure() is not None:
            return refused
        return self.settings_dict.get("POOL_QUEUE_TIMEOUT", refused)

    def server_bound_cursor(self):
        """Like ``cursor()`` (Django's wrapper: query logging, execute wrappers, error mapping), but its
        statements carry their parameters separately instead of quoted into the text."""
        self._binds_on_server = True
        try:
            return self.cursor()
        finally:
            self._binds_on_server = False

    def create_cursor(self, name=None):
        if name is not None or not self._binds_on_server:
            return super().create_cursor(name)
        # psycopg builds a connection's cursors with its cursor_factory: lend it the server-binding
        # class for this one cursor, so Django's own set-up of the cursor (its time zone) still runs.
        connection = self.connection
        factory, connection.cursor_factory = connection.cursor_factory, base.ServerBindingCursor
        try:
            return super().create_cursor(name)
        finally:
            connection.cursor_factory = factory


# -- one statement straight through libpq (run_alone)

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%")
# What each parameter type is declared as when the statement is prepared, its value sent as text.
# A str is declared unknown, as psycopg declares it, so the server types it from where it stands.
_DECLARED = {int: 20, bool: 16, str: 0, type(None): 0}  # int8, bool, unknown
_TIMESTAMPTZ, _TIMESTAMP = 1184, 1114
_INT8 = range(-2**63, 2**63)
_converted: dict[str, tuple[bytes, tuple[str, ...]]] = {}


def _convert(sql: str) -> tuple[bytes, tuple[str, ...]]:
    """The statement with its ``%(name)s`` placeholders numbered ($1, $2…; a name used twice is one
    parameter, as psycopg numbers them), and the names in that order. Any other ``%`` is refused:
    these statements have none, and guessing what one meant could send the wrong text."""
    names: list[str] = []

    def number(match):
        if match.group(1) is None:
            raise ValueError(f"only %(name)s placeholders are supported here: {sql!r}")
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PLACEHOLDER.sub(number, sql).encode(), tuple(names)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Each element of an array literal (PostgreSQL's text form of an array) by its type: None, bool, int, str.
_ELEMENTS: dict[type, Callable[[Any], str]] = {
    type(None): lambda value: "NULL", bool: lambda value: "t" if value else "f", int: str, str: _quoted}


def _as_text(value, encoding: str):
    """(the type the parameter is declared as, its value as the server reads text), or None for a value
    this path does not send (psycopg's cursor does): a type not below, an int past 8 bytes, or a
    str with a NUL byte, which libpq would cut short where psycopg refuses it.

    A list goes as an array literal of its elements (None, bool, int, str), declared unknown: the
    statement casts it to the array type it means (``%(keys)s::int8[]``), and the server reads the
    literal for that type, an int out of its range refused there as psycopg's would be."""
    kind = type(value)
    if kind is list:
        try:
            text = "{" + ",".join([_ELEMENTS[type(element)](element) for element in value]) + "}"
        except KeyError:  # an element of another type
            return None
        return (0, text.encode(encoding)) if "\x00" not in text else None
    if kind is datetime:
        return (_TIMESTAMPTZ if value.tzinfo is not None else _TIMESTAMP), value.isoformat().encode()
    declared = _DECLARED.get(kind)
    if declared is None:
        return None
    if value is None:
        return declared, None
    if kind is bool:
        return declared, b"t" if value else b"f"
    if kind is int:
        return (declared, str(value).encode()) if value in _INT8 else None
    return (declared, value.encode(encoding)) if "\x00" not in value else None


def run_on_libpq(conn, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int] | None:
    """Run one statement on ``conn`` (autocommit, no statement of its own running) through libpq: its
    parameters sent as text apart from the statement, prepared on the connection once per statement
    and parameter types when the connection prepares (``prepare_threshold`` not None), errors raised
    as psycopg raises them. Returns (its first row or None, its row count), or with ``every_row``
    (the list of its rows, its row count); None without sending anything when a parameter is one
    only psycopg's cursor knows how to send.

    psycopg's cursor does the same through its query conversion, per-value adapter lookups and
    prepared-statement bookkeeping, about 40 µs of CPU a statement more (docs/performance.md)."""
    converted = _converted.get(sql)
    if converted is None:
        converted = _converted[sql] = _convert(sql)
    text, names = converted
    state = conn.__dict__.get("_statements")
    if state is None:
        state = conn._statements = {"encoding": conn.info.encoding, "prepared": {}, "replan": {}, "named": 0}
    types, values = [], []
    for name in names:
        sent = _as_text(params[name], state["encoding"])
        if sent is None:
            return None
        types.append(sent[0])
        values.append(sent[1])
    pgconn = conn.pgconn
    result = None
    if conn.prepare_threshold is not None and not state.get("unprepared"):
        result = _run_prepared(conn, state, (sql, tuple(types)), text, types, values)
    if result is None:
        pgconn.send_query_params(text, values, param_types=types)
        result = _result(conn.wait(_execute(pgconn)), state)
    row: list | tuple | None = [] if every_row else None
    if result.status == pq.ExecStatus.TUPLES_OK and result.ntuples:
        loader = Transformer(conn)
        loader.set_pgresult(result)
        row = loader.load_rows(0, result.ntuples, tuple) if every_row else loader.load_row(0, tuple)
    count = result.command_tuples
    return row, (-1 if count is None else count)


def _run_prepared(conn, state: dict, key: tuple, text: bytes, types: list, values: list):
    """The statement's result, run by a name prepared on the connection (prepared first when it is
    not yet); None when named statements do not last on this connection, run nothing.

    Every retry here follows a refusal that comes before the statement runs (at Parse, or at Bind
    and plan revalidation): sending it again cannot run it twice.
    - A statement prepared by an earlier call that the server no longer knows (`DEALLOCATE ALL`),
      or whose result a migration changed ("cached plan must not change result type"), is
      prepared again and sent once more.
    - A name the server already holds although this connection never used it, or a statement
      gone again right after it was prepared, means named statements do not stay with this
      connection's server session: a pooler in transaction mode without prepared-statement
      support (PgBouncer before 1.21, or without max_prepared_statements). The connection stops
      preparing (the caller sends its statements unnamed) and the operator is told, once.

    A statement is also prepared anew, its old name closed, once it has been prepared for longer
    than its turn (``_replanned``), so that its plan is made again for the tables as they are now."""
    pgconn = conn.pgconn
    while True:  # twice at most: a second pass always prepares anew, and every refusal then ends it
        prepared = state["prepared"].get(key)
        if prepared is not None and time.monotonic() >= state["replan"][key][0]:
            _close_prepared(conn, state, prepared)
            state["prepared"].pop(key)
            prepared = None
        earlier = prepared is not None
        try:
            if not earlier:
                state["named"] += 1  # never a name used before on this connection, even once forgotten
                prepared = f"_gw_{state['named']}".encode()
                pgconn.send_prepare(prepared, text, param_types=types)
                _result(conn.wait(_execute(pgconn)), state)
                state["prepared"][key] = prepared
                state["replan"][key] = _replanned(state["replan"].get(key))
            pgconn.send_query_prepared(prepared, values)
            return _result(conn.wait(_execute(pgconn)), state)
        except psycopg.errors.FeatureNotSupported as exc:
            state["prepared"].pop(key, None)
            if not earlier or "cached plan" not in str(exc):
                raise
        except psycopg.errors.InvalidSqlStatementName:
            if earlier:
                continue  # the server forgot them all (_result forgot them too): prepare again
            _stop_preparing(state)
            return None
        except psycopg.errors.DuplicatePreparedStatement:
            _stop_preparing(state)
            return None


# How long a prepared statement's plan is kept before the statement is prepared anew: 2 s at first,
# twice as long at each renewal, and at most REPLAN_MAX_SECONDS.
#
# PostgreSQL plans a prepared statement for its parameters five times, then keeps one generic plan
# for as long as nothing invalidates it (an ANALYZE of its tables, DDL). A plan made while a table
# was a few pages long may scan the whole table, where an index is the only sane path once it has
# grown: a grouped settlement (gateway.metering) joins its entries to the ledger's rows, and on a
# new ledger that plan seq-scanned it, each statement slower than the one before until autovacuum's
# next ANALYZE, half a minute later at 1,000 requests a second (docs/performance.md). Renewing the
# plans on this schedule bounds that to seconds in a new database, and costs an established one a
# Parse and five planned executions per statement every quarter of an hour.
REPLAN_FIRST_SECONDS = 2.0
REPLAN_MAX_SECONDS = 1024.0


def _replanned(previous: tuple[float, float] | None) -> tuple[float, float]:
    """(when the statement is next prepared anew, the interval that set it)."""
    interval = REPLAN_FIRST_SECONDS if previous is None else min(previous[1] * 2, REPLAN_MAX_SECONDS)
    return time.monotonic() + interval, interval


def _close_prepared(conn, state: dict, name: bytes) -> None:
    """Close a prepared statement on the server (closing one it does not hold is no error)."""
    conn.pgconn.send_close_prepared(name)
    _result(conn.wait(_execute(conn.pgconn)), state)


_told_unprepared = False


def _stop_preparing(state: dict) -> None:
    global _told_unprepared
    state["unprepared"] = True
    state["prepared"].clear()
    if not _told_unprepared:
        _told_unprepared = True
        log.warning("PostgreSQL does not keep this process's prepared statements between its statements "
                    "(a pooler in transaction mode without prepared-statement support?): the request "
                    "path's statements go unprepared on such connections. Set "
                    "DATABASE_PREPARED_STATEMENTS=0, or give the pooler prepared-statement support "
                    "(PgBouncer 1.21 or later with max_prepared_statements).")


def _result(results, state: dict):
    """The statement's result; its error raised as psycopg's exception. A prepared statement the server
    no longer knows (a pooler between us that does not keep them) means it knows none of this
    connection's: every one is forgotten, to be prepared again."""
    result = results[-1]
    if result.status == pq.ExecStatus.FATAL_ERROR:
        error = psycopg.errors.error_from_result(result, encoding=state["encoding"])
        if isinstance(error, psycopg.errors.InvalidSqlStatementName):
            state["prepared"].clear()
        raise error
    if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        raise psycopg.errors.InternalError(f"unexpected result from the server: {pq.ExecStatus(result.status).name}")
    return result
