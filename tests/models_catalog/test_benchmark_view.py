from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from models_catalog import analytics
from models_catalog.models import AiModel, UsageEvent

pytestmark = pytest.mark.django_db


def record(key, model_id, *, latency, success=True, minutes_ago=1):
    model = AiModel.objects.get(model_id=model_id)
    UsageEvent.objects.create(key=key, model=model, operation=model.type, status=200 if success else 502,
                              success=success, input_tokens=1, output_tokens=1, latency_ms=latency,
                              created_at=timezone.now() - timedelta(minutes=minutes_ago))


def benchmark(client):
    response = client.get("/benchmark")
    assert response.status_code == 200, response.content
    return response.json()


def by_id(body):
    return {entry["id"]: entry for entry in body["models"]}


def test_the_benchmark_reports_latency_percentiles_and_success_rate_of_the_last_hour(client, seeded, free_key):
    key, _ = free_key
    for latency in range(10, 210, 10):                     # 20 completed requests: 10, 20, ... 200 ms
        record(key, "local-chat", latency=latency)
    record(key, "local-chat", latency=30000, success=False)  # failures count, their latency does not
    record(key, "local-chat", latency=5, minutes_ago=61)     # outside the hour
    record(key, "local-embedding", latency=7)

    body = benchmark(client)
    assert body["object"] == "benchmark" and body["windowSeconds"] == 3600
    models = by_id(body)
    assert models["local-chat"] == {
        "id": "local-chat", "type": "chat", "owned_by": "local",
        "requests": 21, "completedRequests": 20, "failedRequests": 1, "successRate": round(20 / 21, 4),
        # nearest rank: the 10th and the 19th of 20 sorted values
        "latencyMs": {"p50": 100, "p95": 190},
    }
    assert models["local-embedding"]["latencyMs"] == {"p50": 7, "p95": 7}
    assert models["local-embedding"]["successRate"] == 1.0


def test_a_model_without_requests_in_the_hour_has_no_figures(client, seeded, free_key):
    key, _ = free_key
    record(key, "gpt-4.1-mini", latency=100, minutes_ago=90)
    record(key, "gpt-4o-mini-tts", latency=100, success=False)
    models = by_id(benchmark(client))
    assert models["gpt-4.1-mini"] == {"id": "gpt-4.1-mini", "type": "chat", "owned_by": "openai", "requests": 0,
                                "completedRequests": 0, "failedRequests": 0, "successRate": None,
                                "latencyMs": {"p50": None, "p95": None}}
    speech = models["gpt-4o-mini-tts"]
    assert (speech["successRate"], speech["latencyMs"]) == (0.0, {"p50": None, "p95": None})
    assert set(models) == set(AiModel.objects.filter(enabled=True).values_list("model_id", flat=True))


def test_the_benchmark_is_reused_for_a_few_seconds_then_recomputed(client, seeded, free_key):
    key, _ = free_key
    record(key, "local-chat", latency=10)
    assert by_id(benchmark(client))["local-chat"]["requests"] == 1
    record(key, "local-chat", latency=10)
    assert by_id(benchmark(client))["local-chat"]["requests"] == 1
    cache.delete("analytics:benchmark")
    assert by_id(benchmark(client))["local-chat"]["requests"] == 2


def test_the_benchmark_needs_no_key_and_is_limited_per_address(client, seeded, settings):
    settings.PUBLIC_RATE_LIMIT = "2/m"
    statuses = [client.get("/benchmark").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_the_body_keeps_its_member_order_and_isoformat_times(client, seeded, free_key):
    key, _ = free_key
    record(key, "local-chat", latency=10)
    body = benchmark(client)
    assert list(body) == ["object", "windowSeconds", "from", "to", "models"]
    assert list(by_id(body)["local-chat"]) == ["id", "type", "owned_by", "requests", "completedRequests",
                                               "failedRequests", "successRate", "latencyMs"]
    assert body["from"].endswith("+00:00") and body["to"].endswith("+00:00")  # isoformat(), not DRF's "Z"


def test_figures_cached_by_another_version_are_computed_again(client, seeded, free_key):
    key, _ = free_key
    record(key, "local-chat", latency=10)
    cache.set(analytics.BENCHMARK_CACHE, {"object": "benchmark", "models": []}, 60)
    assert by_id(benchmark(client))["local-chat"]["requests"] == 1
