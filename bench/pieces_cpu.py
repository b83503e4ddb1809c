"""CPU of the request path's pieces, each against the way it was done before, in one gevent-patched process.

    .venv/bin/python bench/pieces_cpu.py [--calls 3000] [--rounds 5]

Serves nothing: it calls the pieces in a loop, each call in a greenlet of its own as a gevent
worker runs a request, against the bench's private PostgreSQL and Redis (bench/harness.py), and
reports the best round's CPU per call of this process (other work on the machine only ever adds
to a round, so the best one is the closest to the piece's own cost). Pairs, now against before:

- the limits' Redis round trip (utils_app.windows.count_and_read with the routing's two reads):
  ScriptedRedisCache.round_trip against redis-py's pipeline on the pool's connections;
- one metered statement (the charge's UPDATE of a key row, parameters bound on the server):
  DatabaseWrapper.run_alone against Django's cursor with its checkout and close;
- psycopg waiting for that statement under gevent: utils_app.sockets.wait_gevent against
  psycopg's own wait (its poll loop, through gevent's patched poll);
- validating the bench's chat body: GivenFieldsOnly against DRF's Serializer.to_internal_value
  visiting every field (the fields bound once per class either way);
- that statement's client side: run_alone through libpq (utils_app.postgresql.base.run_on_libpq)
  against run_alone through psycopg's cursor.
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

BODY = {"model": "bench-chat", "messages": [{"role": "system", "content": "You are terse."},
                                            {"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 16}


def best_microseconds(call, *, calls: int, rounds: int) -> float:
    import gevent

    def one():
        gevent.spawn(call).get()

    for _ in range(min(calls, 300)):  # warm: connections open, statements prepared, scripts loaded
        one()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            one()
        best = min(best, (time.process_time() - started) / calls)
    return best * 1e6


def measure(calls: int, rounds: int) -> list[tuple[str, float, float]]:
    import django

    django.setup()
    import psycopg
    from django.core.cache import cache
    from django.db import connection

    from rest_framework import serializers

    from gateway.chat_serializers import ChatCompletionRequest
    from utils_app.fastpath import GivenFieldsOnly
    from utils_app import shared, windows
    from utils_app.db import release_connection
    from utils_app.postgresql import base as backend

    ops = [shared.get("health:bench"), shared.hgetall("pending:bench")]
    given_to_internal_value = GivenFieldsOnly.to_internal_value
    drf_to_internal_value = serializers.Serializer.to_internal_value

    def limits_round_trip():
        windows.count_and_read("key:1", (60, 3600), read="keys-version", default="v", also=ops)

    def limits_pipeline():  # what run_script did before: redis-py's pipeline on the pool's connections
        client = cache.client_for_write()
        now = time.time()
        positions = [windows._position("key:1", period, now) for period in (60, 3600)]
        keys = [cache.make_key(f"w:key:1:{period}:{bucket}") for period, (bucket, _) in zip((60, 3600), positions)]
        keys.append(cache.make_key("keys-version"))
        pipe = client.pipeline(transaction=False)
        pipe.eval(windows._INCREMENT_ALL, len(keys), *keys, 2, *(left + 1 for _, left in positions), "v")
        pipe.get(cache.make_key("health:bench"))
        pipe.hgetall(cache.make_key("pending:bench"))
        shared.answers(ops, pipe.execute()[1:])

    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM keys_apikey ORDER BY id LIMIT 1")
        key = cursor.fetchone()[0]
    release_connection(connection)
    statement = "UPDATE keys_apikey SET last_used_at = %(now)s WHERE id = %(key)s RETURNING id"

    def params():
        from django.utils import timezone

        return {"now": timezone.now(), "key": key}

    def alone():
        connection.run_alone(statement, params())

    def through_django():
        with connection.server_bound_cursor() as cursor:
            cursor.execute(statement, params())
            cursor.fetchone()
        release_connection(connection)

    ours = backend.Connection.wait

    def psycopg_wait():
        backend.Connection.wait = psycopg.Connection.wait
        try:
            alone()
        finally:
            backend.Connection.wait = ours

    def validate_given():
        ChatCompletionRequest(data=BODY).validated()

    def validate_drf():  # fields still bound once per class (SharedFields): only GivenFieldsOnly is undone
        GivenFieldsOnly.to_internal_value = drf_to_internal_value
        try:
            ChatCompletionRequest(data=BODY).validated()
        finally:
            GivenFieldsOnly.to_internal_value = given_to_internal_value

    def through_cursor():
        backend.run_on_libpq = lambda *args: None  # run_alone then takes psycopg's cursor, as before
        try:
            alone()
        finally:
            backend.run_on_libpq = on_libpq

    on_libpq = backend.run_on_libpq
    pairs = [
        ("limits' Redis round trip: round_trip / redis-py pipeline", limits_round_trip, limits_pipeline),
        ("one statement: run_alone / Django's cursor, checkout and close", alone, through_django),
        ("its wait under gevent: wait_gevent / psycopg's poll loop", alone, psycopg_wait),
        ("validating the chat body: GivenFieldsOnly / DRF's path", validate_given, validate_drf),
        ("one statement's client: run_on_libpq / psycopg's cursor", alone, through_cursor),
    ]
    results = []
    for name, now, before in pairs:
        figures = {"now": [], "before": []}
        for number in range(2):  # each side twice, in turn, so a busy minute falls on both
            for label, call in (("now", now), ("before", before)) if number % 2 == 0 else (("before", before),
                                                                                           ("now", now)):
                figures[label].append(best_microseconds(call, calls=calls, rounds=rounds))
        results.append((name, min(figures["now"]), min(figures["before"])))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    harness.stop_on_sigterm()
    workdir = harness.make_workdir("pieces")
    postgres = harness.PrivatePostgres(workdir, max_connections=50)
    redis = None
    try:
        postgres.start()
        redis = harness.PrivateRedis(workdir)
        gateway = harness.Gateway("postgres+redis", workdir / "gateway", source=harness.ROOT,
                                  database_url=postgres.url("gw_bench_pieces"), redis_url=redis.url(0))
        harness._reset_postgres(gateway.database_url)
        gateway.manage("migrate", "--noinput")
        gateway.manage("seed_models", str(harness.CATALOG))
        gateway.manage("issue_key", "--tier", "free", "--credits", "1000")
        os.environ.update(gateway.env)  # this process is the gateway's, as a served worker would be
        sys.path.insert(0, str(harness.ROOT))
        results = measure(args.calls, args.rounds)
    finally:
        if redis is not None:
            redis.stop()
        postgres.stop()
        harness.remove_workdir(workdir, keep=False)
    print(f"\npieces_cpu.py: best of {args.rounds} rounds of {args.calls} calls, each side twice; "
          f"this process's CPU per call, each call in a greenlet of its own\n")
    print("| piece: now / before | now µs | before µs | saved µs |")
    print("|---|---:|---:|---:|")
    for name, now, before in results:
        print(f"| {name} | {now:.1f} | {before:.1f} | {before - now:.1f} |")


if __name__ == "__main__":
    main()
