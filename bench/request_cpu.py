"""Machine CPU per metered chat against the floor view, in one run: the gateway, PostgreSQL and Redis.

    .venv/bin/python bench/request_cpu.py [--backends postgres+redis sqlite] [--rounds 3] [--duration 8]
                                          [--connections 16] [--keys 60] [--source DIR[,NAME=VALUE...] ...]
                                          [--models MODEL ...] [--responses MODEL ...] [--catalog FILE ...]
                                          [--out results.json] [--keep]

For each backend it serves, under gunicorn with the gateway's own settings for that backend
(gateway/gunicorn_conf.py: 2 gevent workers on PostgreSQL + Redis, 1 gthread worker of 32 threads on
the embedded SQLite), the gateway from each --source (the working tree by default) and the floor
view (bench/floor_view.py: a bare DRF view forwarding the body through one requests session) under
the same worker class and count. Then, --rounds times, wrk (bench/wrk/chat.lua, --connections
connections, --duration seconds) loads each in turn, the floor first in even rounds and last in odd
ones, while the CPU time of every process involved is read from /proc before and after:

- server: the gunicorn master and workers of the gateway (or of the floor);
- PostgreSQL: every process of the bench's own cluster (bench/harness.py PrivatePostgres: its
  backends, WAL writer, checkpointer, autovacuum), with production durability (fsync and
  synchronous_commit on);
- Redis: the bench's own redis-server (PrivateRedis);
- and, apart, the fake upstream (nginx) and wrk itself, the same for the gateway and the floor.

Machine CPU per request is server + PostgreSQL + Redis. The report gives, per source, the medians
over the rounds and the median of each round's ratio to that round's floor: CPU per request
(gateway / floor) and throughput (gateway / floor), and in how many rounds each half of the
target (TARGET_CPU_RATIO, TARGET_RPS_RATIO) held on its own. On PostgreSQL also the WAL each
request wrote (pg_current_wal_lsn before and after), and at the end the share of each table's
updates that were HOT (pg_stat_user_tables). `manage.py reconcile` runs after every gateway run;
a mismatch fails the run. The whole machine's busy CPU per request (/proc/stat) is logged too: when
it is far above the processes' own sum, other work was sharing the cores; nginx's and wrk's CPU per
request, the same work for every request, rising in a round says the same. Before each run the
bench waits (--max-wait seconds at most) until the machine is quiet (--quiet: fewer cores busy than
that), since other work on the cores inflates every CPU figure.

A --source is another copy of the project (`git archive REV | tar -x -C DIR`, or an export with a
change applied), served with this tree's virtualenv, each with its own database and Redis db;
`,NAME=VALUE` after it adds environment variables for that gateway (`.` is the working tree), e.g.
`--source BASE . .,ACCESS_LOG=/dev/null`. The provider types side by side:
`--catalog bench/catalog_types.toml --models bench-chat bench-chat-azure bench-chat-gemini
bench-chat-anthropic` (each model a row of its own, answered by nginx in its type's protocol). Token
prices against prices per request, in one run: `--catalog bench/catalog_priced.toml --models bench-chat
bench-chat-priced` (the same upstream and answer; docs/pricing.md). OpenAI's Responses API against chat,
in one run: `--catalog bench/catalog_responses.toml --models bench-chat --responses bench-chat-translated
bench-chat` (each --responses model a row of its own, asked the same question through POST /v1/responses
with `store` left at its default, true, so the settlement also keeps each answer: bench-chat-translated's
provider has no Responses API, so the request is translated to chat and back; bench-chat's is passed
through to nginx's /v1/responses). Gateways run with the production settings: no access line
unless a `,ACCESS_LOG=` names one (the summary line is the access line). `,BENCH_SOCKETS=unix` is
the bench's own: that gateway reaches the private PostgreSQL and Redis through their Unix sockets,
as docs/operations.md recommends for servers on the gateway's machine (127.0.0.1 otherwise).

With --out, every round's figures are written as JSON; bench/pool_rounds.py reads several such runs
and gives the target's two ratios over all their rounds, with intervals (one run's median of a few
rounds moves by several per cent between runs on a shared machine).

Needs wrk, nginx, redis-server and the PostgreSQL server binaries (initdb, pg_ctl).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

WRK_SCRIPT = harness.BENCH / "wrk" / "chat.lua"
BACKENDS = {"postgres+redis": "postgres+redis", "sqlite": "embedded", "embedded": "embedded"}
GATEWAY_PORT = 18230  # + the source's number
TABLES = ("keys_apikey", "keys_ledgerentry", "models_catalog_usageevent", "gateway_storedresponse")
# The inbound APIs a row can load a model through: the path, and the body bench/wrk/chat.lua sends (BENCH_API).
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
# A --source setting of the bench's, not the gateway's: BENCH_SOCKETS=unix serves that source's gateway
# through the private PostgreSQL's and Redis's Unix sockets (docs/operations.md recommends them for
# servers on the gateway's machine); tcp, the default, through 127.0.0.1 as a server elsewhere needs.
SOCKETS = "BENCH_SOCKETS"


@dataclass
class Source:
    path: Path
    env: dict = field(default_factory=dict)
    label: str = ""


def parse_source(spec: str) -> Source:
    path, *pairs = spec.split(",")
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--source {spec!r}: expected DIR[,NAME=VALUE...]")
        env[name] = value
    resolved = Path(path).resolve()
    label = "working tree" if resolved == harness.ROOT else resolved.name
    if env:
        label += " " + " ".join(f"{name}={value}" for name, value in env.items())
    return Source(resolved, env, label)


def _busy_ticks() -> int:
    """Busy CPU ticks of the whole machine so far (every process, every core), from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields[:8]) - idle


def busy_cores(seconds: float = 1.0) -> float:
    """How many cores the whole machine kept busy over the next ``seconds``."""
    before, started = _busy_ticks(), time.monotonic()
    time.sleep(seconds)
    return (_busy_ticks() - before) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - started)


def wait_for_quiet(cores: float, max_wait: float) -> float:
    """Wait (at most ``max_wait`` seconds) until other work keeps fewer than ``cores`` cores busy; returns
    the last reading. Between runs the bench's own servers idle, so what is busy then is someone else."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = busy_cores()
        if busy < cores or time.monotonic() > deadline:
            return round(busy, 2)


def run_wrk(url: str, *, connections: int, duration: int, keys_file: Path | None, model: str,
            result_file: Path, cpu: harness.CpuMeter | None = None, api: str = "chat") -> dict:
    """One wrk run (``api``'s body, see PATHS); with ``cpu``, the CPU milliseconds per answered request of each
    group of processes."""
    wrk = harness.require_tool("wrk", "wrk")
    env = dict(os.environ, BENCH_MODEL=model, BENCH_API=api, BENCH_RESULT=str(result_file),
               BENCH_KEYS_FILE=str(keys_file) if keys_file else "")
    result_file.unlink(missing_ok=True)
    load_before = harness.load_average()
    if cpu:
        cpu.start()
    busy_before = _busy_ticks()
    process = subprocess.Popen([wrk, "-t", str(min(connections, 2)), "-c", str(connections), "-d", f"{duration}s",
                                "--timeout", "10s", "-s", str(WRK_SCRIPT), url], env=env,
                               stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)  # wait4: wrk's own CPU time comes with its exit
    process.returncode = os.waitstatus_to_exitcode(status)
    busy = (_busy_ticks() - busy_before) / os.sysconf("SC_CLK_TCK")
    groups = cpu.stop() if cpu else {}
    if process.returncode != 0:
        raise RuntimeError(f"wrk exited {process.returncode}")
    result = json.loads(result_file.read_text().strip().splitlines()[-1])
    result["load"] = max(load_before, harness.load_average())
    requests = max(result["requests"], 1)
    if cpu:
        groups["wrk"] = usage.ru_utime + usage.ru_stime
        groups["machine busy"] = busy
        result["cpu_ms"] = {name: round(seconds * 1000 / requests, 4) for name, seconds in groups.items()}
    return result


@contextmanager
def served(source: Source, workdir: Path, *, backend: str = "postgres+redis", database: str = "gw_bench_served",
           extra_env: dict | None = None, connections: int = 16, warm: int = 3,
           postgres_settings: dict[str, str] | None = None):
    """The gateway from ``source`` served as the runs above serve it (nginx as the upstream; on PostgreSQL +
    Redis the bench's own servers, ``database`` in its cluster, with ``postgres_settings`` added to the
    cluster's), its keys issued and wrk's load for ``warm`` seconds behind it. Yields (the gateway, the
    PostgreSQL cluster or None); everything it started is stopped after the block, the gateway first
    (``manage.py reconcile`` runs then)."""
    nginx = harness.start_nginx(workdir)
    postgres = redis = gateway = None
    try:
        database_url = redis_url = None
        if backend == "postgres+redis":
            postgres = harness.PrivatePostgres(workdir, max_connections=200, settings=postgres_settings)
            postgres.start()
            redis = harness.PrivateRedis(workdir)
            database_url, redis_url = postgres.url(database), redis.url(0)
        gateway = harness.Gateway(backend, workdir, port=GATEWAY_PORT, source=source.path,
                                  extra_env={**source.env, **(extra_env or {})}, database_url=database_url,
                                  redis_url=redis_url)
        gateway.prepare(keys=60)
        gateway.start()
        run_wrk(f"{gateway.url}/v1/chat/completions", connections=connections, duration=warm,
                keys_file=gateway.keys_file, model="bench-chat", result_file=workdir / "warm.json")
        yield gateway, postgres
    finally:
        if gateway is not None:
            gateway.stop()
        for server in (redis, postgres, nginx):
            if server is not None:
                server.stop()


class Target(NamedTuple):
    """What one wrk run of a round loads: the floor, or a gateway with a model through one inbound API."""
    label: str
    url: str
    keys: Path | None
    model: str
    pid: int
    gateway: harness.Gateway | None
    api: str = "chat"


class Backend:
    """One backend's servers: the floor, a gateway per source, and what measures them."""

    def __init__(self, name: str, workdir: Path, sources: list[Source], args, nginx: harness.Process,
                 postgres: harness.PrivatePostgres | None, redis: harness.PrivateRedis | None):
        self.name = name
        self.args = args
        self.postgres = postgres
        self.redis = redis
        self.nginx = nginx
        self.sources = sources
        self.gateways: list[harness.Gateway] = []
        for number, source in enumerate(sources):
            database = redis_url = None
            env = dict(source.env)
            sockets = env.pop(SOCKETS, "tcp")
            if sockets not in ("tcp", "unix"):
                raise SystemExit(f"{SOCKETS} must be tcp or unix, got {sockets!r}")
            if name == "postgres+redis":
                database = postgres.url(f"gw_bench_{number}")
                redis_url = redis.url(number)
                if sockets == "unix":  # served through the sockets; the bench's own resets keep TCP
                    env.update(DATABASE_URL=postgres.socket_url(f"gw_bench_{number}"),
                               REDIS_URL=redis.socket_url(number))
            self.gateways.append(harness.Gateway(name, workdir / f"source{number}", port=GATEWAY_PORT + number,
                                                 source=source.path, extra_env=env, database_url=database,
                                                 redis_url=redis_url))
        self.floor: harness.Process | None = None

    def start(self) -> None:
        for gateway in self.gateways:
            gateway.prepare(keys=self.args.keys, catalogs=tuple(self.args.catalog))
            gateway.start()
        # The floor under the first gateway's server settings (the same for every source).
        self.floor = self.gateways[0].start_floor(harness.FLOOR_PORT, pinned=self.args.floor_pinned)

    def stop(self) -> None:
        if self.floor is not None:
            self.floor.stop()
        for gateway in self.gateways:
            if gateway.process is not None:
                gateway.process.stop()
                gateway.process = None

    def meter(self, server_pid: int) -> harness.CpuMeter:
        groups = {"server": lambda: harness.process_tree(server_pid),
                  "upstream": lambda: harness.process_tree(self.nginx.pid)}
        if self.postgres is not None:
            groups["postgres"] = self.postgres.processes
            groups["redis"] = lambda: [self.redis.pid]
        return harness.CpuMeter(**groups)

    def wal_lsn(self) -> str | None:
        return self.postgres.query("SELECT pg_current_wal_lsn()")[0][0] if self.postgres else None

    def wal_bytes(self, start: str, end: str) -> int:
        return int(self.postgres.query(f"SELECT pg_wal_lsn_diff('{end}', '{start}')")[0][0])

    def targets(self) -> list[Target]:
        floor = Target("floor", f"http://127.0.0.1:{harness.FLOOR_PORT}/v1/chat/completions", None, "bench-upstream",
                       self.floor.pid, None)
        loads = [("chat", model) for model in self.args.models]
        loads += [("responses", model) for model in self.args.responses]
        targets = [floor]
        for source, gateway in zip(self.sources, self.gateways):
            for api, model in loads:
                # A row is named by its source alone when the source serves one chat model and nothing else.
                label = source.label if loads == [("chat", model)] else " ".join(
                    [source.label, *(["responses"] if api == "responses" else []), model])
                targets.append(Target(label, gateway.url + PATHS[api], gateway.keys_file, model,
                                      gateway.process.pid, gateway, api))
        return targets

    def warm_up(self, workdir: Path) -> None:
        # Connection pools, the catalog snapshot, Python's caches, the keys' cached rows: not measured.
        for target in self.targets():
            run_wrk(target.url, connections=self.args.connections, duration=3, keys_file=target.keys,
                    model=target.model, result_file=workdir / "warm.json", api=target.api)
            if target.gateway is not None:
                self.check_reconcile(target.gateway)

    def check_reconcile(self, gateway: harness.Gateway) -> str:
        outcome = gateway.reconcile()
        if not outcome or outcome.startswith("FAILED") or " 0 mismatch" not in outcome:
            raise SystemExit(f"reconcile is not clean after a run of {gateway.source}: {outcome!r}")
        return outcome

    def round(self, number: int, workdir: Path) -> list[dict]:
        targets = self.targets()
        if number % 2:
            targets.reverse()
        rows = []
        for label, url, keys, model, pid, gateway, api in targets:
            others = wait_for_quiet(self.args.quiet, self.args.max_wait)
            lsn = self.wal_lsn()
            grouped = gateway.metering_groups() if gateway is not None else None
            result = run_wrk(url, connections=self.args.connections, duration=self.args.duration, keys_file=keys,
                             model=model, result_file=workdir / "wrk.json", cpu=self.meter(pid), api=api)
            cpu = result["cpu_ms"]
            result.update(backend=self.name, target=label, round=number, busy_before=others,
                          machine_ms=round(cpu["server"] + cpu.get("postgres", 0) + cpu.get("redis", 0), 4))
            if lsn is not None:
                result["wal_bytes"] = round(self.wal_bytes(lsn, self.wal_lsn()) / max(result["requests"], 1), 1)
            if gateway is not None:
                result["reconcile"] = self.check_reconcile(gateway)
                after = gateway.metering_groups()
                if after is not None:
                    before = grouped or (0.0, 0.0)
                    result["group_size"] = round((after[1] - before[1]) / max(after[0] - before[0], 1), 2)
            harness.log(f"round {number} {self.name} {label}: {result['rps']:.0f} req/s, machine "
                        f"{result['machine_ms']:.3f} ms/req, CPU ms/req {cpu}, WAL {result.get('wal_bytes', '-')} "
                        f"B/req, non-2xx {result['non_2xx']}, socket errors {result['socket_errors']}, "
                        f"load {result['load']}, cores busy before {others}"
                        + (f", charges and settlements per statement {result['group_size']}"
                           if "group_size" in result else ""))
            rows.append(result)
        return rows

    def table_stats(self) -> dict:
        """Each source database's updates and HOT updates per table, over the whole run."""
        if self.postgres is None:
            return {}
        time.sleep(11)  # a backend reports its table counts within 10 s of going idle (PostgreSQL 15+)
        stats = {}
        names = ", ".join(f"'{table}'" for table in TABLES)
        for number, source in enumerate(self.sources):
            rows = self.postgres.query(f"SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                                       f"WHERE relname IN ({names}) ORDER BY relname", database=f"gw_bench_{number}")
            stats[source.label] = {row[0]: {"inserted": int(row[1]), "updated": int(row[2]),
                                            "hot": int(row[3])} for row in rows}
        return stats


# Issue 27's target for a gateway against the floor of its own round: at most this many times the floor's
# machine CPU per request, at least this share of its requests per second.
TARGET_CPU_RATIO, TARGET_RPS_RATIO = 2.0, 0.5


def summarize(rows: list[dict]) -> list[dict]:
    """Per (backend, target): medians over rounds, the medians of each round's ratios to its floor, and
    how many rounds met TARGET_CPU_RATIO and TARGET_RPS_RATIO each on their own."""
    floors = {(row["backend"], row["round"]): row for row in rows if row["target"] == "floor"}
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["backend"], row["target"]), []).append(row)
    summary = []
    for (backend, target), runs in groups.items():
        paired = [(run, floors[(backend, run["round"])]) for run in runs]
        entry = {"backend": backend, "target": target, "rounds": len(runs),
                 "rps": statistics.median(run["rps"] for run in runs),
                 "machine_ms": statistics.median(run["machine_ms"] for run in runs),
                 "machine_ms_range": (min(run["machine_ms"] for run in runs), max(run["machine_ms"] for run in runs)),
                 "cpu_ms": {name: statistics.median(run["cpu_ms"][name] for run in runs) for name in runs[0]["cpu_ms"]},
                 "cpu_ratio": statistics.median(run["machine_ms"] / floor["machine_ms"] for run, floor in paired),
                 "rps_ratio": statistics.median(run["rps"] / floor["rps"] for run, floor in paired),
                 "rounds_at_target": (
                     sum(run["machine_ms"] <= TARGET_CPU_RATIO * floor["machine_ms"] for run, floor in paired),
                     sum(run["rps"] >= TARGET_RPS_RATIO * floor["rps"] for run, floor in paired)),
                 "non_2xx": sum(run["non_2xx"] + run["socket_errors"] for run in runs),
                 "load": max(run["load"] for run in runs)}
        if "wal_bytes" in runs[0]:
            entry["wal_bytes"] = statistics.median(run["wal_bytes"] for run in runs)
        entry["reconcile"] = sorted({run["reconcile"] for run in runs if "reconcile" in run})
        sizes = [run["group_size"] for run in runs if "group_size" in run]
        if sizes:
            entry["group_size"] = statistics.median(sizes)
        summary.append(entry)
    return summary


def table(summary: list[dict], servers: dict) -> str:
    lines = ["| backend (server) | served | req/s | server CPU ms/req | PostgreSQL | Redis | machine CPU ms/req "
             "(range) | × floor CPU | of floor req/s | rounds at target (CPU; req/s) | WAL B/req | non-2xx | load |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for entry in summary:
        cpu = entry["cpu_ms"]
        low, high = entry["machine_ms_range"]
        floor = entry["target"] == "floor"
        lines.append(
            f"| {entry['backend']} ({servers[entry['backend']]}) | {entry['target']} | {entry['rps']:,.0f} "
            f"| {cpu['server']:.3f} | {cpu.get('postgres', 0):.3f} | {cpu.get('redis', 0):.3f} "
            f"| {entry['machine_ms']:.3f} ({low:.2f}–{high:.2f}) | {'1' if floor else format(entry['cpu_ratio'], '.2f')} "
            f"| {'1' if floor else format(entry['rps_ratio'], '.2f')} "
            f"| {'–' if floor else '{}; {} of {}'.format(*entry['rounds_at_target'], entry['rounds'])} "
            f"| {format(entry['wal_bytes'], ',.0f') if 'wal_bytes' in entry else '–'} "
            f"| {entry['non_2xx']} | {entry['load']:.1f} |")
    return "\n".join(lines)


def speed_switches(project: Path) -> list[str]:
    """The speed tricks' switches a copy of the project has: the SPEED_* settings of its gateway/settings.py."""
    text = (project / "gateway" / "settings.py").read_text()
    return re.findall(r"^(SPEED_[A-Z_]+) = env_bool\(", text, flags=re.MULTILINE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["postgres+redis", "sqlite"], choices=list(BACKENDS))
    parser.add_argument("--rounds", type=int, default=3, help="rounds of floor and gateways in turn (at most 10)")
    parser.add_argument("--duration", type=int, default=8, help="seconds of each wrk run (at most 120)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--keys", type=int, default=60, help="keys the requests go round-robin over")
    parser.add_argument("--source", nargs="+", default=["."], help="copies of the project to serve (DIR[,NAME=VALUE])")
    parser.add_argument("--models", nargs="+", default=["bench-chat"],
                        help="the chat models each gateway is loaded with in turn (each its own row)")
    parser.add_argument("--responses", nargs="*", default=[],
                        help="chat models each gateway is also loaded with through POST /v1/responses (each its "
                             "own row), e.g. with --catalog bench/catalog_responses.toml")
    parser.add_argument("--catalog", nargs="*", default=[], type=Path,
                        help="catalogs seeded after bench/catalog.toml, e.g. bench/catalog_types.toml")
    parser.add_argument("--quiet", type=float, default=0.5,
                        help="before each run, wait until other work keeps fewer cores than this busy…")
    parser.add_argument("--max-wait", type=float, default=30, help="…but no longer than this many seconds")
    parser.add_argument("--out", type=Path, help="also write every run's figures as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    parser.add_argument("--tricks", action="store_true",
                        help="also serve the first source once per speed trick with that trick's switch off "
                             "(every SPEED_* setting of its gateway/settings.py): each trick re-measured in one run")
    parser.add_argument("--floor-pinned", action="store_true",
                        help="keep each of the floor's workers to a core of its own, as the gateway's gevent "
                             "workers are by default (the floor is not, unless asked)")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    args.rounds = max(1, min(args.rounds, 10))
    args.duration = max(1, min(args.duration, 120))
    sources = [parse_source(spec) for spec in args.source]
    if args.tricks:
        sources += [parse_source(f"{args.source[0]},{name}=0") for name in speed_switches(sources[0].path)]
    backends = list(dict.fromkeys(BACKENDS[name] for name in args.backends))

    workdir = harness.make_workdir("request_cpu")
    harness.log(f"work dir {workdir}")
    nginx = harness.start_nginx(workdir)
    postgres = redis = None
    rows, servers, table_stats = [], {}, {}
    try:
        if "postgres+redis" in backends:
            postgres = harness.PrivatePostgres(workdir, max_connections=100 + 100 * len(sources))
            postgres.start()
            redis = harness.PrivateRedis(workdir)
        for name in backends:
            backend = Backend(name, workdir / name.replace("+", "_"), sources, args, nginx,
                              postgres if name == "postgres+redis" else None, redis if name == "postgres+redis" else None)
            try:
                backend.start()
                config = backend.gateways[0].server_config()
                servers[name] = (f"{config['workers']} {config['worker_class']}"
                                 + (f" × {config['threads']} threads" if config["worker_class"] == "gthread" else ""))
                backend.warm_up(workdir)
                for number in range(args.rounds):
                    rows += backend.round(number, workdir)
                table_stats[name] = backend.table_stats()
            finally:
                backend.stop()
    finally:
        if redis is not None:
            redis.stop()
        if postgres is not None:
            postgres.stop()
        nginx.stop()
        harness.remove_workdir(workdir, keep=args.keep)

    summary = summarize(rows)
    print(f"\nrequest_cpu.py, {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} rounds of {args.duration} s, "
          f"{args.connections} connections, {args.keys} keys, {os.cpu_count()} CPUs; medians over the rounds, "
          f"ratios are the median of each round's ratio to its floor"
          f"{' (its workers each kept to a core of its own)' if args.floor_pinned else ''}\n")
    print(table(summary, servers))
    for entry in summary:
        if entry["target"] != "floor":
            print(f"\n{entry['backend']} {entry['target']}: reconcile after each run: {'; '.join(entry['reconcile'])}; "
                  f"upstream {entry['cpu_ms']['upstream']:.3f} ms/req, wrk {entry['cpu_ms']['wrk']:.3f} ms/req, "
                  f"whole machine busy {entry['cpu_ms']['machine busy']:.3f} ms/req"
                  + (f", charges and settlements per metering statement (median of the rounds' means) "
                     f"{entry['group_size']:.2f}" if "group_size" in entry else ""))
    for name, per_source in table_stats.items():
        for label, tables in per_source.items():
            print(f"\n{name} {label}: " + ", ".join(
                f"{table} {counts['inserted']:,} inserted, {counts['updated']:,} updated "
                f"({counts['hot'] / counts['updated']:.0%} HOT)" if counts["updated"] else
                f"{table} {counts['inserted']:,} inserted" for table, counts in tables.items()))
    if args.out:
        args.out.write_text(json.dumps({"runs": rows, "summary": summary, "table_stats": table_stats}, indent=2))


if __name__ == "__main__":
    main()
