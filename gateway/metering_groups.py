"""Charges and settlements of one process grouped into one statement (PostgreSQL, gateway.metering).

A process runs one metering statement at a time; while it runs, the charges and settlements of the
process's other requests queue, and the next statement takes them all (up to METERING_GROUP_SIZE; never
two charges of one key, nor a charge and a settlement of one key), the way PostgreSQL groups the commits
of concurrent transactions (utils_app.coalesce). A lone request runs its statement at once. A group's
statement (gateway.metering_sql.GROUP_STATEMENT) is one transaction: each charge in it is taken with its
row or refused on its own key's row, as alone, and nothing of it is committed unless all of it is; each
request still waits for its own charge and its own settlement to be committed before it goes on. What a
group saves is PostgreSQL's work per statement and per commit (check constraints prepared once, one
transaction, one flush) and the process's round trips (docs/performance.md).

A group never waits for a key row: it locks its keys first with SKIP LOCKED, and the request whose key
another transaction holds (another process's statement, a refund, a staff edit) runs its statement
alone, waiting as it always did. So one busy key cannot hold up the other requests of a process. The
rows a group may wait for are the usage rollups, which the usage table's statement trigger
(models_catalog migration 0009) writes for every statement that inserts usage (a settlement alone or
grouped, a refund): all its hourly rows, then all its daily rows, each in the order of their unique
keys. No two statements can wait for each other in a cycle.
"""
import time
from collections.abc import Sequence

from django.conf import settings
from django.db import DatabaseError, DataError, IntegrityError, OperationalError

from gateway import metering_sql as sql
from utils_app import metrics
from utils_app.coalesce import Coalescer, GroupInterrupted
from utils_app.speed.statements import statements_wrapper

# What a group answers for a request whose key row another transaction held: its statement runs alone.
SKIPPED = object()
CHARGE, SETTLEMENT = "charge", "settlement"

_ALONE = {CHARGE: sql.CHARGE, SETTLEMENT: sql.SETTLEMENT}
_ARRAYS = {CHARGE: [(f"c_{column}", column) for column, _ in sql.CHARGE_VALUES],
           SETTLEMENT: [(f"s_{column}", column) for column, _ in sql.SETTLEMENT_VALUES]}


def filled(db, params: dict) -> dict:
    """A request's parameters for its statement alone, with what a request built by hand may leave out."""
    return {**sql.DEFAULTS, **sql.calendar(db), **params}


def _answers(rows: Sequence[tuple]) -> tuple[set, dict, set]:
    """A statement's answer rows: the keys it locked, the keys it charged (their (ledger id, balance after,
    tokens of the key's minute)) and the entries it settled."""
    locked, charged, settled = set(), {}, set()
    for answer, number, entry, balance, tokens in rows:
        if answer == sql.ANSWER_LOCKED:
            locked.add(number)
        elif answer == sql.ANSWER_CHARGED:
            charged[number] = (entry, balance, tokens)
        else:
            settled.add(number)
    return locked, charged, settled


def outcome(kind: str, params: dict, answers: tuple[set, dict, set], *, grouped: bool = False):
    """What a statement's answers say of one request: a charge's (ledger id, balance after) or None where
    its key refused it, whether a settlement settled its charge, or SKIPPED (a group's key it did not
    lock). The tokens the charged key's minute had settled are noted in the request's own parameters
    (``minute_tokens``, what gateway.metering.charge reads back), so an outcome keeps its shape."""
    locked, charged, settled = answers
    if grouped and params["key"] not in locked:
        return SKIPPED
    if kind == SETTLEMENT:
        return params["entry"] in settled
    row = charged.get(params["key"])
    if row is None:
        return None
    params["minute_tokens"] = row[2]
    return row[0], row[1]


def run_alone(db, kind: str, params: dict, *, statement: str | None = None, grouped: bool = False):
    """One request's statement by itself (``statement``: its text, when not the kind's own), waiting for
    its key row; its outcome. ``grouped``: for the group's queue, whose requests may be built by hand
    (``filled``), on a pooled connection of its own (``run_alone``) rather than wherever ``run_one`` finds."""
    if grouped:
        rows, _ = db.run_alone(statement or _ALONE[kind], filled(db, params), every_row=True)
    else:
        rows, _ = db.run_one(statement or _ALONE[kind], params, every_row=True)
    return outcome(kind, params, _answers(rows))


def _group_params(items: Sequence[tuple[str, dict]], now, calendar: dict) -> dict:
    """GROUP_STATEMENT's parameters for the group: one array per value of each kind (empty for a kind it
    lacks), and the group's time."""
    params = {"now": now, **calendar}
    for kind, arrays in _ARRAYS.items():
        rows = [item for item_kind, item in items if item_kind == kind]
        for name, column in arrays:
            params[name] = [row.get(column, sql.DEFAULTS.get(column)) for row in rows]
    return params


def run_group(items: Sequence[tuple[str, dict]]) -> list:
    """A group's work: for each (kind, params) its outcome, as the statement alone would answer it,
    SKIPPED, or the DatabaseError of its own statement when the group's was refused."""
    db = statements_wrapper()  # the leading request's, or the process's: either runs a statement alone
    metrics.grouped(requests=len(items))
    if len(items) == 1:
        kind, params = items[0]
        return [run_alone(db, kind, params, grouped=True)]
    try:
        rows, _ = db.run_alone(sql.GROUP_STATEMENT, _group_params(items, sql.now(db), sql.calendar(db)),
                               every_row=True)
    except (DataError, IntegrityError):
        # One request's row refused by the database (a value a column cannot hold, say, or settlements of
        # one key whose credits given back would pass its maxCredits together): the statement took
        # nothing, so each request runs alone, and only the one at fault fails.
        return [_alone_or_error(db, kind, params) for kind, params in items]
    answers = _answers(rows)
    return [outcome(kind, params, answers, grouped=True) for kind, params in items]


def _alone_or_error(db, kind: str, params: dict):
    """One request's statement by itself, for a group the database refused: its outcome, or its error."""
    try:
        return run_alone(db, kind, params, grouped=True)
    except DatabaseError as exc:
        return exc


def lock_of(item: tuple[str, dict]) -> tuple[int, bool]:
    # A charge needs its key row to itself in a group; settlements of one key share it (one release).
    kind, params = item
    return params["key"], kind == CHARGE


def in_group(kind: str, params: dict):
    """The request's charge or settlement run in this process's group; SKIPPED when groups are off."""
    if groups.size != settings.METERING_GROUP_SIZE:
        groups.resize(settings.METERING_GROUP_SIZE)
    if groups.coalescer is None:
        return SKIPPED
    try:
        result = groups.coalescer.run((kind, params))
    except GroupInterrupted as exc:  # whether the statement took effect is unknown, as when a connection drops
        raise OperationalError(str(exc)) from exc
    if isinstance(result, DatabaseError):  # its own statement failed when the group's was refused
        raise result
    return result


class _Groups:
    """This process's coalescer, made at first use with the group size the settings give then; None when
    METERING_GROUP_SIZE is 1 (each statement alone)."""

    def __init__(self) -> None:
        self.size: int | None = None
        self.coalescer: Coalescer | None = None

    def resize(self, size: int) -> None:
        self.size = size
        # Under load, a group about to start yields once (time.sleep(0): in a gevent worker, the other
        # greenlets ready to run go first): those that reach their charge or settlement meanwhile join it.
        self.coalescer = (None if size == 1 else
                          Coalescer(run_group, max_size=size, lock_of=lock_of, gather=lambda: time.sleep(0)))


groups = _Groups()
