"""Usage figures for the model catalog, the statistics operations and /benchmark.

They are read from the rollups the database keeps beside every UsageEvent insert
(migration 0002), never by scanning the events, with two exceptions that are
bounded by an index range: one key's last 24 hours, and the last hour for the
latency percentiles of /benchmark.

All-time totals per model are a sum over ModelHourlyUsage, one row per model and
hour. Hours that can no longer receive events ("closed": older than SETTLE) are
summed once and cached under the name of the boundary hour; only the open
hours, at most a few rows per model, are summed on each request. So the cost of
GET /v1/models?web-view=true does not grow with the history, and a request
counted a moment ago is in the very next answer.
"""
import logging
import math
from datetime import timedelta

from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate

from models_catalog.catalog import snapshot
from models_catalog.models import KeyDailyUsage, ModelHourlyUsage, UsageEvent

log = logging.getLogger("gateway.analytics")

COUNTERS = ("requests", "completed", "failed", "input_tokens", "output_tokens", "credits")
ZERO = dict.fromkeys(COUNTERS, 0)

# The gateway stamps a usage row with the time it writes it (gateway.services), so
# hours further back than this margin receive nothing new; the margin also covers a
# stamp taken a while before the insert lands. A row back-dated past it by hand (an
# import) is counted from the next hour on.
SETTLE = timedelta(hours=1)
CLOSED_CACHE_SECONDS = 2 * 3600

STATISTIC_DAYS = 30
BENCHMARK_WINDOW = timedelta(hours=1)
BENCHMARK_PERCENTILES = (0.5, 0.95)
# /benchmark sorts an hour of latencies; a few seconds of reuse keep that off the
# database under load while the figures stay current.
BENCHMARK_CACHE_SECONDS = 10


# ---------------------------------------------------------------- helpers

def _floor_hour(moment):
    return moment.replace(minute=0, second=0, microsecond=0)


def _rollup_sums(queryset, *group) -> list[dict]:
    # order_by() drops any default ordering, which would otherwise join the GROUP BY.
    return list(queryset.order_by().values(*group).annotate(**{name: Sum(name) for name in COUNTERS}))


def _counters(row: dict) -> dict:
    return {name: row.get(name) or 0 for name in COUNTERS}


def _add(into: dict, row: dict) -> None:
    for name in COUNTERS:
        into[name] += row.get(name) or 0


def _cache_get(name: str):
    try:
        return cache.get(name)
    except Exception:  # a cache outage costs one more query, never the answer
        log.warning("cache unreachable; computing %s directly", name, exc_info=True)
        return None


def _cache_set(name: str, value, seconds: int) -> None:
    try:
        cache.set(name, value, seconds)
    except Exception:
        log.warning("cache unreachable; %s not stored", name, exc_info=True)


def _usage_out(counters: dict) -> dict:
    """The wire names of a block of counters, as the statistics operations show them."""
    return {
        "totalRequests": counters["requests"],
        "completedRequests": counters["completed"],
        "failedRequests": counters["failed"],
        "inputTokens": counters["input_tokens"],
        "outputTokens": counters["output_tokens"],
        "creditsSpent": counters["credits"],
    }


# ---------------------------------------------------------------- all-time totals per model

def _closed_totals(boundary) -> dict:
    """model pk -> counters over every hour before ``boundary``; cached, the hours can no longer change."""
    name = f"analytics:closed-hours:{boundary:%Y%m%d%H}"
    cached = _cache_get(name)
    if cached is not None:
        return cached
    totals = {row["model_id"]: _counters(row)
              for row in _rollup_sums(ModelHourlyUsage.objects.filter(hour__lt=boundary), "model_id")}
    _cache_set(name, totals, CLOSED_CACHE_SECONDS)
    return totals


def model_totals(*, now) -> dict:
    """model pk -> all-time counters, for every model that has usage (enabled or not)."""
    boundary = _floor_hour(now - SETTLE)
    totals = {pk: dict(counters) for pk, counters in _closed_totals(boundary).items()}
    for row in _rollup_sums(ModelHourlyUsage.objects.filter(hour__gte=boundary), "model_id"):
        _add(totals.setdefault(row["model_id"], dict(ZERO)), row)
    return totals


def _grand_total(totals: dict) -> dict:
    grand = dict(ZERO)
    for counters in totals.values():
        _add(grand, counters)
    return grand


# ---------------------------------------------------------------- GET /v1/models

def model_list() -> dict:
    """The OpenAI-compatible list: every enabled model, no analytics, no query once the snapshot is warm."""
    return {"object": "list", "data": [model.entry() for model in snapshot().models.values()]}


def model_list_with_analytics(*, now) -> dict:
    """The web view: every enabled model with its analytics, and totals over all recorded usage."""
    totals = model_totals(now=now)
    models = []
    for model in snapshot().models.values():
        counters = totals.get(model.pk, ZERO)
        models.append({**model.entry(), "analytics": {
            "totalRequests": counters["requests"],
            "completedRequests": counters["completed"],
            "failedRequests": counters["failed"],
            "inputTokens": counters["input_tokens"],
            "outputTokens": counters["output_tokens"],
        }})
    # Global figures include models disabled since: they describe what the service has served.
    grand = _grand_total(totals)
    return {"object": "list", "success": True, "models": models, "globalStats": {
        "totalRequests": grand["requests"],
        "totalInputTokens": grand["input_tokens"],
        "totalOutputTokens": grand["output_tokens"],
    }}


# ---------------------------------------------------------------- GET /v1/statistic/key

def _usage_block(rows: list[dict]) -> dict:
    total = dict(ZERO)
    per_model = []
    for row in sorted(rows, key=lambda r: r["model__model_id"]):
        _add(total, row)
        per_model.append({"id": row["model__model_id"], **_usage_out(_counters(row))})
    return {**_usage_out(total), "models": per_model}


def key_statistics(*, key, now) -> dict:
    """The key's own usage: all time (from the daily rollup) and the last 24 hours (from its events)."""
    all_time = _rollup_sums(KeyDailyUsage.objects.filter(key=key), "model__model_id")
    # The daily rollup cannot cut at "24 hours ago"; the key's own events can, through
    # the (key, created_at) index, and a key makes at most rph * 24 of them.
    recent = list(
        UsageEvent.objects.filter(key=key, created_at__gte=now - timedelta(hours=24)).order_by()
        .values("model__model_id")
        .annotate(requests=Count("id"), completed=Count("id", filter=Q(success=True)),
                  failed=Count("id", filter=Q(success=False)), input_tokens=Sum("input_tokens"),
                  output_tokens=Sum("output_tokens"), credits=Sum("credits_charged")))
    return {
        "object": "statistic.key",
        "key": {"prefix": key.prefix, "tier": key.tier, "credits": key.credits, "maxCredits": key.max_credits},
        "allTime": _usage_block(all_time),
        "last24Hours": _usage_block(recent),
        "generatedAt": now.isoformat(),
    }


# ---------------------------------------------------------------- GET /v1/statistic/global

def global_statistics(*, now) -> dict:
    """Totals over all recorded usage and one entry per UTC day for the last STATISTIC_DAYS days."""
    today = now.date()
    first_day = today - timedelta(days=STATISTIC_DAYS - 1)
    start = _floor_hour(now).replace(hour=0) - timedelta(days=STATISTIC_DAYS - 1)
    by_day = {row["day"]: _counters(row) for row in _rollup_sums(
        ModelHourlyUsage.objects.filter(hour__gte=start).annotate(day=TruncDate("hour")), "day")}
    days = []
    for offset in range(STATISTIC_DAYS):
        day = first_day + timedelta(days=offset)
        days.append({"date": day.isoformat(), **_usage_out(by_day.get(day, ZERO))})
    return {
        "object": "statistic.global",
        "totals": _usage_out(_grand_total(model_totals(now=now))),
        "days": days,
        "generatedAt": now.isoformat(),
    }


# ---------------------------------------------------------------- GET /benchmark

def _nearest_rank(sorted_values: list, fraction: float):
    """The percentile as PostgreSQL's percentile_disc computes it: a recorded value, never an interpolation."""
    if not sorted_values:
        return None
    rank = math.ceil(round(fraction * len(sorted_values), 9))
    return sorted_values[max(rank, 1) - 1]


def _latency_rows(since) -> dict:
    """model pk -> (requests, completed, [p50, p95] of completed requests' latency) since ``since``."""
    if connection.vendor == "postgresql":
        percentiles = ", ".join(
            "percentile_disc(%s) WITHIN GROUP (ORDER BY latency_ms) FILTER (WHERE success)"
            for _ in BENCHMARK_PERCENTILES)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT model_id, count(*), count(*) FILTER (WHERE success), {percentiles} "
                f"FROM {UsageEvent._meta.db_table} WHERE created_at >= %s GROUP BY model_id",
                [*BENCHMARK_PERCENTILES, since])
            return {row[0]: (row[1], row[2], list(row[3:])) for row in cursor.fetchall()}
    # SQLite has no percentile aggregate; it is the single-process embedded default,
    # where an hour of events is small enough to sort here.
    requests, latencies = {}, {}
    for model_id, success, latency in UsageEvent.objects.filter(created_at__gte=since).order_by().values_list(
            "model_id", "success", "latency_ms").iterator():
        requests[model_id] = requests.get(model_id, 0) + 1
        if success:
            latencies.setdefault(model_id, []).append(latency)
    rows = {}
    for model_id, count in requests.items():
        values = sorted(latencies.get(model_id, []))
        rows[model_id] = (count, len(values), [_nearest_rank(values, p) for p in BENCHMARK_PERCENTILES])
    return rows


def benchmark(*, now) -> dict:
    """Per enabled model over the last hour: requests, success rate, latency p50/p95 (cached a few seconds)."""
    cached = _cache_get("analytics:benchmark")
    if cached is not None:
        return cached
    since = now - BENCHMARK_WINDOW
    rows = _latency_rows(since)
    models = []
    for model in snapshot().models.values():
        requests, completed, (p50, p95) = rows.get(model.pk, (0, 0, [None, None]))
        models.append({
            "id": model.model_id, "type": model.type, "owned_by": model.owned_by,
            "requests": requests, "completedRequests": completed, "failedRequests": requests - completed,
            "successRate": round(completed / requests, 4) if requests else None,
            "latencyMs": {"p50": p50, "p95": p95},
        })
    body = {"object": "benchmark", "windowSeconds": int(BENCHMARK_WINDOW.total_seconds()),
            "from": since.isoformat(), "to": now.isoformat(), "models": models}
    _cache_set("analytics:benchmark", body, BENCHMARK_CACHE_SECONDS)
    return body
