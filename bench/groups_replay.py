"""PostgreSQL's CPU per request when requests share their metering statements: groups of 1, 2, 4… replayed.

    .venv/bin/python bench/groups_replay.py [--sizes 1 2 4 8] [--requests 2400] [--rounds 6] [--ledger 200000]
    .venv/bin/python bench/groups_replay.py --growth 40 [--sizes 3]

A served process groups the charges and settlements of its concurrent requests into one statement
(gateway.metering, docs/ledger.md). This replays that from one connection, on the bench's own
PostgreSQL cluster with production durability (bench/harness.py PrivatePostgres), for each group
size in turn, --rounds times in alternating order:

- size 1: each request's charge and settlement as its own two statements (CHARGE_POSTGRES,
  COMPLETE_POSTGRES), as a lone request sends them;
- size n: statements of n charges (n keys) and n settlements of the charges of the group before,
  on other keys, each the one mixed statement the gateway sends (metering.GROUP_STATEMENT), through
  the same libpq path (utils_app.postgresql.base.run_on_libpq), prepared as the pool prepares.

Per request (a charge and its settlement) it reports the connection's backend CPU, this client's
CPU and the WAL written. The ledger starts with --ledger rows and is analyzed, so that the plans
are those of an established database, not of a new one. Every key's balance is reconciled with
its ledger at the end.

--growth SECONDS instead replays groups of the first --sizes for that long on a new, empty ledger,
twice, each on a database of its own: with the prepared statements made anew on their doubling
schedule (utils_app/postgresql/base.py REPLAN_FIRST_SECONDS), and with each statement's first plan
kept for the whole run. It prints the backend's CPU per request over 3,000 requests, every 12,000: a plan made
while the ledger was a few pages long that keeps scanning it whole shows as a cost that grows
with the ledger.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

KEYS = 16

# Runs in the gateway's environment (Django set up against the bench's database).
MEASURE = r'''
import json, os, statistics, sys, time, uuid
from pathlib import Path

import django
django.setup()
import psycopg
from django.utils import timezone

from gateway import metering
from keys.ledger import mismatches
from utils_app.postgresql.base import run_on_libpq

sizes, requests, rounds = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
growth = float(sys.argv[4])
if os.environ.get("BENCH_KEEP_FIRST_PLANS"):
    import utils_app.postgresql.base
    utils_app.postgresql.base.REPLAN_FIRST_SECONDS = float("inf")


def backend_cpu(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


connection = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=0)
keys = connection.execute("SELECT id, tier FROM keys_apikey WHERE name <> 'ledger filler' ORDER BY id").fetchall()
model_pk, model = connection.execute(
    "SELECT id, model_id FROM models_catalog_aimodel WHERE model_id = 'bench-chat'").fetchone()
deployment = connection.execute("SELECT id FROM models_catalog_deployment WHERE model_id = %s",
                                [model_pk]).fetchone()[0]
pid = connection.info.backend_pid


def charge(key):
    return {"key": key[0], "tier": key[1], "amount": 1, "request_id": uuid.uuid4().hex, "operation": "chat",
            "model": model, "idempotency_key": None, "now": timezone.now()}


def settlement(key, entry):
    return {"entry": entry, "key": key, "model_pk": model_pk, "operation": "chat", "provider": "bench-fast",
            "input_tokens": 12, "output_tokens": 6, "cached_tokens": 0, "latency_ms": 3, "status": 200,
            "success": True, "deployment": deployment, "now": timezone.now()}


def alone(count):
    for number in range(count):
        key = keys[number % len(keys)]
        entry = run_on_libpq(connection, metering.CHARGE_POSTGRES, charge(key))[0][0]
        assert run_on_libpq(connection, metering.COMPLETE_POSTGRES, settlement(key[0], entry))[1] == 1


pending = []  # the charges of the group before: (key, entry)


def grouped(count, size):
    global pending
    halves = keys[:len(keys) // 2], keys[len(keys) // 2:]
    for number in range(count // size):
        items = [(metering.CHARGE, charge(key)) for key in halves[number % 2][:size]]
        items += [(metering.SETTLEMENT, settlement(key, entry)) for key, entry in pending]
        params = metering._group_params(items, timezone.now())
        rows, _ = run_on_libpq(connection, metering.GROUP_STATEMENT, params, every_row=True)
        assert {number for answer, number, _, _ in rows if answer == metering.ANSWER_LOCKED} == {
            params["key"] for _, params in items}
        pending = [(key, entry) for answer, key, entry, _ in rows if answer == metering.ANSWER_CHARGED]
    if pending:  # settle the last group's charges: the ledger ends with nothing pending
        params = metering._group_params(
            [(metering.SETTLEMENT, settlement(key, entry)) for key, entry in pending], timezone.now())
        run_on_libpq(connection, metering.GROUP_STATEMENT, params, every_row=True)
        pending = []


def run(size, count):
    alone(count) if size == 1 else grouped(count, size)


def wal():
    return connection.execute("SELECT pg_current_wal_lsn()", prepare=False).fetchone()[0]


if growth:
    series, started, done, cpu = [], time.monotonic(), 0, backend_cpu(pid)
    while time.monotonic() - started < growth:
        run(sizes[0], 3000)
        done += 3000
        series.append([round(time.monotonic() - started, 1), done, (backend_cpu(pid) - cpu) * 1000 / 3000])
        cpu = backend_cpu(pid)
    print(json.dumps({"series": series, "mismatches": len(mismatches())}))
    sys.exit()
for size in sizes:  # warm-up: caches, each statement prepared and planned
    run(size, 40 * size)
results = {size: [] for size in sizes}
for number in range(rounds):
    for size in (sizes if number % 2 == 0 else sizes[::-1]):
        lsn, backend, client = wal(), backend_cpu(pid), time.thread_time()
        run(size, requests)
        client, backend = time.thread_time() - client, backend_cpu(pid) - backend
        written = connection.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn],
                                     prepare=False).fetchone()[0]
        results[size].append({"backend_ms": backend * 1000 / requests, "client_ms": client * 1000 / requests,
                              "wal_bytes": float(written) / requests})
print(json.dumps({"results": results, "mismatches": len(mismatches())}))
'''


def prepare(gateway: harness.Gateway, postgres: harness.PrivatePostgres, database: str, ledger: int) -> None:
    """A migrated database with KEYS keys and, past them, a ledger of ``ledger`` settled charges, analyzed."""
    harness._reset_postgres(gateway.database_url)
    gateway.manage("migrate", "--noinput")
    gateway.manage("seed_models", str(harness.CATALOG))
    for _ in range(KEYS):
        gateway.manage("issue_key", "--tier", "free", "--credits", str(10**12), "--max-credits", str(10**12),
                       "--rpm", "1000", "--rph", "10000")
    if ledger:
        # One more key whose settled charges fill the ledger, as an established database's ledger is full.
        gateway.manage("issue_key", "--tier", "free", "--credits", str(ledger), "--max-credits", str(ledger),
                       "--name", "ledger filler")
        postgres.query(
            "WITH k AS (UPDATE keys_apikey SET credits = 0 WHERE name = 'ledger filler' RETURNING id) "
            "INSERT INTO keys_ledgerentry (key_id, kind, amount, balance_after, status, actor, request_id, "
            f"operation, model, provider, created_at, settled_at) SELECT k.id, 'charge', -1, {ledger} - g, "
            "'completed', '', 'filler-' || g, 'chat', 'bench-chat', 'bench-fast', now(), now() FROM k, "
            f"generate_series(1, {ledger}) g", database=database)
        postgres.query("VACUUM ANALYZE", database=database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 2, 4, 8],
                        help=f"requests per group (at most {KEYS // 2})")
    parser.add_argument("--requests", type=int, default=2400, help="requests per measurement (a multiple of each size)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ledger", type=int, default=200_000, help="ledger rows before the replay")
    parser.add_argument("--growth", type=float, default=0,
                        help="seconds of groups on a new ledger, plans renewed and plans kept (see above)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if any(size < 1 or size > KEYS // 2 for size in args.sizes):
        raise SystemExit(f"--sizes: from 1 to {KEYS // 2}")
    harness.stop_on_sigterm()
    workdir = harness.make_workdir("groups")
    postgres = harness.PrivatePostgres(workdir, max_connections=50)
    redis = None
    outs = {}
    try:
        postgres.start()
        redis = harness.PrivateRedis(workdir)  # the set-up commands' cache, never the machine's
        runs = {"renewed": {}, "kept": {"BENCH_KEEP_FIRST_PLANS": "1"}} if args.growth else {"replay": {}}
        for name, env in runs.items():
            gateway = harness.Gateway("postgres+redis", workdir / name, source=harness.ROOT,
                                      database_url=postgres.url(f"gw_bench_groups_{name}"), redis_url=redis.url(0))
            prepare(gateway, postgres, f"gw_bench_groups_{name}", 0 if args.growth else args.ledger)
            outs[name] = subprocess.run([harness.PYTHON, "-c", MEASURE, json.dumps(args.sizes), str(args.requests),
                                         str(args.rounds), str(args.growth)], cwd=harness.ROOT,
                                        env={**gateway.env, **env}, check=True, stdout=subprocess.PIPE,
                                        text=True).stdout
    finally:
        if redis is not None:
            redis.stop()
        postgres.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    if args.growth:
        answers = {name: json.loads(out.strip().splitlines()[-1]) for name, out in outs.items()}
        print(f"\ngroups_replay.py --growth: groups of {args.sizes[0]} on a new ledger, backend CPU per request "
              f"over each 3,000 requests\n")
        print("| new ledger rows | plans renewed: s, ms | first plans kept: s, ms |")
        print("|---:|---:|---:|")
        for renewed, kept in itertools.zip_longest(answers["renewed"]["series"], answers["kept"]["series"]):
            rows = (renewed or kept)[1]
            if rows % 12_000:
                continue
            print(f"| {rows:,} | " + " | ".join(f"{point[0]}, {point[2]:.3f}" if point else "–"
                                                for point in (renewed, kept)) + " |")
        mismatched = sum(answer["mismatches"] for answer in answers.values())
        print(f"\nreconcile: {mismatched} mismatch(es)")
        if mismatched:
            raise SystemExit("the ledger does not reconcile after the replay")
        return
    out = outs["replay"]
    answer = json.loads(out.strip().splitlines()[-1])
    print(f"\ngroups_replay.py: {args.rounds} rounds of {args.requests} requests (a charge and its settlement) per "
          f"group size, one connection, a ledger of {args.ledger:,} rows; medians per request\n")
    print("| requests per group | backend CPU ms | client CPU ms | WAL bytes |")
    print("|---:|---:|---:|---:|")
    for size, runs in answer["results"].items():
        print(f"| {size} | {statistics.median(run['backend_ms'] for run in runs):.3f} "
              f"| {statistics.median(run['client_ms'] for run in runs):.3f} "
              f"| {statistics.median(run['wal_bytes'] for run in runs):,.0f} |")
    print(f"\nreconcile: {answer['mismatches']} mismatch(es)")
    if answer["mismatches"]:
        raise SystemExit("the ledger does not reconcile after the replay")


if __name__ == "__main__":
    main()
