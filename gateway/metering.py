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
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

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
from keys.models import ApiKey, IdempotentRequest, LedgerEntry
from models_catalog.models import AiModel, UsageEvent
from utils_app import clock, metrics
from utils_app.coalesce import Coalescer, GroupInterrupted
from utils_app.db import one_writer_at_a_time, statements_wrapper
from utils_app.errors import (
    AccessDenied,
    AuthenticationError,
    ConcurrencyLimited,
    IdempotencyConflict,
    InsufficientCredits,
)

log = logging.getLogger("gateway.metering")

KEYS = ApiKey._meta.db_table
LEDGER = LedgerEntry._meta.db_table
USAGE = UsageEvent._meta.db_table

_TAKE = (f"UPDATE {KEYS} SET credits = credits - %(amount)s, in_flight = in_flight + 1, last_used_at = %(now)s "
         f"WHERE id = %(key)s AND is_active AND tier = %(tier)s AND credits >= %(amount)s "
         f"AND in_flight < max_concurrent")
_ENTRY_COLUMNS = ("key_id, kind, amount, balance_after, status, actor, request_id, idempotency_key, operation, "
                  "model, provider, created_at")
_ENTRY_VALUES = ("'charge', -%(amount)s, {balance}, 'pending', '', %(request_id)s, %(idempotency_key)s, "
                 "%(operation)s, %(model)s, '', %(now)s")
CHARGE_POSTGRES = (f"WITH taken AS ({_TAKE} RETURNING id, credits) "
                   f"INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
                   f"SELECT id, {_ENTRY_VALUES.format(balance='credits')} FROM taken RETURNING id, balance_after")
CHARGE_SQLITE = (f"{_TAKE} RETURNING credits",
                 f"INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
                 f"VALUES (%(key)s, {_ENTRY_VALUES.format(balance='%(balance)s')}) RETURNING id, balance_after")

_COMPLETE = (f"UPDATE {LEDGER} SET status = 'completed', settled_at = %(now)s, input_tokens = %(input_tokens)s, "
             f"output_tokens = %(output_tokens)s, latency_ms = %(latency_ms)s, provider = %(provider)s, "
             f"deployment_id = %(deployment)s "
             f"WHERE id = %(entry)s AND status = 'pending' RETURNING key_id, amount, request_id")
_RELEASE = f"UPDATE {KEYS} SET in_flight = CASE WHEN in_flight > 0 THEN in_flight - 1 ELSE 0 END WHERE id = "
# The usage row takes the request id from the charge row it settles: no parameter can disagree with the ledger.
_USAGE_COLUMNS = ("key_id, model_id, operation, status, success, input_tokens, output_tokens, cached_tokens, "
                  "credits_charged, latency_ms, provider, deployment_id, created_at, request_id")
_USAGE_VALUES = ("%(model_pk)s, %(operation)s, %(status)s, %(success)s, %(input_tokens)s, %(output_tokens)s, "
                 "%(cached_tokens)s, {credits}, "
                 "%(latency_ms)s, %(provider)s, %(deployment)s, %(now)s, {request_id}")
COMPLETE_POSTGRES = (f"WITH settled AS ({_COMPLETE}), "
                     f"released AS ({_RELEASE} (SELECT key_id FROM settled)) "
                     f"INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
                     f"SELECT key_id, {_USAGE_VALUES.format(credits='-amount', request_id='request_id')} FROM settled")
COMPLETE_SQLITE = (_COMPLETE, f"{_RELEASE} %(key)s",
                   f"INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
                   f"VALUES (%(key)s, {_USAGE_VALUES.format(credits='%(credits)s', request_id='%(request_id)s')})")


# What each request of a group brings to its statement, a charge or a settlement: one array per column.
_GROUP_CHARGE = (("key", "int8"), ("tier", "text"), ("amount", "int8"), ("request_id", "text"),
                 ("operation", "text"), ("model", "text"))
_GROUP_SETTLEMENT = (("entry", "int8"), ("key", "int8"), ("model_pk", "int8"), ("operation", "text"),
                     ("status", "int4"), ("success", "bool"), ("input_tokens", "int4"), ("output_tokens", "int4"),
                     ("cached_tokens", "int4"), ("latency_ms", "int4"), ("provider", "text"),
                     ("deployment", "int8"))


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
# completed, each key's in-flight count released once for each of its rows (as that many single
# releases would, never below zero), and the usage rows inserted (their statement trigger adds them
# to the rollups, locking those rows in the one order every statement takes them in). A charge and
# a settlement of one key are never in one group: a statement cannot update a row twice.
#
# The rows come as arrays, one per column, so that the statement is one text whatever the group's
# size, and a group of one kind sends the other's as empty arrays: each connection prepares and
# plans one statement, which PostgreSQL runs on its generic plan. Statements of one kind, prepared
# apart, were planned anew for their parameters at almost every execution (their generic plans,
# sized for ten rows of each array, cost more than plans for the few rows they had), about a third
# of a millisecond each (docs/performance.md).
#
# The answer is what the statement did, one row each (ANSWER_LOCKED, a key it locked), (ANSWER_CHARGED,
# a key charged, its new ledger row, the balance after) and (ANSWER_SETTLED, an entry settled), read
# from the CTEs as they ran; a charge or settlement it names nowhere was refused by its key's row, or
# left to run alone when the key was not locked (_run_group). Matching the answer to the requests
# here rather than in the statement keeps four joins, and their start-up at every execution, out of
# the database's work.
ANSWER_LOCKED, ANSWER_CHARGED, ANSWER_SETTLED = 0, 1, 2
GROUP_STATEMENT = (
    f"WITH {_rows('c', _GROUP_CHARGE)}, {_rows('s', _GROUP_SETTLEMENT)}, "
    f"locked AS (SELECT id FROM {KEYS} WHERE id = ANY(%(c_key)s::int8[] || %(s_key)s::int8[]) "
    f"FOR NO KEY UPDATE SKIP LOCKED), "
    f"taken AS (UPDATE {KEYS} k SET credits = k.credits - c.amount, in_flight = k.in_flight + 1, "
    f"last_used_at = %(now)s FROM c, locked WHERE k.id = c.key AND locked.id = c.key AND k.is_active "
    f"AND k.tier = c.tier AND k.credits >= c.amount AND k.in_flight < k.max_concurrent "
    f"RETURNING k.id, k.credits, c.amount, c.request_id, c.operation, c.model), "
    f"charged AS (INSERT INTO {LEDGER} ({_ENTRY_COLUMNS}) "
    f"SELECT id, 'charge', -amount, credits, 'pending', '', request_id, NULL, operation, model, '', "
    f"%(now)s FROM taken RETURNING key_id, id, balance_after), "
    f"settled AS (UPDATE {LEDGER} l SET status = 'completed', settled_at = %(now)s, "
    f"input_tokens = s.input_tokens, output_tokens = s.output_tokens, latency_ms = s.latency_ms, "
    f"provider = s.provider, deployment_id = s.deployment FROM s, locked WHERE l.id = s.entry "
    f"AND l.key_id = s.key AND locked.id = s.key AND l.status = 'pending' "
    f"RETURNING l.id, l.key_id, l.amount, l.request_id, s.model_pk, s.operation, s.status, s.success, "
    f"s.input_tokens, s.output_tokens, s.cached_tokens, s.latency_ms, s.provider, s.deployment), "
    f"released AS (UPDATE {KEYS} k SET in_flight = CASE WHEN k.in_flight > n.settled "
    f"THEN k.in_flight - n.settled ELSE 0 END FROM (SELECT key_id, count(*) AS settled FROM settled "
    f"GROUP BY key_id) n WHERE k.id = n.key_id), "
    f"recorded AS (INSERT INTO {USAGE} ({_USAGE_COLUMNS}) "
    f"SELECT key_id, model_pk, operation, status, success, input_tokens, output_tokens, cached_tokens, "
    f"-amount, latency_ms, provider, deployment, %(now)s, request_id FROM settled) "
    f"SELECT {ANSWER_LOCKED}, id, NULL::int8, NULL::int8 FROM locked "
    f"UNION ALL SELECT {ANSWER_CHARGED}, key_id, id, balance_after FROM charged "
    f"UNION ALL SELECT {ANSWER_SETTLED}, id, NULL, NULL FROM settled")


# What a group answers for a request whose key row another transaction held: its statement runs alone.
SKIPPED = object()
CHARGE, SETTLEMENT = "charge", "settlement"


_COLUMNS = {CHARGE: [(f"c_{column}", column) for column, _ in _GROUP_CHARGE],
            SETTLEMENT: [(f"s_{column}", column) for column, _ in _GROUP_SETTLEMENT]}


def _group_params(items: Sequence[tuple[str, dict]], now) -> dict:
    """GROUP_STATEMENT's parameters for the group: one array per column of each kind (empty for a kind it lacks)."""
    params = {"now": now}
    for kind, columns in _COLUMNS.items():
        rows = [item for item_kind, item in items if item_kind == kind]
        for name, column in columns:
            params[name] = [row[column] for row in rows]
    return params


def _run_group(items: Sequence[tuple[str, dict]]) -> list:
    """A group's work: for each (kind, params) its outcome, as the statement alone would answer it (a
    charge's (ledger id, balance after) or None where the key refused it; whether a settlement settled
    its charge), SKIPPED, or the DatabaseError of its own statement when the group's was refused."""
    db = statements_wrapper()  # the leading request's, or the process's: either runs a statement alone
    metrics.grouped(requests=len(items))
    if len(items) == 1:
        kind, params = items[0]
        if kind == CHARGE:
            return [db.run_alone(CHARGE_POSTGRES, params)[0]]
        return [db.run_alone(COMPLETE_POSTGRES, params)[1] == 1]
    try:
        rows, _ = db.run_alone(GROUP_STATEMENT, _group_params(items, _now(db)), every_row=True)
    except (DataError, IntegrityError):
        # One request's row refused by the database (a value a column cannot hold, say): the statement
        # took nothing, so each request runs alone, and only the one at fault fails.
        return [_alone(db, kind, params) for kind, params in items]
    locked, charged, settled = set(), {}, set()
    for answer, number, entry, balance in rows:
        if answer == ANSWER_LOCKED:
            locked.add(number)
        elif answer == ANSWER_CHARGED:
            charged[number] = (entry, balance)
        else:
            settled.add(number)

    def outcome(kind: str, params: dict):
        if params["key"] not in locked:
            return SKIPPED
        return charged.get(params["key"]) if kind == CHARGE else params["entry"] in settled

    return [outcome(kind, params) for kind, params in items]


def _alone(db, kind: str, params: dict):
    """One request's statement by itself, for a group the database refused: its outcome, or its error."""
    try:
        if kind == CHARGE:
            return db.run_alone(CHARGE_POSTGRES, params)[0]
        return db.run_alone(COMPLETE_POSTGRES, params)[1] == 1
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


def charge(*, key: ApiKey, model: AiModel, operation: str, amount: int, request_id: str,
           idempotency: Idempotency | None = None, db=None) -> int:
    """Take ``amount`` credits and write the pending charge row; returns the row's id.

    Sets ``key.credits`` to the balance left. Raises 401/403/429/402 (in that order of
    checks) when the key may not be charged, 409 when the Idempotency-Key was just claimed.
    ``db`` is the default database's wrapper of this context, when the caller looked it up.
    """
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # the context's wrapper, looked up once (connection would each time)
    params = {"amount": amount, "now": _now(db), "key": key.pk, "tier": key.tier, "request_id": request_id,
              "idempotency_key": idempotency.key if idempotency else None, "operation": operation,
              "model": model.model_id}
    if idempotency is None and db.vendor == "postgresql":
        row = _take(params, db)  # one statement in autocommit: no BEGIN/COMMIT round trips
    else:
        row = _take_with_claim(params, db, key=key, idempotency=idempotency)
    if row is None:
        return _refused(key=key, model=model, operation=operation, amount=amount, request_id=request_id,
                        idempotency=idempotency)
    key.credits = row[1]
    auth_cache.note_credits(key.digest, row[1])
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
    if db.vendor == "postgresql":  # parameters bound on the server (utils_app.postgresql)
        if db.can_run_alone():
            row = _in_group(CHARGE, params)
            if row is not SKIPPED:
                return row
        return db.run_one(CHARGE_POSTGRES, params)[0]
    with db.cursor() as cursor:
        cursor.execute(CHARGE_SQLITE[0], params)
        taken = cursor.fetchone()
        if taken is None:
            return None
        cursor.execute(CHARGE_SQLITE[1], {**params, "balance": taken[0]})
        return cursor.fetchone()


def _refused(*, key: ApiKey, model: AiModel, amount: int, **charge_args) -> int:
    """Why the conditional UPDATE took nothing, read from the row (the refusal path only)."""
    row = ApiKey.objects.filter(pk=key.pk).values("is_active", "tier", "credits", "in_flight",
                                                  "max_concurrent").first()
    if row is None or not row["is_active"]:
        auth_cache.forget(key.digest)
        raise AuthenticationError("This API key has been revoked.", code="invalid_api_key")
    if row["tier"] != key.tier:  # changed since this process cached the key: decide on the new tier
        auth_cache.forget(key.digest)
        key.tier = row["tier"]
        if not key.can_use(model):
            raise AccessDenied(f"Keys of the '{key.tier}' tier may not use the model '{model.model_id}'.",
                               param="model")
        return charge(key=key, model=model, amount=amount, **charge_args)
    key.credits = row["credits"]
    if row["in_flight"] >= row["max_concurrent"]:
        metrics.limit_rejected("maxConcurrent")
        raise ConcurrencyLimited(f"This key already has {row['max_concurrent']} request(s) in flight, its "
                                 f"maxConcurrent; retry when one has finished.", param="maxConcurrent",
                                 retry_after=1)
    raise InsufficientCredits(f"This request costs {amount} credit(s) and the key has {row['credits']}.")


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


def complete(*, entry: int, key: ApiKey, model: AiModel, operation: str, provider: str, input_tokens: int,
             output_tokens: int, latency_ms: int, cached_tokens: int = 0, deployment: int | None = None,
             status: int = 200, success: bool = True, also: Also | None = None) -> bool:
    """Settle a charge as completed and record its usage; False when it was no longer pending.

    ``status`` and ``success`` are the usage row's: a stream charged after it broke off records
    the failure it ended with (CONTRACT section 5), a whole answer 200 and success. ``also`` is a row
    the same statement writes (never grouped: it runs alone).
    """
    db = statements_wrapper()
    params = {"entry": entry, "key": key.pk, "model_pk": model.pk, "operation": operation, "provider": provider,
              "input_tokens": input_tokens, "output_tokens": output_tokens, "cached_tokens": cached_tokens,
              "latency_ms": min(latency_ms, MAX_LATENCY_MS),
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
            cursor.execute(COMPLETE_SQLITE[0], params)
            settled = cursor.fetchone()
            if settled is None:
                return False
            cursor.execute(COMPLETE_SQLITE[1], params)
            cursor.execute(COMPLETE_SQLITE[2], {**params, "credits": -settled[1], "request_id": settled[2]})
            return True


def _complete_with(db, params: dict, also: Also) -> bool:
    """complete() with one more row written by the settlement: one statement on PostgreSQL, one transaction
    on SQLite."""
    params = {**params, **also.params}
    if db.vendor == "postgresql":
        statement = COMPLETE_POSTGRES.replace(" INSERT INTO ", f", also AS ({also.postgres}) INSERT INTO ", 1)
        return db.run_one(statement, params)[1] == 1
    with db.cursor() as cursor:
        with one_writer_at_a_time(db), transaction.atomic(using=db.alias):
            cursor.execute(COMPLETE_SQLITE[0], params)
            settled = cursor.fetchone()
            if settled is None:
                return False
            cursor.execute(COMPLETE_SQLITE[1], params)
            cursor.execute(COMPLETE_SQLITE[2], {**params, "credits": -settled[1], "request_id": settled[2]})
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
                   .only("id", "key_id", "amount", "model", "request_id").first())
        if charged is None:
            return None
        key = ApiKey.objects.select_for_update().only("id", "digest", "credits", "max_credits", "in_flight").get(
            pk=charged.key_id)
        # Never above maxCredits (an edit may have lowered it meanwhile), never below what the key has.
        restored = max(0, min(-charged.amount, key.max_credits - key.credits))
        key.credits += restored
        key.in_flight = max(0, key.in_flight - 1)
        key.save(update_fields=["credits", "in_flight"])
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
