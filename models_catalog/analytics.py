"""The figures of the model list, the statistics operations and /benchmark, as domain values.

The queries are in models_catalog.usage; the wire names (``totalRequests``,
``latencyMs``, ...) belong to the response serializers in
models_catalog.serializers, which render what these functions return. Here the
names are the domain's: counters named as in usage.COUNTERS, models as the catalog snapshot's
values (models_catalog.served).
"""
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta

from models_catalog import usage
from models_catalog.served import ServedModel, snapshot
from utils_app.cache import cache_get, cache_set

STATISTIC_DAYS = 30
BENCHMARK_WINDOW = timedelta(hours=1)
BENCHMARK_PERCENTILES = (0.5, 0.95)
BENCHMARK_CACHE = "analytics:benchmark"
# /benchmark ranks an hour of latencies; a few seconds of reuse keep that off the
# database under load while the figures stay current.
BENCHMARK_CACHE_SECONDS = 10


# ---------------------------------------------------------------- GET /v1/models

def model_list() -> dict:
    """Every enabled model, by id; no query once the catalog snapshot is warm."""
    return {"models": list(snapshot().models.values())}


@dataclass(frozen=True, slots=True)
class ModelWithUsage(ServedModel):
    """A model of the catalog snapshot with its all-time counters, as the web view's list renders it."""

    usage: dict = field(default_factory=dict)


def _with_usage(model: ServedModel, counters: dict) -> ModelWithUsage:
    # A copy, as a queryset annotation would give: the snapshot's values are shared by every request.
    return ModelWithUsage(**{member.name: getattr(model, member.name) for member in fields(model)}, usage=counters)


def model_list_with_usage(*, now: datetime) -> dict:
    """Every enabled model with its all-time ``usage``, and ``totals`` over all recorded usage."""
    totals = usage.model_totals(now=now)
    return {
        "models": [_with_usage(model, totals.get(model.pk) or usage.zero()) for model in snapshot().models.values()],
        # Over every model, including those disabled since: what the service has served.
        "totals": usage.add_up(totals.values()),
    }


# ---------------------------------------------------------------- GET /v1/statistic/key

def _summary(rows: list[dict]) -> dict:
    """Counters in total, and per model by public id (sorted by it)."""
    per_model = sorted(rows, key=lambda row: row["model__model_id"])
    return {**usage.add_up(rows),
            "models": [{"model": row["model__model_id"], **usage.counters(row)} for row in per_model]}


def key_statistics(*, key, now: datetime) -> dict:
    """The key's own usage: all time (from the daily rollup) and the last 24 hours (from its events)."""
    return {
        "key": key,
        "all_time": _summary(usage.key_models(key)),
        "last_24_hours": _summary(usage.key_last_24_hours(key, now=now)),
        "generated_at": now,
    }


# ---------------------------------------------------------------- GET /v1/statistic/global

def global_statistics(*, now: datetime) -> dict:
    """Totals over all recorded usage and one entry per UTC day for the last STATISTIC_DAYS days."""
    today = now.date()
    first_day = today - timedelta(days=STATISTIC_DAYS - 1)
    by_day = usage.daily_totals(first_day=first_day)
    days = [first_day + timedelta(days=offset) for offset in range(STATISTIC_DAYS)]
    return {
        "totals": usage.add_up(usage.model_totals(now=now).values()),
        "days": [{"date": day, **by_day.get(day, usage.zero())} for day in days],
        "generated_at": now,
    }


# ---------------------------------------------------------------- GET /benchmark

@dataclass(frozen=True)
class ModelBenchmark:
    """One enabled model's requests and latency over the benchmark window."""

    model_id: str
    type: str
    owned_by: str
    requests: int
    completed: int
    p50: int | None
    p95: int | None

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    @property
    def success_rate(self) -> float | None:
        return round(self.completed / self.requests, 4) if self.requests else None


@dataclass(frozen=True)
class Benchmark:
    since: datetime
    until: datetime
    models: list[ModelBenchmark]

    @property
    def window_seconds(self) -> int:
        return int((self.until - self.since).total_seconds())


def benchmark(*, now: datetime) -> Benchmark:
    """Per enabled model over the last hour: requests, completed, latency p50/p95 (cached a few seconds)."""
    cached = cache_get(BENCHMARK_CACHE, why="computing the benchmark directly")
    if isinstance(cached, Benchmark):  # anything else was stored by another version of this module
        return cached
    since = now - BENCHMARK_WINDOW
    counts = {row["model_id"]: row for row in usage.events_by_model(since=since)}
    latencies = usage.latency_percentiles(
        since=since, fractions=BENCHMARK_PERCENTILES, completed_only=True,
        model_ids=[pk for pk, row in counts.items() if row["completed"]])
    models = []
    for model in snapshot().models.values():
        row = counts.get(model.pk) or usage.zero()
        p50, p95 = latencies.get(model.pk, (None, None))
        models.append(ModelBenchmark(model_id=model.model_id, type=model.type, owned_by=model.owned_by,
                                     requests=row["requests"], completed=row["completed"], p50=p50, p95=p95))
    figures = Benchmark(since=since, until=now, models=models)
    cache_set(BENCHMARK_CACHE, figures, BENCHMARK_CACHE_SECONDS)
    return figures
