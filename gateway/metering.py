"""The two database statements of a metered request: the charge with its ledger row, and the settlement.

Charge: one conditional UPDATE of the key takes the credits and counts the request
in flight, only while the key is active, still of the tier that was checked, has
the credits and is under its maxConcurrent. The database evaluates those
conditions under the row lock, so concurrent requests can never spend a credit
twice nor exceed maxConcurrent, whatever the number of workers or hosts. The
pending ledger row is written by the same statement on PostgreSQL (a data-modifying
CTE) and in the same transaction on SQLite (which has no such CTE, and no network
between the statements): a charge without its row cannot exist.

Settlement, success: the charge row is completed, the key's in-flight count
released and the usage event (which feeds every analytic through its rollup
triggers) inserted, again in one statement on PostgreSQL. Only a row still
pending is settled, so a settlement can never happen twice, and a request whose
charge the sweeper already abandoned and refunded is left as it is.

Settlement, failure: refund in one transaction (the failure path may take a few
statements): the charge row refunded, credits given back up to maxCredits, and a
refund row recording what was actually restored.

Prices by the token, budgets and tpm (CONTRACT section 12, docs/pricing.md) ride in the same two
statements. The charge takes a hold (a per-request model's cost, or the most a token-priced request
can cost) and counts it into the key's budget for the current period, opening a new period when the
stored one has ended, only while the budget allows it and the key's current minute is under its tpm.
The settlement keeps the price, gives the rest of the hold back (within maxCredits) to the credits
and the budget, writes the row's amount as what was charged and anything the price passed the hold
by as uncovered, and adds the request's tokens to the key's minute.

Grouped on PostgreSQL (utils_app.coalesce): a process runs one metering statement at a
time; while it runs, the charges and settlements of the process's other requests queue, and
the next statement takes them all (up to METERING_GROUP_SIZE; never two charges of one key,
nor a charge and a settlement of one key), the way PostgreSQL groups the commits of
concurrent transactions. A lone request runs the statements above at once. A group's
statement is one transaction: each charge in it is taken with its row or refused on its own
key's row, as alone, and nothing of it is committed unless all of it is; each request still
waits for its own charge and its own settlement to be committed before it goes on. What a
group saves is PostgreSQL's work per statement and per commit (check constraints prepared
once, one transaction, one flush) and the process's round trips (docs/performance.md).

A group never waits for a key row: it locks its keys first with SKIP LOCKED, and the request
whose key another transaction holds (another process's statement, a refund, a staff edit)
runs its statement alone, waiting as it always did. So one busy key cannot hold up the
other requests of a process. The rows a group may wait for are the usage rollups, which
the usage table's statement trigger (models_catalog migration 0009) writes for every statement
that inserts usage (a settlement alone or grouped, a refund): all its hourly rows, then all its
daily rows, each in the order of their unique keys. No two statements can wait for each other
in a cycle.
"""
import functools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    DataError,
    IntegrityError,
    OperationalError,
    connection,
    connections,
    transaction,
)

from keys import auth_cache
from keys.models import BUDGET_PERIODS, ApiKey, IdempotentRequest, LedgerEntry, budget_bounds
from keys.pricing import TokenPrices
from models_catalog.models import UsageEvent
from models_catalog.served import ServedModel
from utils_app import clock, metrics
from utils_app.coalesce import Coalescer, GroupInterrupted
from utils_app.db import one_writer_at_a_time, statements_wrapper
from utils_app.errors import (
    AccessDenied,
    AuthenticationError,
    BudgetExceeded,
    ConcurrencyLimited,
    IdempotencyConflict,
    InsufficientCredits,
    RateLimited,
)

log = logging.getLogger("gateway.metering")

KEYS = ApiKey._meta.db_table
LEDGER = LedgerEntry._meta.db_table
USAGE = UsageEvent._meta.db_table

# The key row's conditions and writes of a charge, for the single statements (no alias) and the group's
# (alias k, the request's row c). The amount is what the charge holds: a per-request model's cost, or a
# token-priced request's most (CONTRACT section 12).
#
# Budget: the period the key's budget_period names starts at %(day)s, %(week)s or %(month)s (computed
# by the caller from the clock, UTC). A budget_period_start before it is a period that has ended: the
# statement counts the key's spending from 0 again and moves the start, so a new period needs no job.
# The hold is refused when it would take the period's spending past budget_credits, under the row
# lock, so no number of workers or hosts can overshoot it. tpm: refused while the key's current
# minute (%(minute)s, minutes since the epoch) has settled tpm tokens or more.
_PERIOD_START = "CASE {k}budget_period WHEN 'day' THEN %(day)s WHEN 'week' THEN %(week)s ELSE %(month)s END"
_IN_PERIOD = f"{{k}}budget_period_start >= {_PERIOD_START}"  # NULL (no period yet): not in it
_SPENT = f"CASE WHEN {_IN_PERIOD} THEN {{k}}budget_spent ELSE 0 END"
_TAKE_SETS = (f"credits = {{k}}credits - {{amount}}, in_flight = {{k}}in_flight + 1, last_used_at = %(now)s, "
              f"budget_spent = CASE WHEN {{k}}budget_period = '' THEN {{k}}budget_spent "
              f"ELSE {_SPENT} + {{amount}} END, "
              f"budget_period_start = CASE WHEN {{k}}budget_period = '' OR {_IN_PERIOD} "
              f"THEN {{k}}budget_period_start ELSE {_PERIOD_START} END")
_TAKE_WHERE = ("{k}is_active AND {k}tier = {tier} AND {k}credits >= {amount} AND {k}in_flight < {k}max_concurrent "
               f"AND ({{k}}budget_credits IS NULL OR {{k}}budget_period = '' "
               f"OR {_SPENT} + {{amount}} <= {{k}}budget_credits) "
               "AND ({k}tpm IS NULL OR {k}tpm_minute <> %(minute)s OR {k}tpm_used < {k}tpm)")
# The tokens the key's current minute had settled when it was charged, for X-RateLimit-Remaining-Tokens.
_MINUTE_TOKENS = "CASE WHEN {k}tpm_minute = %(minute)s THEN {k}tpm_used ELSE 0 END"

_TAKE = (f"UPDATE {KEYS} SET {_TAKE_SETS.format(k='', amount='%(amount)s')} WHERE id = %(key)s AND "
         f"{_TAKE_WHERE.format(k='', amount='%(amount)s', tier='%(tier)s')} "
         f"RETURNING id, credits, {_MINUTE_TOKENS.format(k='')} AS tokens")
# Every charge row keeps what it held, which its settlement compares the actual price with; a token-priced
# one also its terms (the request fee and the unit prices it was held at), so a later price change never
# rewrites what it was charged.
_ENTRY_COLUMNS = ("key_id, kind, amount, balance_after, status, actor, request_id, idempotency_key, operation, "
                  "model, provider, created_at, held, request_fee, price_input, price_cached_input, price_output")
_ENTRY_VALUES = ("'charge', -%(amount)s, {balance}, 'pending', '', %(request_id)s, %(idempotency_key)s, "
                 "%(operation)s, %(model)s, '', %(now)s, %(amount)s, {terms}")
# PostgreSQL types a parameter of a select list as text unless told: the terms (NULL for a per-request
# model) are cast to their columns' types.
_TERMS_POSTGRES = ("%(request_fee)s::int8, %(price_input)s::numeric, %(price_cached_input)s::numeric, "
                   "%(price_output)s::numeric")
_TERMS_SQLITE = "%(request_fee)s, %(price_input)s, %(price_cached_input)s, %(price_output)s"
CHARGE_POSTGRES = (f"WITH taken AS ({_TAKE}), "
                   f"charged AS (INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
                   f"SELECT id, {_ENTRY_VALUES.format(balance='credits', terms=_TERMS_POSTGRES)} FROM taken "
                   f"RETURNING id, balance_after) "
                   f"SELECT charged.id, charged.balance_after, taken.tokens FROM charged, taken")
CHARGE_SQLITE = (_TAKE,
                 f"INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
                 f"VALUES (%(key)s, {_ENTRY_VALUES.format(balance='%(balance)s', terms=_TERMS_SQLITE)}) "
                 f"RETURNING id, balance_after")

# The settlement keeps the request's price and gives the rest of the hold back: ``give`` is the hold
# minus the price (0 when the price reached the hold), ``uncovered`` what the price passed the hold by,
# written on the row and never taken. What is given back is capped at what keeps the key within
# maxCredits (a refill or an edit may have raised its balance meanwhile, CONTRACT section 5), and the
# charge row's amount becomes what the key was actually charged: the balance stays the sum of the
# ledger. The budget gets back what the key got back when the charge was taken in the key's current
# period (a period opened since counts from 0 and never held it); the request's tokens go to the key's
# current minute, for tpm.
_SETTLE_COLUMNS = ("input_tokens", "output_tokens", "cached_tokens", "latency_ms", "provider", "uncovered")


def _settle_sets(value: str) -> str:
    """The charge row's writes of a settlement, each value ``value`` formatted with its name."""
    sets = ", ".join(f"{column} = {value.format(column)}" for column in _SETTLE_COLUMNS)
    return f"status = 'completed', settled_at = %(now)s, {sets}, deployment_id = {value.format('deployment')}"


def _release_sets(*, settled: str, given: str, budget: str, tokens: str) -> str:
    """The key row's writes of settlements: in flight released, credits given back, budget and minute."""
    return (f"in_flight = CASE WHEN k.in_flight > {settled} THEN k.in_flight - {settled} ELSE 0 END, "
            f"credits = k.credits + {given}, "
            f"budget_spent = CASE WHEN k.budget_spent > {budget} THEN k.budget_spent - {budget} ELSE 0 END, "
            f"tpm_used = CASE WHEN k.tpm_minute = %(minute)s THEN k.tpm_used + {tokens} ELSE {tokens} END, "
            f"tpm_minute = %(minute)s")


_SAME_PERIOD = "k.budget_period_start IS NOT NULL AND l.created_at >= k.budget_period_start"
# The usage row takes the request id from the charge row it settles: no parameter can disagree with the ledger.
_USAGE_COLUMNS = ("key_id, model_id, operation, status, success, input_tokens, output_tokens, cached_tokens, "
                  "credits_charged, latency_ms, provider, deployment_id, created_at, request_id")
_USAGE_VALUES = ("%(model_pk)s, %(operation)s, %(status)s, %(success)s, %(input_tokens)s, %(output_tokens)s, "
                 "%(cached_tokens)s, {credits}, "
                 "%(latency_ms)s, %(provider)s, %(deployment)s, %(now)s, {request_id}")
# On PostgreSQL the charge row and its key row are locked first (``settled``, only while the row is still
# pending): what is given back is computed from the key's balance as it is under the lock, and the two
# updates that follow write exactly that. ``settled`` is what an Also's CTE reads (key_id, amount, request_id).
_GIVEN_POSTGRES = "LEAST(%(give)s, GREATEST(k.max_credits - k.credits, 0))"
COMPLETE_POSTGRES = (
    f"WITH settled AS (SELECT l.id, l.key_id, l.amount + {_GIVEN_POSTGRES} AS amount, l.request_id, "
    f"{_GIVEN_POSTGRES} AS given, CASE WHEN {_SAME_PERIOD} THEN {_GIVEN_POSTGRES} ELSE 0 END AS budget "
    f"FROM {LEDGER} l JOIN {KEYS} k ON k.id = l.key_id WHERE l.id = %(entry)s AND l.status = 'pending' "
    f"FOR NO KEY UPDATE), "
    f"completed AS (UPDATE {LEDGER} l SET amount = s.amount, {_settle_sets('%({})s')} "
    f"FROM settled s WHERE l.id = s.id), "
    f"released AS (UPDATE {KEYS} k SET "
    f"{_release_sets(settled='1', given='s.given', budget='s.budget', tokens='%(tokens)s')} "
    f"FROM settled s WHERE k.id = s.key_id) "
    f"INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
    f"SELECT key_id, {_USAGE_VALUES.format(credits='-amount', request_id='request_id')} FROM settled")
# On SQLite (one writer at a time, in a transaction) the key row read inside the ledger's UPDATE is the one
# the next UPDATE changes.
_GIVEN_SQLITE = f"MIN(%(give)s, MAX((SELECT max_credits - credits FROM {KEYS} WHERE id = key_id), 0))"
_SAME_PERIOD_SQLITE = (f"COALESCE(created_at >= (SELECT budget_period_start FROM {KEYS} WHERE id = key_id), 0)")
COMPLETE_SQLITE = (
    f"UPDATE {LEDGER} SET amount = amount + {_GIVEN_SQLITE}, {_settle_sets('%({})s')} "
    f"WHERE id = %(entry)s AND status = 'pending' "
    f"RETURNING key_id, amount, request_id, {_GIVEN_SQLITE}, {_SAME_PERIOD_SQLITE}",
    f"UPDATE {KEYS} AS k SET "
    f"{_release_sets(settled='1', given='%(given)s', budget='%(budget)s', tokens='%(tokens)s')} "
    f"WHERE id = %(key)s",
    f"INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
    f"VALUES (%(key)s, {_USAGE_VALUES.format(credits='%(credits)s', request_id='%(request_id)s')})")


# What each request of a group brings to its statement, a charge or a settlement: one array per column.
_GROUP_CHARGE = (("key", "int8"), ("tier", "text"), ("amount", "int8"), ("request_id", "text"),
                 ("operation", "text"), ("model", "text"), ("request_fee", "int8"), ("price_input", "numeric"),
                 ("price_cached_input", "numeric"), ("price_output", "numeric"))
_GROUP_SETTLEMENT = (("entry", "int8"), ("key", "int8"), ("model_pk", "int8"), ("operation", "text"),
                     ("status", "int4"), ("success", "bool"), ("input_tokens", "int4"), ("output_tokens", "int4"),
                     ("cached_tokens", "int4"), ("latency_ms", "int4"), ("provider", "text"),
                     ("deployment", "int8"), ("give", "int8"), ("uncovered", "int8"))
# What a request built by hand may leave out (a per-request charge's terms, a settlement that gives nothing
# back): the columns' values for it.
_GROUP_DEFAULTS = {"request_fee": None, "price_input": None, "price_cached_input": None, "price_output": None,
                   "give": 0, "uncovered": 0}


def _rows(name: str, columns: tuple[tuple[str, str], ...]) -> str:
    """A CTE of the group's rows of one kind, zipped from one array parameter per column."""
    arrays = ", ".join(f"%({name}_{column})s::{kind}[]" for column, kind in columns)
    return f"{name} AS (SELECT * FROM unnest({arrays}) AS {name} ({', '.join(column for column, _ in columns)}))"


# One statement for a group of charges (one per key) and settlements of other keys' charges.
#
# The group's keys are locked first, SKIP LOCKED: a key row another transaction holds (another
# process's statement, a refund, a staff edit) is left out, so a group never waits for a key row,
# and the request left out runs its statement alone, waiting as it always did. For the keys locked:
# the same conditional UPDATE and pending rows as CHARGE_POSTGRES; the charge rows still pending
# completed with what each gives back (capped as alone, from the key's balance under the lock),
# each key's in-flight count released once for each of its rows (as that many single releases would,
# never below zero) and the credits given back, and the usage rows inserted (their statement trigger
# adds them to the rollups, locking those rows in the one order every statement takes them in). A
# charge and a settlement of one key are never in one group: a statement cannot update a row twice.
# Two settlements of one key capped by its maxCredits together are refused by the key's check
# constraint, and then each runs alone (_run_group).
#
# The rows come as arrays, one per column, so that the statement is one text whatever the group's
# size, and a group of one kind sends the other's as empty arrays: each connection prepares and
# plans one statement, which PostgreSQL runs on its generic plan. Statements of one kind, prepared
# apart, were planned anew for their parameters at almost every execution (their generic plans,
# sized for ten rows of each array, cost more than plans for the few rows they had), about a third
# of a millisecond each (docs/performance.md).
#
# The answer is what the statement did, one row each (ANSWER_LOCKED, a key it locked), (ANSWER_CHARGED,
# a key charged, its new ledger row, the balance after, the tokens of the key's minute) and
# (ANSWER_SETTLED, an entry settled), read from the CTEs as they ran; a charge or settlement it names
# nowhere was refused by its key's row, or left to run alone when the key was not locked (_run_group).
# Matching the answer to the requests here rather than in the statement keeps four joins, and their
# start-up at every execution, out of the database's work.
ANSWER_LOCKED, ANSWER_CHARGED, ANSWER_SETTLED = 0, 1, 2
_GIVEN_GROUP = "LEAST(s.give, GREATEST(k.max_credits - k.credits, 0))"
GROUP_STATEMENT = (
    f"WITH {_rows('c', _GROUP_CHARGE)}, {_rows('s', _GROUP_SETTLEMENT)}, "
    f"locked AS (SELECT id, credits, max_credits, budget_period_start FROM {KEYS} "
    f"WHERE id = ANY(%(c_key)s::int8[] || %(s_key)s::int8[]) FOR NO KEY UPDATE SKIP LOCKED), "
    f"taken AS (UPDATE {KEYS} k SET {_TAKE_SETS.format(k='k.', amount='c.amount')} FROM c, locked "
    f"WHERE k.id = c.key AND locked.id = c.key AND "
    f"{_TAKE_WHERE.format(k='k.', amount='c.amount', tier='c.tier')} "
    f"RETURNING k.id, k.credits, {_MINUTE_TOKENS.format(k='k.')} AS tokens, c.amount, c.request_id, "
    f"c.operation, c.model, c.request_fee, c.price_input, c.price_cached_input, c.price_output), "
    f"charged AS (INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
    f"SELECT id, 'charge', -amount, credits, 'pending', '', request_id, NULL, operation, model, '', "
    f"%(now)s, amount, request_fee, price_input, price_cached_input, price_output FROM taken "
    f"RETURNING key_id, id, balance_after), "
    f"settled AS (UPDATE {LEDGER} l SET amount = l.amount + {_GIVEN_GROUP}, {_settle_sets('s.{}')} "
    f"FROM s, locked k WHERE l.id = s.entry AND l.key_id = s.key AND k.id = s.key AND l.status = 'pending' "
    f"RETURNING l.id, l.key_id, l.amount, l.request_id, {_GIVEN_GROUP} AS given, "
    f"CASE WHEN {_SAME_PERIOD} THEN {_GIVEN_GROUP} ELSE 0 END AS budget, s.model_pk, s.operation, s.status, "
    f"s.success, s.input_tokens, s.output_tokens, s.cached_tokens, s.latency_ms, s.provider, s.deployment), "
    f"released AS (UPDATE {KEYS} k SET "
    f"{_release_sets(settled='n.settled', given='n.given', budget='n.budget', tokens='n.tokens')} "
    f"FROM (SELECT key_id, count(*) AS settled, sum(given)::int8 AS given, sum(budget)::int8 AS budget, "
    f"sum(input_tokens + output_tokens)::int8 AS tokens FROM settled GROUP BY key_id) n WHERE k.id = n.key_id), "
    f"recorded AS (INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
    f"SELECT key_id, model_pk, operation, status, success, input_tokens, output_tokens, cached_tokens, "
    f"-amount, latency_ms, provider, deployment, %(now)s, request_id FROM settled) "
    f"SELECT {ANSWER_LOCKED}, id, NULL::int8, NULL::int8, NULL::int8 FROM locked "
    f"UNION ALL SELECT {ANSWER_CHARGED}, charged.key_id, charged.id, charged.balance_after, taken.tokens "
    f"FROM charged JOIN taken ON taken.id = charged.key_id "
    f"UNION ALL SELECT {ANSWER_SETTLED}, id, NULL, NULL, NULL FROM settled")


# What a group answers for a request whose key row another transaction held: its statement runs alone.
SKIPPED = object()
CHARGE, SETTLEMENT = "charge", "settlement"


_COLUMNS = {CHARGE: [(f"c_{column}", column) for column, _ in _GROUP_CHARGE],
            SETTLEMENT: [(f"s_{column}", column) for column, _ in _GROUP_SETTLEMENT]}


def _group_params(items: Sequence[tuple[str, dict]], now, calendar: dict) -> dict:
    """GROUP_STATEMENT's parameters for the group: one array per column of each kind (empty for a kind it
    lacks), and the group's time."""
    params = {"now": now, **calendar}
    for kind, columns in _COLUMNS.items():
        rows = [item for item_kind, item in items if item_kind == kind]
        for name, column in columns:
            params[name] = [row.get(column, _GROUP_DEFAULTS.get(column)) for row in rows]
    return params


def _filled(db, kind: str, params: dict) -> dict:
    """A request's parameters for its statement alone, with what a request built by hand may leave out."""
    defaults: dict = {**_GROUP_DEFAULTS, **calendar(db)}
    if kind == SETTLEMENT:
        defaults["tokens"] = params["input_tokens"] + params["output_tokens"]
    return {**defaults, **params}


def _charged(params: dict, row):
    """A charge's outcome, (ledger id, balance after) or None; the tokens its key's minute had settled are
    noted in the request's own parameters (what charge() reads back), so an outcome keeps its shape."""
    if row is None:
        return None
    params["minute_tokens"] = row[2]
    return row[0], row[1]


def _run_group(items: Sequence[tuple[str, dict]]) -> list:
    """A group's work: for each (kind, params) its outcome, as the statement alone would answer it (a
    charge's (ledger id, balance after) or None where the key refused it; whether a settlement settled
    its charge), SKIPPED, or the DatabaseError of its own statement when the group's was refused."""
    db = statements_wrapper()  # the leading request's, or the process's: either runs a statement alone
    metrics.grouped(requests=len(items))
    if len(items) == 1:
        kind, params = items[0]
        if kind == CHARGE:
            return [_charged(params, db.run_alone(CHARGE_POSTGRES, _filled(db, kind, params))[0])]
        return [db.run_alone(COMPLETE_POSTGRES, _filled(db, kind, params))[1] == 1]
    try:
        rows, _ = db.run_alone(GROUP_STATEMENT, _group_params(items, _now(db), calendar(db)), every_row=True)
    except (DataError, IntegrityError):
        # One request's row refused by the database (a value a column cannot hold, say, or settlements of
        # one key whose credits given back would pass its maxCredits together): the statement took
        # nothing, so each request runs alone, and only the one at fault fails.
        return [_alone(db, kind, params) for kind, params in items]
    locked, charged, settled = set(), {}, set()
    for answer, number, entry, balance, tokens in rows:
        if answer == ANSWER_LOCKED:
            locked.add(number)
        elif answer == ANSWER_CHARGED:
            charged[number] = (entry, balance, tokens)
        else:
            settled.add(number)

    def outcome(kind: str, params: dict):
        if params["key"] not in locked:
            return SKIPPED
        return _charged(params, charged.get(params["key"])) if kind == CHARGE else params["entry"] in settled

    return [outcome(kind, params) for kind, params in items]


def _alone(db, kind: str, params: dict):
    """One request's statement by itself, for a group the database refused: its outcome, or its error."""
    try:
        if kind == CHARGE:
            return _charged(params, db.run_alone(CHARGE_POSTGRES, _filled(db, kind, params))[0])
        return db.run_alone(COMPLETE_POSTGRES, _filled(db, kind, params))[1] == 1
    except DatabaseError as exc:
        return exc


def _lock_of(item: tuple[str, dict]) -> tuple[int, bool]:
    # A charge needs its key row to itself in a group; settlements of one key share it (one release).
    kind, params = item
    return params["key"], kind == CHARGE


def _in_group(kind: str, params: dict):
    """The request's charge or settlement run in this process's group; SKIPPED when groups are off."""
    if groups.size != settings.METERING_GROUP_SIZE:
        groups.resize(settings.METERING_GROUP_SIZE)
    if groups.coalescer is None:
        return SKIPPED
    try:
        outcome = groups.coalescer.run((kind, params))
    except GroupInterrupted as exc:  # whether the statement took effect is unknown, as when a connection drops
        raise OperationalError(str(exc)) from exc
    if isinstance(outcome, DatabaseError):  # its own statement failed when the group's was refused
        raise outcome
    return outcome


class _Groups:
    """This process's coalescer, made at first use with the group size the settings give then; None when
    METERING_GROUP_SIZE is 1 (each statement alone)."""

    def __init__(self):
        self.size = None
        self.coalescer = None

    def resize(self, size: int) -> None:
        self.size = size
        # Under load, a group about to start yields once (time.sleep(0): in a gevent worker, the other
        # greenlets ready to run go first): those that reach their charge or settlement meanwhile join it.
        self.coalescer = (None if size == 1 else
                          Coalescer(_run_group, max_size=size, lock_of=_lock_of, gather=lambda: time.sleep(0)))


groups = _Groups()


# Token counts above this are not believed (no model reads or writes ten million tokens in one request);
# it is also well inside the usage columns' 4-byte integers.
MAX_TOKENS = 10_000_000
MAX_LATENCY_MS = 2**31 - 1


@dataclass(frozen=True)
class Idempotency:
    """What an Idempotency-Key request claims with its charge."""

    key: str
    request_hash: str


def _now(db):
    return db.ops.adapt_datetimefield_value(clock.utcnow())


def minute_of(epoch: float) -> int:
    """The minute a key's tpm count belongs to: whole minutes since the epoch. Computed from the product's
    clock by the process and compared inside the statements, so every worker and host judges it alike."""
    return int(epoch // 60)


def calendar(db) -> dict:
    """What the statements judge budgets and tpm by, from the product's clock: the starts of the UTC day,
    week and month (``day``, ``week``, ``month``) and the minute since the epoch (``minute``)."""
    minute = minute_of(clock.now())
    return {**{period: db.ops.adapt_datetimefield_value(start) for period, start in _period_starts(minute)},
            "minute": minute}


@functools.lru_cache(maxsize=4)
def _period_starts(minute: int) -> tuple[tuple[str, datetime], ...]:
    # The same for every request of a minute: worked out once a minute, not per request.
    moment = datetime.fromtimestamp(minute * 60, timezone.utc)
    return tuple((period, budget_bounds(period, moment)[0]) for period in BUDGET_PERIODS)


@functools.lru_cache(maxsize=256)  # a catalog has a few sets of terms: each written out once
def _terms(prices: TokenPrices | None) -> dict:
    """A charge row's terms: a token-priced request's fee and unit prices (as text: the exact decimals the
    columns keep), NULL for a request priced by its model's cost alone."""
    if prices is None:
        return {"request_fee": None, "price_input": None, "price_cached_input": None, "price_output": None}
    unit = [str(price) for price in prices.as_decimals()]
    return {"request_fee": prices.request_fee, "price_input": unit[0], "price_cached_input": unit[1],
            "price_output": unit[2]}


def charge(*, key: ApiKey, model: ServedModel, operation: str, amount: int, request_id: str,
           idempotency: Idempotency | None = None, db=None, prices: TokenPrices | None = None,
           retry: bool = True) -> int:
    """Take ``amount`` credits and write the pending charge row; returns the row's id.

    ``amount`` is what the request holds: its model's cost, or with ``prices`` (a token-priced model)
    the most the request can cost, which its settlement brings down to its price. Sets ``key.credits``
    to the balance left, and ``key.tpm_used`` to the tokens its current minute had settled (the minute
    in ``key.tpm_minute``). Raises 401/403/429/402 (in that order of checks) when the key may not be
    charged, 409 when the Idempotency-Key was just claimed. ``db`` is the default database's wrapper
    of this context, when the caller looked it up. ``retry``: whether a refusal the key's row no longer
    explains (its minute or budget period turned meanwhile) may try once more.
    """
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # the context's wrapper, looked up once (connection would each time)
    params = {"amount": amount, "now": _now(db), "key": key.pk, "tier": key.tier, "request_id": request_id,
              "idempotency_key": idempotency.key if idempotency else None, "operation": operation,
              "model": model.model_id, **_terms(prices), **calendar(db)}  # _terms' cached dict: spread, never changed
    if idempotency is None and db.vendor == "postgresql":
        row = _take(params, db)  # one statement in autocommit: no BEGIN/COMMIT round trips
    else:
        row = _take_with_claim(params, db, key=key, idempotency=idempotency)
    if row is None:
        return _refused(key=key, model=model, operation=operation, amount=amount, request_id=request_id,
                        idempotency=idempotency, prices=prices, retry=retry)
    key.credits = row[1]
    key.tpm_minute, key.tpm_used = params["minute"], params.get("minute_tokens") or 0
    auth_cache.note_credits(key.digest, row[1])
    metrics.held(model=model.model_id, credits=amount)
    return row[0]


def _take_with_claim(params: dict, db, *, key: ApiKey, idempotency: Idempotency | None):
    """The charge in a transaction: SQLite's two statements, and the Idempotency-Key's record."""
    try:
        with one_writer_at_a_time(db), transaction.atomic(using=db.alias):
            row = _take(params, db)
            if row is not None and idempotency is not None:
                IdempotentRequest.objects.create(key_id=key.pk, idempotency_key=idempotency.key,
                                                 request_hash=idempotency.request_hash, entry_id=row[0],
                                                 created_at=clock.utcnow())
            return row
    except IntegrityError:
        if idempotency is None:
            raise
        # The same Idempotency-Key was claimed by a request running right now; the rollback
        # took this charge back with the record.
        raise IdempotencyConflict("A request with this Idempotency-Key is still in progress; retry after it "
                                  "completes.", param="Idempotency-Key") from None


def _take(params: dict, db):
    """The charge's (ledger id, balance after), or None when the key's row refused it."""
    if db.vendor == "postgresql":  # parameters bound on the server (utils_app.postgresql)
        if db.can_run_alone():
            row = _in_group(CHARGE, params)
            if row is not SKIPPED:
                return row
        return _charged(params, db.run_one(CHARGE_POSTGRES, params)[0])
    with db.cursor() as cursor:
        cursor.execute(CHARGE_SQLITE[0], params)
        taken = cursor.fetchone()
        if taken is None:
            return None
        cursor.execute(CHARGE_SQLITE[1], {**params, "balance": taken[1]})
        entry, balance = cursor.fetchone()
        return _charged(params, (entry, balance, taken[2]))


def _refused(*, key: ApiKey, model: ServedModel, amount: int, **charge_args) -> int:
    """Why the conditional UPDATE took nothing, read from the row (the refusal path only), in the contract's
    order: revoked (401), tier (403), maxConcurrent and tpm (429), credits and budget (402)."""
    row = ApiKey.objects.filter(pk=key.pk).only(
        "is_active", "tier", "credits", "in_flight", "max_concurrent", "tpm", "tpm_minute", "tpm_used",
        "budget_credits", "budget_period", "budget_spent", "budget_period_start").first()
    if row is None or not row.is_active:
        auth_cache.forget(key.digest)
        raise AuthenticationError("This API key has been revoked.", code="invalid_api_key")
    if row.tier != key.tier:  # changed since this process cached the key: decide on the new tier
        auth_cache.forget(key.digest)
        key.tier = row.tier
        if not key.can_use(model):
            raise AccessDenied(f"Keys of the '{key.tier}' tier may not use the model '{model.model_id}'.",
                               param="model")
        return charge(key=key, model=model, amount=amount, **charge_args)
    key.credits = row.credits
    if row.in_flight >= row.max_concurrent:
        metrics.limit_rejected("maxConcurrent")
        raise ConcurrencyLimited(f"This key already has {row.max_concurrent} request(s) in flight, its "
                                 f"maxConcurrent; retry when one has finished.", param="maxConcurrent",
                                 retry_after=1)
    now = clock.now()
    if row.tpm is not None and row.tpm_minute == minute_of(now) and row.tpm_used >= row.tpm:
        metrics.limit_rejected("tpm")
        raise RateLimited(f"This key has used {row.tpm_used} tokens this minute, its tpm of {row.tpm}; retry "
                          f"when the minute ends.", param="tpm", retry_after=math.ceil(60 - now % 60),
                          headers={"X-RateLimit-Limit-Tokens": str(row.tpm), "X-RateLimit-Remaining-Tokens": "0"})
    if row.credits < amount:
        raise InsufficientCredits(f"This request costs {amount} credit(s) and the key has {row.credits}.")
    budget = row.budget_state(datetime.fromtimestamp(now, timezone.utc))
    if budget is not None and budget.left < amount:
        ends = budget.end.strftime("%Y-%m-%dT%H:%M:%SZ")
        raise BudgetExceeded(
            f"This request holds {amount} credit(s) and the key's budget per {budget.period} has {budget.left} "
            f"left until {ends}.", headers={"X-Budget-Remaining": str(budget.left), "X-Budget-Reset": ends})
    # Nothing refuses it now (its minute or its budget period turned meanwhile): try once more.
    if charge_args.pop("retry"):
        return charge(key=key, model=model, amount=amount, retry=False, **charge_args)
    raise InsufficientCredits(f"This request costs {amount} credit(s) and the key has {row.credits}.")


def clamp_tokens(count) -> int:
    """A token count an upstream reported, made one the usage columns hold (CONTRACT section 5).

    Not an integer, negative, or absurd (2^63 was seen): a settlement must never fail on it, since
    a failed settlement leaves the charge pending and the key's in-flight slot taken until the
    sweeper refunds it, which would make the request free.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return 0
    return min(count, MAX_TOKENS)


@dataclass(frozen=True)
class Also:
    """A row written by the settlement statement itself, only if the charge is settled (the Responses API's
    stored response): ``postgres`` is a data-modifying CTE's body that may select from ``settled`` (the
    settled charge's key_id, amount, request_id), ``sqlite`` the statement run after the settlement in its
    transaction; both take ``params`` (their names must not clash with the settlement's own)."""

    postgres: str
    sqlite: str
    params: dict


def complete(*, entry: int, key: ApiKey, model: ServedModel, operation: str, provider: str, input_tokens: int,
             output_tokens: int, latency_ms: int, cached_tokens: int = 0, deployment: int | None = None,
             status: int = 200, success: bool = True, also: Also | None = None, give: int = 0,
             uncovered: int = 0) -> bool:
    """Settle a charge as completed and record its usage; False when it was no longer pending.

    ``status`` and ``success`` are the usage row's: a stream charged after it broke off records
    the failure it ended with (CONTRACT section 5), a whole answer 200 and success. ``give`` is what
    of the hold goes back to the key (a token-priced request's hold minus its price; the key's
    maxCredits caps it), ``uncovered`` what its price passed the hold by (kept on the row, never
    taken). The request's input and output tokens count for the key's current minute (tpm).
    ``also`` is a row the same statement writes (never grouped: it runs alone).
    """
    db = statements_wrapper()
    params = {"entry": entry, "key": key.pk, "model_pk": model.pk, "operation": operation, "provider": provider,
              "input_tokens": input_tokens, "output_tokens": output_tokens, "cached_tokens": cached_tokens,
              "latency_ms": min(latency_ms, MAX_LATENCY_MS), "give": give, "uncovered": uncovered,
              "tokens": input_tokens + output_tokens, "minute": minute_of(clock.now()),
              "now": _now(db), "status": status, "success": success, "deployment": deployment}
    if also is not None:
        return _complete_with(db, params, also)
    if db.vendor == "postgresql":
        if db.can_run_alone():
            settled = _in_group(SETTLEMENT, params)
            if settled is not SKIPPED:
                return settled
        return db.run_one(COMPLETE_POSTGRES, params)[1] == 1
    with db.cursor() as cursor:
        with one_writer_at_a_time(db), transaction.atomic(using=db.alias):
            return _settle_on_sqlite(cursor, params) is not None


def _settle_on_sqlite(cursor, params: dict) -> tuple | None:
    """SQLite's settlement, in the caller's transaction: the charge row (key_id, amount, request_id) it
    settled, or None when the row was no longer pending."""
    cursor.execute(COMPLETE_SQLITE[0], params)
    settled = cursor.fetchone()
    if settled is None:
        return None
    _, amount, request_id, given, same_period = settled
    cursor.execute(COMPLETE_SQLITE[1], {**params, "given": given, "budget": given if same_period else 0})
    cursor.execute(COMPLETE_SQLITE[2], {**params, "credits": -amount, "request_id": request_id})
    return settled


def _complete_with(db, params: dict, also: Also) -> bool:
    """complete() with one more row written by the settlement: one statement on PostgreSQL, one transaction
    on SQLite."""
    params = {**params, **also.params}
    if db.vendor == "postgresql":
        statement = COMPLETE_POSTGRES.replace(" INSERT INTO ", f", also AS ({also.postgres}) INSERT INTO ", 1)
        return db.run_one(statement, params)[1] == 1
    with db.cursor() as cursor:
        with one_writer_at_a_time(db), transaction.atomic(using=db.alias):
            settled = _settle_on_sqlite(cursor, params)
            if settled is None:
                return False
            cursor.execute(also.sqlite, {**params, "key_id": settled[0], "request_id": settled[2]})
            return True


def refund(*, entry: int, status: str = LedgerEntry.REFUNDED, usage: dict | None = None,
           latency_ms: int | None = None, provider: str = "", deployment: int | None = None) -> int | None:
    """Give a pending charge back: mark it ``status`` (refunded or abandoned), restore its credits up to
    the key's maxCredits, write the refund row and, when given, the usage event of the failure.

    Returns the key's balance after, or None when the charge was no longer pending.
    """
    now = clock.utcnow()
    with one_writer_at_a_time(connection), transaction.atomic():
        charged = (LedgerEntry.objects.select_for_update().filter(pk=entry, status=LedgerEntry.PENDING)
                   .only("id", "key_id", "amount", "model", "request_id", "created_at").first())
        if charged is None:
            return None
        key = ApiKey.objects.select_for_update().only(
            "id", "digest", "credits", "max_credits", "in_flight", "budget_spent", "budget_period_start").get(
            pk=charged.key_id)
        # Never above maxCredits (an edit may have lowered it meanwhile), never below what the key has.
        restored = max(0, min(-charged.amount, key.max_credits - key.credits))
        key.credits += restored
        key.in_flight = max(0, key.in_flight - 1)
        # The budget gets back what the key got back, when the charge was held in the key's current period.
        if key.budget_period_start is not None and charged.created_at >= key.budget_period_start:
            key.budget_spent = max(0, key.budget_spent - restored)
        key.save(update_fields=["credits", "in_flight", "budget_spent"])
        LedgerEntry.objects.filter(pk=entry).update(status=status, settled_at=now, latency_ms=latency_ms,
                                                    provider=provider, deployment_id=deployment)
        LedgerEntry.objects.create(key_id=key.pk, kind=LedgerEntry.REFUND, amount=restored,
                                   balance_after=key.credits, charge_id=entry, created_at=now, settled_at=now,
                                   actor="" if status == LedgerEntry.REFUNDED else "settle_stale")
        # A retry with the same Idempotency-Key runs anew after a failure.
        IdempotentRequest.objects.filter(entry_id=entry).delete()
        if usage is not None:
            UsageEvent.objects.create(key_id=key.pk, created_at=now, request_id=charged.request_id, **usage)
    metrics.refunded(model=charged.model, credits=restored)  # outside the block: a rollback counts nothing
    auth_cache.note_credits(key.digest, key.credits)  # what a refusal before the next charge reports
    return key.credits
