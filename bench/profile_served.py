"""Where a served gateway's CPU goes: py-spy samples of its workers under wrk, summed by part of the request.

    .venv/bin/python bench/profile_served.py [--backend postgres+redis|sqlite] [--source DIR] [--duration 15]
                                             [--connections 16] [--rate 200] [--py-spy PATH] [--raw DIR]

Serves the gateway as bench/request_cpu.py does (private PostgreSQL and Redis, gunicorn with the
gateway's settings, nginx as the upstream), loads it with wrk and samples every worker with py-spy
(`--gil`: only samples where the worker holds the GIL, i.e. runs Python or C called from Python).
The samples are then summed two ways:

- by part (inclusive): the samples whose stack holds one of PARTS' functions, in ms of CPU per
  request (the share of samples times the workers' CPU per request, read from /proc meanwhile);
- by library (exclusive): each sample counted once, for the innermost frame's library (psycopg,
  requests, urllib3, Django, DRF, the gateway's own code…).

py-spy is not a dependency of the project: `pip download py-spy` and take the binary out of the
wheel, or `pip install py-spy`, and pass --py-spy. Sampling pauses the workers briefly (about 2 %
at 200 Hz): compare figures of one run, not across runs.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import request_cpu  # noqa: E402

# (label, pattern in a py-spy frame "function (path:line)"): inclusive parts of a metered chat.
PARTS = [
    ("whole request in Django (WSGIHandler.__call__)", r"^WSGIHandler\.__call__ \(django/core/handlers/wsgi\.py"),
    ("middleware layers' own code (innermost frame in a middleware)", None),
    ("URL resolution (URLResolver.resolve)", r"^URLResolver\.resolve \(django/urls/resolvers\.py"),
    ("DRF dispatch, whole (APIView.dispatch)", r"^APIView\.dispatch \(rest_framework/views\.py"),
    ("DRF initial: authentication, limits, negotiation", r"^APIView\.initial \(rest_framework/views\.py"),
    ("authentication (BearerKeyAuthentication.authenticate)", r"^BearerKeyAuthentication\.authenticate \(keys/auth"),
    ("limits + routing health: one Redis round trip (keys.limits.enforce)", r"^enforce \(keys/limits\.py"),
    ("  of which redis-py", r"\(redis/"),
    ("request body parse (parse_json_object)", r"^parse_json_object \(utils_app/errors\.py"),
    ("validation (serializer .validated)", r"\.validated \(utils_app/serializers\.py"),
    ("charge statement (gateway.metering.charge)", r"^charge \(gateway/metering\.py"),
    ("connection give-back after the charge (release_connection)", r"^release_connection \(utils_app/db\.py"),
    ("upstream call (Meter.call)", r"^Meter\.call \(gateway/services\.py"),
    ("  of which Upstreams.post (requests' prepare + send, urllib3)", r"^Upstreams\.post \(utils_app/http\.py"),
    ("  of which reading the body (HttpTransport.read)", r"^HttpTransport\.read \(gateway/upstream/transport\.py"),
    ("  of which JSON of the payload and the answer", r"^(dumps|loads) \(json/__init__\.py"),
    ("settlement statement (gateway.metering.complete)", r"^complete \(gateway/metering\.py"),
    ("database connection checkout (Django + psycopg_pool)", r"\.(ensure_connection|connect) \(django/db/backends/base/base\.py"),
    ("database connection give-back (Django close)", r"\.close \(django/db/backends/base/base\.py"),
    ("response rendering (DRF Response.rendered_content)", r"^Response\.rendered_content \(rest_framework/response\.py"),
    ("finalize_response (limit and credit headers)", r"\.finalize_response \("),
    ("ledger sweeper check (maybe_sweep)", r"^maybe_sweep \(gateway/sweeper\.py"),
    ("routing bookkeeping (gateway.routing)", r"\(gateway/routing\.py"),
    ("summary log line (utils_app.logging.write)", r"^write \(utils_app/logging\.py"),
    ("metrics (prometheus_client)", r"\(prometheus_client/"),
    ("request_finished (close_old_connections…)", r"\.close \(django/http/response\.py"),
    ("gunicorn access log line (Logger.access)", r"\.access \(gunicorn/glogging\.py"),
    ("gunicorn + gevent outside Django (HTTP parse, socket I/O, hub)", None),
]

LIBRARIES = [
    ("psycopg / psycopg_pool", r"\((psycopg|psycopg_pool)/"),
    ("redis-py", r"\(redis/"),
    ("requests", r"\(requests/"),
    ("urllib3", r"\(urllib3/"),
    ("http.client / socket / ssl", r"\((http/client|socket|ssl|selectors)\.py"),
    ("json / orjson", r"\(json/"),
    ("logging", r"\(logging/"),
    ("DRF", r"\(rest_framework/"),
    ("Django URL resolution", r"\(django/urls/"),
    ("Django database layer", r"\(django/db/"),
    ("Django other", r"\(django/"),
    ("corsheaders / whitenoise", r"\((corsheaders|whitenoise)/"),
    ("prometheus_client", r"\(prometheus_client/"),
    ("gateway code", r"\(gateway/"),
    ("keys code", r"\(keys/"),
    ("utils_app code", r"\(utils_app/"),
    ("models_catalog code", r"\(models_catalog/"),
    ("gunicorn", r"\(gunicorn/"),
    ("gevent", r"\(gevent/"),
]


def parse_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: 'outer;...;inner count' per line, frames as 'function (file:line)'."""
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def _short(frame: str) -> str:
    # py-spy writes paths relative to site-packages or the project when it can; make both alike.
    return re.sub(r"\((?:[^()]*/site-packages/|[^()]*/lib/python3\.\d+/)", "(", frame)


def summarize(stacks: list[tuple[list[str], int]]) -> tuple[int, dict[str, int], dict[str, int]]:
    total = sum(count for _, count in stacks)
    parts = Counter()
    libraries = Counter()
    compiled = [(label, re.compile(pattern) if pattern else None) for label, pattern in PARTS]
    libs = [(label, re.compile(pattern)) for label, pattern in LIBRARIES]
    for frames, count in stacks:
        frames = [_short(frame) for frame in frames]
        for label, pattern in compiled:
            if pattern is not None and any(pattern.search(frame) for frame in frames):
                parts[label] += count
        in_django = any(compiled[0][1].search(frame) for frame in frames)
        if not in_django:
            parts["gunicorn + gevent outside Django (HTTP parse, socket I/O, hub)"] += count
        else:
            # Middleware's own frames: the innermost frame is a middleware module's.
            leaf = frames[-1]
            if re.search(r"\((utils_app/middleware|django/middleware|corsheaders|whitenoise|keys/two_factor|"
                         r"django/utils/deprecation|django/contrib/(sessions|auth|messages)/middleware|"
                         r"django/core/handlers/(base|exception))", leaf):
                parts["middleware layers' own code (innermost frame in a middleware)"] += count
        for label, pattern in libs:
            if pattern.search(frames[-1]):
                libraries[label] += count
                break
        else:
            libraries["other (Python standard library, C)"] += count
    return total, parts, libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="postgres+redis", choices=["postgres+redis", "sqlite"])
    parser.add_argument("--source", default=".", help="copy of the project to serve (DIR[,NAME=VALUE...])")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--py-spy", default=os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw samples in this folder")
    parser.add_argument("--summarize", type=Path, metavar="DIR",
                        help="only sum up the raw samples kept in DIR by an earlier run (with --cpu-ms)")
    parser.add_argument("--cpu-ms", type=float, default=1.0, help="with --summarize: the workers' CPU ms/request")
    args = parser.parse_args()
    if args.summarize:
        stacks = [stack for path in sorted(args.summarize.glob("worker-*.txt")) for stack in parse_raw(path)]
        print_summary(stacks, args.cpu_ms, f"samples of {args.summarize}")
        return
    harness.stop_on_sigterm()
    backend = "embedded" if args.backend == "sqlite" else args.backend
    source = request_cpu.parse_source(args.source)
    workdir = harness.make_workdir("profile_served")
    try:
        with request_cpu.served(source, workdir, backend=backend, database="gw_bench_profile",
                                connections=args.connections) as (gateway, _):
            workers = [pid for pid in harness.process_tree(gateway.process.pid) if pid != gateway.process.pid]
            raw_dir = args.raw or workdir
            raw_dir.mkdir(parents=True, exist_ok=True)
            spies = [subprocess.Popen([args.py_spy, "record", "--pid", str(pid), "--gil", "--rate", str(args.rate),
                                       "--duration", str(args.duration), "--format", "raw",
                                       "--output", str(raw_dir / f"worker-{pid}.txt")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in workers]
            time.sleep(0.5)  # py-spy attaches
            meter = harness.CpuMeter(workers=lambda: workers)
            result = request_cpu.run_wrk(f"{gateway.url}/v1/chat/completions", connections=args.connections,
                                         duration=args.duration - 1, keys_file=gateway.keys_file,
                                         model="bench-chat", result_file=workdir / "wrk.json", cpu=meter)
            for spy in spies:
                spy.wait(timeout=args.duration + 60)
            gateway.stop()  # and `manage.py reconcile`
            stacks = [stack for pid in workers for stack in parse_raw(raw_dir / f"worker-{pid}.txt")]
    finally:
        harness.remove_workdir(workdir, keep=args.raw is not None and args.raw.is_relative_to(workdir))
    print_summary(stacks, result["cpu_ms"]["workers"],
                  f"{args.backend}, {source.label}, {result['rps']:.0f} req/s at {args.connections} connections, "
                  f"reconcile: {gateway.reconciled}")


def print_summary(stacks: list, cpu_ms: float, what: str) -> None:
    total, parts, libraries = summarize(stacks)
    print(f"\nprofile_served.py: {what}; workers' CPU {cpu_ms:.3f} ms/request; {total:,} GIL-holding samples\n")
    print("| part of the request (inclusive; parts overlap) | share of samples | ms CPU / request |")
    print("|---|---:|---:|")
    for label, _ in PARTS:
        print(f"| {label} | {parts[label] / total:.1%} | {parts[label] / total * cpu_ms:.3f} |")
    print("\n| innermost frame's library (exclusive) | share | ms CPU / request |")
    print("|---|---:|---:|")
    for label, count in libraries.most_common():
        print(f"| {label} | {count / total:.1%} | {count / total * cpu_ms:.3f} |")


if __name__ == "__main__":
    main()
