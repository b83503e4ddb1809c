"""Where PostgreSQL's CPU goes while it serves the gateway: perf samples of the bench's own cluster under wrk.

    .venv/bin/python bench/profile_postgres.py [--source DIR[,NAME=VALUE...]] [--duration 10]
                                               [--connections 16] [--rate 999] [--perf PATH] [--keep-data FILE]

Serves the gateway on PostgreSQL + Redis as bench/request_cpu.py does (a private cluster with
production durability, 2 gevent workers, nginx as the upstream), warms it up with wrk, then loads it
with wrk for --duration seconds while `perf record -g` samples every process of the cluster. It reports:

- each kind of PostgreSQL process (the gateway's backends, the WAL writer, the checkpointer,
  autovacuum…) in user and system CPU ms per answered request, read from /proc;
- by part (inclusive; parts overlap): the share of the cluster's samples whose call stack passes
  through each of PARTS' server functions (executing the statements, planning them, their check
  constraints, the rollup trigger, the deferred foreign-key checks, committing and flushing the WAL),
  and that share of the cluster's CPU per request.

Needs perf (Debian's linux-perf) allowed to sample other processes (kernel.perf_event_paranoid at 2
or lower, as root); Debian's PostgreSQL binaries carry no symbols of their static functions, so a few
frames show as addresses: PARTS names exported functions only. `reconcile` runs at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import request_cpu  # noqa: E402

DATABASE = "gw_bench_profile_pg"

# (label, server function names): a sample counts for a part when any of the names is on its stack.
PARTS = [
    ("executing statements (PortalRun)", ("PortalRun",)),
    ("  scans and joins (ExecScan)", ("ExecScan",)),
    ("  executor start-up: plan state per execution (standard_ExecutorStart)", ("standard_ExecutorStart",)),
    ("  check constraints: parsed and prepared per statement (ExecConstraints)", ("ExecConstraints",)),
    ("    of which reading their stored expressions (stringToNode)", ("stringToNode",)),
    ("  row triggers after the statement: the rollups (AfterTriggerEndQuery)", ("AfterTriggerEndQuery",)),
    ("planning a prepared statement anew (GetCachedPlan → standard_planner)", ("standard_planner",)),
    ("commit (CommitTransactionCommand)", ("CommitTransactionCommand",)),
    ("  deferred foreign-key checks (AfterTriggerFireDeferred)", ("AfterTriggerFireDeferred",)),
    ("  WAL flush to disk (XLogFlush)", ("XLogFlush",)),
    ("kernel, all (system calls, interrupts)", ("entry_SYSCALL_64_after_hwframe", "asm_sysvec_apic_timer_interrupt")),
]


def process_kind(pid: int) -> str:
    """'backend' for a client's connection, else the server process's title (walwriter, checkpointer…)."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return "gone"
    if title.startswith("postgres: ") and DATABASE in title:
        return "backend"
    return title.removeprefix("postgres: ") if title.startswith("postgres: ") else "postmaster"


def cpu_split(pid: int) -> tuple[float, float] | None:
    """User and system CPU seconds of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def read_stacks(perf: str, data: Path) -> list[list[str]]:
    """perf script's samples, each its frames' function names, innermost first."""
    text = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,pid,ip,sym"], capture_output=True,
                          text=True, check=True).stdout
    samples, frames = [], []
    for line in text.splitlines():
        if line.startswith("\t"):  # a frame: its address, then its symbol (a sample's own line: spaces first)
            frames.append(line.split(None, 1)[-1].split("+", 1)[0])
        elif not line.strip() and frames:
            samples.append(frames)
            frames = []
    if frames:
        samples.append(frames)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=".", help="copy of the project to serve (DIR[,NAME=VALUE...])")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rate", type=int, default=999, help="perf samples per second per CPU")
    parser.add_argument("--perf", default=shutil.which("perf") or "perf")
    parser.add_argument("--keep-data", type=Path, help="keep perf's recording in this file")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    source = request_cpu.parse_source(args.source)
    workdir = harness.make_workdir("profile_postgres")
    data = args.keep_data or workdir / "perf.data"
    try:
        with request_cpu.served(source, workdir, database=DATABASE, connections=args.connections) as (gateway,
                                                                                                     postgres):
            pids = postgres.processes()
            before = {pid: (process_kind(pid), cpu_split(pid)) for pid in pids}
            recorder = subprocess.Popen([args.perf, "record", "-F", str(args.rate), "-g", "-o", str(data),
                                         "-p", ",".join(map(str, pids)), "--", "sleep", str(args.duration - 1)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # perf attaches
            result = request_cpu.run_wrk(f"{gateway.url}/v1/chat/completions", connections=args.connections,
                                         duration=args.duration, keys_file=gateway.keys_file, model="bench-chat",
                                         result_file=workdir / "wrk.json")
            recorder.wait(timeout=args.duration + 60)
            kinds: dict[str, list[float]] = {}
            for pid, (kind, cpu_before) in before.items():
                cpu_after = cpu_split(pid)
                if cpu_before is None or cpu_after is None:
                    continue
                user, system = kinds.setdefault(kind, [0.0, 0.0])
                kinds[kind] = [user + cpu_after[0] - cpu_before[0], system + cpu_after[1] - cpu_before[1]]
            gateway.stop()  # and `manage.py reconcile`
        samples = read_stacks(args.perf, data)
    finally:
        harness.remove_workdir(workdir, keep=False)
    requests = result["requests"]
    print(f"\nprofile_postgres.py: {source.label}, {result['rps']:.0f} req/s at {args.connections} connections, "
          f"{requests:,} requests, reconcile: {gateway.reconciled}\n")
    print("| PostgreSQL process | user ms / request | system ms / request |")
    print("|---|---:|---:|")
    for kind, (user, system) in sorted(kinds.items(), key=lambda item: -sum(item[1])):
        print(f"| {kind} | {user / requests * 1000:.3f} | {system / requests * 1000:.3f} |")
    cluster_ms = sum(user + system for user, system in kinds.values()) / requests * 1000
    total = len(samples)  # perf sampled the cluster's processes only
    shares = Counter()
    for frames in samples:
        names = set(frames)
        for label, functions in PARTS:
            if any(name in names for name in functions):
                shares[label] += 1
    print(f"\n{total:,} samples of PostgreSQL's processes; their CPU {cluster_ms:.3f} ms per request\n")
    print("| part of PostgreSQL's work (inclusive; parts overlap) | share of samples | ms CPU / request |")
    print("|---|---:|---:|")
    for label, _ in PARTS:
        share = shares[label] / total if total else 0.0
        print(f"| {label} | {share:.1%} | {share * cluster_ms:.3f} |")


if __name__ == "__main__":
    main()
