"""The text of the metering statements (gateway.metering), each rule written once.

The charge, the settlement and the refund are each defined here once, as the writes they make to the
key row and the rows they add, over a request's values named by a function (``v``): a parameter of the
statement alone (``%(amount)s``) or a column of the request's row (``c.amount``). From those
definitions come:

- on PostgreSQL, one statement of data-modifying CTEs per use: CHARGE and SETTLEMENT for a request
  alone, GROUP_STATEMENT for the requests a process groups (gateway.metering_groups). The three
  differ only in where the requests' rows come from (one row of parameters, or one array per
  column), how the key rows are locked (waiting, or SKIP LOCKED) and which answer rows they give;
- on SQLite, which has no data-modifying CTE, the same writes as statements run one after the other
  in one transaction (CHARGE_SQLITE, SETTLEMENT_SQLITE).

The refund is the settlement's twin for a request that failed: REFUND (REFUND_SQLITE) is the
settlement's release of the key row with the whole hold as what goes back and no tokens counted; the
cap by maxCredits, the in-flight release and the budget rule are the settlement's (``_given``,
``_release_sets``). gateway.metering runs it in the transaction that marks the charge refunded (or
abandoned) and writes the refund row with what it restored.

What the statements judge time by (the budget periods, the tpm minute) comes from the product's clock
through ``calendar``.
"""
import functools
from collections.abc import Callable
from datetime import datetime, timezone

from keys.models import BUDGET_PERIODS, ApiKey, LedgerEntry, budget_bounds
from models_catalog.models import UsageEvent
from utils_app import clock

KEYS = ApiKey._meta.db_table
LEDGER = LedgerEntry._meta.db_table
USAGE = UsageEvent._meta.db_table

Names = Callable[[str], str]  # how a statement names one of a request's values


def param(name: str) -> str:
    return f"%({name})s"


# ---------------------------------------------------------------------------------------------- the charge
# The key row's conditions and writes of a charge (``k``: the key row's alias and dot, or nothing). The
# amount is what the charge holds: a per-request model's cost, or a token-priced request's most (CONTRACT
# section 12).
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

# What a request brings to its charge, with each value's type on PostgreSQL.
CHARGE_VALUES = (("key", "int8"), ("tier", "text"), ("amount", "int8"), ("request_id", "text"),
                 ("idempotency_key", "text"), ("operation", "text"), ("model", "text"), ("request_fee", "int8"),
                 ("price_input", "numeric"), ("price_cached_input", "numeric"), ("price_output", "numeric"))


def _charge_entry(v: Names) -> tuple[str, str]:
    """The pending charge row, as (columns, values). It keeps what it held, which its settlement compares
    the price with; a token-priced one also its terms (the request fee and the unit prices it was held
    at, NULL for a per-request model), so a later price change never rewrites what it was charged."""
    row = {"key_id": v("key"), "kind": "'charge'", "amount": f"-{v('amount')}", "balance_after": v("balance"),
           "status": "'pending'", "actor": "''", "request_id": v("request_id"),
           "idempotency_key": v("idempotency_key"), "operation": v("operation"), "model": v("model"),
           "provider": "''", "created_at": "%(now)s", "held": v("amount"), "request_fee": v("request_fee"),
           "price_input": v("price_input"), "price_cached_input": v("price_cached_input"),
           "price_output": v("price_output")}
    return ", ".join(row), ", ".join(row.values())


# ------------------------------------------------------------------------------------------ the settlement
# The settlement keeps the request's price and gives the rest of the hold back: ``give`` is the hold
# minus the price (0 when the price reached the hold), ``uncovered`` what the price passed the hold by,
# written on the row and never taken. What is given back is capped at what keeps the key within
# maxCredits (a refill or an edit may have raised its balance meanwhile, CONTRACT section 5), and the
# charge row's amount becomes what the key was actually charged: the balance stays the sum of the
# ledger. The budget gets back what the key got back when the charge was taken in the key's current
# period (a period opened since counts from 0 and never held it); the request's tokens go to the key's
# current minute, for tpm.
SETTLEMENT_VALUES = (("entry", "int8"), ("key", "int8"), ("model_pk", "int8"), ("operation", "text"),
                     ("status", "int4"), ("success", "bool"), ("input_tokens", "int4"), ("output_tokens", "int4"),
                     ("cached_tokens", "int4"), ("latency_ms", "int4"), ("provider", "text"),
                     ("deployment", "int8"), ("give", "int8"), ("uncovered", "int8"))
# What a request built by hand may leave out (a per-request charge's terms, a settlement that gives nothing
# back): its values for it.
DEFAULTS = {"idempotency_key": None, "request_fee": None, "price_input": None, "price_cached_input": None,
            "price_output": None, "give": 0, "uncovered": 0}
_SETTLED_COLUMNS = ("input_tokens", "output_tokens", "cached_tokens", "latency_ms", "provider", "uncovered")


def _given(give: str, *, postgres: bool, headroom: str = "k.max_credits - k.credits") -> str:
    """What of ``give`` goes back to the key: never above its maxCredits (an edit may have lowered it, a
    refill raised its balance meanwhile), never below nothing."""
    return f"LEAST({give}, GREATEST({headroom}, 0))" if postgres else f"MIN({give}, MAX({headroom}, 0))"


def _settle_sets(v: Names) -> str:
    """The charge row's writes of a settlement."""
    sets = ", ".join(f"{column} = {v(column)}" for column in _SETTLED_COLUMNS)
    return f"status = 'completed', settled_at = %(now)s, {sets}, deployment_id = {v('deployment')}"


def _release_sets(*, settled: str, given: str, budget: str, tokens: str | None) -> str:
    """The key row's writes of settlements (or refunds: no ``tokens``): in flight released, credits given
    back, budget and minute."""
    sets = (f"in_flight = CASE WHEN k.in_flight > {settled} THEN k.in_flight - {settled} ELSE 0 END, "
            f"credits = k.credits + {given}, "
            f"budget_spent = CASE WHEN k.budget_spent > {budget} THEN k.budget_spent - {budget} ELSE 0 END")
    if tokens is None:
        return sets
    return (f"{sets}, tpm_used = CASE WHEN k.tpm_minute = %(minute)s THEN k.tpm_used + {tokens} ELSE {tokens} END, "
            f"tpm_minute = %(minute)s")


def _same_period(charged_at: str) -> str:
    """Whether a charge made at ``charged_at`` was held in its key's current budget period."""
    return f"k.budget_period_start IS NOT NULL AND {charged_at} >= k.budget_period_start"


def _usage_row(v: Names) -> tuple[str, str]:
    """The usage row of a settled charge, as (columns, values); its request id is the charge row's, so no
    parameter can disagree with the ledger."""
    row = {"key_id": v("key"), "model_id": v("model_pk"), "operation": v("operation"), "status": v("status"),
           "success": v("success"), "input_tokens": v("input_tokens"), "output_tokens": v("output_tokens"),
           "cached_tokens": v("cached_tokens"), "credits_charged": f"-{v('amount')}", "latency_ms": v("latency_ms"),
           "provider": v("provider"), "deployment_id": v("deployment"), "created_at": "%(now)s",
           "request_id": v("request_id")}
    return ", ".join(row), ", ".join(row.values())


# ------------------------------------------------------------------------------- PostgreSQL: one statement
# The answer is what the statement did, one row each (ANSWER_LOCKED, a key a group locked), (ANSWER_CHARGED,
# a key charged, its new ledger row, the balance after, the tokens of the key's minute) and
# (ANSWER_SETTLED, an entry settled), read from the CTEs as they ran; a charge or settlement it names
# nowhere was refused by its key's row, or, in a group, left to run alone when the key was not locked.
# Matching the answer to the requests in the process rather than in the statement keeps joins, and
# their start-up at every execution, out of the database's work.
ANSWER_LOCKED, ANSWER_CHARGED, ANSWER_SETTLED = 0, 1, 2


def _rows(name: str, values: tuple[tuple[str, str], ...], *, grouped: bool) -> str:
    """A CTE of the requests' rows of one kind: one row of the statement's parameters, or for a group the
    rows zipped from one array parameter per value (``c_amount``...)."""
    if not grouped:
        return f"{name} AS (SELECT {', '.join(f'%({column})s::{kind} AS {column}' for column, kind in values)})"
    arrays = ", ".join(f"%({name}_{column})s::{kind}[]" for column, kind in values)
    return f"{name} AS (SELECT * FROM unnest({arrays}) AS {name} ({', '.join(column for column, _ in values)}))"


def _charge_ctes(*, grouped: bool) -> str:
    """``taken`` (the key rows charged) and ``charged`` (their pending rows), from the requests' rows ``c``.
    A group takes only the keys it locked; alone, the UPDATE waits for its key row."""
    joined = ", locked" if grouped else ""
    only_locked = "locked.id = c.key AND " if grouped else ""
    carried = ", ".join(f"c.{column}" for column, _ in CHARGE_VALUES if column not in ("key", "tier"))
    columns, values = _charge_entry(lambda name: {"key": "id", "balance": "credits"}.get(name, name))
    return (f"taken AS (UPDATE {KEYS} k SET {_TAKE_SETS.format(k='k.', amount='c.amount')} FROM c{joined} "
            f"WHERE k.id = c.key AND {only_locked}{_TAKE_WHERE.format(k='k.', amount='c.amount', tier='c.tier')} "
            f"RETURNING k.id, k.credits, {_MINUTE_TOKENS.format(k='k.')} AS tokens, {carried}), "
            f"charged AS (INSERT INTO {LEDGER} ({columns}) SELECT {values} FROM taken "
            f"RETURNING key_id, id, balance_after)")


def _settlement_ctes() -> str:
    """``settled`` (the charge rows still pending, completed), ``released`` (their keys: each key's in-flight
    count released once for each of its rows, as that many single releases would, and the credits given
    back) and ``recorded`` (the usage rows: their statement trigger adds them to the rollups, locking those
    rows in the one order every statement takes them in), from the requests' rows ``s`` and their key rows
    as ``locked`` holds them: what is given back is computed from the key's balance under the lock."""
    given = _given("s.give", postgres=True)
    carried = ", ".join(f"s.{column}" for column, _ in SETTLEMENT_VALUES
                        if column not in ("entry", "key", "give", "uncovered"))
    columns, values = _usage_row(lambda name: "key_id" if name == "key" else name)
    return (f"settled AS (UPDATE {LEDGER} l SET amount = l.amount + {given}, {_settle_sets(lambda n: f's.{n}')} "
            f"FROM s, locked k WHERE l.id = s.entry AND l.key_id = s.key AND k.id = s.key AND l.status = 'pending' "
            f"RETURNING l.id, l.key_id, l.amount, l.request_id, {given} AS given, "
            f"CASE WHEN {_same_period('l.created_at')} THEN {given} ELSE 0 END AS budget, {carried}), "
            f"released AS (UPDATE {KEYS} k SET "
            f"{_release_sets(settled='n.settled', given='n.given', budget='n.budget', tokens='n.tokens')} "
            f"FROM (SELECT key_id, count(*) AS settled, sum(given)::int8 AS given, sum(budget)::int8 AS budget, "
            f"sum(input_tokens + output_tokens)::int8 AS tokens FROM settled GROUP BY key_id) n "
            f"WHERE k.id = n.key_id), "
            f"recorded AS (INSERT INTO {USAGE} ({columns}) SELECT {values} FROM settled)")


_ANSWER_CHARGED = (f"SELECT {ANSWER_CHARGED}, charged.key_id, charged.id, charged.balance_after, taken.tokens "
                   f"FROM charged JOIN taken ON taken.id = charged.key_id")
_ANSWER_SETTLED = f"SELECT {ANSWER_SETTLED}, id, NULL::int8, NULL::int8, NULL::int8 FROM settled"

# A charge alone: its answer is its ANSWER_CHARGED row, none when the key's row refused it.
CHARGE = f"WITH {_rows('c', CHARGE_VALUES, grouped=False)}, {_charge_ctes(grouped=False)} {_ANSWER_CHARGED}"


def settlement(also: str = "") -> str:
    """A settlement alone: its answer is its ANSWER_SETTLED row, none when the charge was no longer pending.
    The charge row and its key's are locked first, together and only while the row is still pending, and
    the statement waits for them. ``also``: the body of one more data-modifying CTE (gateway.metering.Also),
    which may read ``settled`` (its key_id, amount, request_id)."""
    locked = (f"locked AS (SELECT k.id, k.credits, k.max_credits, k.budget_period_start FROM {LEDGER} l "
              f"JOIN s ON l.id = s.entry JOIN {KEYS} k ON k.id = l.key_id WHERE l.status = 'pending' "
              f"FOR NO KEY UPDATE OF l, k)")
    also = f", also AS ({also})" if also else ""
    return (f"WITH {_rows('s', SETTLEMENT_VALUES, grouped=False)}, {locked}, {_settlement_ctes()}{also} "
            f"{_ANSWER_SETTLED}")


SETTLEMENT = settlement()

# A group: charges (one per key) and settlements of other keys' charges. Its keys are locked first, SKIP
# LOCKED: a key row another transaction holds (another process's statement, a refund, a staff edit) is
# left out, so a group never waits for a key row, and the request left out runs its statement alone,
# waiting as it always did. A charge and a settlement of one key are never in one group: a statement
# cannot update a row twice. Two settlements of one key capped by its maxCredits together are refused by
# the key's check constraint, and then each runs alone (gateway.metering_groups).
#
# The rows come as arrays, one per value, so that the statement is one text whatever the group's size,
# and a group of one kind sends the other's as empty arrays: each connection prepares and plans one
# statement, which PostgreSQL runs on its generic plan. Statements of one kind, prepared apart, were
# planned anew for their parameters at almost every execution (their generic plans, sized for ten rows
# of each array, cost more than plans for the few rows they had), about a third of a millisecond each.
GROUP_STATEMENT = (
    f"WITH {_rows('c', CHARGE_VALUES, grouped=True)}, {_rows('s', SETTLEMENT_VALUES, grouped=True)}, "
    f"locked AS (SELECT id, credits, max_credits, budget_period_start FROM {KEYS} "
    f"WHERE id = ANY(%(c_key)s::int8[] || %(s_key)s::int8[]) FOR NO KEY UPDATE SKIP LOCKED), "
    f"{_charge_ctes(grouped=True)}, {_settlement_ctes()} "
    f"SELECT {ANSWER_LOCKED}, id, NULL::int8, NULL::int8, NULL::int8 FROM locked "
    f"UNION ALL {_ANSWER_CHARGED} UNION ALL {_ANSWER_SETTLED}")


# --------------------------------------------------------------------- SQLite: the same writes, one by one
# One writer at a time, in a transaction: the key row read inside the ledger's UPDATE is the one the next
# UPDATE changes.
_entry_columns, _entry_values = _charge_entry(param)
CHARGE_SQLITE = (f"UPDATE {KEYS} SET {_TAKE_SETS.format(k='', amount='%(amount)s')} WHERE id = %(key)s AND "
                 f"{_TAKE_WHERE.format(k='', amount='%(amount)s', tier='%(tier)s')} "
                 f"RETURNING id, credits, {_MINUTE_TOKENS.format(k='')} AS tokens",
                 f"INSERT INTO {LEDGER} ({_entry_columns}) VALUES ({_entry_values}) RETURNING id, balance_after")
_HEADROOM_SQLITE = f"(SELECT max_credits - credits FROM {KEYS} WHERE id = key_id)"
_GIVEN_SQLITE = _given("%(give)s", postgres=False, headroom=_HEADROOM_SQLITE)
_usage_columns, _usage_values = _usage_row(param)
_TOKENS_SQLITE = "(%(input_tokens)s + %(output_tokens)s)"
SETTLEMENT_SQLITE = (
    f"UPDATE {LEDGER} SET amount = amount + {_GIVEN_SQLITE}, {_settle_sets(param)} "
    f"WHERE id = %(entry)s AND status = 'pending' RETURNING key_id, amount, request_id, {_GIVEN_SQLITE}, "
    f"COALESCE(created_at >= (SELECT budget_period_start FROM {KEYS} WHERE id = key_id), 0)",
    f"UPDATE {KEYS} AS k SET "
    f"{_release_sets(settled='1', given='%(given)s', budget='%(budget)s', tokens=_TOKENS_SQLITE)} WHERE id = %(key)s",
    f"INSERT INTO {USAGE} ({_usage_columns}) VALUES ({_usage_values})")



# ---------------------------------------------------------------------------------------------- the refund
def _refund(*, postgres: bool) -> str:
    """The key row's writes of a refund, on a key row its caller has locked: the settlement's release with
    the whole hold (``give``) as what goes back, and no tokens counted. Its answer is the balance after."""
    given = _given("%(give)s", postgres=postgres)
    budget = f"CASE WHEN {_same_period('%(charged_at)s')} THEN {given} ELSE 0 END"
    return (f"UPDATE {KEYS} AS k SET {_release_sets(settled='1', given=given, budget=budget, tokens=None)} "
            f"WHERE k.id = %(key)s RETURNING credits")


REFUND = _refund(postgres=True)
REFUND_SQLITE = _refund(postgres=False)


# ----------------------------------------------------------------------------------------------- the clock
def minute_of(epoch: float) -> int:
    """The minute a key's tpm count belongs to: whole minutes since the epoch. Computed from the product's
    clock by the process and compared inside the statements, so every worker and host judges it alike."""
    return int(epoch // 60)


def now(db) -> object:
    """The time written on the rows, as the database's driver takes it."""
    return db.ops.adapt_datetimefield_value(clock.utcnow())


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
