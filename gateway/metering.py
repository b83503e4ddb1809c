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

The statements' text, each rule written once for every use, is gateway.metering_sql; on PostgreSQL the
charges and settlements of a process's concurrent requests are grouped by gateway.metering_groups.
"""
import functools
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timezone

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction

from gateway import metering_sql as sql
from gateway.metering_groups import CHARGE, SETTLEMENT, SKIPPED, in_group, run_alone
from keys import auth_cache
from keys.models import ApiKey, IdempotentRequest, LedgerEntry
from keys.pricing import TokenPrices
from models_catalog.models import UsageEvent
from models_catalog.served import ServedModel
from utils_app import clock, metrics
from utils_app.db import one_writer_at_a_time
from utils_app.speed.statements import statements_wrapper
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

# Token counts above this are not believed (no model reads or writes ten million tokens in one request);
# it is also well inside the usage columns' 4-byte integers.
MAX_TOKENS = 10_000_000
MAX_LATENCY_MS = 2**31 - 1


@dataclass(frozen=True)
class Idempotency:
    """What an Idempotency-Key request claims with its charge."""

    key: str
    request_hash: str


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
    params = {"amount": amount, "now": sql.now(db), "key": key.pk, "tier": key.tier, "request_id": request_id,
              "idempotency_key": idempotency.key if idempotency else None, "operation": operation,
              "model": model.model_id, **_terms(prices), **sql.calendar(db)}  # _terms' cached dict: spread only
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
            row = in_group(CHARGE, params)
            if row is not SKIPPED:
                return row
        return run_alone(db, CHARGE, params)
    with db.cursor() as cursor:
        cursor.execute(sql.CHARGE_SQLITE[0], params)
        taken = cursor.fetchone()
        if taken is None:
            return None
        cursor.execute(sql.CHARGE_SQLITE[1], {**params, "balance": taken[1]})
        params["minute_tokens"] = taken[2]
        return cursor.fetchone()


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
    if row.tpm is not None and row.tpm_minute == sql.minute_of(now) and row.tpm_used >= row.tpm:
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
              "minute": sql.minute_of(clock.now()),
              "now": sql.now(db), "status": status, "success": success, "deployment": deployment}
    if also is not None:
        return _complete_with(db, params, also)
    if db.vendor == "postgresql":
        if db.can_run_alone():
            settled = in_group(SETTLEMENT, params)
            if settled is not SKIPPED:
                return settled
        return run_alone(db, SETTLEMENT, params)
    with db.cursor() as cursor:
        with one_writer_at_a_time(db), transaction.atomic(using=db.alias):
            return _settle_on_sqlite(cursor, params) is not None


def _settle_on_sqlite(cursor, params: dict) -> tuple | None:
    """SQLite's settlement, in the caller's transaction: the charge row (key_id, amount, request_id) it
    settled, or None when the row was no longer pending."""
    cursor.execute(sql.SETTLEMENT_SQLITE[0], params)
    settled = cursor.fetchone()
    if settled is None:
        return None
    _, amount, request_id, given, same_period = settled
    cursor.execute(sql.SETTLEMENT_SQLITE[1], {**params, "given": given, "budget": given if same_period else 0})
    cursor.execute(sql.SETTLEMENT_SQLITE[2], {**params, "amount": amount, "request_id": request_id})
    return settled


def _complete_with(db, params: dict, also: Also) -> bool:
    """complete() with one more row written by the settlement: one statement on PostgreSQL, one transaction
    on SQLite."""
    params = {**params, **also.params}
    if db.vendor == "postgresql":
        return run_alone(db, SETTLEMENT, params, statement=sql.settlement(also.postgres))
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
        # The key row locked, and its balance before: the refund's statement writes what the settlement's
        # rules give back (gateway.metering_sql), and what it restored is the difference.
        key = ApiKey.objects.select_for_update().only("id", "digest", "credits").get(pk=charged.key_id)
        with connection.cursor() as cursor:
            cursor.execute(sql.REFUND if connection.vendor == "postgresql" else sql.REFUND_SQLITE,
                           {"key": key.pk, "give": -charged.amount,
                            "charged_at": connection.ops.adapt_datetimefield_value(charged.created_at)})
            (balance,) = cursor.fetchone()
        restored, key.credits = balance - key.credits, balance
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
