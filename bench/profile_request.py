"""Where the time of one metered chat request goes: queries, cache round trips, upstream call.

    .venv/bin/python bench/profile_request.py [--backend embedded|postgres+redis] [--model bench-chat]
                                              [--requests 300] [--cprofile 25] [--conn-max-age 0]

Runs the whole Django stack in this process (middleware, URL routing, DRF, the gateway's services)
by calling the WSGI application the way gunicorn does, against the same fake upstream the throughput bench uses (nginx,
127.0.0.1:18201) and a fresh database seeded with bench/catalog.toml. After a warm-up it sends
--requests identical non-streamed chat requests and, for each one, measures:

- SQL: every statement (a connection.execute_wrapper), its count and time in the driver, and the
  opening, closing or health check of the database connection (on PostgreSQL: taking it from the
  pool and giving it back);
- cache: every call of the Django cache API (outermost calls only) and, on Redis, every command
  sent to the server (redis-py's execute_command, i.e. one network round trip each);
- upstream: the time inside requests' HTTPAdapter.send (connect + send + wait + read);
- garbage collection: the pauses of Python's cyclic garbage collector (gc.callbacks);
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
import gc
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
    "gateway.upstream.openai:OpenAIAdapter.chat",
    "gateway.upstream.local:LocalAdapter.chat",
    "gateway.services:Meter._record",
]


# Opening a connection (SQLite runs its PRAGMAs then), closing it (SQLite checkpoints its WAL when
# the last connection closes) and the health check of a kept one pass through no execute wrapper.
CONNECTION_METHODS = ("connect", "close", "is_usable")


class Meter:
    """Counters for the request being measured."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.sql: list[float] = []
        self.sql_text: list[str] = []
        self.cache_calls: list[tuple[str, float]] = []
        self.redis_commands: list[str] = []
        self.upstream: list[float] = []
        self.phases: dict[str, float] = defaultdict(float)
        self.phase_calls: dict[str, int] = defaultdict(int)
        self.gc: list[float] = []
        self._gc_start = 0.0
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
        meter.sql_text.append(sql)


def instrument_gc() -> None:
    def on_gc(phase, info):
        if phase == "start":
            meter._gc_start = time.perf_counter()
        else:
            meter.gc.append(time.perf_counter() - meter._gc_start)
    gc.callbacks.append(on_gc)


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
    os.environ.setdefault("GATEWAY_UPSTREAM_BENCH_KEY", "sk-bench-upstream")
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
    parser.add_argument("--cpu-clock", action="store_true",
                        help="time the cProfile by CPU time of this thread, not wall time")
    parser.add_argument("--dump", type=Path, help="also write the raw cProfile stats here (for pstats)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (database, nginx log)")
    parser.add_argument("--conn-max-age", type=int, default=None,
                        help="embedded only: override SQLite's CONN_MAX_AGE (0 opens a connection per request, "
                             "as before persistent connections; PostgreSQL uses a connection pool instead)")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    args.requests = max(10, min(args.requests, 10000))
    if args.conn_max_age is not None and args.backend != "embedded":
        parser.error("--conn-max-age applies to the embedded default only (PostgreSQL uses a connection pool)")

    workdir = harness.make_workdir("profile")
    nginx = harness.start_nginx(workdir)
    try:
        with harness.private_servers(workdir, wanted=args.backend == "postgres+redis"):
            setup_django(args.backend, workdir)
            report = profile(args)
    finally:
        nginx.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    print(report)


def wsgi_post(app, path: str, body: bytes, headers: dict) -> tuple[str, bytes]:
    """One request through the WSGI application exactly as gunicorn hands it over.

    Not Django's test Client: that one keeps the database connection open across
    requests (it disconnects close_old_connections) and adds signal handlers of its
    own, so it would hide what a served request really costs.
    """
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "18299", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:18299",
        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr, "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0), "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    environ.update({"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()})
    status = []
    result = app(environ, lambda line, response_headers, exc_info=None: status.append(line))
    try:
        content = b"".join(result)
    finally:
        result.close()  # fires request_finished, which closes or keeps the DB connection
    return status[0], content


def profile(args) -> str:
    from django.core.cache import caches
    from django.db import connection, connections

    from gateway.wsgi import application
    from keys.services import issue_key

    if args.conn_max_age is not None:
        connections["default"].settings_dict["CONN_MAX_AGE"] = args.conn_max_age
        connection.close()
    found_phases = instrument_phases()
    database_class = type(connections["default"])
    for method in CONNECTION_METHODS:
        setattr(database_class, method, _timed_phase(f"DatabaseWrapper.{method}", getattr(database_class, method)))
        found_phases.append(f"DatabaseWrapper.{method}")
    instrument_cache()
    instrument_upstream()
    instrument_gc()
    # A key may make 1000 requests a minute: enough keys for the run, used round-robin.
    secrets = [issue_key(actor="bench profile", tier="free", credits=10**9, rpm=1000, rph=10000)[1]
               for _ in range((args.requests + 20) // 900 + 1)]
    turn = iter(range(10**9))
    connection.close()  # the request path opens its own, as under gunicorn
    body = json.dumps({"model": args.model, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello to the benchmark."}]}).encode()

    def send():
        status, content = wsgi_post(application, "/v1/chat/completions", body,
                                    {"Authorization": f"Bearer {secrets[next(turn) % len(secrets)]}"})
        if not status.startswith("200"):
            raise SystemExit(f"chat answered {status}: {content[:500]!r}")

    for _ in range(20):  # warm-up: connection pools, catalog snapshot, imports, the rate-limit keys
        send()

    totals, cpu_times, sql_counts, sql_times, connect_times = [], [], [], [], []
    cache_counts, cache_times, redis_counts, upstream_times = [], [], [], []
    gc_counts, gc_times = [], []
    phase_samples: dict[str, list[float]] = defaultdict(list)
    sample_queries, sample_cache, sample_redis, sample_calls = [], [], [], {}
    # --cpu-clock times the profile by this thread's CPU time, so waits on sockets drop out of it.
    clock = time.thread_time if args.cpu_clock else time.perf_counter
    profiler = cProfile.Profile(clock) if args.cprofile else None
    with connection.execute_wrapper(time_sql):
        for index in range(args.requests):
            meter.reset()
            if profiler:
                profiler.enable()
            start, cpu_start = time.perf_counter(), time.thread_time()
            send()
            elapsed = time.perf_counter() - start
            cpu_times.append(time.thread_time() - cpu_start)
            if profiler:
                profiler.disable()
            totals.append(elapsed)
            sql_counts.append(len(meter.sql))
            sql_times.append(sum(meter.sql))
            connect_times.append(sum(meter.phases.get(f"DatabaseWrapper.{m}", 0.0) for m in CONNECTION_METHODS))
            cache_counts.append(len(meter.cache_calls))
            cache_times.append(sum(t for _, t in meter.cache_calls))
            redis_counts.append(len(meter.redis_commands))
            upstream_times.append(sum(meter.upstream))
            gc_counts.append(len(meter.gc))
            gc_times.append(sum(meter.gc))
            for name in found_phases:
                phase_samples[name].append(meter.phases.get(name, 0.0))
            if index == args.requests - 1:
                sample_queries = list(meter.sql_text)
                sample_cache = [name for name, _ in meter.cache_calls]
                sample_redis = list(meter.redis_commands)
                sample_calls = dict(meter.phase_calls)

    total = median_ms(totals)
    sql, connect = median_ms(sql_times), median_ms(connect_times)
    cache, upstream = median_ms(cache_times), median_ms(upstream_times)
    out = io.StringIO()
    w = functools.partial(print, file=out)
    what_if = "" if args.conn_max_age is None else f", SQLite CONN_MAX_AGE={args.conn_max_age}"
    w(f"\nprofile_request.py: backend {args.backend}, model {args.model}, {args.requests} requests{what_if} "
      f"(medians; {connection.vendor}, cache {type(caches['default']).__name__}; "
      f"load average {harness.load_average()})\n")
    w("| part | per request |")
    w("|---|---:|")
    w(f"| whole request (WSGI application, in process, no HTTP server) | {total:.3f} ms (p90 "
      f"{sorted(totals)[int(len(totals) * 0.9)] * 1000:.3f} ms), CPU time of this thread "
      f"{median_ms(cpu_times):.3f} ms |")
    w(f"| SQL statements | {statistics.median(sql_counts):.0f} statements, {sql:.3f} ms |")
    w(f"| database connection: open / close / health check | {sample_calls.get('DatabaseWrapper.connect', 0)} "
      f"opened, {sample_calls.get('DatabaseWrapper.close', 0)} closed, "
      f"{sample_calls.get('DatabaseWrapper.is_usable', 0)} checked, {connect:.3f} ms |")
    w(f"| cache API calls | {statistics.median(cache_counts):.0f} calls, {cache:.3f} ms |")
    if any(redis_counts):
        w(f"| Redis commands (network round trips) | {statistics.median(redis_counts):.0f} |")
    w(f"| upstream HTTP call (requests HTTPAdapter.send) | {upstream:.3f} ms |")
    # Collections are occasional, so their median is 0: the mean says what they cost a request.
    w(f"| garbage collector pauses (mean, not median) | {statistics.mean(gc_counts):.2f} collections, "
      f"{statistics.mean(gc_times) * 1000:.3f} ms |")
    w(f"| the rest: Python (Django, DRF, JSON, gateway code) "
      f"| {max(total - sql - connect - cache - upstream, 0):.3f} ms |")
    if phase_samples:
        w("\nNamed functions (inclusive wall time, median; they overlap the rows above):\n")
        w("| function | calls | ms |")
        w("|---|---:|---:|")
        for name, samples in phase_samples.items():
            w(f"| {name} | {sample_calls.get(name, 0)} | {median_ms(samples):.3f} |")
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
        if args.dump:
            stats.dump_stats(args.dump)
        w(f"\ncProfile over {args.requests} requests, top {args.cprofile} by {args.sort}:")
        w(stream.getvalue())
    return out.getvalue()


if __name__ == "__main__":
    main()
