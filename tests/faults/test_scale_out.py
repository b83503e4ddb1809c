"""Several instances on one PostgreSQL left at its defaults, and workers that start while it refuses them.

PostgreSQL accepts 100 connections by default (3 of them for superusers only). The gateway's
pools must leave room for a second instance, management commands and an operator's psql; and a
worker whose pool could not open because the server was full or down must recover by itself once
the server accepts connections again, answering 503s that say why meanwhile.
"""
import os
import re
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path

import psycopg
import pytest
import requests

from tests.faults.conftest import ROOT, Stack, free_port

pytestmark = [pytest.mark.faults, pytest.mark.postgres, pytest.mark.redis]

HELLO = [{"role": "user", "content": "Hello"}]
# Neither an instance's total nor a pool size: each worker takes the default pool.
DEFAULT_POOLS = {"DATABASE_MAX_CONNECTIONS": "", "DATABASE_POOL_SIZE": ""}


def chat(base: str, secret: str) -> requests.Response:
    return requests.post(f"{base}/v1/chat/completions", json={"model": "local-chat", "messages": HELLO},
                         headers={"Authorization": f"Bearer {secret}"}, timeout=15)


def issue_key(stack: Stack, *, credits: int, rpm: int) -> str:
    """A key issued by `manage.py issue_key`, as an operator would, while the gateway serves."""
    result = stack.manage("issue_key", "--tier", "free", "--credits", str(credits), "--rpm", str(rpm),
                          "--rph", "10000", "--max-concurrent", "1000", "--name", "scale-out", check=False)
    assert result.returncode == 0, f"issue_key failed: {result.stdout}{result.stderr}"
    return result.stdout.strip().splitlines()[-1]


def key_pk(stack: Stack, secret: str) -> int:
    with stack.postgres.connect() as connection:
        return connection.execute("SELECT id FROM keys_apikey WHERE digest = %s",
                                  [sha256(secret.encode()).hexdigest()]).fetchone()[0]


def key_clear_of_its_minute_edge(stack: Stack, margin: float = 8.0, **fields) -> str:
    """issue_key(**fields) until the key's minute window (utils_app.windows shifts it by a hash of the
    key's id) has ``margin`` seconds left on the real clock the served instances read, so its rpm is
    counted in one window; nothing waits for the minute to turn."""
    from utils_app.windows import seconds_left

    for _ in range(20):
        secret = issue_key(stack, **fields)
        if seconds_left(f"key:{key_pk(stack, secret)}", 60) >= margin:
            return secret
    raise AssertionError(f"no key of 20 had {margin} s left in its minute")


def backends(stack: Stack) -> int:
    """Connections the server holds right now, this query's own included."""
    with stack.postgres.connect("postgres") as connection:
        return connection.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                                  ).fetchone()[0]


@contextmanager
def served(stack: Stack, name: str, *, database_up: bool = True):
    """The gateway under gunicorn (2 workers, default pools) on the stack, on a port of its own.

    Returned once /health answers 200, or with ``database_up=False`` once it answers at all: with
    the database refusing, that answer is 503.
    """
    folder = stack.data_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()  # at random, far from other test runs' servers (tests.gateway.conftest takes the lowest)
    env = {**os.environ, **stack.gateway_env(**DEFAULT_POOLS), "GATEWAY_DATA_DIR": str(folder),
           "BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2", "ACCESS_LOG": os.devnull, "LOG_LEVEL": "WARNING"}
    log = folder / "gunicorn.log"
    with open(log, "wb") as output:
        process = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c",
                                    "python:gateway.gunicorn_conf", "gateway.wsgi"],
                                   cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"gunicorn exited: {log.read_text()[-2000:]}"
            try:
                if requests.get(f"{base}/health", timeout=10).status_code == 200 or not database_up:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"gunicorn did not answer within 60 s: {log.read_text()[-2000:]}"
            time.sleep(0.2)
        yield base, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_two_instances_of_two_workers_share_a_default_postgresql_and_keep_one_key_exact(stack):
    with stack.postgres.connect("postgres") as connection:
        assert connection.execute("SHOW max_connections").fetchone() == ("100",)  # PostgreSQL's default
    with served(stack, "a") as (first, _), served(stack, "b") as (second, _):
        both = (first, second)
        held = backends(stack)
        # An operator issues keys while both serve (each command a connection of its own).
        paying = issue_key(stack, credits=100, rpm=1000)

        # 160 requests at once, alternating between the instances, on a key with 100 credits.
        with ThreadPoolExecutor(32) as pool:
            issued_meanwhile = pool.submit(issue_key, stack, credits=5, rpm=10)
            paid = list(pool.map(lambda turn: chat(both[turn % 2], paying), range(160)))
            also_issued = issued_meanwhile.result()
        limited = key_clear_of_its_minute_edge(stack, credits=1000, rpm=30)
        with ThreadPoolExecutor(16) as pool:
            counted = list(pool.map(lambda turn: chat(both[turn % 2], limited), range(60)))
        # And an operator's psql still gets in.
        with stack.postgres.connect() as operator:
            assert operator.execute("SELECT count(*) FROM keys_apikey").fetchone()[0] >= 3

    assert Counter(response.status_code for response in paid) == {200: 100, 402: 60}
    assert {response.json()["error"]["code"] for response in paid if response.status_code == 402} == {
        "insufficient_credits"}
    assert Counter(response.status_code for response in counted) == {200: 30, 429: 30}
    assert {response.json()["error"]["param"] for response in counted if response.status_code == 429} == {"rpm"}
    assert (stack.credits(paying), stack.credits(limited), stack.credits(also_issued)) == (0, 970, 5)
    # Two instances of two workers with their default pools, and the tests' own connection.
    assert held <= 2 * 2 * 8 + 1
    code, summary = stack.reconcile()
    assert code == 0, summary


# ---------------------------------------------------------------- a worker that starts while it is refused

@contextmanager
def server_full(stack: Stack):
    """Every connection the server accepts, held until the block ends (superusers may take the reserved ones too)."""
    held = []
    try:
        while True:
            try:
                held.append(stack.postgres.connect("postgres"))
            except psycopg.OperationalError as refused:
                assert "too many clients" in str(refused)
                break
            assert len(held) <= 200, "the server accepts more connections than it says"
        yield held
    finally:
        for connection in held:
            connection.close()


def refusals_then_recovery(base: str, secret: str, *, refusing: float, free) -> tuple[list, float, list]:
    """Requests while the server refuses (for ``refusing`` seconds), then ``free()``; returns the refused
    answers, how long after ``free()`` the first request succeeded, and 20 answers after that."""
    refused = []
    until = time.monotonic() + refusing
    while time.monotonic() < until:
        refused.append(chat(base, secret))
    freed = time.monotonic()
    free()
    while True:
        response = chat(base, secret)
        if response.status_code == 200:
            recovered = time.monotonic() - freed
            break
        assert time.monotonic() - freed < 30, f"still {response.status_code} 30 s after the server accepted again"
    with ThreadPoolExecutor(4) as pool:
        after = list(pool.map(lambda _: chat(base, secret), range(20)))
    return refused, recovered, after


def assert_refused_with_cause(refused: list, log: Path, cause: str) -> None:
    assert refused
    assert {(response.status_code, response.json()["error"]["code"], response.headers.get("Retry-After"))
            for response in refused} == {(503, "service_unavailable", "2")}
    text = log.read_text(errors="replace")
    assert re.search(r"database pool: 0 of 8 connections open: " + re.escape(cause), text), text[-3000:]
    unavailable = re.findall(r"database unavailable: (.*)", text)
    assert unavailable and all(cause in line for line in unavailable), unavailable[:5]
    assert "OperationalError" not in text


def test_a_worker_started_while_the_server_is_full_serves_once_connections_are_freed(stack):
    secret = stack.secrets[0]
    before = stack.credits(secret)
    with server_full(stack) as held:
        with served(stack, "full", database_up=False) as (base, log):
            refused, recovered, after = refusals_then_recovery(
                base, secret, refusing=4, free=lambda: [connection.close() for connection in held])
    assert_refused_with_cause(refused, log, "too many clients")
    print(f"server full: {len(refused)} refused, served again {recovered:.2f} s after the connections were freed")
    assert recovered < 10
    assert [response.status_code for response in after] == [200] * 20
    assert stack.credits(secret) == before - 21  # only what was served
    code, summary = stack.reconcile()
    assert code == 0, summary


def test_a_worker_started_while_the_server_is_down_serves_once_it_is_up(stack):
    secret = stack.secrets[0]
    before = stack.credits(secret)
    stack.postgres.stop()
    with served(stack, "down", database_up=False) as (base, log):
        refused, recovered, after = refusals_then_recovery(base, secret, refusing=4, free=stack.postgres.start)
    assert_refused_with_cause(refused, log, "connection refused")
    print(f"server down: {len(refused)} refused, served again {recovered:.2f} s after it started")
    assert recovered < 10
    assert [response.status_code for response in after] == [200] * 20
    assert stack.credits(secret) == before - 21
    code, summary = stack.reconcile()
    assert code == 0, summary
