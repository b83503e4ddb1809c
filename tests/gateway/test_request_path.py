"""The request path under the production server: pooled connections, cached keys, database faults."""
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.db import OperationalError

from keys.ledger import mismatches
from keys.models import ApiKey
from tests.gateway.conftest import (
    LOCAL_BODIES,
    UPSTREAM_SECRET,
    assert_error,
    chat_completion,
    gunicorn,
    key_clear_of_window_edges,
    post,
    wait_for,
)

HELLO = [{"role": "user", "content": "Hello"}]


def chat(base: str, secret: str, model: str = "local-chat") -> requests.Response:
    return requests.post(f"{base}/v1/chat/completions", json={"model": model, "messages": HELLO},
                         headers={"Authorization": f"Bearer {secret}"}, timeout=30)


def pool_in_use(base: str) -> float:
    """The answering worker's pooled connections lent out right now, from its /metrics."""
    scrape = requests.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape-me"}, timeout=10).text
    [line] = [line for line in scrape.splitlines() if line.startswith("gateway_db_pool_connections_in_use ")]
    return float(line.split()[1])


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_slow_upstream_calls_hold_no_database_connection(transactional_db, fake_models, upstream, make_key, tmp_path,
                                                         monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    key, secret = make_key(credits=100, max_credits=100, rpm=1000)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrent=100)
    upstream.json("/chat/completions", chat_completion(), delay=2.0)  # within the provider's 3 s deadline
    # Twenty requests waiting on a slow upstream in one worker whose pool holds two connections:
    # while they wait, none of them may hold one (the scrape takes its own afterwards).
    with gunicorn(tmp_path / "server", env={"DATABASE_POOL_SIZE": "2", "DATABASE_POOL_TIMEOUT": "20",
                                            "METRICS_TOKEN": "scrape-me"}) as base:
        with ThreadPoolExecutor(20) as pool:
            waiting = [pool.submit(chat, base, secret, "fake-chat") for _ in range(20)]
            assert wait_for(lambda: len(upstream.posts()) == 20, timeout=15)  # all of them at the upstream
            in_use = pool_in_use(base)
            responses = [future.result() for future in waiting]
    assert in_use == 0
    assert [response.status_code for response in responses] == [200] * 20
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (80, 0)
    assert mismatches() == []


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_the_workers_of_an_instance_share_its_database_connections_and_open_them_at_start(transactional_db,
                                                                                           tmp_path):
    # Three workers and twelve connections: four each. gunicorn tells each worker the count it
    # runs with before the application (and its pool) is loaded, and each worker has opened its
    # four before it answers anything (a pool left to grow on demand would hold one or two here).
    with gunicorn(tmp_path / "server", workers=3, env={"DATABASE_MAX_CONNECTIONS": "12", "DATABASE_POOL_SIZE": "",
                                                       "METRICS_TOKEN": "scrape-me"}) as base:
        scrapes = [requests.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape-me",
                                                             "Connection": "close"}, timeout=10).text
                   for _ in range(6)]
    for scrape in scrapes:  # whichever worker answered
        gauges = dict(line.split() for line in scrape.splitlines() if line.startswith("gateway_db_pool_"))
        assert float(gauges["gateway_db_pool_max_size"]) == 4
        assert float(gauges["gateway_db_pool_connections_open"]) == 4


@pytest.mark.postgres
@pytest.mark.served
def test_a_threaded_worker_opens_no_more_connections_than_its_threads_use(transactional_db, tmp_path):
    with gunicorn(tmp_path / "server", threads=3, env={"GUNICORN_WORKER_CLASS": "gthread", "DATABASE_POOL_SIZE": "",
                                                       "METRICS_TOKEN": "scrape-me"}) as base:
        scrape = requests.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape-me"}, timeout=10).text
    gauges = dict(line.split() for line in scrape.splitlines() if line.startswith("gateway_db_pool_"))
    # Three request threads and the sweeper's, of the sixteen the instance may hold.
    assert float(gauges["gateway_db_pool_max_size"]) == 4
    assert float(gauges["gateway_db_pool_connections_open"]) == 4


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_a_burst_of_requests_reuses_the_upstream_connections_of_the_last_one(transactional_db, fake_models, upstream,
                                                                             make_key, tmp_path, monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    key, secret = make_key(credits=200, max_credits=200, rpm=1000)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrent=100)
    upstream.json("/chat/completions", chat_completion(), delay=2.0)  # each burst's 80 wait at once
    # One gevent worker serving up to 200 connections keeps up to 200 to each upstream: the
    # second burst of 80 finds the first burst's 80 waiting. A pool smaller than the burst
    # would open a new connection for every request past it, each time, and throw it away.
    with gunicorn(tmp_path / "server", env={"GUNICORN_WORKER_CONNECTIONS": "200"}) as base:
        bursts = []
        for _ in range(2):
            with ThreadPoolExecutor(80) as pool:
                bursts.append([pool.submit(chat, base, secret, "fake-chat") for _ in range(80)])
    assert [future.result().status_code for burst in bursts for future in burst] == [200] * 160
    first, second = ({call.peer_port for call in calls} for calls in (upstream.posts()[:80], upstream.posts()[80:]))
    assert len(first) == 80
    assert second == first
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (40, 0)
    assert mismatches() == []


def admin_call(base: str, admin_secret: str, operation: str, body: dict) -> requests.Response:
    return requests.post(f"{base}/admin/{operation}", json=body, headers={"Authorization": f"Bearer {admin_secret}"},
                         timeout=10)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_key_changes_reach_another_instance_within_the_cache_seconds(transactional_db, seeded, make_key,
                                                                       admin_key, tmp_path):
    revoked, revoked_secret = make_key(credits=100, max_credits=100, rpm=1000)
    _, admin_secret = admin_key
    with gunicorn(tmp_path / "a") as first, gunicorn(tmp_path / "b") as second:
        # The served instances count on the real clock: the limited key's two requests must share one
        # minute window.
        limited, limited_secret = key_clear_of_window_edges(make_key, credits=100, max_credits=100, rpm=1000)
        # The second instance now has both keys cached; the limited key's row was read after the revoked
        # key's request had shown it the shared keys version (keys.auth_cache).
        assert chat(second, revoked_secret).status_code == chat(second, limited_secret).status_code == 200

        assert admin_call(first, admin_secret, "revoke-key", {"key": revoked_secret}).status_code == 200
        # At once: the charge itself checks that the key is still active.
        assert chat(second, revoked_secret).status_code == 401

        assert admin_call(first, admin_secret, "update-key",
                          {"key": limited_secret, "update": {"rpm": 1}}).status_code == 200
        # The change moved the shared keys version: the second instance reads the row again at the key's
        # next request, without waiting for KEY_CACHE_SECONDS (keys.auth_cache).
        refused = chat(second, limited_secret)
        assert refused.status_code == 429 and refused.json()["error"]["param"] == "rpm"
    assert [ApiKey.objects.get(pk=key.pk).credits for key in (limited, revoked)] == [99, 99]
    assert mismatches() == []


def pool_timeout() -> OperationalError:
    from psycopg_pool import PoolTimeout

    error = OperationalError("couldn't get a connection after 3.00 sec")  # Django's, around psycopg's own
    error.__cause__ = PoolTimeout("couldn't get a connection after 3.00 sec")
    return error


@pytest.mark.parametrize(("error", "logged"), [
    (lambda: OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection '
                              'refused\n\tIs the server running on that host and accepting TCP/IP connections?'),
     "database unavailable: connection refused (no server listening)"),
    (lambda: OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
                              'sorry, too many clients already'),
     "database unavailable: too many clients (the server's max_connections is reached)"),
    (pool_timeout, "database unavailable: pool timeout after 3 s (every pooled connection busy)"),
], ids=["connection refused", "too many clients", "pool timeout"])
@pytest.mark.django_db
def test_a_database_outage_at_the_charge_is_a_503_with_retry_after_and_its_cause_in_the_log(
        client, seeded, free_key, monkeypatch, caplog, error, logged):
    from utils_app import db

    key, secret = free_key
    monkeypatch.setattr(db, "_last_connect_failure", None)  # no failed connect in this process, whatever ran before

    def unreachable(**kwargs):
        raise error()

    monkeypatch.setattr("gateway.metering.charge", unreachable)
    with caplog.at_level(logging.WARNING, logger="gateway.errors"):
        response = post(client, *LOCAL_BODIES["chat"], secret)
    error_body = assert_error(response, 503, "service_unavailable", "server_error")
    assert response["Retry-After"] == "2"
    assert "127.0.0.1" not in json.dumps(error_body)
    assert [record.getMessage() for record in caplog.records if record.name == "gateway.errors"] == [logged]
    assert ApiKey.objects.get(pk=key.pk).credits == 100
