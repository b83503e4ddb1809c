"""The reads of recorded usage, each written once.

The catalog's analytics, the statistics operations and /benchmark (analytics.py)
and the staff pages (dashboard.py) all read usage through these functions, so a
figure such as "a key's last 24 hours" or "p95 latency" has one definition.

Counters over hours or days come from the rollups the database keeps beside
every UsageEvent insert (migration 0002): ModelHourlyUsage (one row per model
and hour) and KeyDailyUsage (one row per key, model and day), so they cost the
same with ten events or ten million. The events themselves are read only over
an index range: a key's recent events through (key, created_at), a window of
recent events through (created_at), and the latencies of a model through
(model, created_at).

Every block of counters is a dict with the names of COUNTERS, zero where
nothing was recorded; rows grouped by model also carry ``model_id`` (the pk) and
``model__model_id`` (the public id), as Django's ``values()`` names them.
"""
import math
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db import connection
from django.db.models import Aggregate, Count, IntegerField, Q, Sum
from django.db.models.functions import TruncDate

from models_catalog.models import KeyDailyUsage, ModelHourlyUsage, UsageEvent
from utils_app.cache import cache_get, cache_set

COUNTERS = ("requests", "completed", "failed", "input_tokens", "output_tokens", "credits", "latency_ms_total")
LAST_24_HOURS = timedelta(hours=24)

# The gateway stamps a usage row with the time it writes it (gateway.metering), so
# hours further back than this margin receive nothing new; the margin also covers a
# stamp taken a while before the insert lands. A row back-dated past it by hand (an
# import) is counted from the next hour on.
SETTLE = timedelta(hours=1)
CLOSED_CACHE_SECONDS = 2 * 3600


# ---------------------------------------------------------------- blocks of counters

def zero() -> dict:
    return dict.fromkeys(COUNTERS, 0)


def counters(row: Mapping[str, Any]) -> dict:
    """The counters of a row, 0 where the database summed nothing (NULL)."""
    return {name: row.get(name) or 0 for name in COUNTERS}


def add_up(blocks: Iterable[dict]) -> dict:
    total = zero()
    for block in blocks:
        for name in COUNTERS:
            total[name] += block.get(name) or 0
    return total


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_start(day: date) -> datetime:
    """The first moment of a UTC day."""
    return datetime.combine(day, time.min, tzinfo=dt_timezone.utc)


def _rollup_sums(queryset, *group) -> list[dict]:
    # order_by() drops any default ordering, which would otherwise join the GROUP BY.
    rows = queryset.order_by().values(*group).annotate(**{name: Sum(name) for name in COUNTERS})
    return [{**{name: row[name] for name in group}, **counters(row)} for row in rows]


def _busiest_first(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda row: (-row["requests"], row["model__model_id"]))


# ---------------------------------------------------------------- per model, from the hourly rollup

def _closed_totals(boundary: datetime) -> dict:
    """model pk -> counters over every hour before ``boundary``; cached, the hours can no longer change."""
    name = f"usage:closed-hours:{boundary:%Y%m%d%H}"
    cached = cache_get(name, why="summing the closed hours again")
    if cached is not None:
        return cached
    totals = {row["model_id"]: counters(row)
              for row in _rollup_sums(ModelHourlyUsage.objects.filter(hour__lt=boundary), "model_id")}
    cache_set(name, totals, CLOSED_CACHE_SECONDS)
    return totals


def model_totals(*, now: datetime) -> dict[int, dict]:
    """model pk -> all-time counters, for every model that has usage (enabled or not).

    Hours older than SETTLE are summed once per hour change and cached; only the open
    hours, at most a few rows per model, are summed on each call. So the cost does not
    grow with the history, and a request counted a moment ago is in the very next answer.
    """
    boundary = floor_hour(now - SETTLE)
    totals = {pk: dict(block) for pk, block in _closed_totals(boundary).items()}
    for row in _rollup_sums(ModelHourlyUsage.objects.filter(hour__gte=boundary), "model_id"):
        totals[row["model_id"]] = add_up([totals.get(row["model_id"], {}), row])
    return totals


def models_since(*, hour: datetime) -> list[dict]:
    """Counters per model over the hours from ``hour`` on, busiest first."""
    return _busiest_first(_rollup_sums(ModelHourlyUsage.objects.filter(hour__gte=hour),
                                       "model_id", "model__model_id"))


def daily_totals(*, first_day: date) -> dict[date, dict]:
    """UTC day -> counters over every model, from ``first_day`` on; days without usage are absent."""
    window = ModelHourlyUsage.objects.filter(hour__gte=day_start(first_day)).annotate(day=TruncDate("hour"))
    return {row["day"]: counters(row) for row in _rollup_sums(window, "day")}


# ---------------------------------------------------------------- per key, from the daily rollup

def busiest_keys(*, first_day: date, limit: int) -> list[dict]:
    """Counters of the ``limit`` keys with the most requests from ``first_day`` on (rows with ``key_id``)."""
    window = KeyDailyUsage.objects.filter(day__gte=first_day).values("key_id").annotate(
        **{name: Sum(name) for name in COUNTERS}).order_by("-requests", "key_id")[:limit]
    return [{"key_id": row["key_id"], **counters(row)} for row in window]


def key_models(key, *, first_day: date | None = None) -> list[dict]:
    """A key's counters per model, all time or from ``first_day`` on, busiest first."""
    days = KeyDailyUsage.objects.filter(key=key)
    if first_day is not None:
        days = days.filter(day__gte=first_day)
    return _busiest_first(_rollup_sums(days, "model_id", "model__model_id"))


def key_days(key, *, first_day: date) -> dict[date, dict]:
    """UTC day -> a key's counters over every model, from ``first_day`` on; days without usage are absent."""
    rows = _rollup_sums(KeyDailyUsage.objects.filter(key=key, day__gte=first_day), "day")
    return {row["day"]: counters(row) for row in rows}


# ---------------------------------------------------------------- from the events, over an index range

def events_by_model(*, since: datetime, key=None) -> list[dict]:
    """Counters per model of the events since ``since`` (of one key, if given), busiest first.

    The rollups cannot cut at an arbitrary moment such as "24 hours ago"; the events
    can, through the created_at index, or (key, created_at) for one key, who makes
    at most rph * 24 of them a day.
    """
    events = UsageEvent.objects.filter(created_at__gte=since)
    if key is not None:
        events = events.filter(key=key)
    rows = events.order_by().values("model_id", "model__model_id").annotate(
        requests=Count("id"), completed=Count("id", filter=Q(success=True)),
        failed=Count("id", filter=Q(success=False)), input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"), credits=Sum("credits_charged"), latency_ms_total=Sum("latency_ms"))
    return _busiest_first([{"model_id": row["model_id"], "model__model_id": row["model__model_id"],
                            **counters(row)} for row in rows])


def key_last_24_hours(key, *, now: datetime) -> list[dict]:
    """A key's counters per model over exactly the last 24 hours, busiest first."""
    return events_by_model(since=now - LAST_24_HOURS, key=key)


def recent_events(key, *, limit: int) -> list[UsageEvent]:
    """A key's latest events, newest first, with their models."""
    return list(UsageEvent.objects.filter(key=key).select_related("model").order_by("-created_at", "-id")[:limit])


class _PercentileDisc(Aggregate):
    """PostgreSQL's nearest-rank percentile: the smallest value with ``fraction`` of the rows at or below it."""

    function = "PERCENTILE_DISC"
    template = "%(function)s(%(fraction)r) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = IntegerField()

    def __init__(self, expression, *, fraction: float):
        super().__init__(expression, fraction=float(fraction))


def nearest_rank(fraction: float, count: int) -> int:
    """The 1-based rank percentile_disc picks among ``count`` sorted values (same float arithmetic)."""
    return max(math.ceil(fraction * count), 1)


def latency_percentiles(*, since: datetime, fractions: tuple[float, ...], model_ids: Iterable[int],
                        completed_only: bool = False) -> dict[int, list[int]]:
    """model pk -> nearest-rank percentiles of latency_ms since ``since``, one per fraction.

    Always a recorded value, never an interpolation. Models without a matching event
    are absent. ``completed_only`` leaves failures out: how long the gateway took to
    give up says nothing of how fast the model is.
    """
    model_ids = list(model_ids)
    events = UsageEvent.objects.filter(created_at__gte=since, model_id__in=model_ids)
    if completed_only:
        events = events.filter(success=True)
    names = [f"p{index}" for index in range(len(fractions))]
    if connection.vendor == "postgresql":
        rows: Iterable[Mapping[str, Any]] = events.order_by().values("model_id").annotate(
            **{name: _PercentileDisc("latency_ms", fraction=fraction) for name, fraction in zip(names, fractions)})
        return {row["model_id"]: [row[name] for name in names] for row in rows}
    # SQLite has no percentile function: count, then fetch the value at each rank,
    # both through the (model, created_at) index, one model at a time.
    result = {}
    for model_id in model_ids:
        scoped = events.filter(model_id=model_id)
        total = scoped.count()
        if total:
            ordered = scoped.order_by("latency_ms").values_list("latency_ms", flat=True)
            result[model_id] = [ordered[nearest_rank(fraction, total) - 1] for fraction in fractions]
    return result
