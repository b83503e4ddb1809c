"""CPU per round trip to PostgreSQL and Redis on the same machine: over loopback TCP, and over a Unix socket.

    .venv/bin/python bench/socket_cpu.py [--round-trips 5000] [--rounds 3]

A metered request makes three round trips to servers that, on a one-machine deployment, run
beside the gateway: the charge and the settlement to PostgreSQL, the limits' script to Redis.
Over loopback TCP each one goes through the kernel's TCP stack twice (the client's send and the
server's answer), which a Unix socket skips. This script starts a PostgreSQL and a Redis of its
own (bench/harness.py), both listening on 127.0.0.1 and on a Unix socket, and for each transport
sends --round-trips small requests one after the other from one connection: a prepared
`SELECT 1` through psycopg, and an `INCR` through redis-py. It reports the CPU per round trip of
this client process and of the server process that answered it (the PostgreSQL backend, the
redis-server), the best of --rounds rounds, the transports taking turns. Nothing is asserted:
the figures go to docs/operations.md (a PostgreSQL or Redis on the gateway's own machine).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(send, server_pid: int, count: int) -> tuple[float, float]:
    """(client µs, server µs) of CPU per round trip over ``count`` calls of ``send``."""
    for _ in range(min(count, 500)):
        send()
    server, client = _cpu_seconds(server_pid), time.process_time()
    for _ in range(count):
        send()
    return ((time.process_time() - client) / count * 1e6, (_cpu_seconds(server_pid) - server) / count * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    harness.stop_on_sigterm()

    import psycopg
    import redis

    workdir = harness.make_workdir("socket_cpu")
    postgres = harness.PrivatePostgres(workdir, max_connections=20)
    redis_folder = workdir / "redis-unix"
    redis_folder.mkdir()
    redis_socket = redis_folder / "redis.sock"
    redis_port = harness.free_port(harness.PRIVATE_REDIS_PORT)
    redis_server = None
    best: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        postgres.start()
        redis_server = harness.Process("private Redis (TCP and Unix socket)", [
            harness.require_tool("redis-server", "redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1",
            "--unixsocket", str(redis_socket), "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
            "--dir", str(redis_folder)], logfile=redis_folder / "redis.log")
        deadline = time.monotonic() + 10
        while not redis_socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the private Redis did not open its socket")
            time.sleep(0.1)
        transports = {
            "TCP 127.0.0.1": (f"host=127.0.0.1 port={postgres.port} user=postgres dbname=postgres",
                              lambda: redis.Redis(host="127.0.0.1", port=redis_port)),
            "Unix socket": (f"host={postgres.data} port={postgres.port} user=postgres dbname=postgres",
                            lambda: redis.Redis(unix_socket_path=str(redis_socket))),
        }
        for number in range(args.rounds):
            order = list(transports.items())
            if number % 2:
                order.reverse()
            for name, (conninfo, redis_client) in order:
                with psycopg.connect(conninfo, autocommit=True, prepare_threshold=0) as connection:
                    figures = _measure(lambda: connection.execute("SELECT 1").fetchone(),
                                       connection.info.backend_pid, args.round_trips)
                key = (name, "PostgreSQL: a prepared SELECT 1")
                best[key] = min(best.get(key, figures), figures, key=sum)
                client = redis_client()
                figures = _measure(lambda: client.incr("socket_cpu"), redis_server.pid, args.round_trips)
                client.close()
                key = (name, "Redis: INCR")
                best[key] = min(best.get(key, figures), figures, key=sum)
                harness.log(f"round {number} {name} done")
    finally:
        if redis_server is not None:
            redis_server.stop()
        postgres.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    print(f"\nsocket_cpu.py: {args.round_trips} round trips per transport and round, best of {args.rounds} rounds\n")
    print("| round trip | transport | client CPU µs | server CPU µs | both µs |")
    print("|---|---|---:|---:|---:|")
    for (name, what), (client, server) in sorted(best.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"| {what} | {name} | {client:.1f} | {server:.1f} | {client + server:.1f} |")


if __name__ == "__main__":
    main()
