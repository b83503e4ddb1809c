"""What a served gateway's workers wait for: each worker's CPU use, and where its requests' time goes.

    .venv/bin/python bench/metering_lanes.py [--source DIR[,NAME=VALUE...]] [--duration 10] [--connections 16]

Serves the gateway on PostgreSQL + Redis as bench/request_cpu.py does (private servers, gunicorn
with the gateway's settings, nginx as the upstream) and loads it with wrk. Each worker's time is
then read two ways:

- its CPU, from /proc every 100 ms: the share of the run it kept a core busy, and the connections
  it holds (from `ss`), since wrk's keep-alive connections need not land evenly on the workers;
- wall-clock timers around the request's waits, added to the served code by a `sitecustomize`
  module this script writes and puts on the workers' PYTHONPATH (nothing of the project changes):
  the whole request in Django, the limits' Redis round trip, the upstream call, each charge or
  settlement's wait in the process's metering queue (utils_app.coalesce), and, for each group's
  statement, its round trip to PostgreSQL and the time from one group's end to the start of the
  next while callers were queued (the hand-over: the next leader waits for its turn on the hub).

A worker whose requests spend most of their time waiting on their metering statements while it
keeps its core busy only part of the time is bound by its metering queue, not by CPU. Timers
cost a few microseconds per call: compare workers and runs of this script, not its req/s with
request_cpu.py's. `reconcile` runs at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import request_cpu  # noqa: E402

# Loaded by every Python process of the served gateway (PYTHONPATH); acts only once gateway.wsgi,
# the WSGI application, has been imported, in a worker.
SITECUSTOMIZE = r'''
import importlib.abc
import importlib.util
import json
import os
import sys
import time

_OUT = os.environ["BENCH_LANES_DIR"]
_totals = {}
_last = [0.0]


def _add(name, seconds, count=1):
    entry = _totals.setdefault(name, [0, 0.0])
    entry[0] += count
    entry[1] += seconds


def _timed(owner, attribute, name):
    original = getattr(owner, attribute)

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _add(name, time.perf_counter() - started)

    setattr(owner, attribute, timed)


def _dump():
    path = os.path.join(_OUT, f"worker-{os.getpid()}.json")
    with open(path + ".part", "w") as out:
        json.dump(_totals, out)
    os.replace(path + ".part", path)


def _instrument(wsgi):
    import atexit

    from utils_app import coalesce, http, windows
    from utils_app.postgresql import base

    atexit.register(_dump)  # a worker's last requests: gunicorn ends a worker by SystemExit

    _timed(coalesce.Coalescer, "run", "metering wait per charge or settlement")
    _timed(windows, "count_and_read", "limits: Redis round trip")
    _timed(http.Upstreams, "post", "upstream call")
    _timed(base.DatabaseWrapper, "run_alone", "statement round trip")
    run_group, ended = coalesce.Coalescer._run_group, [None]

    def timed_group(self, me):
        started = time.perf_counter()
        if ended[0] is not None:
            _add("hand-over: one group's end to the next one's start", started - ended[0])
        try:
            return run_group(self, me)
        finally:
            ended[0] = time.perf_counter() if self._led else None  # a queued caller was handed the lead

    coalesce.Coalescer._run_group = timed_group
    take = coalesce.Coalescer._take

    def counted_take(self, me):
        group = take(self, me)
        _add("groups", len(group))  # counted in groups, summed in items
        return group

    coalesce.Coalescer._take = counted_take
    call = wsgi.Application.__call__

    def timed_call(self, environ, start_response):
        started = time.perf_counter()
        try:
            return call(self, environ, start_response)
        finally:
            _add("request in Django", time.perf_counter() - started)
            now = time.monotonic()
            if now - _last[0] > 0.2:
                _last[0] = now
                _dump()

    wsgi.Application.__call__ = timed_call


class _AfterWsgi(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "gateway.wsgi":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _instrument(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterWsgi())
'''

TIMERS = [
    ("request in Django", "ms per request"),
    ("limits: Redis round trip", "ms per call"),
    ("upstream call", "ms per call"),
    ("metering wait per charge or settlement", "ms per call"),
    ("statement round trip", "ms per statement"),
    ("hand-over: one group's end to the next one's start", "ms per hand-over"),
]


def connections_by_worker(port: int) -> dict[int, int]:
    """Established connections to ``port`` per process holding them (from ss)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    counts: dict[int, int] = {}
    for pid in re.findall(r"pid=(\d+)", out):
        counts[int(pid)] = counts.get(int(pid), 0) + 1
    return counts


def read_totals(folder: Path, pid: int) -> dict:
    try:
        return json.loads((folder / f"worker-{pid}.json").read_text())
    except (OSError, ValueError):
        return {}


def difference(after: dict, before: dict) -> dict:
    return {name: [count - before.get(name, [0, 0.0])[0], seconds - before.get(name, [0, 0.0])[1]]
            for name, (count, seconds) in after.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=".", help="copy of the project to serve (DIR[,NAME=VALUE...])")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    harness.stop_on_sigterm()
    source = request_cpu.parse_source(args.source)
    workdir = harness.make_workdir("metering_lanes")
    lanes = workdir / "lanes"
    lanes.mkdir()
    (lanes / "sitecustomize.py").write_text(SITECUSTOMIZE)
    extra_env = {"BENCH_LANES_DIR": str(lanes),  # added to the source's own (request_cpu.served)
                 "PYTHONPATH": os.pathsep.join(filter(None, [str(lanes), source.env.get("PYTHONPATH")]))}
    try:
        with request_cpu.served(source, workdir, database="gw_bench_lanes", extra_env=extra_env,
                                connections=args.connections) as (gateway, _):
            url = f"{gateway.url}/v1/chat/completions"
            workers = [pid for pid in harness.process_tree(gateway.process.pid) if pid != gateway.process.pid]
            time.sleep(0.5)
            # What the workers had written by the end of the warm-up (each writes at most every 0.2 s, so
            # up to its last 0.2 s of the warm-up count in the run: 2 % of a 10 s run at most).
            before = {pid: read_totals(lanes, pid) for pid in workers}
            busy = {pid: 0.0 for pid in workers}  # CPU seconds during the run
            held: dict[int, int] = {}
            stop = threading.Event()

            def sample() -> None:
                last = {pid: harness.cpu_of(pid) for pid in workers}
                halfway = time.monotonic() + args.duration / 2
                while not stop.wait(0.1):
                    for pid in workers:
                        now = harness.cpu_of(pid)
                        if now is not None and last[pid] is not None:
                            busy[pid] += now - last[pid]
                        last[pid] = now
                    if not held and time.monotonic() >= halfway:
                        held.update(connections_by_worker(gateway.port))

            sampler = threading.Thread(target=sample)
            started = time.monotonic()
            sampler.start()
            result = request_cpu.run_wrk(url, connections=args.connections, duration=args.duration,
                                         keys_file=gateway.keys_file, model="bench-chat",
                                         result_file=workdir / "wrk.json")
            stop.set()
            sampler.join()
            elapsed = time.monotonic() - started
            gateway.stop()  # each worker writes its totals as it exits; then `manage.py reconcile`
            after = {pid: read_totals(lanes, pid) for pid in workers}
    finally:
        harness.remove_workdir(workdir, keep=False)
    print(f"\nmetering_lanes.py: {source.label}, {result['rps']:.0f} req/s at {args.connections} connections "
          f"for {args.duration} s, reconcile: {gateway.reconciled}\n")
    print("| worker | connections | requests | core busy | " + " | ".join(f"{name} ({unit})" for name, unit in TIMERS)
          + " | charges and settlements per statement |")
    print("|---|---:|---:|---:|" + "---:|" * (len(TIMERS) + 1))
    for number, pid in enumerate(workers, 1):
        totals = difference(after[pid], before[pid])
        requests = totals.get("request in Django", [0, 0.0])[0]
        cells = []
        for name, _ in TIMERS:
            count, seconds = totals.get(name, [0, 0.0])
            cells.append(f"{seconds * 1000 / count:.2f}" if count else "–")
        groups, items = totals.get("groups", [0, 0.0])
        per_group = f"{items / groups:.2f}" if groups else "–"
        print(f"| {number} | {held.get(pid, 0)} | {requests:,} | {busy[pid] / elapsed:.0%} | "
              + " | ".join(cells) + f" | {per_group} |")
    print("\nA charge or settlement's wait counts from its arrival in the queue to its result (its group's "
          "statement included); a request has two.")


if __name__ == "__main__":
    main()
