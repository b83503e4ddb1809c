"""CPU per metered chat of several copies of the project, in process, one request at a time: A/B for small changes.

    .venv/bin/python bench/inprocess_cpu.py --source DIR DIR [DIR...] [--backend postgres+redis|sqlite]
                                            [--requests 800] [--rounds 3]

bench/request_cpu.py measures the served gateway, where a shared machine's noise (tens of percent
between minutes) hides a change worth a few per cent. This script measures what such a change
does to the work itself: for each --source (a copy of the project; `.` is the working tree) a
fresh Python process runs the gateway's WSGI application in process (as gunicorn calls it, no HTTP
server: bench/profile_request.py's wsgi_post) and sends --requests metered chats one after the
other, against nginx as the upstream and, on postgres+redis, the bench's private PostgreSQL and
Redis (bench/harness.py). It reports per request the CPU time of the Python thread that served
them, and of PostgreSQL's and Redis's processes meanwhile. The sources take turns within each
round (reversed every other round); each source's own database and keys are made once. The
catalog snapshot's reload and the ledger sweep (every few seconds, not per request) are turned off
in the measuring process (AMORTIZED), so a slow run does not count them over and over.

With --callgrind the Python process runs under valgrind's callgrind, which counts the instructions
it executes for the measured requests only (instrumentation is switched on and off around them):
a count other work on the machine does not change, so differences of a few per cent show.

With --cprofile DIR each measuring process also runs its measured requests under cProfile and
writes the statistics to DIR (one file per source and round, for pstats): which functions a
request calls, and how often, on the same path as the counts above. Its timings carry cProfile's
own cost; read the call counts, and the timings only against each other.

With --greenlets the measuring process is patched by gevent and runs each request in a greenlet of
its own, as the production worker does: what Django keeps per context (its cache objects) is then
made anew for every request, as it is when served.

Every answer must be 200; `reconcile` runs on each database at the end.
"""
from __future__ import annotations

import sys

if "--worker" in sys.argv and "--greenlets" in sys.argv:
    # As in a gevent worker: patched before anything opens a socket or starts a thread.
    from gevent import monkey

    monkey.patch_all()

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import request_cpu  # noqa: E402

# Work a process does every so many seconds, not per request: at hundreds of requests a second it
# costs a request next to nothing, but a slow run (callgrind's) would count it many times over.
AMORTIZED = {"CATALOG_CACHE_SECONDS": "3600", "LEDGER_SWEEP_SECONDS": "0"}
BODY = json.dumps({"model": "bench-chat", "messages": [{"role": "system", "content": "You are terse."},
                                                        {"role": "user", "content": "Say hello to the benchmark."}]})


def worker(requests: int, keys_file: Path, callgrind: bool = False, greenlets: bool = False,
           cprofile: Path | None = None) -> None:
    """In the source's folder, with its gateway's environment: warm up, wait for the go, measure, report."""
    sys.path.insert(0, os.getcwd())
    import profile_request
    from gateway.wsgi import application

    secrets = keys_file.read_text().split()
    body = BODY.encode()

    def send(index: int) -> None:
        if greenlets:  # each request in a greenlet of its own, as gunicorn's gevent worker runs it
            import gevent

            return gevent.spawn(serve, index).get()
        return serve(index)

    def serve(index: int) -> None:
        status, content = profile_request.wsgi_post(application, "/v1/chat/completions", body,
                                                    {"Authorization": f"Bearer {secrets[index % len(secrets)]}"})
        if not status.startswith("200"):
            raise SystemExit(f"chat answered {status}: {content[:300]!r}")

    for index in range(100):
        send(index)
    print("ready", flush=True)
    sys.stdin.readline()
    if callgrind:  # count instructions of the measured requests only (valgrind started with --instr-atstart=no)
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    profiler = None
    if cprofile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu, wall = time.thread_time(), time.perf_counter()
    for index in range(requests):
        send(index)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(cprofile)
    if callgrind:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    print(json.dumps({"cpu_ms": cpu * 1000 / requests, "wall_ms": wall * 1000 / requests}), flush=True)


def measure(gateway: harness.Gateway, args, postgres, redis, callgrind_out: Path | None = None,
            cprofile_out: Path | None = None) -> dict:
    command = [harness.PYTHON, str(Path(__file__).resolve()), "--worker", "--requests", str(args.requests),
               "--keys-file", str(gateway.keys_file), *(["--greenlets"] if args.greenlets else []),
               *(["--cprofile", str(cprofile_out)] if cprofile_out is not None else [])]
    if callgrind_out is not None:
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={callgrind_out}",
                   *command, "--callgrind"]
    child = subprocess.Popen(command,
                             cwd=gateway.source, env={**gateway.env, **AMORTIZED},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker for {gateway.source} did not start")
        groups = {}
        if postgres is not None:
            groups = {"postgres": postgres.processes, "redis": lambda: [redis.pid]}
        meter = harness.CpuMeter(**groups)
        meter.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        servers = meter.stop()
        result = json.loads(line)
    except BaseException:
        child.kill()  # the worker this call started, waiting for its go or halfway through
        raise
    finally:
        child.wait(timeout=600)
    if callgrind_out is not None:
        # callgrind's "totals:" line: instructions executed while instrumentation was on.
        summary = next(line for line in callgrind_out.read_text().splitlines() if line.startswith("totals:"))
        result["instructions_m"] = int(summary.split()[1]) / args.requests / 1e6
        result["cpu_ms"] = 0.0  # a thread under valgrind runs tens of times slower: its CPU time says nothing
    for name, seconds in servers.items():
        result[f"{name}_ms"] = seconds * 1000 / args.requests
    result["machine_ms"] = result["cpu_ms"] + result.get("postgres_ms", 0) + result.get("redis_ms", 0)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", nargs="+", default=["."])
    parser.add_argument("--backend", default="postgres+redis", choices=["postgres+redis", "sqlite"])
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true",
                        help="count the Python process's instructions per request under valgrind's callgrind "
                             "(immune to other work on the machine, ~50x slower) instead of timing it")
    parser.add_argument("--greenlets", action="store_true",
                        help="as a gevent worker: sockets patched, each request in a greenlet of its own (whose "
                             "context starts empty: what Django keeps per context is made anew per request)")
    parser.add_argument("--cprofile", type=Path, help="also write each measuring process's cProfile statistics "
                                                      "to this folder (call counts; timings inflated)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keys-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", type=float, default=0.5, help="as bench/request_cpu.py's")
    parser.add_argument("--max-wait", type=float, default=5)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    if args.worker:
        worker(args.requests, args.keys_file, args.callgrind, args.greenlets, args.cprofile)
        return
    backend = "embedded" if args.backend == "sqlite" else args.backend
    sources = [request_cpu.parse_source(spec) for spec in args.source]
    workdir = harness.make_workdir("inprocess")
    nginx = harness.start_nginx(workdir)
    postgres = redis = None
    results: dict[str, list[dict]] = {source.label: [] for source in sources}
    gateways = []
    try:
        if backend == "postgres+redis":
            postgres = harness.PrivatePostgres(workdir, max_connections=100)
            postgres.start()
            redis = harness.PrivateRedis(workdir)
        for number, source in enumerate(sources):
            gateway = harness.Gateway(backend, workdir / f"source{number}", source=source.path,
                                      extra_env=source.env,
                                      database_url=postgres.url(f"gw_bench_{number}") if postgres else None,
                                      redis_url=redis.url(number) if redis else None)
            gateway.prepare(keys=max(3, args.requests // 800 + 2))
            gateways.append(gateway)
        for number in range(args.rounds):
            order = list(zip(sources, gateways))
            if number % 2:
                order.reverse()
            for source, gateway in order:
                busy = request_cpu.wait_for_quiet(args.quiet, args.max_wait)
                out = workdir / f"callgrind-{number}-{gateways.index(gateway)}.out" if args.callgrind else None
                profile_out = None
                if args.cprofile is not None:
                    args.cprofile.mkdir(parents=True, exist_ok=True)
                    profile_out = args.cprofile.resolve() / f"source{gateways.index(gateway)}-round{number}.pstats"
                result = measure(gateway, args, postgres, redis, out, profile_out)
                result["busy_before"] = busy
                results[source.label].append(result)
                harness.log(f"round {number} {source.label}: " + ", ".join(
                    f"{name} {value:.3f}" for name, value in result.items()))
        reconciled = [gateway.reconcile() for gateway in gateways]
    finally:
        for server in (redis, postgres, nginx):
            if server is not None:
                server.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    first = sources[0].label
    print(f"\ninprocess_cpu.py: {args.backend}, {args.requests} requests × {args.rounds} rounds per source, "
          f"one at a time; medians, and the median of each round's difference from {first}\n")
    if args.callgrind:
        print("| source | Python instructions M/req | Δ vs first | PostgreSQL ms/req | Redis ms/req |")
        print("|---|---:|---:|---:|---:|")
        for source in sources:
            runs, base = results[source.label], results[first]
            print(f"| {source.label} | {statistics.median(run['instructions_m'] for run in runs):.3f} "
                  f"| {statistics.median(r['instructions_m'] - b['instructions_m'] for r, b in zip(runs, base)):+.3f} "
                  f"| {statistics.median(run.get('postgres_ms', 0) for run in runs):.3f} "
                  f"| {statistics.median(run.get('redis_ms', 0) for run in runs):.3f} |")
        print("\nreconcile: " + "; ".join(reconciled))
        return
    print("| source | Python thread ms/req | PostgreSQL | Redis | machine ms/req | Δ machine vs first | Δ Python | "
          "wall ms/req |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for source in sources:
        runs = results[source.label]
        base = results[first]
        d_machine = statistics.median(run["machine_ms"] - ref["machine_ms"] for run, ref in zip(runs, base))
        d_python = statistics.median(run["cpu_ms"] - ref["cpu_ms"] for run, ref in zip(runs, base))
        med = {name: statistics.median(run.get(name, 0) for run in runs)
               for name in ("cpu_ms", "postgres_ms", "redis_ms", "machine_ms", "wall_ms")}
        print(f"| {source.label} | {med['cpu_ms']:.3f} | {med['postgres_ms']:.3f} | {med['redis_ms']:.3f} "
              f"| {med['machine_ms']:.3f} | {d_machine:+.3f} | {d_python:+.3f} | {med['wall_ms']:.3f} |")
    print("\nreconcile: " + "; ".join(reconciled))


if __name__ == "__main__":
    main()
