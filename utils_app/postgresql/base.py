"""Django's PostgreSQL backend, with three changes for the metered request path.

A pooled connection the server has ended is never used. After a database restart every
idle connection in the pool is dead, and the first use of each would fail a request.
Django's CONN_HEALTH_CHECKS would ping the server at every checkout, a round trip per
request on the hot path; here a dead connection is told apart without one
(utils_app.db.ended_by_server), closed, and given back so the pool drops it, and the next
one is taken.

A cursor may send its parameters apart from the statement (``server_bound_cursor``).
Django binds parameters on the client by default: the values are quoted into the
statement's text, which is what every ORM query here still gets. The statements of a
metered request (gateway.metering) instead travel as text plus parameters, which costs
PostgreSQL about half the CPU per request and psycopg less quoting (docs/performance.md).
psycopg prepares them on their first use on each pooled connection (``prepare_threshold`` 0,
utils_app.env; DATABASE_PREPARED_STATEMENTS=0 for a pooler that cannot keep them), which takes
another third off PostgreSQL's CPU for them; ``execute_prepared`` keeps their plans fresh and
notices a pooler that loses them. The ORM's client-side binding never prepares.

A statement may run alone on a pooled connection (``run_alone``, utils_app.speed.statements):
taken from the pool for that statement and given back at once. The statements of a metered
request do, outside a transaction.

The pool says why it cannot connect. Each attempt to open a connection is recorded
(utils_app.db.note_connect), so a request's 503 names the cause even when all it met was
the pool's timeout, and psycopg's pool warnings name theirs in words instead of a libpq
message over several lines or a connection's repr.

Everything else is Django's backend unchanged.
"""
import logging
import time

import psycopg
from django.db.backends.postgresql import base, operations

from utils_app.db import ended_by_server, failure_cause, last_connect_failure, note_connect
from utils_app.speed import statements

ENDED_BY_SERVER = "ended by the server while idle in the pool (a restart or a terminated backend)"
log = logging.getLogger(__name__)


class Connection(psycopg.Connection):
    """What the pool opens: a psycopg connection that records how each attempt to open one went."""

    closed_because = ""  # set when the gateway closes it for a reason the pool's warning should tell

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
        return self._through_cursor(sql, params, every_row=every_row)

    def can_run_alone(self) -> bool:
        """Whether ``run_alone`` applies now: a pool, no connection held by this wrapper, no transaction
        and no execute wrapper (a test's) that must see the statement."""
        return (self.connection is None and self.pool is not None and not self.in_atomic_block
                and not self.execute_wrappers)

    def run_alone(self, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int]:
        """Run one statement in autocommit on a pooled connection taken for it alone, and give the
        connection back at once; returns (its first row or None, its row count), or with
        ``every_row`` (the list of its rows, its row count).

        Straight on the pool, without Django's checkout, cursor wrapper and close around it
        (utils_app.speed.statements, switch SPEED_STATEMENTS_ALONE); with the switch off, through
        this wrapper's own cursor and closed after it, which gives the connection back to the pool
        the same way. Either way only a live connection is used, the parameters travel apart from
        the text, errors are Django's and the query log records the statement as Django would."""
        if statements.enabled():
            return statements.run_alone(self, sql, params, every_row=every_row)
        try:
            return self._through_cursor(sql, params, every_row=every_row)
        finally:
            self.close()

    def _through_cursor(self, sql: str, params: dict, *, every_row: bool) -> tuple[tuple | list | None, int]:
        with self.server_bound_cursor() as cursor:
            execute_prepared(self.connection, cursor.execute, sql, params)
            if cursor.description is None:
                return ([] if every_row else None), cursor.rowcount
            return (cursor.fetchall() if every_row else cursor.fetchone()), cursor.rowcount

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




# -- prepared statements: plans kept fresh, and a pooler that loses them noticed

# How long the request path's prepared statements keep their plans before they are prepared anew: 2 s
# at first, twice as long at each renewal, and at most REPLAN_MAX_SECONDS.
#
# PostgreSQL plans a prepared statement for its parameters five times, then keeps one generic plan for
# as long as nothing invalidates it (an ANALYZE of its tables, DDL). A plan made while a table was a
# few pages long may scan the whole table, where an index is the only sane path once it has grown: a
# grouped settlement (gateway.metering) joins its entries to the ledger's rows, and on a new ledger that
# plan seq-scanned it, each statement slower than the one before until autovacuum's next ANALYZE. At
# each renewal the statements' text gets a new comment (`` /* plan N */``), so psycopg takes them for
# new statements and prepares them again with a fresh plan; psycopg closes the oldest names past its
# ``prepared_max``. It costs an established process a Parse and five planned executions per statement
# and connection every quarter of an hour.
REPLAN_FIRST_SECONDS = 2.0
REPLAN_MAX_SECONDS = 1024.0


class _Plans:
    """The process's current plans: their number (0 until the first renewal), when the next are due, the turn."""

    def __init__(self) -> None:
        self.epoch = 0
        self.due: float | None = None
        self.interval = REPLAN_FIRST_SECONDS


_plans = _Plans()
_texts: dict[tuple[str, int], str] = {}


def current_plans() -> int:
    """The number of the process's current plans (0 until the first renewal), renewed first when due. Both
    ways the request path prepares a statement follow it: psycopg's, by the text ``planned`` gives, and
    libpq's (utils_app.speed.libpq), which prepares a statement anew once this number has moved on."""
    now = time.monotonic()
    if _plans.due is None:
        _plans.due = now + REPLAN_FIRST_SECONDS
    elif now >= _plans.due:
        replan()
    return _plans.epoch


def planned(sql: str) -> str:
    """``sql`` as the current plans' text: itself until the first renewal, then with its plan's number."""
    epoch = current_plans()
    if not epoch:
        return sql
    text = _texts.get((sql, epoch))
    if text is None:
        if len(_texts) > 256:
            _texts.clear()
        text = _texts[(sql, epoch)] = f"{sql} /* plan {epoch} */"
    return text


def replan() -> None:
    """Start the next plans now: every statement is prepared anew at its next use on each connection."""
    _plans.interval = min(_plans.interval * 2, REPLAN_MAX_SECONDS)
    _plans.epoch += 1
    _plans.due = time.monotonic() + _plans.interval


# Refusals that come before a prepared statement runs (at Parse, or at Bind and plan revalidation):
# sending the statement again cannot run it twice.
_NAME_TAKEN, _NAME_GONE = psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName
_told_unprepared = False


def execute_prepared(conn, execute, sql: str, params: dict) -> None:
    """``execute(text, params)`` for one statement of the request path on ``conn`` (its psycopg connection),
    which psycopg prepares as the connection's ``prepare_threshold`` says.

    - The text is the current plans' (``planned``).
    - A prepared statement whose result a migration changed ("cached plan must not change result
      type") starts the next plans, and the statement is sent once more.
    - A name the server already holds, or one it does not know, means named statements do not stay
      with this connection's server session: a pooler in transaction mode without prepared-statement
      support (PgBouncer before 1.21, or without max_prepared_statements). The connection stops
      preparing, the statement is sent once more unprepared, and the operator is told, once.

    Outside autocommit (a transaction's statement) a refusal is raised as it is: the transaction
    is aborted and the statement cannot be sent again in it."""
    if conn.prepare_threshold is None:
        execute(sql, params)
        return
    try:
        execute(planned(sql), params)
        return
    except Exception as exc:
        cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
        if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise
        if isinstance(cause, psycopg.errors.FeatureNotSupported) and "cached plan" in str(cause):
            replan()
        elif isinstance(cause, (_NAME_TAKEN, _NAME_GONE)):
            stop_preparing(conn)
        else:
            raise
    execute(planned(sql) if conn.prepare_threshold is not None else sql, params)


def stop_preparing(conn) -> None:
    global _told_unprepared
    conn.prepare_threshold = None
    if not _told_unprepared:
        _told_unprepared = True
        log.warning("PostgreSQL does not keep this process's prepared statements between its statements "
                    "(a pooler in transaction mode without prepared-statement support?): the request "
                    "path's statements go unprepared on such connections. Set "
                    "DATABASE_PREPARED_STATEMENTS=0, or give the pooler prepared-statement support "
                    "(PgBouncer 1.21 or later with max_prepared_statements).")
