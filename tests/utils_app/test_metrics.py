"""Who may read /metrics, what it answers everyone else, and what counting a request costs."""
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "scrape-token-0123456789abcdef"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def metrics_off(settings, monkeypatch):
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOW = ()
    settings.TRUSTED_PROXIES = ()


def networks(*items) -> tuple:
    return tuple(ipaddress.ip_network(item) for item in items)


def test_without_a_token_or_an_allow_list_there_is_no_metrics_endpoint(client):
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert response["X-Request-ID"]


def test_the_token_opens_it_and_anything_else_is_refused(client, settings):
    settings.METRICS_TOKEN = TOKEN
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": f"Basic {TOKEN}"},
                    {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}x"}):
        refused = client.get("/metrics", **headers)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "metrics_forbidden"
        assert TOKEN not in refused.content.decode()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert b"# TYPE gateway_requests_total counter" in response.content
    assert response["Cache-Control"] == "no-store"


def test_an_allowed_address_needs_no_token_and_another_one_is_refused(client, settings):
    settings.METRICS_ALLOW = networks("10.0.0.0/8", "192.0.2.7")
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.8").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_behind_a_trusted_proxy_the_real_client_address_is_checked(client, settings):
    settings.TRUSTED_PROXIES = networks("10.0.0.0/8")
    settings.METRICS_ALLOW = networks("10.0.0.0/8")
    # The proxy itself is allowed, but it forwards a request from outside: refused.
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    # A client that names an allowed address itself is not believed: the proxy appended the real one.
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.2",
                      HTTP_X_FORWARDED_FOR="10.9.9.9, 203.0.113.9").status_code == 403
    settings.METRICS_ALLOW = networks("203.0.113.0/24")
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 200


def test_a_scraper_that_asks_for_openmetrics_gets_it_and_other_methods_are_refused(client, settings):
    settings.METRICS_TOKEN = TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
                          HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.endswith(b"# EOF\n")
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


COUNT_ONE_REQUEST = """
from utils_app import metrics
metrics.response_ready(operation="chat-completions", seconds=0.01, upstream_seconds=0.008)
metrics.upstream_called(provider="local", seconds=0.008)
metrics.settled(model="local-chat", credits=1, input_tokens=12, output_tokens=30)
metrics.request_answered(operation="chat-completions", model="local-chat", status=200)
"""


def test_in_multiprocess_mode_a_request_is_counted_in_the_shared_folder(tmp_path):
    # Its cost per request is in the served bench's figures (docs/performance.md), not asserted here. The counts
    # were tallied in memory; the process's exit wrote them to its files.
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    done = subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + COUNT_ONE_REQUEST], cwd=ROOT,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway.settings",
                               "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {"counter", "histogram"} <= {path.name.split("_")[0] for path in tmp_path.glob("*.db")}
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    assert registry.get_sample_value("gateway_requests_total", {"operation": "chat-completions",
                                                                "model": "local-chat", "status": "200"}) == 1
    assert registry.get_sample_value("gateway_tokens_total", {"model": "local-chat", "direction": "out"}) == 30
    assert registry.get_sample_value("gateway_added_latency_seconds_bucket",
                                     {"operation": "chat-completions", "le": "0.001"}) == 0
    assert registry.get_sample_value("gateway_added_latency_seconds_bucket",
                                     {"operation": "chat-completions", "le": "0.005"}) == 1


def _samples(metric) -> dict:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in metric.collect() for sample in family.samples if not sample.name.endswith("_created")}


def test_a_tallied_histogram_and_counter_equal_what_prometheus_client_counts_itself():
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from utils_app import metrics

    registry = CollectorRegistry()
    bounds = (0.001, 0.01, 0.1, 1.0)
    tallied = Histogram("tallied", "t", ["op"], buckets=bounds, registry=registry)
    direct = Histogram("direct", "d", ["op"], buckets=bounds, registry=registry)
    counted = Counter("counted", "c", ["op"], registry=registry)
    plain = Counter("plain", "p", ["op"], registry=registry)
    # On each bound, between them, below the first, above the last, zero, negative and not a number.
    values = [0.001, 0.0005, 0.01, 0.05, 0.1, 1.0, 1.5, 250.0, 0.0, -0.25, float("nan"), 0.01000001]
    for value in values:
        metrics._observe(tallied, value, "x")
        direct.labels("x").observe(value)
    for amount in (1, 3, 0, 12.5):
        metrics._count(counted, amount, "y")
        plain.labels("y").inc(amount)
    metrics.flush()

    def renamed(samples: dict, old: str, new: str) -> dict:
        return {(name.replace(old, new), labels): value for (name, labels), value in samples.items()}

    tallied_samples, direct_samples = renamed(_samples(tallied), "tallied", "x"), renamed(_samples(direct), "direct", "x")
    assert tallied_samples.keys() == direct_samples.keys()
    for name in tallied_samples:
        a, b = tallied_samples[name], direct_samples[name]
        assert (a != a and b != b) or a == b, name  # the sum is NaN on both sides
    assert renamed(_samples(counted), "counted", "x") == renamed(_samples(plain), "plain", "x")
    with pytest.raises(ValueError):
        metrics._count(counted, -1, "y")


def test_counts_reach_the_values_at_the_next_count_after_a_second_or_at_a_scrape(client, settings, monkeypatch):
    from utils_app import metrics

    metrics.flush()
    before = metrics.REQUESTS.labels("tally-test", "m", "200")._value.get()
    monkeypatch.setattr(metrics, "_flush_after", float("inf"))  # not due
    metrics.request_answered(operation="tally-test", model="m", status=200)
    metrics.request_answered(operation="tally-test", model="m", status=200)
    assert metrics.REQUESTS.labels("tally-test", "m", "200")._value.get() == before  # tallied, not written
    monkeypatch.setattr(metrics, "_flush_after", 0.0)  # due: the next count writes the tally
    metrics.request_answered(operation="tally-test", model="m", status=200)
    assert metrics.REQUESTS.labels("tally-test", "m", "200")._value.get() == before + 3
    assert metrics._flush_after > 0.0  # due again a second later

    monkeypatch.setattr(metrics, "_flush_after", float("inf"))
    metrics.request_answered(operation="tally-test", model="m", status=200)
    settings.METRICS_TOKEN = TOKEN
    scrape = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert (f'gateway_requests_total{{model="m",operation="tally-test",status="200"}} {before + 4}'
            in scrape)


def test_counts_made_by_threads_while_others_flush_are_all_written():
    import threading

    from prometheus_client import CollectorRegistry, Counter

    from utils_app import metrics

    counter = Counter("threaded", "t", ["op"], registry=CollectorRegistry())
    start = threading.Barrier(6)

    def count():
        start.wait()
        for _ in range(5000):
            metrics._count(counter, 1, "z")

    def flush():
        start.wait()
        for _ in range(500):
            metrics.flush()

    threads = [threading.Thread(target=count) for _ in range(4)] + [threading.Thread(target=flush) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metrics.flush()
    assert counter.labels("z")._value.get() == 20000
