"""GET /metrics after known requests: exact counts, no secret, and the sums of several gunicorn workers."""
import os
import signal

import pytest
import requests
from django.db.models import Sum
from prometheus_client.parser import text_string_to_metric_families

from gateway import metering
from utils_app.errors import UpstreamRejected
from utils_app.errors import failure_kind
from models_catalog.models import AiModel, UsageEvent
from tests.gateway.conftest import (
    DROP,
    Gate,
    UPSTREAM_SECRET,
    chunk,
    gunicorn,
    post,
    usage_chunk,
    wait_for,
)
from utils_app import metrics
from utils_app.errors import UpstreamError, UpstreamRateLimited, UpstreamTimeout

TOKEN = "metrics-token-for-tests-0123456789"
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(autouse=True)
def fresh_metrics(settings, monkeypatch):
    """Counts start at zero in each test (the test process keeps them in memory, not in mmapped files)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOW = ()
    metrics.reset()


def parse(text: str) -> dict:
    """{(sample name, sorted labels): value} of an exposition."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(client) -> tuple[dict, str]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    return parse(text), text


def value(found: dict, name: str, **labels) -> float:
    """A sample's value; a counter never incremented has no sample, which reads as 0."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def chat(client, secret, model="local-chat", **extra):
    return post(client, CHAT, {"model": model, "messages": HELLO, **extra}, secret)


def tokens_in_usage(model_id: str) -> tuple[int, int]:
    totals = UsageEvent.objects.filter(model__model_id=model_id, success=True).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"))
    return totals["i"], totals["o"]


@pytest.mark.django_db
def test_a_known_sequence_of_requests_gives_exact_counts(client, fake_models, upstream, free_key, broke_key,
                                                         make_key, clock):
    key, secret = free_key
    limited, limited_secret = make_key(credits=10, rpm=1)
    assert chat(client, secret).status_code == 200
    streamed = chat(client, secret, stream=True)
    assert b"[DONE]" in b"".join(streamed.streaming_content)
    assert chat(client, broke_key[1]).status_code == 402
    assert chat(client, limited_secret).status_code == 200
    assert chat(client, limited_secret).status_code == 429
    upstream.fail_all(500)
    assert chat(client, secret, model="fake-chat").status_code == 502

    found, text = scrape(client)
    requests_total = "gateway_requests_total"
    assert value(found, requests_total, operation="chat-completions", model="local-chat", status="200") == 3
    assert value(found, requests_total, operation="chat-completions", model="local-chat", status="402") == 1
    # Refused by rpm before the body was read: no model was resolved.
    assert value(found, requests_total, operation="chat-completions", model="", status="429") == 1
    assert value(found, requests_total, operation="chat-completions", model="fake-chat", status="502") == 1
    assert value(found, "gateway_limit_rejections_total", param="rpm") == 1
    assert value(found, "gateway_limit_rejections_total", param="rph") == 0
    assert value(found, "gateway_credits_charged_total", model="local-chat") == 3
    assert value(found, "gateway_credits_charged_total", model="fake-chat") == 0
    assert value(found, "gateway_credits_refunded_total", model="fake-chat") == 1
    assert value(found, "gateway_upstream_errors_total", provider="fake", kind="unavailable") == 1
    assert value(found, "gateway_upstream_latency_seconds_count", provider="local") == 3
    assert value(found, "gateway_upstream_latency_seconds_count", provider="fake") == 1
    assert value(found, "gateway_added_latency_seconds_count", operation="chat-completions") == 6
    assert value(found, "gateway_open_streams") == 0
    assert value(found, "gateway_ledger_pending_charges") == 0
    assert value(found, "gateway_ledger_oldest_pending_seconds") == 0
    # The token counters add up to the usage records of the same requests.
    tokens_in, tokens_out = tokens_in_usage("local-chat")
    assert tokens_in > 0 and tokens_out > 0
    assert value(found, "gateway_tokens_total", model="local-chat", direction="in") == tokens_in
    assert value(found, "gateway_tokens_total", model="local-chat", direction="out") == tokens_out
    # Nothing that names a key or a request is ever a label.
    for secret_text in (secret, limited_secret, broke_key[1], UPSTREAM_SECRET, key.prefix, limited.prefix):
        assert secret_text not in text
    assert "request_id" not in text


@pytest.mark.django_db
def test_a_scrape_shows_a_stream_open_until_it_ends(client, fake_models, upstream, free_key):
    _, secret = free_key
    gate = Gate()
    upstream.sse("/chat/completions", [chunk("Hel"), gate, chunk("lo"), usage_chunk(), "[DONE]"])
    response = chat(client, secret, model="fake-chat", stream=True)
    events = iter(response.streaming_content)
    assert next(events).startswith(b"data: ")
    found, _ = scrape(client)
    assert value(found, "gateway_open_streams") == 1
    assert value(found, "gateway_ledger_pending_charges") == 1
    # Counted when it ends, not when its headers went out.
    assert value(found, "gateway_requests_total", operation="chat-completions", model="fake-chat", status="200") == 0
    gate.open()
    assert b"".join(events).endswith(b"data: [DONE]\n\n")
    found, _ = scrape(client)
    assert value(found, "gateway_open_streams") == 0
    assert value(found, "gateway_requests_total", operation="chat-completions", model="fake-chat", status="200") == 1
    assert value(found, "gateway_tokens_total", model="fake-chat", direction="in") == 9
    assert value(found, "gateway_tokens_total", model="fake-chat", direction="out") == 3


@pytest.mark.django_db
def test_a_stream_that_fails_midway_counts_as_its_error_and_an_upstream_error(client, fake_models, upstream,
                                                                              free_key):
    _, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hel"), DROP])
    response = chat(client, secret, model="fake-chat", stream=True)
    body = b"".join(response.streaming_content)
    assert response.status_code == 200 and b'"upstream_unavailable"' in body
    found, _ = scrape(client)
    assert value(found, "gateway_requests_total", operation="chat-completions", model="fake-chat", status="502") == 1
    assert value(found, "gateway_requests_total", operation="chat-completions", model="fake-chat", status="200") == 0
    assert value(found, "gateway_upstream_errors_total", provider="fake", kind="unavailable") == 1
    # "Hel" reached the client: charged, not refunded (CONTRACT section 5).
    assert value(found, "gateway_credits_refunded_total", model="fake-chat") == 0
    assert value(found, "gateway_credits_charged_total", model="fake-chat") == 1
    assert value(found, "gateway_open_streams") == 0


@pytest.mark.django_db
def test_a_key_at_its_max_concurrent_is_counted_as_a_max_concurrent_rejection(client, seeded, make_key):
    key, secret = make_key(credits=10, max_concurrent=1)
    metering.charge(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat", amount=1,
                    request_id="held")  # one request in flight
    assert chat(client, secret).status_code == 429
    found, _ = scrape(client)
    assert value(found, "gateway_limit_rejections_total", param="maxConcurrent") == 1
    assert value(found, "gateway_ledger_pending_charges") == 1
    assert value(found, "gateway_requests_total", operation="chat-completions", model="local-chat", status="429") == 1


@pytest.mark.django_db
def test_the_database_pool_is_reported_on_postgresql_only(client, seeded, vendor):
    found, _ = scrape(client)
    pool = {name for name, _ in found if name.startswith("gateway_db_pool_")}
    if vendor == "postgresql":
        assert pool == {"gateway_db_pool_connections_open", "gateway_db_pool_connections_in_use",
                        "gateway_db_pool_requests_waiting", "gateway_db_pool_max_size"}
        assert 1 <= value(found, "gateway_db_pool_connections_open") <= value(found, "gateway_db_pool_max_size")
        assert value(found, "gateway_db_pool_max_size") >= 1
        assert value(found, "gateway_db_pool_requests_waiting") == 0
    else:
        assert pool == set()


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_every_worker_of_gunicorn_adds_to_the_same_counts_and_a_dead_ones_stream_closes(
        transactional_db, fake_models, upstream, make_key, tmp_path):
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    headers = {"Authorization": f"Bearer {secret}"}
    gate = Gate(timeout=60)
    upstream.sse("/chat/completions", [chunk("held "), gate, "[DONE]"])
    earlier_run = tmp_path / "server" / "prometheus" / "counter_1.db"
    earlier_run.parent.mkdir(parents=True)
    earlier_run.write_bytes(b"counts of a server that ran before")
    with gunicorn(tmp_path / "server", workers=2, env={"METRICS_TOKEN": TOKEN}) as base:
        assert not earlier_run.exists()  # emptied when the server started
        def scraped() -> dict:
            response = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            assert response.status_code == 200
            return parse(response.text)

        for _ in range(10):  # a new connection each: the two workers share them
            response = requests.post(f"{base}{CHAT}", json={"model": "local-chat", "messages": HELLO},
                                     headers={**headers, "Connection": "close"}, timeout=10)
            assert response.status_code == 200
        held = requests.post(f"{base}{CHAT}", json={"model": "fake-chat", "messages": HELLO, "stream": True},
                             headers=headers, stream=True, timeout=30)
        assert held.raw.read1(65536).startswith(b"data: ")
        # Each worker writes its counts within a second (utils_app.metrics.flush); then whichever
        # worker answers a scrape reports the whole instance.
        assert wait_for(lambda: value(scraped(), "gateway_requests_total", operation="chat-completions",
                                      model="local-chat", status="200") == 10, timeout=10)
        for _ in range(4):
            found = scraped()
            assert value(found, "gateway_requests_total", operation="chat-completions", model="local-chat",
                         status="200") == 10
            assert value(found, "gateway_open_streams") == 1

        dead = set(base.worker_pids())
        for worker in dead:
            os.kill(worker, signal.SIGKILL)
        held.close()
        assert wait_for(lambda: len(set(base.worker_pids()) - dead) == 2, timeout=30)
        # The dead workers' counts stay in the sums; their open stream is gone with them.
        assert wait_for(lambda: value(scraped(), "gateway_open_streams") == 0, timeout=30)
        assert value(scraped(), "gateway_requests_total", operation="chat-completions", model="local-chat",
                     status="200") == 10
    gate.open()


@pytest.mark.parametrize("error, kind", [
    (UpstreamRateLimited("slow down", code="rate_limit_exceeded"), "rate_limited"),
    (UpstreamTimeout("too slow"), "timeout"),
    (UpstreamRejected("bad request", status=400, code="invalid_value"), "rejected"),
    (UpstreamError("reset"), "unavailable"),
    (ValueError("a bug"), "internal"),
])
def test_each_upstream_failure_is_counted_under_its_fixed_kind(error, kind):
    assert failure_kind(error) == kind
