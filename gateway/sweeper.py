"""The ledger sweeper: charges nobody settled are refunded, expired Idempotency-Key claims dropped.

A charge stays pending only while its request runs. One still pending after
LEDGER_STALE_SECONDS (longer than any upstream call or stream may last) belongs to
a worker that died, or to a settlement the database refused twice: it is marked
abandoned and its credits go back, through the same refund as a failed request.

``manage.py settle_stale`` runs a sweep by hand or from cron. The service also runs
one by itself at a bounded rate: after a settlement, at most once every
LEDGER_SWEEP_SECONDS per process, and only in the one process that wins a short
claim in the shared cache, in a background thread so no request waits for it.
"""
import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, connection
from django.utils import timezone

from gateway import metering
from keys.models import IdempotentRequest, LedgerEntry
from models_catalog.models import AiModel

log = logging.getLogger("gateway.ledger")

BATCH = 500
_next_sweep = 0.0


def settle_stale(*, older_than: float) -> int:
    """Abandon and refund every charge pending for more than ``older_than`` seconds; returns how many."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    models = {model.model_id: model.pk for model in AiModel.objects.only("id", "model_id")}
    abandoned = 0
    while True:
        stale = list(LedgerEntry.objects.filter(kind=LedgerEntry.CHARGE, status=LedgerEntry.PENDING,
                                                created_at__lt=cutoff)
                     .order_by("created_at").values("id", "model", "operation", "created_at")[:BATCH])
        for entry in stale:
            if metering.refund(entry=entry["id"], status=LedgerEntry.ABANDONED,
                               usage=_abandoned_usage(entry, models)) is not None:
                abandoned += 1
        if len(stale) < BATCH:
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


def sweep() -> tuple[int, int]:
    return settle_stale(older_than=settings.LEDGER_STALE_SECONDS), drop_expired_claims()


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
            log.warning("ledger sweep: %d charge(s) pending longer than %ss abandoned and refunded", abandoned,
                        settings.LEDGER_STALE_SECONDS)
        if dropped:
            log.info("ledger sweep: %d expired Idempotency-Key claim(s) dropped", dropped)
    except Exception:
        log.exception("ledger sweep failed; the next one will try again")
    finally:
        close_old_connections()
        connection.close()
