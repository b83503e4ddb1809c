"""Upstream pools (CONTRACT section 7): choosing a deployment, what each upstream answer does to the
request and to the deployment, shared health, re-enabling, and money across attempts."""
import json
import logging
import random
import time
from collections import Counter

import pytest
from django.core.management import CommandError, call_command
from django.test.utils import CaptureQueriesContext
from django.db import connection

from gateway import deployment_health, probes, routing
from keys.models import ApiKey, LedgerEntry
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider, UsageEvent
from tests.gateway.conftest import (
    DROP,
    FakeUpstream,
    add_provider,
    assert_error,
    chat_completion,
    chunk,
    post,
)
from utils_app import shared

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]
SECRET_ENV = "GATEWAY_UPSTREAM_FAKE_KEY"


@pytest.fixture
def fakes(monkeypatch):
    """Factory of fake upstreams, each answering chat with its own name; all stopped at the end."""
    monkeypatch.setenv(SECRET_ENV, "sk-pool-secret-0123456789")
    started = []

    def make(name: str) -> FakeUpstream:
        server = FakeUpstream()
        server.start()
        server.json("/chat/completions", chat_completion(f"from {name}"))
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def pool(model_id: str, members: list, **model_fields) -> AiModel:
    """A chat model served by ``members``: (provider, {priority, weight, rpm, upstream_model}) pairs."""
    model = AiModel.objects.create(model_id=model_id, type="chat", owned_by="test", cost=1,
                                   tiers=["free"], **model_fields)
    for provider, fields in members:
        for secret_env in provider.secret_envs():
            Deployment.objects.create(model=model, provider=provider, secret_env=secret_env, **fields)
    catalog.invalidate()
    return model


def chat(client, secret, model="pooled", **body):
    return post(client, CHAT, {"model": model, "messages": HELLO, **body}, secret)


def answered_by(response) -> str:
    assert response.status_code == 200, response.content
    return response.json()["choices"][0]["message"]["content"].removeprefix("from ")


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


# ---------------------------------------------------------------- choosing (no network)

class _Provider:
    def secret_configured(self, variable):
        return True


class _Deployment:
    """Just what choose() reads of a deployment."""

    def __init__(self, pk, priority=1, weight=1, disabled=False):
        self.pk, self.priority, self.weight, self.disabled = pk, priority, weight, disabled
        self.provider, self.secret_env = _Provider(), "GATEWAY_UPSTREAM_FAKE_KEY"


class _Model:
    def __init__(self, members, routing="weighted"):
        self.pool, self.routing = members, routing


def picks(model, health=None, times=4000, seed=7, skip=()) -> Counter:
    rng = random.Random(seed)
    health = health or routing.Health()
    return Counter(routing.choose(model, health, skip=set(skip), rng=rng).pk for _ in range(times))


def test_weighted_routing_spreads_traffic_in_proportion_to_weight():
    counts = picks(_Model([_Deployment(1, weight=3), _Deployment(2, weight=1)]))
    assert 0.72 < counts[1] / 4000 < 0.78


def test_a_lower_priority_number_takes_all_the_traffic_while_it_is_healthy():
    counts = picks(_Model([_Deployment(1, priority=2, weight=100), _Deployment(2, priority=1, weight=1)]))
    assert counts == {2: 4000}


def test_a_weight_of_zero_is_only_a_last_resort_within_its_priority():
    model = _Model([_Deployment(1, weight=0), _Deployment(2, weight=1)])
    assert picks(model) == {2: 4000}
    assert picks(model, skip={2}) == {1: 4000}
    all_zero = picks(_Model([_Deployment(1, weight=0), _Deployment(2, weight=0)]))
    assert 0.45 < all_zero[1] / 4000 < 0.55


def test_disabled_and_tried_deployments_are_never_chosen():
    model = _Model([_Deployment(1, disabled=True), _Deployment(2), _Deployment(3)])
    assert routing.choose(model, routing.Health(), skip={2, 3}) is None
    assert set(picks(model, skip={3})) == {2}
    assert routing.choose(model, routing.Health(disabled={2, 3}), skip=set()) is None


def test_when_only_cooling_deployments_are_left_the_one_back_soonest_is_tried():
    now = time.time()
    model = _Model([_Deployment(1), _Deployment(2), _Deployment(3, priority=2)])
    health = routing.Health(cooling={1: now + 50, 2: now + 10, 3: now + 30})
    assert routing.choose(model, health, skip=set(), now=now).pk == 2
    # A cooldown that has ended is no cooldown: deployment 3's priority does not matter then.
    health = routing.Health(cooling={1: now + 50, 2: now - 1})
    assert picks(model, health) == {2: 4000}


def test_latency_routing_measures_first_then_takes_the_fastest_and_explores_now_and_then():
    model = _Model([_Deployment(1), _Deployment(2), _Deployment(3)], routing="latency")
    assert picks(model, routing.Health(latency={1: 100, 2: 40})) == {3: 4000}  # unmeasured first
    counts = picks(model, routing.Health(latency={1: 100, 2: 40, 3: 300}))
    assert counts.most_common(1)[0][0] == 2
    # One choice in ten explores, never the fastest: each of the two others gets one in twenty.
    assert 0.88 < counts[2] / 4000 < 0.92
    assert 0.035 < counts[1] / 4000 < 0.065 and 0.035 < counts[3] / 4000 < 0.065


def test_latency_routing_chooses_by_the_figures_successes_wrote_to_the_shared_cache():
    model = pool("pooled", [(add_provider("fast", "http://127.0.0.1:9/v1"), {}),
                            (add_provider("slow", "http://127.0.0.1:9/v1"), {})], routing="latency")
    fast, slow = model.deployments.order_by("provider__name")
    for _ in range(3):
        deployment_health.succeeded(fast, 0.004)
        deployment_health.succeeded(slow, 0.254)
    pooled = catalog.get_model("pooled")
    read = routing.HealthRead(pooled)
    # This process's waiting figures ride ahead of the reads, so the very same round trip reads them back.
    health = read.health(shared.run(read.ops))
    assert health.latency == {fast.pk: 4, slow.pk: 254}
    counts = picks(pooled, health)
    assert 0.88 < counts[fast.pk] / 4000 < 0.92 and counts[slow.pk] + counts[fast.pk] == 4000


def test_latency_routing_sends_most_requests_to_the_faster_deployment_once_both_are_measured(client, fakes,
                                                                                              free_key):
    fast, slow = fakes("fast"), fakes("slow")
    slow.json("/chat/completions", chat_completion("from slow"), delay=0.25)
    pool("pooled", [(add_provider("fast", fast.base_url), {}), (add_provider("slow", slow.base_url), {})],
         routing="latency")
    _, secret = free_key
    drawn = random.getstate()
    random.seed(12)  # the exploring draws: the same every run
    try:
        measuring = Counter(answered_by(chat(client, secret)) for _ in range(10))
        latency = routing.read_health(catalog.get_model("pooled")).latency
        served = Counter(answered_by(chat(client, secret)) for _ in range(30))
    finally:
        random.setstate(drawn)
    assert measuring["fast"] and measuring["slow"]
    assert sorted(latency.values())[1] >= 250  # both measured, the slow one as slow as it is
    assert served["fast"] >= 24, served  # at least four in five


# ---------------------------------------------------------------- served through the pool

def test_a_pool_spreads_requests_over_its_deployments_by_weight(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"weight": 3}), (add_provider("b", b.base_url), {"weight": 1})])
    key, secret = free_key
    served = Counter(answered_by(chat(client, secret)) for _ in range(60))
    assert served["a"] > served["b"] > 0
    assert credits_of(key) == 40


def test_every_secret_of_a_provider_is_a_deployment_of_its_own(client, fakes, free_key, monkeypatch):
    a = fakes("a")
    monkeypatch.setenv("GATEWAY_UPSTREAM_KEY_ONE", "sk-one-0123456789abcdef")
    monkeypatch.setenv("GATEWAY_UPSTREAM_KEY_TWO", "sk-two-0123456789abcdef")
    provider = Provider.objects.create(name="multi", base_url=a.base_url, timeout=3,
                                       api_key_envs=["GATEWAY_UPSTREAM_KEY_ONE", "GATEWAY_UPSTREAM_KEY_TWO"])
    model = pool("pooled", [(provider, {})])
    assert sorted(model.deployments.values_list("secret_env", flat=True)) == ["GATEWAY_UPSTREAM_KEY_ONE",
                                                                             "GATEWAY_UPSTREAM_KEY_TWO"]
    _, secret = free_key
    for _ in range(30):
        answered_by(chat(client, secret))
    sent = Counter(call.headers["Authorization"] for call in a.posts())
    assert set(sent) == {"Bearer sk-one-0123456789abcdef", "Bearer sk-two-0123456789abcdef"}


def test_each_deployment_gets_its_own_upstream_model_name(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"upstream_model": "gpt-a", "priority": 1}),
                    (add_provider("b", b.base_url), {"upstream_model": "gpt-b", "priority": 2})])
    a.fail_all(500)
    a.replies.clear()
    _, secret = free_key
    assert answered_by(chat(client, secret)) == "b"
    assert [call.body["model"] for call in a.posts() + b.posts()] == ["gpt-a", "gpt-b"]


@pytest.mark.parametrize("status", [500, 503, 404, 408])
def test_a_failing_deployment_is_replaced_before_the_client_sees_anything_and_charged_once(client, fakes, free_key,
                                                                                          status):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.json("/chat/completions", {"error": {"message": "boom"}}, status=status)
    key, secret = free_key
    assert answered_by(chat(client, secret)) == "b"
    assert credits_of(key) == 99
    charge = LedgerEntry.objects.get(kind="charge")
    b_deployment = Deployment.objects.get(provider__name="b")
    assert (charge.status, charge.provider, charge.deployment_id) == ("completed", "b", b_deployment.pk)
    event = UsageEvent.objects.get()
    assert (event.success, event.provider, event.deployment_id) == (True, "b", b_deployment.pk)


def test_a_refusal_of_the_request_itself_is_passed_on_and_not_retried(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.json("/chat/completions", {"error": {"message": "bad temperature", "code": "invalid_value",
                                           "param": "temperature"}}, status=400)
    key, secret = free_key
    error = assert_error(chat(client, secret), 400, "invalid_value")
    assert (error["message"], error["param"]) == ("bad temperature", "temperature")
    assert b.posts() == []
    assert credits_of(key) == 100
    # The request was at fault, not the deployment: no failure counted against it.
    assert deployment_health.states([Deployment.objects.get(provider__name="a")])[
        Deployment.objects.get(provider__name="a").pk].failures == 0


def test_allowed_fails_within_a_minute_cool_a_deployment_down_for_cooldown_seconds(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})],
         allowed_fails=2, cooldown_seconds=60)
    a.fail_all(500)
    a.replies.clear()
    _, secret = free_key
    for _ in range(2):
        assert answered_by(chat(client, secret)) == "b"
    assert len(a.posts()) == 2
    for _ in range(5):  # cooling: a is not asked at all
        assert answered_by(chat(client, secret)) == "b"
    assert len(a.posts()) == 2
    a_deployment = Deployment.objects.get(provider__name="a")
    state = deployment_health.states([a_deployment])[a_deployment.pk]
    assert state.state == "cooling" and 50 < state.cooldown_until - time.time() <= 60
    assert (state.requests, state.failures) == (2, 2)


def test_a_deployment_is_back_in_rotation_when_its_cooldown_ends(client, fakes, free_key, clock):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})],
         allowed_fails=1, cooldown_seconds=1)
    a.fail_all(500)
    a.replies.clear()
    _, secret = free_key
    assert answered_by(chat(client, secret)) == "b"
    a.fallback_reply = None
    a.json("/chat/completions", chat_completion("from a"))
    assert answered_by(chat(client, secret)) == "b"  # still cooling
    clock.advance(1.1)
    assert answered_by(chat(client, secret)) == "a"


def test_an_upstream_429_cools_the_deployment_at_once_for_its_retry_after(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.raw("/chat/completions", json.dumps({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}).encode(),
          content_type="application/json", status=429, headers={"Retry-After": "120"})
    _, secret = free_key
    response = chat(client, secret)
    assert answered_by(response) == "b"
    assert "Retry-After" not in response  # one deployment's headers never leak into another's answer
    answered_by(chat(client, secret))
    assert len(a.posts()) == 1
    a_deployment = Deployment.objects.get(provider__name="a")
    assert 110 < deployment_health.states([a_deployment])[a_deployment.pk].cooldown_until - time.time() <= 120


def test_a_retry_after_longer_than_five_minutes_cools_for_five(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.raw("/chat/completions", b"{}", content_type="application/json", status=429, headers={"Retry-After": "86400"})
    _, secret = free_key
    answered_by(chat(client, secret))
    a_deployment = Deployment.objects.get(provider__name="a")
    assert 290 < deployment_health.states([a_deployment])[a_deployment.pk].cooldown_until - time.time() <= 300


@pytest.mark.parametrize("status, body", [
    (401, {"error": {"message": "Incorrect API key provided"}}),
    (403, {"error": {"message": "forbidden"}}),
    (402, {"error": {"message": "payment required"}}),
    (429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                     "code": "insufficient_quota"}}),
])
def test_a_refused_secret_disables_every_deployment_using_it_and_the_request_moves_on(client, fakes, free_key,
                                                                                      caplog, status, body):
    a, b = fakes("a"), fakes("b")
    provider_a = add_provider("a", a.base_url)
    pool("pooled", [(provider_a, {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    other = pool("other", [(provider_a, {})])
    a.json("/chat/completions", body, status=status)
    key, secret = free_key
    with caplog.at_level(logging.ERROR, logger="gateway.routing"):
        assert answered_by(chat(client, secret)) == "b"
    disabled = Deployment.objects.filter(provider=provider_a)
    assert disabled.count() == 2 and all(d.disabled_at and str(status) in d.disabled_reason for d in disabled)
    assert "disabled" in caplog.text and "sk-pool-secret" not in caplog.text
    # Never tried again, by any model, until enabled.
    assert answered_by(chat(client, secret)) == "b"
    assert len(a.posts()) == 1
    assert_error(chat(client, secret, model=other.model_id), 502, "upstream_unavailable", "upstream_error")
    assert len(a.posts()) == 1
    assert credits_of(key) == 98


def test_a_model_whose_deployments_are_all_disabled_calls_nobody_and_refunds(client, fakes, free_key):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    model.deployments.update(disabled_at="2026-01-01T00:00:00Z", disabled_reason="revoked")
    catalog.invalidate()
    key, secret = free_key
    error = assert_error(chat(client, secret), 502, "upstream_unavailable", "upstream_error")
    assert "disabled" in error["message"]
    assert a.calls == []
    assert credits_of(key) == 100
    assert not UsageEvent.objects.exists()  # nothing was sent upstream


def test_at_most_max_upstream_attempts_are_made(client, fakes, free_key, settings):
    settings.MAX_UPSTREAM_ATTEMPTS = 3
    servers = [fakes(name) for name in "abcd"]
    for server in servers:
        server.fail_all(500)
        server.replies.clear()
    pool("pooled", [(add_provider(name, server.base_url), {"priority": index})
                    for index, (name, server) in enumerate(zip("abcd", servers), start=1)])
    key, secret = free_key
    assert_error(chat(client, secret), 502, "upstream_unavailable", "upstream_error")
    assert [len(server.posts()) for server in servers] == [1, 1, 1, 0]
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().provider == "c"  # the last one tried


def test_the_last_failure_decides_the_answer(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}),
                    (add_provider("b", b.base_url, timeout=0.5), {"priority": 2})])
    a.fail_all(500)
    a.replies.clear()
    b.json("/chat/completions", chat_completion(), delay=2)
    _, secret = free_key
    assert_error(chat(client, secret), 504, "upstream_timeout", "upstream_error")


def test_an_rpm_cap_holds_a_deployment_to_its_share_of_each_minute(client, fakes, make_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1, "rpm": 3}),
                    (add_provider("b", b.base_url), {"priority": 2})])
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    served = Counter(answered_by(chat(client, secret)) for _ in range(8))
    if len(a.posts()) < 3:  # the minute turned during the run: the cap started over
        pytest.skip("a minute boundary fell inside the run")
    assert served == {"a": 3, "b": 5}


def test_a_pool_whose_only_deployment_is_at_its_cap_answers_429_and_refunds(client, fakes, make_key):
    a = fakes("a")
    pool("pooled", [(add_provider("a", a.base_url), {"rpm": 1})])
    key, secret = make_key(credits=10, max_credits=10, rpm=1000)
    answered_by(chat(client, secret))
    response = chat(client, secret)
    if len(a.posts()) == 2:
        pytest.skip("a minute boundary fell inside the run")
    error = assert_error(response, 429, "rate_limit_exceeded", "rate_limit_error")
    assert int(response["Retry-After"]) <= 60
    assert error["param"] == "model"
    assert credits_of(key) == 9


def test_a_stream_that_fails_before_its_first_content_moves_to_the_next_deployment(client, fakes, free_key):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.sse("/chat/completions", [{**chunk(), "choices": [{"index": 0, "delta": {"role": "assistant"}}]}, DROP])
    b.sse("/chat/completions", [chunk("from b", finish_reason="stop"), "[DONE]"])
    key, secret = free_key
    response = chat(client, secret, stream=True)
    body = b"".join(response.streaming_content).decode()
    assert "from b" in body and "error" not in body
    assert credits_of(key) == 99


def test_a_stream_that_fails_after_its_commit_point_counts_against_its_deployment(client, fakes, free_key):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    a.sse("/chat/completions", [chunk("Half"), DROP])
    _, secret = free_key
    body = b"".join(chat(client, secret, stream=True).streaming_content).decode()
    assert "upstream_unavailable" in body
    deployment = model.deployments.get()
    assert deployment_health.states([deployment])[deployment.pk].failures == 1


def test_the_success_path_stays_at_two_statements_with_a_pool(client, fakes, free_key, vendor):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"weight": 1}), (add_provider("b", b.base_url), {"weight": 1})])
    _, secret = free_key
    answered_by(chat(client, secret))  # the key is cached
    with CaptureQueriesContext(connection) as captured:
        answered_by(chat(client, secret))
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == (2 if vendor == "postgresql" else 5)


def test_the_success_path_makes_one_shared_cache_round_trip(client, fakes, free_key, monkeypatch, settings):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {}), (add_provider("b", b.base_url), {})], routing="latency")
    _, secret = free_key
    answered_by(chat(client, secret))
    trips = []
    monkeypatch.setattr(shared, "run", _counting(shared.run, trips))
    if settings.SHARED_CACHE:  # Redis: the limits' script and whatever rides with it, in one pipeline
        backend = shared.shared_cache()  # the process's cache object, which the limits' round trip uses
        monkeypatch.setattr(backend, "run_script", _counting(backend.run_script, trips))
    else:
        monkeypatch.setattr(shared.memory, "run", _counting(shared.memory.run, trips))
    answered_by(chat(client, secret))
    assert len(trips) == 1  # the limits' round trip, which carried the health read and the last figures


def _counting(function, calls):
    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)
    return counted


def test_a_success_is_written_with_the_next_requests_round_trip(client, fakes, free_key):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    _, secret = free_key
    for _ in range(3):
        answered_by(chat(client, secret))
    deployment = model.deployments.get()
    state = deployment_health.states([deployment])[deployment.pk]
    assert (state.state, state.requests, state.failures) == ("healthy", 3, 0)
    assert state.p50_ms is not None and state.p50_ms < 1000


# ---------------------------------------------------------------- re-enabling

def test_a_probe_enables_a_disabled_deployment_that_answers_again(client, fakes, free_key):
    a = fakes("a")
    provider = add_provider("a", a.base_url)
    model = pool("pooled", [(provider, {})])
    other = pool("other", [(provider, {})])
    deployment = model.deployments.get()
    deployment_health.disable(deployment, reason="HTTP 401")
    assert Deployment.objects.filter(disabled_at__isnull=False).count() == 2
    results = probes.probe_disabled()
    assert [(result.ok, result.enabled) for result in results] == [(True, True)]
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    assert a.posts()[-1].body["max_tokens"] == 1
    _, secret = free_key
    assert answered_by(chat(client, secret, model=other.model_id)) == "a"


def test_a_probe_that_fails_leaves_the_deployment_disabled(fakes):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    deployment_health.disable(model.deployments.get(), reason="HTTP 401")
    a.json("/chat/completions", {"error": {"message": "still revoked"}}, status=401)
    [result] = probes.probe_disabled()
    assert not result.ok and "refused this gateway's credentials" in result.detail
    assert model.deployments.get().disabled


def test_the_probe_command_prints_a_table_and_enables_what_answers(fakes, capsys):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    deployment_health.disable(model.deployments.get(), reason="HTTP 401")
    call_command("probe_deployments")
    out = capsys.readouterr().out
    assert "pooled" in out and "ok, enabled again" in out and "1 probed, 0 failed" in out
    call_command("probe_deployments", "--all")
    assert "1 probed, 0 failed" in capsys.readouterr().out


def test_the_probe_command_lists_unset_secrets_apart_and_fails_when_a_probe_fails(fakes, capsys, monkeypatch):
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    unset = Provider.objects.create(name="unset", base_url=a.base_url, api_key_env="GATEWAY_UPSTREAM_UNSET_KEY")
    pool("elsewhere", [(unset, {})])
    monkeypatch.delenv("GATEWAY_UPSTREAM_UNSET_KEY", raising=False)
    call_command("probe_deployments", "--all")
    out = capsys.readouterr().out
    assert "not configured: set GATEWAY_UPSTREAM_UNSET_KEY on this server" in out
    assert out.strip().splitlines()[-1] == "2 probed, 0 failed, 1 not configured"
    assert all(sent.body["model"] != "elsewhere" for sent in a.posts())  # nothing is sent without its secret

    b.json("/chat/completions", {"error": {"message": "revoked"}}, status=401)
    with pytest.raises(CommandError, match="1 of 2 probes failed"):
        call_command("probe_deployments", "--all")
    assert capsys.readouterr().out.strip().splitlines()[-1] == "2 probed, 1 failed, 1 not configured"


def test_the_upkeep_writes_waiting_figures(fakes, client, free_key):
    a = fakes("a")
    model = pool("pooled", [(add_provider("a", a.base_url), {})])
    _, secret = free_key
    answered_by(chat(client, secret))
    deployment = model.deployments.get()
    assert deployment_health.pending_writes()  # the success waits for the next round trip
    deployment_health.succeeded(deployment, 0.01)
    deployment_health.flush()
    assert not deployment_health.pending_writes()


def test_the_scrape_counts_disabled_deployments_and_attempts_by_outcome(client, fakes, free_key, settings):
    from utils_app import metrics

    settings.METRICS_TOKEN = "metrics-token-0123456789"
    metrics.reset()
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    a.json("/chat/completions", {"error": {"message": "revoked"}}, status=401)
    _, secret = free_key
    answered_by(chat(client, secret))
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-0123456789").content.decode()
    a_id, b_id = (Deployment.objects.get(provider__name=name).pk for name in "ab")
    assert "gateway_deployments_disabled 1.0" in body
    assert (f'gateway_upstream_attempts_total{{deployment="{a_id}",model="pooled",outcome="credential_rejected",'
            f'provider="a"}} 1.0') in body
    assert f'gateway_upstream_attempts_total{{deployment="{b_id}",model="pooled",outcome="success",provider="b"}} 1.0' in body
    assert 'gateway_deployment_disables_total{provider="a"} 1.0' in body
    assert "sk-pool-secret" not in body and a.base_url not in body


def test_a_parameter_one_deployment_cannot_honour_moves_the_request_to_one_that_can(client, fakes, free_key,
                                                                                    monkeypatch):
    from gateway.upstream.openai import OpenAIAdapter
    from utils_app.errors import UnsupportedParameter

    served = OpenAIAdapter.chat

    def chat_unless_a(self, payload):
        if self.name == "a":  # stands for a provider type without this parameter
            raise UnsupportedParameter("logit_bias is not supported by this upstream.", param="logit_bias")
        return served(self, payload)

    monkeypatch.setattr(OpenAIAdapter, "chat", chat_unless_a)
    a, b = fakes("a"), fakes("b")
    pool("pooled", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    only_a = pool("only-a", [(Provider.objects.get(name="a"), {})])
    key, secret = free_key
    assert answered_by(chat(client, secret, logit_bias={"50256": -100})) == "b"
    error = assert_error(chat(client, secret, model=only_a.model_id, logit_bias={"50256": -100}), 400,
                         "unsupported_parameter")
    assert error["param"] == "logit_bias"
    assert credits_of(key) == 99
    a_deployment = Deployment.objects.get(model__model_id="pooled", provider__name="a")
    assert deployment_health.states([a_deployment])[a_deployment.pk].failures == 0  # not the deployment's fault


def test_a_deployment_disabled_by_hand_stays_disabled_however_well_it_probes(fakes):
    a = fakes("a")
    provider = add_provider("a", a.base_url)
    by_hand = pool("pooled", [(provider, {})]).deployments.get()
    by_router = pool("other", [(provider, {"upstream_model": "other"})]).deployments.get()
    deployment_health.disable(by_hand, reason="retired upstream name", same_secret=False, by_hand=True)
    assert not Deployment.objects.get(pk=by_router.pk).disabled  # only that one
    deployment_health.disable(by_router, reason="HTTP 401")
    assert [result.deployment.pk for result in probes.probe_disabled()] == [by_router.pk]
    assert Deployment.objects.get(pk=by_hand.pk).disabled and not Deployment.objects.get(pk=by_router.pk).disabled
    deployment_health.enable(by_hand)
    assert not Deployment.objects.get(pk=by_hand.pk).disabled_by_hand


def test_a_cooldown_after_a_disable_does_not_hide_the_disable_from_other_processes(fakes, clock):
    a = fakes("a")
    deployment = pool("pooled", [(add_provider("a", a.base_url), {})]).deployments.get()
    stale = catalog.get_model("pooled")  # the snapshot another process still holds, read before the disable
    deployment_health.disable(deployment, reason="HTTP 401")
    deployment_health.cool_down(deployment, 0.01, why="a 429 of a request still in flight")  # must not undo the marker
    clock.advance(0.02)
    assert not stale.pool[0].disabled
    health = routing.read_health(stale)
    assert routing.choose(stale, health, skip=set()) is None


def test_a_deployment_a_failure_disabled_is_skipped_by_the_requests_holding_the_same_snapshot(fakes):
    pool("pooled", [(add_provider("a", fakes("a").base_url), {"priority": 1}),
                    (add_provider("b", fakes("b").base_url), {"priority": 2})])
    held = catalog.get_model("pooled")  # by a request in flight, say
    first, second = held.pool
    deployment_health.disable(first, reason="HTTP 401")
    assert not first.disabled  # the snapshot's value stays as it was read: what routing learnt, it keeps
    assert routing.choose(held, routing.Health(), skip=set()) is second
    fresh = catalog.get_model("pooled")
    assert fresh is not held and fresh.pool[0].disabled  # read again from the database
    deployment_health.enable(fresh.pool[0])
    assert routing.choose(catalog.get_model("pooled"), routing.Health(), skip=set()).pk == first.pk


def test_a_deployment_whose_secret_is_not_set_here_is_never_chosen_while_another_can_be(client, fakes, free_key,
                                                                                        monkeypatch, settings):
    served = fakes("served")
    served.json("/chat/completions", chat_completion("from served"))
    unset = Provider.objects.create(name="unset", base_url=served.base_url, api_key_env="GATEWAY_UPSTREAM_UNSET_KEY")
    monkeypatch.delenv("GATEWAY_UPSTREAM_UNSET_KEY", raising=False)
    # The unset one first by priority, and the pool allows a single attempt: it must not be spent on it.
    settings.MAX_UPSTREAM_ATTEMPTS = 1
    pool("pooled", [(unset, {"priority": 1}), (add_provider("served", served.base_url), {"priority": 2})])
    _, secret = free_key
    for _ in range(3):
        response = chat(client, secret)
        assert response.status_code == 200 and answered_by(response) == "served"
    assert len(served.posts()) == 3
