"""Whether two copies of the project answer alike: every status, header and body, and the ledger and usage rows.

    .venv/bin/python bench/answers_diff.py --backend postgres+redis|sqlite --source DIR DIR [DIR...] [--keep]

A change made for speed must not change what clients see nor what the ledger records. For each
--source (a copy of the project, e.g. `git archive REV | tar -x -C DIR`, or `.` for the working
tree) this serves a gateway on the chosen backend (bench/harness.py: a private PostgreSQL and Redis,
or SQLite), seeded with bench/answers_catalog.toml, whose upstreams answer, fail and refuse in
known ways (nginx with bench/upstream/nginx.conf.in, bench/fake_upstream.py for a stream, a port
nothing listens on). Each gateway gets the same requests in the same order from one fresh key:
successes, an Idempotency-Key retry, a stream, upstream failures (404, 429, 401, refused
connection), refusals of every kind (bad JSON, NaN, lone surrogates, big integers, oversize
bodies, missing and bad keys, a tier without access) and CORS. It records each answer, then the
key's ledger and usage rows, with what changes from run to run taken out (Date, X-Request-ID,
row ids, timestamps, latencies, request ids, /utils/facts' random facts). A row column that an
older source's schema lacks (a deployment, say) is compared for no source, and the report names
it. One worker serves each gateway, so the key row it caches answers every request. Prints the
differences against the first source and exits 1 if there are any.
"""
from __future__ import annotations

import argparse
import difflib
import http.client
import json
import re
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

CATALOG = harness.BENCH / "answers_catalog.toml"
PORT = 18250
MAX_REQUEST_BYTES = 65536
VOLATILE_HEADERS = {"date", "x-request-id", "server", "x-ratelimit-reset-requests"}


def chat(model: str, **extra) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hello."}], **extra}).encode()


def requests_to_send(key: str) -> list[tuple[str, str, str, bytes, dict]]:
    """(name, method, path, body, headers) of every request, in order."""
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    nested = b'{"model": "ans-chat", "messages": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    return [
        ("chat", "POST", "/v1/chat/completions", chat("ans-chat"), auth),
        ("chat, Idempotency-Key", "POST", "/v1/chat/completions", chat("ans-chat", temperature=0.5),
         {**auth, "Idempotency-Key": "answers-1"}),
        ("chat, same Idempotency-Key (replay)", "POST", "/v1/chat/completions", chat("ans-chat", temperature=0.5),
         {**auth, "Idempotency-Key": "answers-1"}),
        ("chat, same Idempotency-Key, other body", "POST", "/v1/chat/completions", chat("ans-chat"),
         {**auth, "Idempotency-Key": "answers-1"}),
        ("chat, odd answer (small floats, U+2028, emoji)", "POST", "/v1/chat/completions", chat("ans-odd"), auth),
        ("chat, non-ASCII prompt", "POST", "/v1/chat/completions",
         json.dumps({"model": "ans-chat", "messages": [{"role": "user", "content": "café \u2028 😀"}]},
                    ensure_ascii=False).encode(), auth),
        ("chat, small float parameter", "POST", "/v1/chat/completions", chat("ans-chat", top_p=1e-05), auth),
        ("chat, upstream 429", "POST", "/v1/chat/completions", chat("ans-limited"), auth),
        ("chat, upstream 401", "POST", "/v1/chat/completions", chat("ans-refused"), auth),
        ("chat, upstream refused connection", "POST", "/v1/chat/completions", chat("ans-down"), auth),
        ("embeddings, upstream 404", "POST", "/v1/embeddings",
         json.dumps({"model": "ans-embed", "input": "hello"}).encode(), auth),
        ("chat, stream", "POST", "/v1/chat/completions", chat("ans-stream", stream=True), auth),
        ("chat, stream with usage", "POST", "/v1/chat/completions",
         chat("ans-stream", stream=True, stream_options={"include_usage": True}), auth),
        ("chat, local model", "POST", "/v1/chat/completions", chat("local-chat"), auth),
        ("chat, model of another type", "POST", "/v1/chat/completions", chat("ans-embed"), auth),
        ("chat, model of another tier", "POST", "/v1/chat/completions", chat("ans-premium"), auth),
        ("chat, unknown model", "POST", "/v1/chat/completions", chat("no-such-model"), auth),
        ("chat, no model", "POST", "/v1/chat/completions", b'{"messages": []}', auth),
        ("chat, invalid JSON", "POST", "/v1/chat/completions", b'{"model": ', auth),
        ("chat, empty body", "POST", "/v1/chat/completions", b"", auth),
        ("chat, JSON array", "POST", "/v1/chat/completions", b"[1, 2]", auth),
        ("chat, not UTF-8", "POST", "/v1/chat/completions", b'{"model": "\xff"}', auth),
        ("chat, NaN", "POST", "/v1/chat/completions",
         b'{"model": "ans-chat", "temperature": NaN, "messages": [{"role": "user", "content": "x"}]}', auth),
        ("chat, lone surrogate", "POST", "/v1/chat/completions",
         b'{"model": "ans-chat", "messages": [{"role": "user", "content": "\\ud800"}]}', auth),
        ("chat, integer past 64 bits", "POST", "/v1/chat/completions", chat("ans-chat", max_tokens=2**70), auth),
        ("chat, nested 3000 deep", "POST", "/v1/chat/completions", nested, auth),
        ("chat, duplicate member", "POST", "/v1/chat/completions",
         b'{"model": "no-such", "model": "ans-chat", "messages": [{"role": "user", "content": "x"}]}', auth),
        ("chat, over the size limit", "POST", "/v1/chat/completions",
         chat("ans-chat", user="x" * MAX_REQUEST_BYTES), auth),
        ("chat, no key", "POST", "/v1/chat/completions", chat("ans-chat"), {"Content-Type": "application/json"}),
        ("chat, unknown key", "POST", "/v1/chat/completions", chat("ans-chat"),
         {**auth, "Authorization": "Bearer sk-nosuchkey0000000000000000"}),
        ("chat, malformed Authorization", "POST", "/v1/chat/completions", chat("ans-chat"),
         {**auth, "Authorization": "Basic abc"}),
        ("chat, GET", "GET", "/v1/chat/completions", b"", auth),
        ("chat, CORS preflight", "OPTIONS", "/v1/chat/completions", b"",
         {"Origin": "https://example.com", "Access-Control-Request-Method": "POST",
          "Access-Control-Request-Headers": "authorization, content-type"}),
        ("chat, with Origin", "POST", "/v1/chat/completions", chat("ans-chat"), {**auth, "Origin": "https://example.com"}),
        ("unknown /v1 path", "POST", "/v1/nope", chat("ans-chat"), auth),
        ("models", "GET", "/v1/models", b"", {}),
        ("key statistics", "GET", "/v1/statistic/key", b"", auth),
        ("health", "GET", "/health", b"", {}),
        ("facts", "GET", "/utils/facts", b"", {}),
    ]


def send(port: int, method: str, path: str, body: bytes, headers: dict) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body or None, headers=headers)
        response = connection.getresponse()
        content = response.read()
        return {"status": response.status,
                "headers": sorted((name.lower(), value) for name, value in response.getheaders()
                                  if name.lower() not in VOLATILE_HEADERS),
                "body": content}
    finally:
        connection.close()


# What differs from one run to the next in a body: (pattern, replacement).
VOLATILE_BODY = [
    (r'"created":\s*\d+', '"created": 0'),  # the streaming fake's chunks carry the time
    (r"chatcmpl-[0-9a-f]{24}", "chatcmpl-<id>"),  # the local model's completion ids
    (r"[0-9a-f]{32}", "<id>"),  # request ids
    (r'"prefix":"sk-[^"]*"', '"prefix":"<prefix>"'),  # the key's display prefix
    (r'"(generatedAt|time)":"[^"]*"', r'"\1":"<time>"'),
    (r'"latency_ms":[0-9.]+', '"latency_ms":<ms>'),  # /health's measured latencies
    (r'"facts":\[.*\]', '"facts":[<random facts>]'),
]


def normalized(answer: dict, secrets: list[str]) -> str:
    raw = answer["body"].decode("utf-8", "replace")
    text = raw
    for pattern, replacement in VOLATILE_BODY:
        text = re.sub(pattern, replacement, text)
    for secret in secrets:
        text = text.replace(secret, "<key>")
    headers = "\n".join(f"  {name}: {'<varies with the body>' if name == 'content-length' and text != raw else value}"
                        for name, value in answer["headers"])
    return f"{answer['status']}\n{headers}\n  body: {text}"


# The rows compared: (label, table, columns). A column that some source's schema lacks (an older
# tree's) is compared for none of them, and the report names it.
ROWS = [
    ("ledger", "keys_ledgerentry", ["kind", "amount", "balance_after", "status", "actor", "operation", "model",
                                    "provider", "deployment_id", "input_tokens", "output_tokens",
                                    "idempotency_key", "charge_id IS NOT NULL"]),
    ("usage", "models_catalog_usageevent", ["operation", "status", "success", "input_tokens", "output_tokens",
                                            "cached_tokens", "credits_charged", "provider", "deployment_id"]),
    ("key", "keys_apikey", ["credits", "in_flight"]),
]
BOOLEANS = {"success", "charge_id IS NOT NULL"}  # SQLite keeps them as 0/1


def rows(gateway: harness.Gateway, postgres: harness.PrivatePostgres | None, database: str) -> dict:
    """{label: (columns, rows)} with the columns of ROWS this source's schema has."""
    def fetch(sql: str) -> list[list[str]]:
        if postgres is not None:
            return postgres.query(sql, database=database)
        with sqlite3.connect(gateway.dir / "data" / "gateway.sqlite3") as connection:
            return [["t" if value is True else "f" if value is False else "" if value is None else str(value)
                     for value in row] for row in connection.execute(sql)]

    out = {}
    for label, table, wanted in ROWS:
        if postgres is not None:
            present = {row[0] for row in fetch(f"SELECT column_name FROM information_schema.columns "
                                               f"WHERE table_name = '{table}'")}
        else:
            present = {row[1] for row in fetch(f"PRAGMA table_info({table})")}
        columns = [column for column in wanted if column.split()[0] in present]
        found = fetch(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")
        out[label] = (columns, [[{"1": "t", "0": "f"}.get(value, value) if column in BOOLEANS else value
                                 for column, value in zip(columns, row)] for row in found])
    return out


def rows_text(found: dict, shared: dict[str, list[str]]) -> str:
    """The rows of one source as text, with only the columns every source has."""
    out = []
    for label, _, _ in ROWS:
        columns, values = found[label]
        keep = [columns.index(column) for column in shared[label]]
        out += [f"{label}: {' | '.join(row[index] for index in keep)}" for row in values]
    return "\n".join(out)


def record(backend: str, number: int, source: Path, workdir: Path, postgres, redis) -> dict[str, str]:
    database = f"gw_bench_answers_{number}"
    gateway = harness.Gateway(backend, workdir / f"source{number}", port=PORT + number, source=source,
                              # One worker: each worker's cached key row reports its own X-Remaining-Credits
                              # on a refusal before the charge, so two workers would answer by turns.
                              extra_env={"MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES), "WEB_CONCURRENCY": "1"},
                              database_url=postgres.url(database) if postgres else None,
                              redis_url=redis.url(number % 16) if redis else None)
    if backend == "postgres+redis":
        harness._reset_postgres(gateway.database_url)
        harness._reset_redis(gateway.redis_url)
    gateway.manage("migrate", "--noinput")
    gateway.manage("seed_models", str(CATALOG))
    key = gateway.manage("issue_key", "--tier", "free", "--credits", "1000", "--name", "answers",
                         capture=True).strip().splitlines()[-1]
    gateway.start()
    answers = {}
    try:
        for name, method, path, body, headers in requests_to_send(key):
            answers[name] = normalized(send(gateway.port, method, path, body, headers), [key])
    finally:
        gateway.stop()  # and reconcile
    answers["reconcile"] = gateway.reconciled
    answers["rows"] = rows(gateway, postgres, database)
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="postgres+redis", choices=["postgres+redis", "sqlite"])
    parser.add_argument("--source", nargs="+", required=True, help="copies of the project (`.` is the working tree)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="also print every answer of the first source")
    args = parser.parse_args()
    harness.stop_on_sigterm()
    backend = "embedded" if args.backend == "sqlite" else args.backend
    sources = [Path(source).resolve() for source in args.source]
    workdir = harness.make_workdir("answers")
    nginx = harness.start_nginx(workdir)
    stream = harness.start_stream_upstream(workdir, chunks=3, interval=0)
    postgres = redis = None
    recorded = []
    try:
        if backend == "postgres+redis":
            postgres = harness.PrivatePostgres(workdir, max_connections=200)
            postgres.start()
            redis = harness.PrivateRedis(workdir)
        for number, source in enumerate(sources):
            recorded.append(record(backend, number, source, workdir, postgres, redis))
    finally:
        for server in (redis, postgres, stream, nginx):
            if server is not None:
                server.stop()
        harness.remove_workdir(workdir, keep=args.keep)
    shared = {label: [column for column in wanted if all(column in answers["rows"][label][0] for answers in recorded)]
              for label, _, wanted in ROWS}
    for answers in recorded:
        answers["rows"] = rows_text(answers["rows"], shared)
    first = recorded[0]
    print(f"\nanswers_diff.py, {args.backend}: {len(first)} answers and records per source; "
          f"reference {sources[0]}")
    left_out = [f"{table}.{column}" for label, table, wanted in ROWS
                for column in wanted if column not in shared[label]]
    if left_out:
        print(f"Not in every source's schema, so compared for none: {', '.join(left_out)}")
    if args.verbose:
        for name, answer in first.items():
            print(f"\n=== {name}\n{answer}")
    different = 0
    for source, answers in zip(sources[1:], recorded[1:]):
        differences = 0
        for name, expected in first.items():
            got = answers.get(name, "(missing)")
            if got != expected:
                differences += 1
                print(f"\n--- {name}: {sources[0].name} vs {source.name}")
                print("\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(), lineterm="", n=1)))
        print(f"\n{source}: {'identical' if differences == 0 else f'{differences} difference(s)'}")
        different += differences > 0
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
