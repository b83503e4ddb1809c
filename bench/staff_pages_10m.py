"""The staff pages (dashboard, usage list, key page, ...) with 10 million usage events on PostgreSQL.

    .venv/bin/python bench/staff_pages_10m.py [--events 10000000] [--keys 1000] [--days 90]
                                              [--runs 20] [--reuse]

1. Database gw_f_bench, loaded by bench/models_10m.py's own loader (events generated inside
   PostgreSQL, rollups built with the trigger's expressions and checked against the events),
   here spread over --days days (default 90, so the dashboard's 30-day window and the last 24
   hours hold a realistic share of the 10 million).
   The loader writes the events in random time order; the live service appends them as they
   happen, so the rows of the last 24 hours sit together on disk. The script restores that
   (CLUSTER on the created_at index) before measuring, unless the table is already in time order.
3. Each page is rendered in this process through Django's test client as a logged-in superuser
   (no network in the figure): 3 warm-up renders, then --runs timed ones. The SQL statements of
   one render are counted too.

Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import harness  # noqa: E402
import models_10m  # noqa: E402

DB_NAME = "gw_f_bench"
models_10m.DB_NAME = DB_NAME
models_10m.DB_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
models_10m.REDIS_URL = "redis://127.0.0.1:6379/4"
models_10m.CACHE_PREFIX = DB_NAME


def order_events_by_time() -> float:
    """CLUSTER the events on created_at when they are not already in time order; returns the correlation."""
    with models_10m.psycopg.connect(models_10m.DB_URL, autocommit=True) as conn:
        correlation = conn.execute(
            "SELECT correlation FROM pg_stats WHERE tablename = %s AND attname = 'created_at'",
            [models_10m.EVENTS]).fetchone()[0]
        if abs(correlation) < 0.9:
            index = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
                                 [models_10m.EVENTS, "%(created_at)"]).fetchone()[0]
            harness.log(f"created_at correlation {correlation:.2f}: CLUSTER on {index} (as the service appends)")
            conn.execute(f'CLUSTER {models_10m.EVENTS} USING "{index}"')
            # CLUSTER rewrites the table with an empty visibility map: vacuum, or index-only
            # scans (the capped counts) would visit the heap for every row.
            conn.execute(f"VACUUM ANALYZE {models_10m.EVENTS}")
            correlation = conn.execute(
                "SELECT correlation FROM pg_stats WHERE tablename = %s AND attname = 'created_at'",
                [models_10m.EVENTS]).fetchone()[0]
    return correlation


def measure(runs: int) -> list[tuple[str, int, float, float, int]]:
    import django
    from django.db import connection
    from django.test import Client

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db.models import Sum

    from keys.models import ApiKey
    from models_catalog.models import AiModel, KeyDailyUsage

    user, _ = get_user_model().objects.get_or_create(username="bench-staff", defaults={
        "is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    busiest = (KeyDailyUsage.objects.values("key_id").annotate(n=Sum("requests")).order_by("-n")[0]["key_id"])
    key = ApiKey.objects.get(pk=busiest)
    chat = AiModel.objects.get(model_id="gpt-5-mini")
    pages = [
        ("admin index", "/admin/"),
        ("dashboard, 30 days", "/admin/models_catalog/usageevent/dashboard/"),
        ("dashboard, 90 days", "/admin/models_catalog/usageevent/dashboard/?days=90"),
        ("usage list, page 1", "/admin/models_catalog/usageevent/"),
        ("usage list, page 100", "/admin/models_catalog/usageevent/?p=100"),
        ("usage list, one key", f"/admin/models_catalog/usageevent/?key={key.pk}"),
        ("usage list, one model, last 24 h", f"/admin/models_catalog/usageevent/?model__id__exact={chat.pk}&since=24h"),
        ("usage list, 5xx", "/admin/models_catalog/usageevent/?status_class=5"),
        ("usage list, search by key prefix", f"/admin/models_catalog/usageevent/?q={key.prefix}"),
        ("key list", "/admin/keys/apikey/"),
        ("key list, credits at zero", "/admin/keys/apikey/?credits=zero"),
        ("key page (busiest key)", f"/admin/keys/apikey/{key.pk}/change/"),
        ("access matrix", "/admin/models_catalog/aimodel/access/"),
        ("audit log", "/admin/keys/auditlog/"),
    ]
    results = []
    for name, url in pages:
        for _ in range(3):
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}")
        statements = []
        with connection.execute_wrapper(lambda execute, sql, *rest: statements.append(sql) or execute(sql, *rest)):
            client.get(url)
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            client.get(url)
            samples.append((time.perf_counter() - started) * 1000)
        samples.sort()
        p95 = samples[max(1, -(-95 * len(samples) // 100)) - 1]
        results.append((name, len(samples), statistics.median(samples), p95, len(statements)))
        harness.log(f"{name}: p50 {statistics.median(samples):.1f} ms")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="keep gw_f_bench when it already holds --events")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="gw_staff_10m_"))
    env = models_10m.django_env(workdir, 18500)
    load_seconds = None
    if args.reuse and models_10m.loaded_events() == args.events:
        harness.log(f"reusing {DB_NAME} with {args.events:,} events")
    else:
        models_10m.recreate_database(env, args.keys)
        load_seconds = models_10m.load_events(args.events, args.days)
    counts = models_10m.check_rollups()
    harness.log(f"rollups agree with the events: {counts}")
    correlation = order_events_by_time()

    os.environ.update({name: env[name] for name in ("DATABASE_URL", "REDIS_URL", "CACHE_KEY_PREFIX",
                                                    "GATEWAY_DATA_DIR", "DJANGO_SETTINGS_MODULE")})
    try:
        results = measure(args.runs)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nPostgreSQL, {counts['events']:,} usage events over {args.days} days, {args.keys} keys, 10 models; "
          f"ModelHourlyUsage {counts['hourly_rows']:,} rows, KeyDailyUsage {counts['daily_rows']:,} rows"
          + (f"; load {load_seconds:.0f} s" if load_seconds else "")
          + f"; created_at correlation {correlation:.2f}; load average {harness.load_average()}\n")
    print("| page | n | p50 ms | p95 ms | SQL queries |")
    print("|---|---|---|---|---|")
    for name, n, p50, p95, queries in results:
        print(f"| {name} | {n} | {p50:.1f} | {p95:.1f} | {queries} |")


if __name__ == "__main__":
    main()
