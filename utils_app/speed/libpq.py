"""The metered request's statements sent straight through libpq (switch: SPEED_LIBPQ).

psycopg's cursor runs a statement through its query conversion, a lookup of an adapter for each
value, and its prepared-statement bookkeeping. The request path's statements are few and their
parameters plain (ints, bools, strings, timestamps, arrays of those), so ``run`` does the same
work itself: the statement's ``%(name)s`` placeholders numbered once per text, each value sent as
text beside its declared type, the statement prepared under a name of its own on each connection,
and the answer read by psycopg's own loader. A value of any other kind (a Decimal, an int past
8 bytes, a string with a NUL byte) makes ``run`` send nothing and return None, and the caller
takes psycopg's cursor.

The plain twin, with the switch off, is psycopg's cursor with its own prepared statements
(utils_app.speed.statements). The same statements and answers either way
(tests/gateway/test_statements_alone.py); bench/request_cpu.py measures one against the other served
(``--source .,SPEED_LIBPQ=0``).

These prepared statements are renewed on the same schedule as psycopg's, so their plans follow tables
that grow (``current_plans`` in utils_app.postgresql.base), and a pooler that loses them is noticed
the same way: the connection then sends its statements unprepared.
"""
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.generators import execute as _execute

# The backend imports the statements' module, which imports this one: the module, not its names, so
# either may be imported first.
from utils_app.postgresql import base as backend

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%")
# What each parameter type is declared as when the statement is prepared, its value sent as text.
# A str is declared unknown, as psycopg declares it, so the server types it from where it stands.
_DECLARED = {int: 20, bool: 16, str: 0, type(None): 0}  # int8, bool, unknown
_TIMESTAMPTZ, _TIMESTAMP = 1184, 1114
_INT8 = range(-2**63, 2**63)
_converted: dict[str, tuple[bytes, tuple[str, ...]]] = {}


def enabled() -> bool:
    """Whether statements alone go straight through libpq (SPEED_LIBPQ), else through psycopg's cursor."""
    return settings.SPEED_LIBPQ


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


def run(conn, sql: str, params: dict, *, every_row: bool = False) -> tuple[tuple | list | None, int] | None:
    """Run one statement on ``conn`` (autocommit, no statement of its own running) through libpq: its
    parameters sent as text apart from the statement, prepared on the connection once per statement
    and parameter types while the connection prepares (``prepare_threshold`` not None), errors raised
    as psycopg raises them. Returns (its first row or None, its row count), or with ``every_row``
    (the list of its rows, its row count); None without sending anything when a parameter is one
    only psycopg's cursor knows how to send."""
    converted = _converted.get(sql)
    if converted is None:
        converted = _converted[sql] = _convert(sql)
    text, names = converted
    state = conn.__dict__.get("_statements")
    if state is None:
        state = conn._statements = {"encoding": conn.info.encoding, "prepared": {}, "named": 0}
    types, values = [], []
    for name in names:
        sent = _as_text(params[name], state["encoding"])
        if sent is None:
            return None
        types.append(sent[0])
        values.append(sent[1])
    pgconn = conn.pgconn
    result = None
    if conn.prepare_threshold is not None:
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
      connection's server session (a pooler in transaction mode without prepared-statement
      support): the connection stops preparing and the operator is told, once.

    A statement is also prepared anew, its old name closed, once the process's plans have been renewed
    since it was prepared (``current_plans``), so that its plan is made again for the tables as they are
    now."""
    pgconn = conn.pgconn
    plans = backend.current_plans()
    while True:  # twice at most: a second pass always prepares anew, and every refusal then ends it
        prepared, epoch = state["prepared"].get(key, (None, plans))
        if prepared is not None and epoch != plans:
            pgconn.send_close_prepared(prepared)  # closing one the server does not hold is no error
            _result(conn.wait(_execute(pgconn)), state)
            state["prepared"].pop(key)
            prepared = None
        earlier = prepared is not None
        try:
            if not earlier:
                state["named"] += 1  # never a name used before on this connection, even once forgotten
                prepared = f"_gw_{state['named']}".encode()
                pgconn.send_prepare(prepared, text, param_types=types)
                _result(conn.wait(_execute(pgconn)), state)
                state["prepared"][key] = prepared, plans
            pgconn.send_query_prepared(prepared, values)
            return _result(conn.wait(_execute(pgconn)), state)
        except psycopg.errors.FeatureNotSupported as exc:
            state["prepared"].pop(key, None)
            if not earlier or "cached plan" not in str(exc):
                raise
        except psycopg.errors.InvalidSqlStatementName:
            if earlier:
                continue  # the server forgot them all (_result forgot them too): prepare again
            state["prepared"].clear()
            backend.stop_preparing(conn)
            return None
        except psycopg.errors.DuplicatePreparedStatement:
            state["prepared"].clear()
            backend.stop_preparing(conn)
            return None


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
