"""Metered non-streamed chat: directly against a fake upstream vs. through the gateway, same run.

    .venv/bin/python bench/chat_overhead.py [--backends embedded postgres+redis] [--duration 10]
                                            [--connections 1 16 64] [--keys 100] [--out results.json]
                                            [--rounds 1] [--source DIR ...]

It starts nginx as the fast fake upstream (bench/upstream/nginx.conf.in, 127.0.0.1:18201), then for
each backend a gateway under gunicorn from the working tree (bench/harness.py: own data dir, fresh
database, bench/catalog.toml, keys issued with issue_key) and runs wrk (bench/wrk/chat.lua) at each
connection count: first directly against nginx, then through the gateway (model bench-chat, which
nginx answers), then through the gateway with the in-process local-chat model (no upstream call at
all, so the gateway's own cost alone). Prints a Markdown table: requests/s, p50 and p99 latency,
the gateway/direct throughput ratio and the latency the gateway adds.

Other work on a shared machine moves every figure by tens of percent from one minute to the next.
--rounds N repeats the whole measurement N times and reports the median of each figure. --source
serves the gateway from other copies of the project as well (an export of an older commit:
`git archive REV | tar -x -C DIR`), in turn with the working tree within each round, so a change
can be compared with what came before under the same conditions.

One key may make 1000 requests a minute and 10000 an hour, less than a benchmark makes, so the
requests go round-robin over --keys keys (each with rpm 1000, rph 10000, 10^9 credits); a 429 or
any other non-2xx answer is counted and shown, never hidden.

Needs wrk and nginx (`apt-get install -y wrk nginx-light`); for PostgreSQL + Redis, the PostgreSQL
server binaries and redis-server: the bench runs servers of its own (bench/harness.py private_servers).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

WRK_SCRIPT = harness.BENCH / "wrk" / "chat.lua"


def run_wrk(url: str, *, connections: int, duration: int, keys_file: Path | None, model: str,
            result_file: Path, cpu: harness.CpuMeter | None = None) -> dict:
    wrk = harness.require_tool("wrk", "wrk")
    env = dict(os.environ, BENCH_MODEL=model, BENCH_RESULT=str(result_file),
               BENCH_KEYS_FILE=str(keys_file) if keys_file else "")
    result_file.unlink(missing_ok=True)
    load_before = harness.load_average()
    threads = min(connections, 2)  # two cores: more wrk threads would only compete with the server
    if cpu:
        cpu.start()
    subprocess.run([wrk, "-t", str(threads), "-c", str(connections), "-d", f"{duration}s", "--timeout", "10s",
                    "-s", str(WRK_SCRIPT), url], env=env, check=True, stdout=subprocess.DEVNULL, timeout=duration + 60)
    result = json.loads(result_file.read_text().strip().splitlines()[-1])
    result["load"] = max(load_before, harness.load_average())
    if cpu:
        # CPU milliseconds per answered request, per group of processes.
        result["cpu_ms"] = {name: round(seconds * 1000 / max(result["requests"], 1), 3)
                            for name, seconds in cpu.stop().items()}
    return result


def measure(backend: str, workdir: Path, args, nginx: harness.Process, source: Path) -> list[dict]:
    gateway = harness.Gateway(backend, workdir, source=source)
    gateway.prepare(keys=args.keys)
    workers, threads = gateway.workers_and_threads()
    gateway.start()
    floor = gateway.start_floor(harness.FLOOR_PORT)
    groups = {"gateway": lambda: harness.process_tree(gateway.process.pid),
              "upstream": lambda: harness.process_tree(nginx.pid)}
    if backend == "postgres+redis":
        groups["postgres"] = lambda: harness.postgres_backends(urlsplit(harness.PG_URL).path.lstrip("/"))
        groups["redis"] = harness.redis_server_pids
    cpu = harness.CpuMeter(**groups)
    rows = []
    try:
        targets = [
            ("direct", f"http://127.0.0.1:{harness.FAST_UPSTREAM_PORT}/v1/chat/completions", None, "bench-upstream"),
            ("floor", f"http://127.0.0.1:{harness.FLOOR_PORT}/v1/chat/completions", None, "bench-upstream"),
            ("gateway", f"{gateway.url}/v1/chat/completions", gateway.keys_file, "bench-chat"),
            ("gateway local-chat", f"{gateway.url}/v1/chat/completions", gateway.keys_file, "local-chat"),
        ]
        # Warm-up: connection pools, the catalog snapshot, Python's caches; not measured.
        for _, url, keys, model in targets:
            run_wrk(url, connections=4, duration=2, keys_file=keys, model=model, result_file=workdir / "warm.json")
        for connections in args.connections:
            for name, url, keys, model in targets:
                result = run_wrk(url, connections=connections, duration=args.duration, keys_file=keys,
                                 model=model, result_file=workdir / "wrk.json", cpu=cpu)
                result.update(backend=backend, target=name, connections=connections,
                              workers=workers, threads=threads, source=source_label(source))
                harness.log(f"{source_label(source)} {backend} c={connections} {name}: {result['rps']:.0f} req/s, "
                            f"p50 {result['p50_us'] / 1000:.2f} ms, p99 {result['p99_us'] / 1000:.2f} ms, "
                            f"non-2xx {result['non_2xx']}, socket errors {result['socket_errors']}, load {result['load']}, "
                            f"CPU ms/request {result['cpu_ms']}")
                rows.append(result)
        rss = harness.rss_mib(harness.process_tree(gateway.process.pid))
        harness.log(f"{source_label(source)} {backend}: gateway RSS after the run {rss} MiB")
        for row in rows:
            row["rss_mib"] = rss
    finally:
        floor.stop()
        gateway.stop()
    return rows


def source_label(source: Path) -> str:
    return "working tree" if Path(source).resolve() == harness.ROOT else Path(source).name


def medians(rows: list[dict]) -> list[dict]:
    """One row per (source, backend, connections, target): the median of each figure over the rounds."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["source"], row["backend"], row["connections"], row["target"]), []).append(row)
    merged = []
    for runs in groups.values():
        row = dict(runs[0], rounds=len(runs))
        for name in ("rps", "p50_us", "p99_us"):
            row[name] = statistics.median(run[name] for run in runs)
        row["cpu_ms"] = {group: statistics.median(run["cpu_ms"][group] for run in runs)
                         for group in runs[0]["cpu_ms"]}
        row["non_2xx"] = sum(run["non_2xx"] for run in runs)
        row["socket_errors"] = sum(run["socket_errors"] for run in runs)
        row["load"] = max(run["load"] for run in runs)
        row["rss_mib"] = max(run.get("rss_mib", 0) for run in runs)
        merged.append(row)
    return merged


def cpu_cell(row: dict) -> str:
    cpu = row.get("cpu_ms") or {}
    cell = f"{cpu.get('gateway', 0):.2f}"
    if "postgres" in cpu:
        cell += f" (+ {cpu['postgres']:.2f}, {cpu.get('redis', 0):.2f})"
    return cell


def table(rows: list[dict]) -> str:
    lines = [
        "| backend (workers×threads) | conns | direct req/s | floor req/s | gateway req/s | of floor "
        "| direct p50 / p99 ms | gateway p50 / p99 ms | added p50 / p99 ms | local-chat req/s, p50 ms "
        "| gateway CPU ms/req (+ PostgreSQL, Redis) | RSS MiB | non-2xx | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    index = {(r["source"], r["backend"], r["connections"], r["target"]): r for r in rows}
    sources = list(dict.fromkeys(r["source"] for r in rows))
    for backend, source in dict.fromkeys((r["backend"], r["source"]) for r in rows):
        for connections in dict.fromkeys(r["connections"] for r in rows if r["backend"] == backend):
            direct = index[(source, backend, connections, "direct")]
            floor = index[(source, backend, connections, "floor")]
            gateway = index[(source, backend, connections, "gateway")]
            local = index[(source, backend, connections, "gateway local-chat")]
            errors = sum(r["non_2xx"] + r["socket_errors"] for r in (direct, floor, gateway, local))
            label = f"{backend} ({gateway['workers']}×{gateway['threads']})"
            if len(sources) > 1:
                label += f", {source}"
            lines.append(
                f"| {label} | {connections} "
                f"| {direct['rps']:,.0f} | {floor['rps']:,.0f} | {gateway['rps']:,.0f} "
                f"| {gateway['rps'] / floor['rps']:.2f} "
                f"| {direct['p50_us'] / 1000:.2f} / {direct['p99_us'] / 1000:.2f} "
                f"| {gateway['p50_us'] / 1000:.2f} / {gateway['p99_us'] / 1000:.2f} "
                f"| {(gateway['p50_us'] - direct['p50_us']) / 1000:.2f} / "
                f"{(gateway['p99_us'] - direct['p99_us']) / 1000:.2f} "
                f"| {local['rps']:,.0f}, {local['p50_us'] / 1000:.2f} | {cpu_cell(gateway)} "
                f"| {gateway.get('rss_mib', 0):.0f} | {errors} "
                f"| {max(r['load'] for r in (direct, gateway, local)):.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=list(harness.GATEWAY_PORTS),
                        choices=list(harness.GATEWAY_PORTS))
    parser.add_argument("--connections", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run (bounded to 300)")
    parser.add_argument("--keys", type=int, default=100, help="keys the requests go round-robin over")
    parser.add_argument("--out", type=Path, help="also write the raw results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat everything; report medians (at most 10)")
    parser.add_argument("--source", type=Path, nargs="+", default=[],
                        help="also serve the gateway from these copies of the project, in turn with the working tree")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    args.duration = max(1, min(args.duration, 300))
    args.rounds = max(1, min(args.rounds, 10))
    sources = [Path(source).resolve() for source in args.source] + [harness.ROOT]

    workdir = harness.make_workdir("chat_bench")
    harness.log(f"work dir {workdir}")
    nginx = harness.start_nginx(workdir)
    rows = []
    try:
        with harness.private_servers(workdir, wanted="postgres+redis" in args.backends):
            for round_ in range(args.rounds):
                for backend in args.backends:
                    for number, source in enumerate(sources):
                        rows += measure(backend, workdir / f"round{round_}-source{number}", args, nginx, source)
    finally:
        nginx.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    started = time.strftime("%Y-%m-%d %H:%M")
    rounds = f", median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"\nchat_overhead.py, {started}, {args.duration} s per run{rounds}, {os.cpu_count()} CPUs\n")
    print(table(medians(rows)))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
