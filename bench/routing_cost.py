"""The CPU the upstream pools' routing adds to a metered chat: the path before pools against this tree, in one run.

    .venv/bin/python bench/routing_cost.py --before DIR [--rounds 3] [--duration 5] [--connections 16]
                                           [--keys 100] [--requests 200] [--out results.json]

DIR is a copy of the commit before pools (`git archive 780d6a8 | tar -x -C DIR`), served with this
tree's virtualenv as chat_overhead.py's --source does. Each round serves both copies in turn (the
order alternates from round to round) on PostgreSQL + Redis with 2 gevent workers, each on a fresh
database, and sends non-streamed chats with wrk at --connections for --duration seconds to three
models, all answered by nginx (bench/upstream/nginx.conf.in):

- route-one: one upstream (the old catalog form: one provider, so one deployment after pools);
- route-weighted: three upstreams, weights 3/2/1 (before pools: a provider and two fallbacks, the
  closest there was: only the first is ever asked while it answers);
- route-latency: the same three by latency routing (before pools: the same chain as route-weighted).

For each wrk run it reads the CPU time used by the gateway's processes, the database's backends and
the bench's own redis-server (started here, so no other work on the machine's Redis is counted) and
divides by the requests answered: CPU per request, the figure a shared, noisy machine still gives
when its requests per second do not. Then, in a process of its own against the same database, it
sends --requests chats through the WSGI application of each copy, counting each one's SQL
statements and Redis round trips (every write of a command or pipeline to a Redis connection),
and, for this tree, times the routing's own steps in a loop (the health read's ops, reading the
answers, the choice, the success's figures) and counts once more with one redis-py client kept by
the process (Django's cache builds one at each get_client() call: what keeping one would save).
`manage.py reconcile` runs after every gateway and its summary is printed; a failed one is reported,
never hidden.

Ports 18222 (nginx), 18223 (redis-server) and 18231 (the gateway), and the database gw_bench_routing
(BENCH_DATABASE_URL to change it), keep it apart from the other bench scripts; the gateway keeps 16
database connections (DATABASE_MAX_CONNECTIONS), not its 90, on a server other work shares.
Needs wrk, nginx and redis-server (`apt-get install -y wrk nginx-light redis-server`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

os.environ.setdefault("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gw_bench_routing")
os.environ.setdefault("BENCH_REDIS_URL", "redis://127.0.0.1:18223/5")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

NGINX_PORT = 18222
REDIS_PORT = int(urlsplit(harness.REDIS_URL).port or 6379)
GATEWAY_PORT = 18231
MODELS = ("route-one", "route-weighted", "route-latency")

_PROVIDERS = "".join(f"""
[providers.route-{name}]
base_url = "http://127.0.0.1:{NGINX_PORT}/v1"
api_key_env = "GATEWAY_UPSTREAM_BENCH_KEY"
timeout = 30
""" for name in "abc")
_MODEL = """
[[models]]
id = "{id}"
type = "chat"
owned_by = "bench"
cost = 1
access = ["free"]
"""
_ONE = 'provider = "route-a"\nupstream_model = "bench-upstream"\n'
# Before pools: a provider and its fallbacks, the only way there was to name three upstreams.
CATALOG_BEFORE = _PROVIDERS + "".join(
    _MODEL.format(id=model_id) + _ONE
    + ('fallbacks = ["route-b", "route-c"]\n' if model_id != "route-one" else "")
    for model_id in MODELS)
CATALOG_POOLS = (_PROVIDERS + _MODEL.format(id="route-one") + _ONE
                 + "".join(_MODEL.format(id=f"route-{routing}") + f'routing = "{routing}"\n' + "".join(
                     f'\n  [[models.deployments]]\n  provider = "route-{name}"\n  upstream_model = "bench-upstream"\n'
                     f"  weight = {weight}\n" for name, weight in zip("abc", (3, 2, 1)))
                     for routing in ("weighted", "latency")))


def has_pools(source: Path) -> bool:
    return (source / "gateway" / "routing.py").is_file()


# ---------------------------------------------------------------- in a process of its own: counts, the routing's steps

def count(model_id: str, requests: int, keys_file: Path) -> dict:
    """Run inside the copy being measured (cwd): SQL statements and Redis round trips of each chat on
    the success path, and, with pools, the CPU of the routing's steps."""
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    import django

    django.setup()
    import redis.connection
    from django.db import connection

    from gateway.wsgi import application
    from profile_request import wsgi_post

    trips = [0]
    send = redis.connection.AbstractConnection.send_packed_command

    def counted_send(self, *args, **kwargs):
        trips[0] += 1  # one write of a command, or of a whole pipeline, then its replies are read
        return send(self, *args, **kwargs)

    redis.connection.AbstractConnection.send_packed_command = counted_send
    statements = []

    def counted_sql(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    if os.environ.get("BENCH_KEPT_CLIENT"):
        keep_one_redis_client()
    secret = keys_file.read_text().split()[0]
    body = json.dumps({"model": model_id, "messages": [{"role": "system", "content": "You are terse."},
                                                       {"role": "user", "content": "Say hello to the benchmark."}]})
    headers = {"Authorization": f"Bearer {secret}"}
    connection.close()  # the request path takes its own, as under gunicorn
    for _ in range(20):  # the key cache, the catalog snapshot, the limits script, connection pools
        wsgi_post(application, "/v1/chat/completions", body.encode(), headers)
    sql, round_trips, cpu, beyond = [], [], [], Counter()
    with connection.execute_wrapper(counted_sql):
        for _ in range(requests):
            trips[0] = 0
            statements.clear()
            began = time.thread_time()
            status, content = wsgi_post(application, "/v1/chat/completions", body.encode(), headers)
            cpu.append(time.thread_time() - began)
            if not status.startswith("200"):
                raise SystemExit(f"{model_id} answered {status}: {content[:300]!r}")
            sql.append(len(statements))
            round_trips.append(trips[0])
            if len(statements) > 2:  # what a request past the usual two ran: the first words of each statement
                beyond.update(" ".join(statement.split()[:4])[:60] for statement in statements)
    found = {"sql": sql, "redis": round_trips, "beyond": dict(beyond),
             "in_process_cpu_ms": round(statistics.median(cpu) * 1000, 3)}
    if has_pools(Path(os.getcwd())):
        found["routing_us"] = routing_steps(model_id)
    return found


def keep_one_redis_client() -> None:
    """What the limits' round trip would cost with one redis-py client kept by the process, instead of the
    one Django's cache builds at each get_client() call (its __init__ copies 169 reply callbacks)."""
    from django.core.cache import cache

    built = cache._cache.get_client(write=True)
    cache._cache.get_client = lambda key=None, *, write=False: built


def routing_steps(model_id: str, rounds: int = 20000) -> dict:
    """Microseconds per request of each routing step, best of five loops of ``rounds``."""
    import timeit

    from gateway import routing
    from models_catalog import catalog

    model = catalog.get_model(model_id)
    read = routing.HealthRead(model)
    # What the round trip answers for a healthy pool: no cooldowns, and recent figures for latency routing.
    answers = [["1200", "100"] if op.kind == "hmget" else None for op in read.ops]
    health = read.health(answers)
    deployment = routing.Attempts(model, health).next()

    def success_and_ops():
        routing.succeeded(deployment, 0.012)  # the figures wait in memory (and the attempts metric)
        routing.HealthRead(model)  # the next request's ops: the health read and the waiting figures

    steps = {"success and the round trip's ops": success_and_ops,
             "answers read": lambda: read.health(answers),
             "choice": lambda: routing.Attempts(model, health).next()}
    return {name: round(min(timeit.repeat(step, number=rounds, repeat=5)) / rounds * 1e6, 2)
            for name, step in steps.items()}


# ---------------------------------------------------------------- the run

def start_redis(workdir: Path) -> harness.Process:
    redis_server = harness.require_tool("redis-server", "redis-server")
    process = harness.Process("bench redis-server", [redis_server, "--port", str(REDIS_PORT), "--bind", "127.0.0.1",
                                                     "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                              logfile=workdir / "redis.log")
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(host="127.0.0.1", port=REDIS_PORT, socket_timeout=1).ping()
            return process
        except redis.RedisError:
            if time.monotonic() > deadline or not process.alive():
                raise RuntimeError(f"redis-server did not start; see {process.logfile}") from None
            time.sleep(0.1)


def measure(source: Path, label: str, round_: int, workdir: Path, args, redis_server: harness.Process) -> list[dict]:
    import chat_overhead

    workdir.mkdir(parents=True, exist_ok=True)
    catalog = workdir / "catalog.toml"
    catalog.write_text(CATALOG_POOLS if has_pools(source) else CATALOG_BEFORE)
    harness.CATALOG = catalog
    gateway = harness.Gateway("postgres+redis", workdir, port=GATEWAY_PORT, source=source,
                              # The machine's PostgreSQL is shared (max_connections 100): 16 serve 16 connections.
                              extra_env={"WEB_CONCURRENCY": "2", "PROBE_SECONDS": "0",
                                         "DATABASE_MAX_CONNECTIONS": "16"})
    gateway.prepare(keys=args.keys)
    workers, threads = gateway.workers_and_threads()
    gateway.start()
    database = urlsplit(harness.PG_URL).path.lstrip("/")
    cpu = harness.CpuMeter(gateway=lambda: harness.process_tree(gateway.process.pid),
                           postgres=lambda: harness.postgres_backends(database),
                           redis=lambda: [redis_server.pid])
    rows = []
    try:
        url = f"{gateway.url}/v1/chat/completions"
        for model in MODELS:  # warm-up: pools, the catalog snapshot, the key cache
            chat_overhead.run_wrk(url, connections=4, duration=2, keys_file=gateway.keys_file, model=model,
                                  result_file=workdir / "warm.json")
        for model in MODELS:
            result = chat_overhead.run_wrk(url, connections=args.connections, duration=args.duration,
                                           keys_file=gateway.keys_file, model=model,
                                           result_file=workdir / "wrk.json", cpu=cpu)
            result.update(source=label, model=model, workers=workers, round=round_)
            harness.log(f"{label} {model}: {result['rps']:.0f} req/s, CPU ms/request {result['cpu_ms']}, "
                        f"non-2xx {result['non_2xx']}, load {result['load']}")
            rows.append(result)
    finally:
        gateway.process.stop()
        gateway.process = None
    for row in rows:
        found = count_apart(source, gateway, row["model"], args.requests)
        if has_pools(source):  # and again with one Redis client kept by the process, to see what it would save
            kept = count_apart(source, gateway, row["model"], args.requests, BENCH_KEPT_CLIENT="1")
            found["in_process_cpu_ms_kept_client"] = kept["in_process_cpu_ms"]
        row.update(found)
        harness.log(f"{label} {row['model']}: SQL statements {statistics.median(found['sql'])} "
                    f"(max {max(found['sql'])}), Redis round trips {statistics.median(found['redis'])} "
                    f"(max {max(found['redis'])}), routing µs {found.get('routing_us')}")
    reconciled = gateway.reconcile()
    for row in rows:
        row["reconcile"] = reconciled
    return rows


def count_apart(source: Path, gateway: harness.Gateway, model: str, requests: int, **env: str) -> dict:
    """count() in a process of its own, in the copy measured, against the gateway's database."""
    out = subprocess.run([harness.PYTHON, str(Path(__file__).resolve()), "--count", model, "--requests",
                          str(requests), "--keys-file", str(gateway.keys_file)],
                         cwd=source, env={**gateway.env, "LOG_LEVEL": "WARNING", **env}, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.splitlines()[-1])


def total(row: dict) -> float:
    return sum(row["cpu_ms"].values())


def spread(counts: Counter) -> str:
    """The usual count, and how many requests had another: "2 (3 ×1)"."""
    usual = counts.most_common(1)[0][0]
    others = ", ".join(f"{value} ×{times}" for value, times in sorted(counts.items()) if value != usual)
    return f"{usual}" + (f" ({others})" if others else "")


def table(rows: list[dict]) -> str:
    lines = ["| model | source | req/s | CPU ms/req: gateway | PostgreSQL | Redis | together (each round) "
             "| in process, CPU ms/req (each round) | SQL statements / Redis round trips per request | non-2xx |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model in MODELS:
        for source in dict.fromkeys(row["source"] for row in rows):
            runs = [row for row in rows if row["model"] == model and row["source"] == source]
            if not runs:
                continue
            cpu = {name: statistics.median(run["cpu_ms"][name] for run in runs) for name in runs[0]["cpu_ms"]}
            each = ", ".join(f"{total(run):.2f}" for run in runs)
            in_process = ", ".join(f"{run['in_process_cpu_ms']:.2f}" for run in runs)
            sql = Counter(value for run in runs for value in run["sql"])
            trips = Counter(value for run in runs for value in run["redis"])
            lines.append(f"| {model} | {source} | {statistics.median(run['rps'] for run in runs):,.0f} "
                         f"| {cpu['gateway']:.2f} | {cpu['postgres']:.2f} | {cpu['redis']:.3f} "
                         f"| {statistics.median(total(run) for run in runs):.2f} ({each}) "
                         f"| {statistics.median(run['in_process_cpu_ms'] for run in runs):.2f} ({in_process}) "
                         f"| {spread(sql)} / {spread(trips)} "
                         f"| {sum(run['non_2xx'] + run['socket_errors'] for run in runs)} |")
    return "\n".join(lines)


def differences(rows: list[dict]) -> str:
    """After minus before, each round's pair: the CPU per request the change added (gateway, PostgreSQL and Redis)."""
    lines = ["| model | after − before, CPU ms/req together (each round) | median | of which gateway (median) |",
             "|---|---:|---:|---:|"]
    for model in MODELS:
        pairs = []
        for round_ in sorted({row["round"] for row in rows}):
            found = {row["source"]: row for row in rows if row["model"] == model and row["round"] == round_}
            if {"before", "after"} <= set(found):
                pairs.append((total(found["after"]) - total(found["before"]),
                              found["after"]["cpu_ms"]["gateway"] - found["before"]["cpu_ms"]["gateway"]))
        if pairs:
            lines.append(f"| {model} | {', '.join(f'{both:+.2f}' for both, _ in pairs)} "
                         f"| {statistics.median(both for both, _ in pairs):+.2f} "
                         f"| {statistics.median(gateway for _, gateway in pairs):+.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a copy of the commit before pools")
    parser.add_argument("--rounds", type=int, default=3, help="both copies in turn per round (at most 10)")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run (bounded to 120)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--keys", type=int, default=100, help="keys the requests go round-robin over")
    parser.add_argument("--requests", type=int, default=200, help="chats counted in process, per model")
    parser.add_argument("--out", type=Path, help="also write the raw results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    parser.add_argument("--count", help=argparse.SUPPRESS)  # inside the copy measured: see count()
    parser.add_argument("--keys-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        print(json.dumps(count(args.count, max(10, min(args.requests, 5000)), args.keys_file)))
        return
    if args.before is None or not (args.before / "manage.py").is_file():
        parser.error("--before must name a copy of the project (git archive 780d6a8 | tar -x -C DIR)")
    args.rounds = max(1, min(args.rounds, 10))
    args.duration = max(1, min(args.duration, 120))
    sources = [(args.before.resolve(), "before"), (harness.ROOT, "after")]

    workdir = harness.make_workdir("routing_cost")
    harness.log(f"work dir {workdir}")
    nginx = harness.start_nginx(workdir, port=NGINX_PORT)
    redis_server = start_redis(workdir)
    rows = []
    try:
        for round_ in range(args.rounds):
            for source, label in sources if round_ % 2 == 0 else sources[::-1]:
                rows += measure(source, label, round_, workdir / f"round{round_}-{label}", args, redis_server)
    finally:
        redis_server.stop()
        nginx.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    print(f"\nrouting_cost.py, {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} round(s), {args.duration} s "
          f"per wrk run at {args.connections} connections, {os.cpu_count()} CPUs; medians over the rounds\n")
    print(table(rows))
    print("\n" + differences(rows))
    for model in MODELS:
        kept = [(row["in_process_cpu_ms"], row["in_process_cpu_ms_kept_client"]) for row in rows
                if row["model"] == model and "in_process_cpu_ms_kept_client" in row]
        if kept:
            print(f"\n{model}, after, in process, CPU ms/req as served / with one Redis client kept: "
                  + ", ".join(f"{plain:.2f} / {one:.2f}" for plain, one in kept))
    routing = [row for row in rows if row.get("routing_us")]
    for model in MODELS:
        steps = [row["routing_us"] for row in routing if row["model"] == model]
        if steps:
            print(f"\nrouting steps of {model}, µs per request (best of 5, median over rounds): "
                  + ", ".join(f"{name} {statistics.median(step[name] for step in steps):.2f}" for name in steps[0]))
    beyond = Counter()
    for row in rows:
        beyond.update(row.get("beyond") or {})
    if beyond:
        print("\nstatements of the requests that ran more than two: "
              + "; ".join(f"{text} ×{times}" for text, times in beyond.most_common()))
    print("\nreconcile: " + "; ".join(dict.fromkeys(f"{row['source']}: {row['reconcile']}" for row in rows)))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
