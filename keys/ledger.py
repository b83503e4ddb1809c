"""The credit ledger outside the request path: grants, refills, edits, and the proof that balances add up.

Charges and their settlement are written by the metering pipeline (gateway.metering),
in the statement that moves the credits. Every other change of a balance goes
through ``record_change`` inside the transaction that makes it, so the rule
"a key's credits equal the sum of its ledger" holds after every commit.
"""
from dataclasses import dataclass

from django.db.models import Count, F, IntegerField, Min, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from keys.models import ApiKey, LedgerEntry


def record_change(*, key: ApiKey, before: int, kind: str, actor: str) -> LedgerEntry | None:
    """The entry for a balance that went from ``before`` to ``key.credits``; call it inside the change's
    transaction. Nothing is written when the balance did not move."""
    amount = key.credits - before
    if amount == 0 and kind != LedgerEntry.GRANT:
        return None
    return LedgerEntry.objects.create(key=key, kind=kind, amount=amount, balance_after=key.credits,
                                      actor=actor, created_at=timezone.now(), settled_at=timezone.now())


def refill(keys: list[ApiKey], *, actor: str) -> None:
    """Refill entries for keys locked by the caller, written before their credits are raised."""
    now = timezone.now()
    LedgerEntry.objects.bulk_create(
        LedgerEntry(key=key, kind=LedgerEntry.REFILL, amount=key.max_credits - key.credits,
                    balance_after=key.max_credits, actor=actor, created_at=now, settled_at=now)
        for key in keys)


@dataclass(frozen=True)
class Mismatch:
    prefix: str
    credits: int
    ledger_sum: int
    in_flight: int
    pending: int

    def __str__(self):
        parts = []
        if self.credits != self.ledger_sum:
            parts.append(f"credits {self.credits} but the ledger sums to {self.ledger_sum} "
                         f"(difference {self.credits - self.ledger_sum:+d})")
        if self.in_flight != self.pending:
            parts.append(f"{self.in_flight} request(s) counted in flight but {self.pending} pending charge(s)")
        return f"{self.prefix}…: " + "; ".join(parts)


def _per_key(queryset, value):
    # One correlated subquery per key: the aggregate of that key's entries, 0 when it has none.
    rows = queryset.filter(key=OuterRef("pk")).order_by().values("key").annotate(value=value).values("value")
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


def mismatches(*, prefix: str = "") -> list[Mismatch]:
    """Keys whose balance is not the sum of their ledger, or whose in-flight count is not their
    number of pending charges."""
    keys = ApiKey.objects.filter(prefix__startswith=prefix) if prefix else ApiKey.objects.all()
    keys = keys.annotate(
        ledger_sum=_per_key(LedgerEntry.objects.all(), Sum("amount")),
        pending=_per_key(LedgerEntry.objects.filter(kind=LedgerEntry.CHARGE, status=LedgerEntry.PENDING),
                         Count("id")),
    ).exclude(Q(credits=F("ledger_sum")) & Q(in_flight=F("pending")))
    return [Mismatch(prefix=key.prefix, credits=key.credits, ledger_sum=key.ledger_sum, in_flight=key.in_flight,
                     pending=key.pending)
            for key in keys.order_by("id")]


@dataclass(frozen=True)
class KeyLedger:
    """What a key's staff page shows of its ledger."""

    ledger_sum: int
    pending: int
    balanced: bool
    recent: list


def for_key(key: ApiKey, *, recent: int = 10) -> KeyLedger:
    """The key's latest entries and whether its balance and in-flight count match its ledger."""
    entries = LedgerEntry.objects.filter(key=key)
    totals = entries.aggregate(total=Sum("amount"),
                               pending=Count("id", filter=Q(kind=LedgerEntry.CHARGE, status=LedgerEntry.PENDING)))
    total = totals["total"] or 0
    return KeyLedger(ledger_sum=total, pending=totals["pending"],
                     balanced=total == key.credits and totals["pending"] == key.in_flight,
                     recent=list(entries.order_by("-created_at", "-id")[:recent]))


def pending_charges() -> dict:
    """Charges not settled yet: how many, how many credits, and how long the oldest has waited
    (read through the partial index on pending rows)."""
    row = LedgerEntry.objects.filter(kind=LedgerEntry.CHARGE, status=LedgerEntry.PENDING).aggregate(
        count=Count("id"), credits=Sum("amount"), oldest=Min("created_at"))
    oldest = row["oldest"]
    return {"count": row["count"], "credits": -(row["credits"] or 0),
            "oldest_seconds": int((timezone.now() - oldest).total_seconds()) if oldest else None}
