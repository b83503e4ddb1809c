"""How many chat streams one gateway instance holds open at once.

    .venv/bin/python bench/open_streams.py [--backends embedded postgres+redis] [--streams 64 160]
                                           [--chunks 20] [--interval 0.5] [--keys 20] [--threads N]

Starts bench/fake_upstream.py, which streams each answer slowly (--chunks chunks, --interval s
apart, 10 s by default), and a gateway per backend (bench/harness.py). Then, for each number in
--streams, opens that many streaming chat requests (model bench-stream) at the same moment and
reads them to the end. For each stream it records when the first SSE event arrived and when the
stream ended. It reports:

- held at once: the most streams that were receiving events at the same instant (client side),
  and the most streams the upstream had open at once (the fake upstream counts them);
- first event within 1 s: streams served at once rather than queued behind a busy thread;
- completed (`data: [DONE]` seen) and failed (non-200, error event or broken connection);
- upstream connections opened: the connections the upstream accepted during the burst. The
  upstream runs for the gateway's whole life and keeps connections alive as a provider's API
  does, so a gateway that keeps its connections opens none for a burst no larger than the last;
- on PostgreSQL, the most connections the bench database had open at once during the burst
  (pg_stat_activity, sampled every 0.5 s), which the gateway's connection pools bound.

The same run first opens the streams directly against the fake upstream, to show the client and
upstream are not the limit. The client is plain asyncio sockets: one process holds thousands.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

BODY = {"model": "bench-stream", "stream": True,
        "messages": [{"role": "user", "content": "Stream something slowly."}]}


async def one_stream(port: int, path: str, key: str | None, model: str, started: float, deadline: float) -> dict:
    body = json.dumps(dict(BODY, model=model)).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n")
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    record = {"status": None, "first_event": None, "end": None, "events": 0, "done": False, "error": None}
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=10)
        writer.write(head.encode() + b"\r\n" + body)
        await writer.drain()
        buffer = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                record["error"] = "client deadline"
                break
            data = await asyncio.wait_for(reader.read(65536), timeout=remaining)
            if not data:
                break
            buffer += data
            if record["status"] is None and b"\r\n" in buffer:
                record["status"] = int(buffer.split(b" ", 2)[1])
            # Count complete events only; keep the unfinished tail for the next read.
            events, _, buffer_tail = buffer.rpartition(b"\n\n")
            found = events.count(b"data: ")
            if found:
                if record["first_event"] is None:
                    record["first_event"] = time.monotonic() - started
                record["events"] += found
                if b"data: [DONE]" in events:
                    record["done"] = True
                if b'data: {"error"' in events:
                    record["error"] = "error event"
                buffer = buffer_tail
        writer.close()
    except (OSError, asyncio.TimeoutError, ValueError, IndexError) as exc:
        record["error"] = type(exc).__name__
    record["end"] = time.monotonic() - started
    return record


def peak_overlap(records: list[dict]) -> int:
    """The most streams receiving events at one instant (from first event to end)."""
    edges = []
    for r in records:
        if r["first_event"] is not None:
            edges += [(r["first_event"], 1), (r["end"], -1)]
    peak = current = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        current += step
        peak = max(peak, current)
    return peak


async def burst(port: int, path: str, keys: list[str], model: str, count: int, limit_seconds: float) -> dict:
    started = time.monotonic()
    deadline = started + limit_seconds
    records = await asyncio.gather(*(
        one_stream(port, path, keys[i % len(keys)] if keys else None, model, started, deadline)
        for i in range(count)))
    ok = [r for r in records if r["status"] == 200 and r["done"] and not r["error"]]
    firsts = sorted(r["first_event"] for r in records if r["first_event"] is not None)
    ends = sorted(r["end"] for r in ok)
    events = sorted({r["events"] for r in ok})
    return {
        "streams": count,
        "completed": len(ok),
        "failed": count - len(ok),
        "held_at_once": peak_overlap(records),
        "first_event_within_1s": sum(1 for t in firsts if t <= 1.0),
        "first_event_p50_s": round(firsts[len(firsts) // 2], 2) if firsts else None,
        "first_event_max_s": round(firsts[-1], 2) if firsts else None,
        "complete_p50_s": round(ends[len(ends) // 2], 2) if ends else None,
        "complete_max_s": round(ends[-1], 2) if ends else None,
        # Every completed stream of a burst carries the same events when nothing was lost or added.
        "events_per_stream": events,
        "wall_s": round(time.monotonic() - started, 1),
        "statuses": sorted({str(r["status"]) for r in records}),
        "errors": sorted({r["error"] for r in records if r["error"]}),
    }


class ConnectionSampler:
    """The most connections to the bench's PostgreSQL database seen at once while it runs."""

    def __init__(self):
        self.database = urlsplit(harness.PG_URL).path.lstrip("/")
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, len(harness.postgres_backends(self.database)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def run_level(port: int, path: str, keys: list[str], model: str, count: int, limit_seconds: float,
              *, sample_connections: bool = False) -> dict:
    load = harness.load_average()
    harness.upstream_stats(reset=True)
    if sample_connections:
        with ConnectionSampler() as sampler:
            result = asyncio.run(burst(port, path, keys, model, count, limit_seconds))
        result["db_connections_peak"] = sampler.peak
    else:
        result = asyncio.run(burst(port, path, keys, model, count, limit_seconds))
    result["load"] = max(load, harness.load_average())
    stats = harness.upstream_stats()
    result["upstream_peak"] = stats["peak_streams"]
    result["upstream_connections"] = stats["connections"] - 1  # less the stats request's own
    return result


def measure(backend: str, workdir: Path, args, limit_seconds: float, source: Path = harness.ROOT) -> list[dict]:
    extra_env = {"GUNICORN_THREADS": str(args.threads)} if args.threads else {}
    gateway = harness.Gateway(backend, workdir, extra_env=extra_env, source=source)
    keys = gateway.prepare(keys=args.keys)
    workers, threads = gateway.workers_and_threads()
    gateway.start()
    # One upstream for the gateway's whole life, as a provider's API is: connections the gateway
    # keeps from one burst serve the next.
    upstream = harness.start_stream_upstream(workdir, chunks=args.chunks, interval=args.interval)
    rows = []
    try:
        for count in args.streams:
            for target, port, key_list, model in (
                ("direct", harness.STREAM_UPSTREAM_PORT, [], "bench-upstream"),
                ("gateway", gateway.port, keys, "bench-stream"),
            ):
                result = run_level(port, "/v1/chat/completions", key_list, model, count, limit_seconds,
                                   sample_connections=backend == "postgres+redis" and target == "gateway")
                result.update(backend=backend, target=target, workers=workers, threads=threads,
                              source="working tree" if source == harness.ROOT else source.name)
                harness.log(json.dumps(result))
                rows.append(result)
    finally:
        upstream.stop()
        gateway.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=list(harness.GATEWAY_PORTS),
                        choices=list(harness.GATEWAY_PORTS))
    parser.add_argument("--streams", nargs="+", type=int, default=[64, 160])
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--out", type=Path, help="also write the raw results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    parser.add_argument("--threads", type=int, help="GUNICORN_THREADS for the gateway (default: its config's)")
    parser.add_argument("--source", type=Path, nargs="+", default=[],
                        help="also serve the gateway from these copies of the project (e.g. an older commit)")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    if max(args.streams) > 5000:
        raise SystemExit("at most 5000 streams per burst")
    stream_seconds = args.chunks * args.interval
    # Long enough for queued streams to be served in a few rounds; never unbounded.
    limit_seconds = min(600.0, stream_seconds * 6 + 30)

    workdir = harness.make_workdir("stream_bench")
    harness.log(f"work dir {workdir}")
    rows = []
    try:
        with harness.private_servers(workdir, wanted="postgres+redis" in args.backends):
            for backend in args.backends:
                for number, source in enumerate([Path(s).resolve() for s in args.source] + [harness.ROOT]):
                    rows += measure(backend, workdir / f"source{number}", args, limit_seconds, source)
    finally:
        harness.remove_workdir(workdir, keep=args.keep)

    print(f"\nopen_streams.py, {time.strftime('%Y-%m-%d %H:%M')}, each stream {args.chunks} chunks "
          f"{args.interval} s apart ({stream_seconds:.0f} s)\n")
    print("| backend (workers×threads), source | target | streams opened | held at once (client / upstream) "
          "| first event ≤ 1 s | first event p50 / max s | complete p50 / max s | completed | events per stream "
          "| failed | statuses | upstream connections opened | database connections (peak) | load |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} ({r['workers']}×{r['threads']}), {r['source']} | {r['target']} | {r['streams']} "
              f"| {r['held_at_once']} / {r['upstream_peak']} | {r['first_event_within_1s']} "
              f"| {r['first_event_p50_s']} / {r['first_event_max_s']} "
              f"| {r['complete_p50_s']} / {r['complete_max_s']} | {r['completed']} "
              f"| {', '.join(map(str, r['events_per_stream']))} | {r['failed']} "
              f"| {', '.join(r['statuses'])} | {r['upstream_connections']} | {r.get('db_connections_peak', '–')} "
              f"| {r['load']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
