"""What PostgreSQL does for a served gateway, statement by statement: pg_stat_statements under wrk's load.

    .venv/bin/python bench/statements_served.py [--source DIR[,NAME=VALUE...] ...] [--duration 15]

Serves each source on PostgreSQL + Redis as bench/request_cpu.py does (its own private cluster,
gunicorn with the gateway's settings, nginx as the upstream, a 3 s warm-up), with the cluster's
pg_stat_statements loaded and counting nested statements too (the rollups' trigger, the
foreign-key checks at commit) and planning. After --duration seconds of wrk it prints, for each
statement, its calls, its executions' and its planning's total time, how many times it was
planned and the rows it returned or wrote, then the requests wrk had answered.

The times are PostgreSQL's wall-clock times, not its CPU: on a busy machine they include the
waits for a core and for row locks, and a statement's time includes its nested statements'.
What they tell is where the database's work is and how often a statement is planned (a
prepared statement runs on a plan of its parameters five times, then on its generic plan, and
is prepared anew on the schedule of utils_app/postgresql/base.py). `reconcile` runs at the end.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import request_cpu  # noqa: E402

SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all",
            "pg_stat_statements.track_planning": "on"}
DATABASE = "gw_bench_statements"
# The statements' text cut to what tells them apart; their parameters are $n already.
SUMMARY = (r"SELECT calls, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), plans, rows, "
           r"left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements "
           r"WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time + total_plan_time DESC LIMIT 20")


def measure(source: request_cpu.Source, workdir: Path, *, duration: int, connections: int) -> None:
    with request_cpu.served(source, workdir, database=DATABASE, connections=connections,
                            postgres_settings=SETTINGS) as (gateway, postgres):
        postgres.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", database=DATABASE)
        postgres.query("SELECT pg_stat_statements_reset()", database=DATABASE)
        result_file = workdir / "run.json"
        request_cpu.run_wrk(f"{gateway.url}/v1/chat/completions", connections=connections, duration=duration,
                            keys_file=gateway.keys_file, model="bench-chat", result_file=result_file)
        rows = postgres.query(SUMMARY, database=DATABASE)
        answered = json.loads(result_file.read_text())
    print(f"\n{source.label}: {duration} s of wrk at {connections} connections, "
          f"{answered.get('requests', '?')} requests answered\n")
    print("| calls | exec ms (total) | plan ms (total) | plans | rows | statement |")
    print("|---:|---:|---:|---:|---:|---|")
    for calls, executed, planned, plans, returned, text in rows:
        print(f"| {int(calls):,} | {executed} | {planned} | {int(plans):,} | {int(returned):,} | `{text}` |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", nargs="+", default=["."], help="copies of the project (DIR[,NAME=VALUE])")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if not 1 <= args.duration <= 120:
        parser.error("--duration: 1 to 120 seconds")
    for spec in args.source:
        source = request_cpu.parse_source(spec)
        with tempfile.TemporaryDirectory(prefix="gw_statements_") as folder:
            measure(source, Path(folder), duration=args.duration, connections=args.connections)
    harness.log("done")


if __name__ == "__main__":
    main()
