"""GET /v1/models?web-view=true with 10 million usage events on PostgreSQL.

    .venv/bin/python bench/models_10m.py [--events 10000000] [--keys 1000] [--days 365]
                                         [--requests 1000] [--reuse] [--port 18300]

1. Database gw_models_bench (its own; dropped and created afresh unless --reuse finds it loaded):
   migrate, the shipped default catalog (10 models), --keys keys issued through issue_key.
2. Load: the events are generated inside PostgreSQL (INSERT ... SELECT over generate_series, in
   batches of one million), spread uniformly over the last --days days, over the 10 models and
   the keys, ~3 % failed. The per-row rollup trigger is disabled and the secondary indexes are
   dropped during the load; afterwards the indexes are rebuilt and the two rollup tables are built
   with one INSERT ... SELECT ... GROUP BY each, using the trigger's own expressions, so they hold
   the numbers the trigger would have written. The script then checks that: the rollups' totals
   equal the events' totals, and the trigger is back on (one more insert moves the rollups by one).
3. Measure: a gunicorn from the working tree on 127.0.0.1:--port (2 workers x 4 threads, Redis
   db 2 as the shared cache under its own prefix, PUBLIC_RATE_LIMIT raised so the per-address limit
   does not answer 429 to the benchmark) gets --requests sequential keep-alive requests of each
   view after a warm-up; the first request after a cache flush (closed hours not yet cached) is
   reported separately. For scale, the script also times the naive answer: one GROUP BY over the
   events table.

Prints a Markdown table. Every process it starts is stopped by its PID.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import redis
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

DB_NAME = "gw_models_bench"
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DB_URL = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/2"
CACHE_PREFIX = DB_NAME
EVENTS = "models_catalog_usageevent"
HOURLY = "models_catalog_modelhourlyusage"
DAILY = "models_catalog_keydailyusage"
BATCH = 1_000_000

log = harness.log


def django_env(workdir: Path, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WEB_CONCURRENCY", "GUNICORN_THREADS")}
    env.update({
        "DATABASE_URL": DB_URL, "REDIS_URL": REDIS_URL, "CACHE_KEY_PREFIX": CACHE_PREFIX,
        "GATEWAY_DATA_DIR": str(workdir / "data"), "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2", "GUNICORN_THREADS": "4", "ACCESS_LOG": str(workdir / "access.log"),
        "PUBLIC_RATE_LIMIT": "1000000/m", "DJANGO_SETTINGS_MODULE": "gateway.settings",
    })
    return env


def manage(env: dict, *args: str) -> str:
    return subprocess.run([harness.PYTHON, "manage.py", *args], cwd=harness.ROOT, env=env, check=True,
                          stdout=subprocess.PIPE, text=True).stdout


def loaded_events() -> int | None:
    """How many events the bench database holds, or None when it is not there."""
    try:
        with psycopg.connect(DB_URL, connect_timeout=5) as conn:
            return conn.execute(f"SELECT count(*) FROM {EVENTS}").fetchone()[0]
    except psycopg.Error:
        return None


def recreate_database(env: dict, keys: int) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    log("migrate, seed_models (default catalog)")
    manage(env, "migrate", "--noinput")
    manage(env, "seed_models")
    log(f"issue {keys} keys through issue_key")
    manage(env, "shell", "-c", (
        "from keys.services import issue_key\n"
        f"for i in range({keys}):\n"
        "    issue_key(actor='bench models_10m', tier='premium', credits=10**6, name=f'bench {i}')\n"))


def load_events(total: int, days: int) -> float:
    started = time.monotonic()
    with psycopg.connect(DB_URL) as conn:
        models = conn.execute("SELECT id, type, cost FROM models_catalog_aimodel ORDER BY id").fetchall()
        key_ids = [row[0] for row in conn.execute("SELECT id FROM keys_apikey ORDER BY id")]
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT LIKE '%%_pkey'",
            [EVENTS]).fetchall()
        conn.execute(f"ALTER TABLE {EVENTS} DISABLE TRIGGER usage_rollups")
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        conn.commit()
        log(f"dropped {len(indexes)} secondary indexes and disabled the rollup trigger for the load")

        params = {"ids": [m[0] for m in models], "types": [m[1] for m in models], "costs": [m[2] for m in models],
                  "n": len(models), "keys": key_ids, "nkeys": len(key_ids), "span": f"{days} days"}
        done = 0
        while done < total:
            rows = min(BATCH, total - done)
            conn.execute(f"""
                INSERT INTO {EVENTS} (key_id, model_id, operation, status, success, input_tokens, output_tokens,
                                      credits_charged, latency_ms, provider, created_at, request_id)
                SELECT (%(keys)s::bigint[])[1 + floor(random() * %(nkeys)s)::int],
                       (%(ids)s::bigint[])[i], (%(types)s::text[])[i],
                       CASE WHEN ok THEN 200 ELSE 502 END, ok,
                       floor(random() * 2000)::int,
                       CASE WHEN ok THEN floor(random() * 800)::int ELSE 0 END,
                       CASE WHEN ok THEN (%(costs)s::int[])[i] ELSE 0 END,
                       (40 + floor(random() * random() * 3000))::int, 'bench',
                       now() - random() * %(span)s::interval, ''
                FROM (SELECT 1 + floor(random() * %(n)s)::int AS i, random() >= 0.03 AS ok
                      FROM generate_series(1, %(rows)s)) AS src""", {**params, "rows": rows})
            conn.commit()
            done += rows
            log(f"  {done:,} / {total:,} events ({time.monotonic() - started:.0f} s)")

        for name, definition in indexes:
            log(f"rebuild index {name}")
            conn.execute(definition)
        conn.commit()

        # The trigger's own expressions (migration 0002), one GROUP BY per rollup.
        counters = ("count(*), count(*) FILTER (WHERE success), count(*) FILTER (WHERE NOT success), "
                    "sum(input_tokens), sum(output_tokens), sum(credits_charged), sum(latency_ms)")
        columns = "requests, completed, failed, input_tokens, output_tokens, credits, latency_ms_total"
        log("build the hourly rollup")
        conn.execute(f"""
            INSERT INTO {HOURLY} (model_id, hour, {columns})
            SELECT model_id, date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', {counters}
            FROM {EVENTS} GROUP BY 1, 2""")
        log("build the daily per-key rollup")
        conn.execute(f"""
            INSERT INTO {DAILY} (key_id, model_id, day, {columns})
            SELECT key_id, model_id, (created_at AT TIME ZONE 'UTC')::date, {counters}
            FROM {EVENTS} GROUP BY 1, 2, 3""")
        conn.execute(f"ALTER TABLE {EVENTS} ENABLE TRIGGER usage_rollups")
        conn.commit()
    with psycopg.connect(DB_URL, autocommit=True) as conn:
        for table in (EVENTS, HOURLY, DAILY):
            conn.execute(f"VACUUM ANALYZE {table}")
    return time.monotonic() - started


def check_rollups() -> dict:
    """The rollups agree with the events, and the trigger counts a new insert."""
    with psycopg.connect(DB_URL) as conn:
        events = conn.execute(f"SELECT count(*), count(*) FILTER (WHERE success), sum(input_tokens), "
                              f"sum(output_tokens) FROM {EVENTS}").fetchone()
        for table in (HOURLY, DAILY):
            rolled = conn.execute(f"SELECT sum(requests), sum(completed), sum(input_tokens), sum(output_tokens) "
                                  f"FROM {table}").fetchone()
            if tuple(rolled) != tuple(events):
                raise SystemExit(f"{table} disagrees with the events: {rolled} != {events}")
        counts = {"events": events[0], "hourly_rows": conn.execute(f"SELECT count(*) FROM {HOURLY}").fetchone()[0],
                  "daily_rows": conn.execute(f"SELECT count(*) FROM {DAILY}").fetchone()[0]}
        # The trigger is on again: one insert (rolled back) moves the hourly rollup by exactly one.
        before = conn.execute(f"SELECT sum(requests) FROM {HOURLY}").fetchone()[0]
        conn.execute(f"INSERT INTO {EVENTS} (key_id, model_id, operation, status, success, input_tokens, "
                     f"output_tokens, credits_charged, latency_ms, provider, created_at, request_id) SELECT min(k.id), "
                     f"min(m.id), 'chat', 200, true, 1, 1, 1, 1, 'check', now(), '' FROM keys_apikey k, "
                     f"models_catalog_aimodel m")
        after = conn.execute(f"SELECT sum(requests) FROM {HOURLY}").fetchone()[0]
        conn.rollback()
        if after != before + 1:
            raise SystemExit("the rollup trigger is not enabled after the load")
        started = time.perf_counter()
        conn.execute(f"SELECT model_id, count(*), count(*) FILTER (WHERE success), sum(input_tokens), "
                     f"sum(output_tokens) FROM {EVENTS} GROUP BY model_id").fetchall()
        counts["naive_scan_ms"] = (time.perf_counter() - started) * 1000
        # What the first web view after an hour change pays once: the closed hours summed per model.
        started = time.perf_counter()
        conn.execute(f"SELECT model_id, sum(requests), sum(completed), sum(failed), sum(input_tokens), "
                     f"sum(output_tokens), sum(credits) FROM {HOURLY} "
                     f"WHERE hour < date_trunc('hour', now() - interval '1 hour') GROUP BY model_id").fetchall()
        counts["closed_sum_ms"] = (time.perf_counter() - started) * 1000
    return counts


def flush_cache() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    names = list(client.scan_iter(match=f"{CACHE_PREFIX}:*", count=1000))
    if names:
        client.delete(*names)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank, as /benchmark reports its percentiles."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def timed(session: requests.Session, url: str) -> float:
    started = time.perf_counter()
    response = session.get(url, timeout=30)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{url} answered {response.status_code}: {response.text[:300]}")
    return elapsed


def measure(base: str, requests_per_view: int) -> dict:
    session = requests.Session()
    results = {}
    # Warm both workers (imports, catalog snapshot, database connection) on the default view,
    # so that the "cold" figure is only the closed hours being summed and cached.
    for _ in range(50):
        timed(session, f"{base}/v1/models")
    flush_cache()
    results["cold"] = timed(session, f"{base}/v1/models?web-view=true")
    body = session.get(f"{base}/v1/models?web-view=true", timeout=30).json()
    results["global"] = body["globalStats"]
    for name, path in (("web-view", "/v1/models?web-view=true"), ("default", "/v1/models")):
        for _ in range(50):
            timed(session, base + path)
        samples = [timed(session, base + path) for _ in range(requests_per_view)]
        results[name] = {"n": len(samples), "p50": statistics.median(samples), "p95": percentile(samples, 0.95),
                         "p99": percentile(samples, 0.99), "max": max(samples)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per view (after 50 warm-up)")
    parser.add_argument("--reuse", action="store_true", help="keep gw_models_bench when it already holds --events")
    parser.add_argument("--port", type=int, default=18300)
    args = parser.parse_args()
    if not 18300 <= args.port <= 18399:
        raise SystemExit("--port must be in 18300-18399")

    workdir = Path(tempfile.mkdtemp(prefix="gw_models_10m_"))
    env = django_env(workdir, args.port)
    load_seconds = None
    if args.reuse and loaded_events() == args.events:
        log(f"reusing {DB_NAME} with {args.events:,} events")
    else:
        recreate_database(env, args.keys)
        load_seconds = load_events(args.events, args.days)
        log(f"loaded in {load_seconds:.0f} s")
    counts = check_rollups()
    log(f"rollups agree with the events: {counts}")

    server = harness.Process(f"gateway on :{args.port}",
                             [str(harness.VENV_BIN / "gunicorn"), "-c", "python:gateway.gunicorn_conf", "gateway.wsgi"],
                             env=env, logfile=workdir / "gunicorn.log")
    try:
        harness.wait_for_port(args.port, path="/health", timeout=60, process=server)
        results = measure(f"http://127.0.0.1:{args.port}", args.requests)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\nPostgreSQL, {counts['events']:,} usage events over {args.days} days, {args.keys} keys, 10 models; "
          f"ModelHourlyUsage {counts['hourly_rows']:,} rows, KeyDailyUsage {counts['daily_rows']:,} rows"
          + (f"; load {load_seconds:.0f} s" if load_seconds else ""))
    print(f"globalStats: {results['global']}\n")
    print("| request | n | p50 ms | p95 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for name, path in (("web-view", "GET /v1/models?web-view=true"), ("default", "GET /v1/models")):
        r = results[name]
        print(f"| {path} | {r['n']} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |")
    print(f"\nfirst web-view request after a cache flush (closed hours summed and cached): "
          f"{results['cold']:.1f} ms; that SQL alone: {counts['closed_sum_ms']:.0f} ms; "
          f"the naive GROUP BY over the events table: {counts['naive_scan_ms']:.0f} ms")


if __name__ == "__main__":
    main()
