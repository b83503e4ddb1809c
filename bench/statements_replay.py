"""PostgreSQL's CPU and WAL per metered request: the charge and the settlement replayed, with variants in turn.

    .venv/bin/python bench/statements_replay.py [--pairs 300] [--rounds 8]

The two statements of a metered request (gateway/metering.py CHARGE_POSTGRES and COMPLETE_POSTGRES,
read from the working tree) run one after the other from one psycopg connection per database, with
their parameters bound on the server as the request path sends them, in batches of --pairs, on
the bench's own PostgreSQL cluster with production durability (bench/harness.py PrivatePostgres:
fsync and synchronous_commit on). Each variant below gets a batch in turn, --rounds times, so the
machine's noise falls on all of them alike. Per pair it reports the CPU of the connection's
backend, of the whole cluster (WAL writer, checkpointer…), of this client (psycopg), and the WAL
written (pg_current_wal_lsn before and after); at the end the share of HOT updates per table.

Variants, each on its own database migrated by the working tree:

- as is: the statements as the request path sends them today (prepared: psycopg's
  prepare_threshold 0, so each statement is parsed and planned once per connection);
- not prepared: the same, parsed and planned at every execution;
- no foreign-key checks: the ledger's and the usage table's foreign keys to the key and the
  model dropped, so no referential-integrity trigger runs at commit (each is a query that
  locks the referenced row, FOR KEY SHARE);
- no rollup trigger: the usage rollups' trigger disabled. Measurement only: without it the rollup
  tables would no longer follow the usage events;
- neither: both of the last two;
- no check constraints: every CHECK constraint of the key, ledger and usage tables dropped
  (PostgreSQL parses and plans each one again at every statement that writes the table);
- one check per table: the same constraints joined with AND into one per table;
- no list checks: only the three "one of these words" constraints (tier, kind, status) dropped;
- list checks as one constant: those three rewritten as `= ANY ('{...}'::text[])`.

The last four are measurement only: the constraints guard the ledger and stay. --only picks the
variants to run beside "as is".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

VARIANTS = {
    "as is": {"database": "as_is", "prepare": True},
    "not prepared": {"database": "as_is", "prepare": False},
    "no foreign-key checks": {"database": "no_fk", "prepare": True},
    "no rollup trigger": {"database": "no_rollups", "prepare": True},
    "neither": {"database": "neither", "prepare": True},
    "no check constraints": {"database": "no_checks", "prepare": True},
    "one check per table": {"database": "one_check", "prepare": True},
    "no list checks": {"database": "no_lists", "prepare": True},
    "list checks as one constant": {"database": "list_consts", "prepare": True},
}
_LIST_CHECKS = {"apikey_tier_known": ("keys_apikey", "tier"), "ledger_kind_known": ("keys_ledgerentry", "kind"),
                "ledger_status_known": ("keys_ledgerentry", "status")}
_DROP_LISTS = ";".join(f"ALTER TABLE {table} DROP CONSTRAINT {name}" for name, (table, _) in _LIST_CHECKS.items())
_CONST_LISTS = """DO $$DECLARE found record; BEGIN
FOR found IN SELECT conrelid::regclass AS tab, conname, (SELECT attname FROM pg_attribute
    WHERE attrelid = conrelid AND attnum = conkey[1]) AS col, (SELECT '{' || string_agg(m[1], ',') || '}'
    FROM regexp_matches(pg_get_constraintdef(oid), $r$'([a-z_]+)'::character varying$r$, 'g') AS m) AS items
    FROM pg_constraint WHERE conname IN ('apikey_tier_known', 'ledger_kind_known', 'ledger_status_known')
LOOP EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', found.tab, found.conname);
EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I::text = ANY (%L::text[]))', found.tab, found.conname,
    found.col, found.items); END LOOP; END$$"""
_CHECKED = "('keys_apikey'::regclass, 'keys_ledgerentry'::regclass, 'models_catalog_usageevent'::regclass)"
_DROP_CHECKS = f"""DO $$DECLARE found record; BEGIN
FOR found IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint WHERE contype = 'c'
    AND conrelid IN {_CHECKED}
LOOP EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', found.tab, found.conname); END LOOP; END$$"""
_MERGE_CHECKS = f"""DO $$DECLARE found record; BEGIN
FOR found IN SELECT conrelid::regclass AS tab,
    string_agg('(' || substr(pg_get_constraintdef(oid), 7) || ')', ' AND ') AS merged
    FROM pg_constraint WHERE contype = 'c' AND conrelid IN {_CHECKED} GROUP BY conrelid
LOOP EXECUTE format('ALTER TABLE %s ADD CONSTRAINT merged_checks CHECK (%s)', found.tab, found.merged); END LOOP;
END$$"""
# The foreign keys from the ledger and the usage events to the keys and the models, whatever Django named them.
_DROP_FOREIGN_KEYS = """DO $$DECLARE found record; BEGIN
FOR found IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint WHERE contype = 'f'
    AND conrelid IN ('keys_ledgerentry'::regclass, 'models_catalog_usageevent'::regclass)
    AND confrelid IN ('keys_apikey'::regclass, 'models_catalog_aimodel'::regclass)
LOOP EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', found.tab, found.conname); END LOOP; END$$"""
_NO_ROLLUPS = "ALTER TABLE models_catalog_usageevent DISABLE TRIGGER usage_rollups"
SETUP = {
    "as_is": [],
    "no_fk": [_DROP_FOREIGN_KEYS],
    "no_rollups": [_NO_ROLLUPS],
    "neither": [_DROP_FOREIGN_KEYS, _NO_ROLLUPS],
    "no_checks": [_DROP_CHECKS],
    "no_lists": [_DROP_LISTS],
    "list_consts": [_CONST_LISTS],
    "one_check": [_MERGE_CHECKS, _DROP_CHECKS.replace("contype = 'c'", "contype = 'c' AND conname <> 'merged_checks'")],
}
STATEMENTS = ("import json, django; django.setup(); from gateway import metering; "
              "print(json.dumps([metering.CHARGE_POSTGRES, metering.COMPLETE_POSTGRES]))")


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Replay:
    """One connection to one variant's database, with a key, a model and a deployment to charge."""

    def __init__(self, postgres: harness.PrivatePostgres, database: str, statements: tuple[str, str]):
        self.connection = psycopg.connect(host="127.0.0.1", port=postgres.port, user="postgres",
                                          dbname=database, autocommit=True, prepare_threshold=None)
        self.charge, self.complete = statements
        row = self.connection.execute("SELECT id, tier FROM keys_apikey ORDER BY id LIMIT 1").fetchone()
        self.key, self.tier = row
        self.model_pk, self.model = self.connection.execute(
            "SELECT id, model_id FROM models_catalog_aimodel WHERE model_id = 'bench-chat'").fetchone()
        self.deployment = self.connection.execute(
            "SELECT id FROM models_catalog_deployment WHERE model_id = %s", [self.model_pk]).fetchone()[0]
        self.pid = self.connection.info.backend_pid

    def pairs(self, count: int, *, prepare: bool) -> None:
        self.connection.prepare_threshold = 0 if prepare else None
        cursor = self.connection.cursor()
        for _ in range(count):
            now = datetime.now(timezone.utc)
            cursor.execute(self.charge, {"amount": 1, "now": now, "key": self.key, "tier": self.tier,
                                         "request_id": uuid.uuid4().hex, "idempotency_key": None,
                                         "operation": "chat", "model": self.model})
            entry = cursor.fetchone()[0]
            cursor.execute(self.complete, {"entry": entry, "key": self.key, "model_pk": self.model_pk,
                                           "operation": "chat", "provider": "bench-fast", "input_tokens": 12,
                                           "output_tokens": 6, "cached_tokens": 0, "latency_ms": 3,
                                           "now": datetime.now(timezone.utc), "status": 200, "success": True,
                                           "deployment": self.deployment})
            if cursor.rowcount != 1:
                raise RuntimeError("a settlement settled nothing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="charge + settlement pairs per batch")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--only", nargs="*", help="variants to run besides 'as is' (default: all)")
    args = parser.parse_args()
    if args.only:
        for name in [name for name in VARIANTS if name != "as is" and name not in args.only]:
            database = VARIANTS.pop(name)["database"]
            if all(variant["database"] != database for variant in VARIANTS.values()):
                SETUP.pop(database)
    harness.stop_on_sigterm()
    workdir = harness.make_workdir("statements")
    postgres = harness.PrivatePostgres(workdir, max_connections=50)
    redis = None
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    hot = {}
    try:
        postgres.start()
        redis = harness.PrivateRedis(workdir)  # the set-up commands' cache, never the machine's
        statements = None
        replays = {}
        for database, commands in SETUP.items():
            gateway = harness.Gateway("postgres+redis", workdir / database, source=harness.ROOT,
                                      database_url=postgres.url(f"gw_bench_{database}"),
                                      redis_url=redis.url(0))
            harness._reset_postgres(gateway.database_url)
            gateway.manage("migrate", "--noinput")
            gateway.manage("seed_models", str(harness.CATALOG))
            gateway.manage("issue_key", "--tier", "free", "--credits", str(10**12), "--max-credits", str(10**12),
                           "--rpm", "1000", "--rph", "10000")
            for command in commands:
                postgres.query(command, database=f"gw_bench_{database}")
            if statements is None:
                statements = tuple(json.loads(subprocess.run(
                    [harness.PYTHON, "-c", STATEMENTS], cwd=harness.ROOT, env=gateway.env, check=True,
                    stdout=subprocess.PIPE, text=True).stdout))
            replays[database] = Replay(postgres, f"gw_bench_{database}", statements)
        for replay in replays.values():  # warm-up: caches, the first pages, each statement prepared once
            replay.pairs(50, prepare=False)
            replay.pairs(50, prepare=True)
        for number in range(args.rounds):
            order = list(VARIANTS.items())
            if number % 2:
                order.reverse()
            for name, variant in order:
                replay = replays[variant["database"]]
                lsn = postgres.query("SELECT pg_current_wal_lsn()")[0][0]
                cluster = harness.CpuMeter(cluster=postgres.processes)
                cluster.start()
                backend, client = backend_cpu(replay.pid), time.thread_time()
                started = time.perf_counter()
                replay.pairs(args.pairs, prepare=variant["prepare"])
                wall = time.perf_counter() - started
                client, backend = time.thread_time() - client, backend_cpu(replay.pid) - backend
                spent = cluster.stop()["cluster"]
                wal = int(postgres.query(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn}')")[0][0])
                row = {"backend_ms": backend * 1000 / args.pairs, "cluster_ms": spent * 1000 / args.pairs,
                       "client_ms": client * 1000 / args.pairs, "wal_bytes": wal / args.pairs,
                       "wall_ms": wall * 1000 / args.pairs}
                results[name].append(row)
                harness.log(f"round {number} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()))
        for replay in replays.values():
            replay.connection.close()
        time.sleep(11)  # table counts reach pg_stat_user_tables within 10 s of a backend going idle
        for database in SETUP:
            hot[database] = postgres.query("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE "
                                           "relname IN ('keys_ledgerentry', 'keys_apikey') ORDER BY relname",
                                           database=f"gw_bench_{database}")
    finally:
        if redis is not None:
            redis.stop()
        postgres.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    base = results["as is"]
    print(f"\nstatements_replay.py: {args.rounds} rounds of {args.pairs} charge + settlement pairs per variant; "
          f"medians per pair, and the median of each round's difference from 'as is'\n")
    print("| variant | backend CPU ms | Δ | whole cluster CPU ms | Δ | client (psycopg) CPU ms | WAL bytes | Δ | wall ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        def med(field):
            return statistics.median(run[field] for run in runs)

        def delta(field):
            return statistics.median(run[field] - ref[field] for run, ref in zip(runs, base))
        print(f"| {name} | {med('backend_ms'):.3f} | {delta('backend_ms'):+.3f} | {med('cluster_ms'):.3f} "
              f"| {delta('cluster_ms'):+.3f} | {med('client_ms'):.3f} | {med('wal_bytes'):,.0f} "
              f"| {delta('wal_bytes'):+,.0f} | {med('wall_ms'):.2f} |")
    for database, rows in hot.items():
        print(f"\n{database}: " + ", ".join(f"{table} {int(upd):,} updates, {int(hot_upd) / max(int(upd), 1):.0%} HOT"
                                            for table, upd, hot_upd in rows))


if __name__ == "__main__":
    main()
