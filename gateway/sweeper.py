"""The ledger sweeper: settlements the database refused are retried, charges nobody settled are
refunded, expired Idempotency-Key claims dropped.

A settlement that fails twice (the database is restarting or down) is handed to
``settle_later``: a background thread of the process tries it again every
SETTLE_RETRY_SECONDS, so the charge is completed (or refunded) moments after the
database is back instead of holding the key's maxConcurrent until the sweeper.

A charge stays pending only while its request runs. One still pending after the longest
its request could run (``stale_after``: the catalog's longest provider timeout, then a
whole stream, then a margin; never less than LEDGER_STALE_SECONDS) belongs to a worker
that died, or to a settlement the database refused twice: it is marked abandoned and
its credits go back, through the same refund as a failed request. Sooner, it could
still be running, and its finished answer would be free.

``manage.py settle_stale`` runs a sweep by hand or from cron. The service also runs
one by itself at a bounded rate: after a settlement, at most once every
LEDGER_SWEEP_SECONDS per process, and only in the one process that wins a short
claim in the shared cache, in a background thread so no request waits for it.
"""
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Max
from django.utils import timezone

from gateway import metering
from gateway.models import StoredResponse
from keys.models import IdempotentRequest, LedgerEntry, SweepMark
from models_catalog.models import AiModel, Provider

log = logging.getLogger("gateway.ledger")

BATCH = 500
# How old the newest entry below the sweep mark must be: far longer than a charge's one statement takes.
MARK_LAG_SECONDS = 60
SETTLE_RETRY_SECONDS = 1.0
# What a request may still do after its upstream's last byte (shape and store the answer, settle), and the
# connect timeout an attempt begun at the end of its budget may still take: far more than either needs.
SETTLE_MARGIN_SECONDS = 60.0
_next_sweep = 0.0
_retries: list[tuple[Callable[[], object], str, float]] = []  # (settlement, what it is, give up after)
_retries_lock = threading.Lock()
_retrier: threading.Thread | None = None


def settle_later(settle: Callable[[], object], *, what: str) -> None:
    """Try a settlement again in the background until it goes through, for at most LEDGER_STALE_SECONDS
    (a charge still pending after that is left to the sweeper, which refunds it)."""
    global _retrier
    with _retries_lock:
        _retries.append((settle, what, time.monotonic() + settings.LEDGER_STALE_SECONDS))
        if _retrier is None:
            _retrier = threading.Thread(target=_retry_settlements, name="settle-retry", daemon=True)
            _retrier.start()


def _retry_settlements() -> None:
    global _retrier
    while True:
        time.sleep(SETTLE_RETRY_SECONDS)
        with _retries_lock:
            waiting = list(_retries)
        for item in waiting:
            settle, what, give_up = item
            try:
                settle()
                log.info("%s: settled on a later try", what)
            except DatabaseError:
                if time.monotonic() < give_up:
                    continue
                log.error("%s: given up after %ss; the sweeper refunds it", what, settings.LEDGER_STALE_SECONDS)
            finally:
                connection.close()  # a fresh connection for the next try
            with _retries_lock:
                _retries.remove(item)
        with _retries_lock:
            if not _retries:
                _retrier = None  # under the lock: settle_later starts a new thread for the next one
                return


def longest_request_seconds() -> float:
    """The longest a metered request can run with the catalog as it is now (docs/ledger.md).

    Every attempt of a request over its pool shares one budget, the longest timeout of the
    pool's providers (gateway.pipeline.Meter): no attempt starts after it, and a non-streamed
    one ends within it. A stream begun at its very end is cut STREAM_MAX_SECONDS after its
    upstream answered, however lively. Then the answer is shaped, stored and settled.
    """
    longest = Provider.objects.aggregate(longest=Max("timeout"))["longest"] or 0.0
    return longest + settings.STREAM_MAX_SECONDS + SETTLE_MARGIN_SECONDS


def stale_after() -> float:
    """How long a charge stays pending before a sweep may abandon it: once its request can no longer be
    running, and never sooner than LEDGER_STALE_SECONDS."""
    return max(float(settings.LEDGER_STALE_SECONDS), longest_request_seconds())


def stale_charges(cutoff):
    """Charges still pending that were made before ``cutoff``, oldest first: read by the primary key
    from the sweep mark up (no index names the status, so settlements stay HOT; keys.models.SweepMark)."""
    return (LedgerEntry.objects.filter(id__gt=sweep_mark(), kind=LedgerEntry.CHARGE, status=LedgerEntry.PENDING,
                                       created_at__lt=cutoff).order_by("id"))


def sweep_mark() -> int:
    mark = SweepMark.objects.filter(pk=1).values_list("ledger_id", flat=True).first()
    return mark or 0


def move_sweep_mark(cutoff) -> int:
    """Move the mark up to just below the first charge still pending, but no higher than the last
    entry made before ``cutoff`` and a minute ago (one made later might not have committed yet,
    and a lower id could still appear); returns the mark. A mark once right stays right (no entry
    below it can appear or become pending again), so sweepers racing keep the higher one."""
    mark = sweep_mark()
    above = LedgerEntry.objects.filter(id__gt=mark)
    settled_before = min(cutoff, timezone.now() - timedelta(seconds=MARK_LAG_SECONDS))
    last_old = above.filter(created_at__lt=settled_before).order_by("-id").values_list("id", flat=True).first()
    if last_old is None:
        return mark
    first_pending = above.filter(status=LedgerEntry.PENDING).order_by("id").values_list("id", flat=True).first()
    moved = last_old if first_pending is None else min(last_old, first_pending - 1)
    if moved > mark:
        SweepMark.objects.get_or_create(pk=1)
        SweepMark.objects.filter(pk=1, ledger_id__lt=moved).update(ledger_id=moved)
        return moved
    return mark


def settle_stale(*, older_than: float) -> int:
    """Abandon and refund every charge pending for more than ``older_than`` seconds; returns how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    models = {model.model_id: model.pk for model in AiModel.objects.only("id", "model_id")}
    abandoned = 0
    while True:
        stale = list(stale_charges(cutoff).values("id", "model", "operation", "created_at")[:BATCH])
        for entry in stale:
            if metering.refund(entry=entry["id"], status=LedgerEntry.ABANDONED,
                               usage=_abandoned_usage(entry, models)) is not None:
                abandoned += 1
        if len(stale) < BATCH:
            break
    move_sweep_mark(cutoff)
    return abandoned


def _abandoned_usage(entry: dict, models: dict) -> dict | None:
    # Recorded as a failed request with status 0: nobody knows what the client received.
    model_pk = models.get(entry["model"])
    if model_pk is None:
        return None
    waited = (timezone.now() - entry["created_at"]).total_seconds()
    return dict(model_id=model_pk, operation=entry["operation"], status=0, success=False, input_tokens=0,
                output_tokens=0, credits_charged=0, latency_ms=int(waited * 1000), provider="")


def drop_expired_claims() -> int:
    from gateway.idempotency import expired_before

    deleted, _ = IdempotentRequest.objects.filter(created_at__lt=expired_before()).exclude(
        entry__status=LedgerEntry.PENDING).delete()
    return deleted


def purge_stored_responses() -> int:
    """The Responses API's retention, kept by the sweeps as well as by manage.py purge_responses."""
    deleted, _ = StoredResponse.objects.expired().delete()
    return deleted


def sweep() -> tuple[int, int]:
    return settle_stale(older_than=stale_after()), drop_expired_claims()


def maybe_sweep() -> None:
    """Start a sweep in the background if this process is due one and wins the fleet-wide claim."""
    global _next_sweep
    interval = settings.LEDGER_SWEEP_SECONDS
    now = time.monotonic()
    if interval <= 0 or now < _next_sweep or connection.in_atomic_block:
        return
    _next_sweep = now + interval
    try:
        if not cache.add("ledger-sweep", 1, timeout=interval):
            return  # another process swept within the interval
    except Exception:  # no shared cache right now: this process sweeps on its own
        pass
    threading.Thread(target=_sweep_in_background, name="ledger-sweep", daemon=True).start()


def _sweep_in_background() -> None:
    try:
        abandoned, dropped = sweep()
        if abandoned:
            log.warning("ledger sweep: %d charge(s) pending longer than their requests could run abandoned and "
                        "refunded", abandoned)
        if dropped:
            log.info("ledger sweep: %d expired Idempotency-Key claim(s) dropped", dropped)
        purged = purge_stored_responses()
        if purged:
            log.info("ledger sweep: %d stored response(s) older than RESPONSES_RETENTION_DAYS deleted", purged)
    except Exception:
        log.exception("ledger sweep failed; the next one will try again")
    finally:
        close_old_connections()
        connection.close()
