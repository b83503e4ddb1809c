"""CPU of each speed trick of the request path against its plain twin, in one gevent-patched process.

    .venv/bin/python bench/pieces_cpu.py [--calls 3000] [--rounds 5]

Serves nothing: it calls each trick's piece of the request path in a loop, each call in a greenlet of
its own as a gevent worker runs a request, against the bench's private PostgreSQL, Redis and nginx
(bench/harness.py), once with the trick's switch on and once off (its plain twin), and reports the
best round's CPU per call of this process (other work on the machine only ever adds to a round, so
the best one is the closest to the piece's own cost). One line per trick of utils_app.speed:

- SPEED_REDIS_ROUND_TRIP: the limits' round trip (utils_app.windows.count_and_read with the
  routing's two reads) on a connection of its own / through redis-py's pipeline;
- SPEED_STATEMENTS_ALONE: one metered statement (an UPDATE of a key row, parameters bound on the
  server, prepared) alone on the pool / through a context's own Django wrapper and cursor;
- SPEED_LIBPQ: that statement alone on the pool, sent straight through libpq / through psycopg's cursor;
- SPEED_ONE_PASS_VALIDATION: validating the bench's chat body in one pass / DRF's own way;
- SPEED_UPSTREAM_POOL: one model call to nginx, its answer read, straight through urllib3's pool /
  through requests' session.

It prints each trick's µs saved per call and what that is of the machine CPU of a metered request
(REQUEST_CPU_US, docs/performance.md). A loop undercounts what a trick saves served: whether a trick
stays is judged by bench/request_cpu.py --tricks, which serves the gateway with each switch off.
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

BODY = {"model": "bench-chat", "messages": [{"role": "system", "content": "You are terse."},
                                            {"role": "user", "content": "Say hello in five words."}],
        "max_tokens": 16}
# Machine CPU per metered request on PostgreSQL + Redis, µs (docs/performance.md, "The figures").
REQUEST_CPU_US = 5253


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


def measure(calls: int, rounds: int, upstream: str) -> list[tuple[str, float, float]]:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from gateway.chat_serializers import ChatCompletionRequest
    from utils_app import shared, windows
    from utils_app.db import release_connection
    from utils_app.http import Upstreams
    from utils_app.speed.statements import statements_wrapper

    ops = [shared.get("health:bench"), shared.hgetall("pending:bench")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM keys_apikey ORDER BY id LIMIT 1")
        key = cursor.fetchone()[0]
    release_connection(connection)
    statement = "UPDATE keys_apikey SET last_used_at = %(now)s WHERE id = %(key)s RETURNING id"
    # One Upstreams per side: the trick's pool gives its connections the kernel's check, the twin's keeps urllib3's.
    upstreams = {True: Upstreams(pool_size=8), False: Upstreams(pool_size=8)}
    payload = json.dumps(BODY)

    def limits_round_trip():
        windows.count_and_read("key:1", (60, 3600), read="keys-version", default="v", also=ops)

    def statement_alone():
        from django.utils import timezone

        statements_wrapper().run_alone(statement, {"now": timezone.now(), "key": key})

    def validation():
        ChatCompletionRequest.with_data(BODY).validated()

    def upstream_call():
        switch = settings.SPEED_UPSTREAM_POOL
        answer = upstreams[switch].post(upstream, f"{upstream}/chat/completions", data=payload,
                                        headers={"Content-Type": "application/json"}, timeout=(3.05, 30))
        answer.raw.read()
        answer.close()

    tricks = [
        ("SPEED_REDIS_ROUND_TRIP", "the limits' round trip: own connection / redis-py pipeline", limits_round_trip),
        ("SPEED_STATEMENTS_ALONE", "one statement: alone on the pool / Django's wrapper and cursor", statement_alone),
        ("SPEED_LIBPQ", "one statement alone: straight through libpq / psycopg's cursor", statement_alone),
        ("SPEED_ONE_PASS_VALIDATION", "validating the chat body: one pass / DRF's own", validation),
        ("SPEED_UPSTREAM_POOL", "one upstream call: urllib3's pool / requests' session", upstream_call),
    ]
    results = []
    for switch, name, call in tricks:
        figures: dict[bool, list[float]] = {True: [], False: []}
        for number in range(2):  # each side twice, in turn, so a busy minute falls on both
            for on in ((True, False) if number % 2 == 0 else (False, True)):
                setattr(settings, switch, on)
                try:
                    figures[on].append(best_microseconds(call, calls=calls, rounds=rounds))
                finally:
                    setattr(settings, switch, True)
        results.append((f"{name} ({switch})", min(figures[True]), min(figures[False])))
        print(f"{results[-1][0]}: {results[-1][1]:.1f} / {results[-1][2]:.1f} µs", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    harness.stop_on_sigterm()
    workdir = harness.make_workdir("pieces")
    postgres = harness.PrivatePostgres(workdir, max_connections=50)
    redis = nginx = None
    try:
        postgres.start()
        port = harness.free_port(18300)
        nginx = harness.start_nginx(workdir, port)
        redis = harness.PrivateRedis(workdir)
        gateway = harness.Gateway("postgres+redis", workdir / "gateway", source=harness.ROOT,
                                  database_url=postgres.url("gw_bench_pieces"), redis_url=redis.url(0))
        harness._reset_postgres(gateway.database_url)
        gateway.manage("migrate", "--noinput")
        gateway.manage("seed_models", str(harness.CATALOG))
        gateway.manage("issue_key", "--tier", "free", "--credits", "1000")
        os.environ.update(gateway.env)  # this process is the gateway's, as a served worker would be
        sys.path.insert(0, str(harness.ROOT))
        results = measure(args.calls, args.rounds, f"http://127.0.0.1:{port}/v1")
    finally:
        if nginx is not None:
            nginx.stop()
        if redis is not None:
            redis.stop()
        postgres.stop()
        harness.remove_workdir(workdir, keep=False)
    print(f"\npieces_cpu.py: best of {args.rounds} rounds of {args.calls} calls, each side twice; "
          f"this process's CPU per call, each call in a greenlet of its own\n")
    print(f"| trick: on / off (switch) | on µs | off µs | saved µs | of {REQUEST_CPU_US} µs a request |")
    print("|---|---:|---:|---:|---:|")
    for name, now, before in results:
        print(f"| {name} | {now:.1f} | {before:.1f} | {before - now:.1f} | {(before - now) / REQUEST_CPU_US:.1%} |")


if __name__ == "__main__":
    main()
