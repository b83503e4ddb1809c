"""Figures for the staff pages: the usage dashboard and a key's usage panel.

The figures are read through models_catalog.usage, the same queries as the
statistics operations: aggregates over days from the rollup tables, which hold
one row per model-hour or key-model-day whatever the number of events, so these
pages cost the same with ten events or ten million. Only the p95 latency of the
last 24 hours and a key's last 24 hours and recent requests read the events,
each through an index.

Charts are drawn on the server as SVG: this module computes the geometry, the
templates only place it, and the page needs no JavaScript library and no network.
"""
import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import timezone as dt_timezone

from django.db.models import Count
from django.utils import timezone

from keys import ledger
from keys.models import TIERS, ApiKey
from models_catalog import usage

WINDOWS = (7, 30, 90)  # days the dashboard offers
RECENT_REQUESTS = 20
TOP = 10


# ------------------------------------------------------------------ charts

@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass
class BarChart:
    """A (stacked) column chart in a fixed coordinate space; the SVG viewBox scales it to any width."""

    title: str
    # About the width a chart gets on the page (half of a desktop screen, or a
    # whole phone screen), so 12-unit text stays readable after scaling.
    width: int = 480
    height: int = 200
    left: int = 34  # room for the y labels
    top: int = 8  # room for the top y label
    bottom: int = 18  # room for the x labels
    bars: list = field(default_factory=list)
    y_ticks: list = field(default_factory=list)
    x_ticks: list = field(default_factory=list)
    legend: list = field(default_factory=list)  # (css class, label)
    total: int = 0

    @property
    def baseline(self) -> int:
        return self.height - self.bottom

    @property
    def plot_height(self) -> int:
        return self.baseline - self.top

    @property
    def has_data(self) -> bool:
        return self.total > 0


def nice_ceiling(value: float) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (so the axis reads well)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return int(step * power) if step * power >= 1 else 1
    return int(10 * power)


def short_number(value: int) -> str:
    for limit, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return str(value)


def column_chart(*, title: str, labels: list[str], series: list[tuple[str, str, list[int]]],
                 unit: str) -> BarChart:
    """Columns over ``labels``; each entry of ``series`` is (name, css class, values), stacked in order."""
    chart = BarChart(title=title, legend=[(css, name) for name, css, _ in series])
    count = len(labels)
    sums = [sum(values[i] for _, _, values in series) for i in range(count)]
    chart.total = sum(sums)
    # Four gridlines at whole, round numbers: the step is rounded, not the top.
    step = nice_ceiling(max(sums, default=0) / 4)
    top = step * 4
    plot_width = chart.width - chart.left
    slot = plot_width / max(count, 1)
    gap = min(2.0, slot * 0.2)
    scale = chart.plot_height / top
    for i, label in enumerate(labels):
        base: float = chart.baseline
        for name, css, values in series:
            value = values[i]
            if value <= 0:
                continue
            height = value * scale
            base -= height
            chart.bars.append(Bar(x=round(chart.left + i * slot + gap / 2, 2), y=round(base, 2),
                                  width=round(slot - gap, 2), height=round(height, 2), css=css,
                                  title=f"{label}: {value:,} {name} {unit}".replace("  ", " ")))
    for index in range(5):
        chart.y_ticks.append(Tick(position=round(chart.baseline - chart.plot_height * index / 4, 2),
                                  label=short_number(step * index)))
    every = max(1, math.ceil(count / 6))  # at most about six date labels, whatever the window
    for i in range(0, count, every):
        chart.x_ticks.append(Tick(position=round(chart.left + (i + 0.5) * slot, 2), label=labels[i]))
    return chart


# ------------------------------------------------------------------ time windows

def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _percent(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


# ------------------------------------------------------------------ p95 latency

def p95_latency_by_model(since: datetime, model_ids: list[int]) -> dict[int, int]:
    """Nearest-rank p95 of latency_ms per model since ``since``, over every request.

    Failures included, unlike /benchmark's: the staff page shows how long clients waited.
    """
    percentiles = usage.latency_percentiles(since=since, fractions=(0.95,), model_ids=model_ids)
    return {model_id: p95 for model_id, (p95,) in percentiles.items()}


# ------------------------------------------------------------------ the dashboard

def overview(*, days: int = 30, now: datetime | None = None) -> dict:
    """Everything the usage dashboard shows, for the last ``days`` days (today included)."""
    now = now or timezone.now()
    today = now.astimezone(dt_timezone.utc).date()
    first_day = today - timedelta(days=days - 1)

    per_day = usage.daily_totals(first_day=first_day)
    day_list = _days(first_day, today)
    labels = [day.strftime("%m-%d") for day in day_list]

    def series(name):
        return [per_day.get(day, usage.zero())[name] for day in day_list]

    requests_chart = column_chart(title="Requests per day", labels=labels, unit="requests",
                                  series=[("completed", "bar-ok", series("completed")),
                                          ("failed", "bar-failed", series("failed"))])
    credits_chart = column_chart(title="Credits spent per day", labels=labels, unit="credits",
                                 series=[("", "bar-credits", series("credits"))])

    totals = usage.add_up(per_day.values())
    top_models = usage.models_since(hour=usage.day_start(first_day))[:TOP]
    _add_shares(top_models)

    top_key_rows = usage.busiest_keys(first_day=first_day, limit=TOP)
    keys = ApiKey.objects.in_bulk([row["key_id"] for row in top_key_rows])
    for row in top_key_rows:
        row["key"] = keys.get(row["key_id"])
    _add_shares(top_key_rows)

    return {
        "days": days,
        "windows": WINDOWS,
        "first_day": first_day,
        "today": today,
        "totals": {**totals, "error_pct": _percent(totals["failed"], totals["requests"])},
        "requests_chart": requests_chart,
        "credits_chart": credits_chart,
        "top_models": top_models,
        "top_keys": top_key_rows,
        "models_24h": models_last_24h(now=now),
        "tiers": active_keys_per_tier(),
        "pending": ledger.pending_charges(),
    }


def _add_shares(rows: list[dict]) -> None:
    """Width of each row's bar relative to the largest, for the top-10 tables."""
    largest = max((row["requests"] for row in rows), default=0) or 1
    for row in rows:
        row["share"] = round(100 * row["requests"] / largest, 1)
        row["error_pct"] = _percent(row["failed"], row["requests"])


def models_last_24h(*, now: datetime) -> list[dict]:
    """Requests, error rate, mean and p95 latency per model over the last 24 hours.

    Counts come from the 24 hourly rollup rows ending with the current hour; the
    p95 reads the events of exactly the last 24 hours.
    """
    current_hour = usage.floor_hour(now.astimezone(dt_timezone.utc))
    rows = usage.models_since(hour=current_hour - timedelta(hours=23))
    p95 = p95_latency_by_model(now - usage.LAST_24_HOURS, [row["model_id"] for row in rows])
    for row in rows:
        row["error_pct"] = _percent(row["failed"], row["requests"])
        row["mean_latency"] = round(row["latency_ms_total"] / row["requests"]) if row["requests"] else None
        row["p95_latency"] = p95.get(row["model_id"])
    return rows


def active_keys_per_tier() -> list[tuple[str, int]]:
    counts = dict(ApiKey.objects.active().values_list("tier").annotate(n=Count("id")).order_by())
    return [(tier, counts.get(tier, 0)) for tier in TIERS]


# ------------------------------------------------------------------ one key

def key_usage(key: ApiKey, *, now: datetime | None = None) -> dict:
    """A key's usage for its staff page: last 24 h and 30 days per model, a daily chart, recent requests."""
    now = now or timezone.now()
    today = now.astimezone(dt_timezone.utc).date()
    first_day = today - timedelta(days=29)

    per_model_30d = {row["model__model_id"]: row for row in usage.key_models(key, first_day=first_day)}
    per_model_24h = {row["model__model_id"]: row for row in usage.key_last_24_hours(key, now=now)}
    rows = []
    for model in per_model_30d.keys() | per_model_24h.keys():
        day = per_model_24h.get(model, usage.zero())
        month = per_model_30d.get(model, usage.zero())
        rows.append({
            "model": model,
            "requests_24h": day["requests"],
            "failed_24h": day["failed"],
            "credits_24h": day["credits"],
            "requests_30d": month["requests"],
            "failed_30d": month["failed"],
            "credits_30d": month["credits"],
            "tokens_30d": month["input_tokens"] + month["output_tokens"],
        })
    rows.sort(key=lambda row: (-row["requests_30d"], -row["requests_24h"], row["model"]))

    def total(name):
        return sum(row[name] for row in rows)

    per_day = usage.key_days(key, first_day=first_day)
    day_list = _days(first_day, today)
    chart = column_chart(
        title="Requests per day (30 days)", labels=[day.strftime("%m-%d") for day in day_list], unit="requests",
        series=[("completed", "bar-ok", [per_day.get(d, usage.zero())["completed"] for d in day_list]),
                ("failed", "bar-failed", [per_day.get(d, usage.zero())["failed"] for d in day_list])])

    recent = usage.recent_events(key, limit=RECENT_REQUESTS)
    return {
        "per_model": rows,
        "totals_24h": {"requests": total("requests_24h"), "failed": total("failed_24h"),
                       "credits": total("credits_24h")},
        "totals_30d": {"requests": total("requests_30d"), "failed": total("failed_30d"),
                       "credits": total("credits_30d"), "tokens": total("tokens_30d")},
        "chart": chart,
        "recent": recent,
    }
