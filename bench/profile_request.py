"""Where the time of one metered chat request goes: queries, cache round trips, upstream call.

    .venv/bin/python bench/profile_request.py [--backend embedded|postgres+redis] [--model bench-chat]
                                              [--requests 300] [--cprofile 25]

Runs the whole Django stack in this process (middleware, URL routing, DRF, the gateway's services)
through Django's test Client, against the same fake upstream the throughput bench uses (nginx,
127.0.0.1:18201) and a fresh database seeded with bench/catalog.toml. After a warm-up it sends
--requests identical non-streamed chat requests and, for each one, measures:

- SQL: every statement (CaptureQueriesContext), its count and time in the driver;
- cache: every call of the Django cache API (outermost calls only) and, on Redis, every command
  sent to the server (redis-py's execute_command, i.e. one network round trip each);
- upstream: the time inside requests' HTTPAdapter.send (connect + send + wait + read);
- the named phases below (inclusive wall time of those functions, when the code has them);
- the rest: Python (Django, DRF, serialisation, the gateway's own code).

It prints the medians, the statements and cache calls of one request, and optionally the top
functions of a cProfile over all measured requests. Nothing is asserted: the figures go to
docs/performance.md.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import io
import json
import os
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

# Functions whose inclusive time is reported when they exist ("module:Qualified.name").
PHASES = [
    "keys.auth:BearerKeyAuthentication.authenticate",
    "gateway.views:MeteredView.read",
    "models_catalog.catalog:snapshot",
    "keys.limits:enforce",
    "keys.credits:charge",
    "keys.credits:refund",
    "gateway.providers:HttpProvider.chat",
    "gateway.providers:LocalProvider.chat",
    "gateway.services:Meter._record",
]


class Meter:
    """Counters for the request being measured."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.sql: list[float] = []
        self.cache_calls: list[tuple[str, float]] = []
        self.redis_commands: list[str] = []
        self.upstream: list[float] = []
        self.phases: dict[str, float] = defaultdict(float)
        self.phase_calls: dict[str, int] = defaultdict(int)
        self._cache_depth = 0


meter = Meter()


def _timed_phase(name: str, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            meter.phases[name] += time.perf_counter() - start
            meter.phase_calls[name] += 1
    return wrapper


def instrument_phases() -> list[str]:
    """Wrap each PHASES function that exists; returns the names found.

    Done before the first request imports the views, so modules that import a function by name
    (`from keys.limits import enforce`) bind the wrapper.
    """
    found = []
    for spec in PHASES:
        module_name, _, qualname = spec.partition(":")
        try:
            owner = importlib.import_module(module_name)
        except ImportError:
            continue
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is None or not callable(getattr(owner, attr, None)):
            continue
        setattr(owner, attr, _timed_phase(qualname, getattr(owner, attr)))
        found.append(qualname)
    return found


def instrument_cache() -> None:
    from django.core.cache import caches

    cache = caches["default"]
    for name in ("get", "set", "add", "incr", "decr", "delete", "get_many", "set_many", "delete_many",
                 "touch", "has_key", "get_or_set"):
        original = getattr(cache, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            # Only the outermost call counts: get_or_set calls get and add itself.
            meter._cache_depth += 1
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                meter._cache_depth -= 1
                if meter._cache_depth == 0:
                    meter.cache_calls.append((_name, time.perf_counter() - start))
        setattr(cache, name, wrapper)
    try:
        import redis
    except ImportError:
        return
    original_execute = redis.Redis.execute_command

    def execute_command(self, *args, **options):
        meter.redis_commands.append(str(args[0]))
        return original_execute(self, *args, **options)
    redis.Redis.execute_command = execute_command


def time_sql(execute, sql, params, many, context):
    """A connection.execute_wrapper: the time of each statement in the database driver.

    CaptureQueriesContext keeps only milliseconds to three decimals, too coarse here.
    """
    start = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        meter.sql.append(time.perf_counter() - start)


def instrument_upstream() -> None:
    import requests.adapters

    original_send = requests.adapters.HTTPAdapter.send

    def send(self, request, **kwargs):
        start = time.perf_counter()
        try:
            return original_send(self, request, **kwargs)
        finally:
            meter.upstream.append(time.perf_counter() - start)
    requests.adapters.HTTPAdapter.send = send


def setup_django(backend: str, workdir: Path) -> None:
    os.environ["GATEWAY_DATA_DIR"] = str(workdir / "data")
    os.environ["DJANGO_SETTINGS_MODULE"] = "gateway.settings"
    os.environ.setdefault("BENCH_UPSTREAM_KEY", "sk-bench-upstream")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    if backend == "postgres+redis":
        harness._reset_postgres(harness.PG_URL)
        harness._reset_redis(harness.REDIS_URL)
        os.environ["DATABASE_URL"] = harness.PG_URL
        os.environ["REDIS_URL"] = harness.REDIS_URL
        os.environ["CACHE_KEY_PREFIX"] = "gw_bench"
    sys.path.insert(0, str(harness.ROOT))
    os.chdir(harness.ROOT)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    call_command("seed_models", str(harness.CATALOG), stdout=io.StringIO())


def median_ms(values) -> float:
    return statistics.median(values) * 1000 if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="embedded", choices=list(harness.GATEWAY_PORTS))
    parser.add_argument("--model", default="bench-chat", help="bench-chat (nginx upstream) or local-chat")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--cprofile", type=int, default=0, help="print the top N functions of a cProfile")
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"],
                        help="order of the cProfile list (own time or inclusive time)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (database, nginx log)")
    args = parser.parse_args()
    args.requests = max(10, min(args.requests, 10000))

    workdir = harness.make_workdir("profile")
    nginx = harness.start_nginx(workdir)
    try:
        setup_django(args.backend, workdir)
        report = profile(args)
    finally:
        nginx.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    print(report)


def profile(args) -> str:
    from django.core.cache import caches
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from keys.services import issue_key

    found_phases = instrument_phases()
    instrument_cache()
    instrument_upstream()
    key, secret = issue_key(actor="bench profile", tier="free", credits=10**9, rpm=1000, rph=10000)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    body = json.dumps({"model": args.model, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello to the benchmark."}]})

    def send():
        response = client.post("/v1/chat/completions", body, content_type="application/json")
        if response.status_code != 200:
            raise SystemExit(f"chat answered {response.status_code}: {response.content[:500]!r}")
        return response

    for _ in range(20):  # warm-up: connection pools, catalog snapshot, imports, the rate-limit keys
        send()

    totals, sql_counts, sql_times, cache_counts, cache_times, redis_counts, upstream_times = ([] for _ in range(7))
    phase_samples: dict[str, list[float]] = defaultdict(list)
    sample_queries, sample_cache, sample_redis = [], [], []
    profiler = cProfile.Profile() if args.cprofile else None
    for index in range(args.requests):
        meter.reset()
        with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(time_sql):
            if profiler:
                profiler.enable()
            start = time.perf_counter()
            send()
            elapsed = time.perf_counter() - start
            if profiler:
                profiler.disable()
        totals.append(elapsed)
        sql_counts.append(len(queries.captured_queries))
        sql_times.append(sum(meter.sql))
        cache_counts.append(len(meter.cache_calls))
        cache_times.append(sum(t for _, t in meter.cache_calls))
        redis_counts.append(len(meter.redis_commands))
        upstream_times.append(sum(meter.upstream))
        for name in found_phases:
            phase_samples[name].append(meter.phases.get(name, 0.0))
        if index == args.requests - 1:
            sample_queries = [q["sql"] for q in queries.captured_queries]
            sample_cache = [name for name, _ in meter.cache_calls]
            sample_redis = list(meter.redis_commands)

    total = median_ms(totals)
    sql, cache, upstream = median_ms(sql_times), median_ms(cache_times), median_ms(upstream_times)
    out = io.StringIO()
    w = functools.partial(print, file=out)
    w(f"\nprofile_request.py: backend {args.backend}, model {args.model}, {args.requests} requests "
      f"(medians; {connection.vendor}, cache {type(caches['default']).__name__}; "
      f"load average {harness.load_average()})\n")
    w("| part | per request |")
    w("|---|---:|")
    w(f"| whole request (Django test Client, in process) | {total:.3f} ms (p90 "
      f"{sorted(totals)[int(len(totals) * 0.9)] * 1000:.3f} ms) |")
    w(f"| SQL statements | {statistics.median(sql_counts):.0f} statements, {sql:.3f} ms |")
    w(f"| cache API calls | {statistics.median(cache_counts):.0f} calls, {cache:.3f} ms |")
    if any(redis_counts):
        w(f"| Redis commands (network round trips) | {statistics.median(redis_counts):.0f} |")
    w(f"| upstream HTTP call (requests HTTPAdapter.send) | {upstream:.3f} ms |")
    w(f"| the rest: Python (Django, DRF, JSON, gateway code) | {max(total - sql - cache - upstream, 0):.3f} ms |")
    if phase_samples:
        w("\nNamed functions (inclusive wall time, median; they overlap the rows above):\n")
        w("| function | calls | ms |")
        w("|---|---:|---:|")
        for name, samples in phase_samples.items():
            calls = meter.phase_calls.get(name, 0)
            w(f"| {name} | {calls} | {median_ms(samples):.3f} |")
    w("\nSQL of the last request:")
    for sql_text in sample_queries:
        w(f"  - {sql_text[:220]}")
    w(f"\nCache calls of the last request: {', '.join(sample_cache) or 'none'}")
    if sample_redis:
        w(f"Redis commands of the last request: {', '.join(sample_redis)}")
    if profiler:
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        stats.sort_stats(args.sort).print_stats(args.cprofile)
        w(f"\ncProfile over {args.requests} requests, top {args.cprofile} by {args.sort}:")
        w(stream.getvalue())
    return out.getvalue()


if __name__ == "__main__":
    main()
