"""Whose failure an upstream's answer is (CONTRACT section 7; docs/routing.md, "Whose failure is it").

A deployment's health changes only on what the upstream says about itself in machine-readable form,
never on words of a message that may quote the request; and a failure the request itself caused (its
size, the length it asked for) is passed on without touching the deployment. Each hostile behaviour
lives in the suite's fake upstreams (anthropic_fake, gemini_fake, fake_servers.FakeOpenAI)."""
import json

import pytest
import requests

from gateway import deployment_health
from gateway.upstream.transport import Demand, HttpTransport
from keys.ledger import mismatches
from models_catalog.models import Deployment, Provider
from tests.gateway.anthropic_fake import ANTHROPIC_KEY, FakeAnthropic, error_body
from tests.gateway.conftest import add_provider, assert_error, credits_of, post
from tests.gateway.fake_servers import FakeOpenAI
from tests.gateway.gemini_fake import GEMINI_KEY, GEMINI_KEY_ENV, FakeGemini, token_quota_exceeded
from tests.gateway.gemini_fake import error_body as google_error
from tests.gateway.test_gemini_gateway import add_gemini
from tests.gateway.test_routing import pool
from utils_app.errors import SLOW_ANSWER

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
CLAUDE_ENVS = ["GATEWAY_UPSTREAM_CLAUDE_1", "GATEWAY_UPSTREAM_CLAUDE_2"]
# Words the gateway once read as "no credit left", sent by a client for its upstream to quote back.
BAIT = ("Your credit balance is too low to access the Anthropic API; billing_error; authentication_error; "
        "insufficient_quota; invalid_api_key; API_KEY_INVALID; BILLING_DISABLED; enable billing; "
        "prepayment credits are depleted")


@pytest.fixture
def fakes(monkeypatch):
    """Factory of fake upstreams of each kind, started, and stopped at the end."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-pool-secret-0123456789")
    for variable in CLAUDE_ENVS:  # two secrets of one account: the fake takes either
        monkeypatch.setenv(variable, ANTHROPIC_KEY)
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    started = []

    def make(kind):
        fake = kind().start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


def chat(client, secret, model: str, content: str = "Hello", **body):
    return post(client, CHAT, {"model": model, "messages": [{"role": "user", "content": content}], **body}, secret)


def state(deployment: Deployment) -> deployment_health.DeploymentState:
    return deployment_health.states([deployment])[deployment.pk]


def untouched(*models) -> None:
    """Every deployment of the models enabled, not cooling, and without a failure counted."""
    for deployment in Deployment.objects.filter(model__model_id__in=models):
        assert deployment.disabled_at is None, deployment.disabled_reason
        found = state(deployment)
        assert (found.state, found.failures) == ("healthy", 0), (deployment.provider.name, found)


# ---------------------------------------------------------------- 1. no health from a message's words

def test_an_anthropic_400_quoting_the_request_leaves_every_deployment_enabled_and_is_passed_on(
        client, fakes, free_key):
    """One request with the bait in its text, its metadata, an unknown member and its anthropic-beta header
    used to disable both secrets of a pool and the mixed pool sharing them."""
    claude, openai = fakes(FakeAnthropic), fakes(FakeOpenAI)
    claude.echo_request()
    provider = Provider.objects.create(name="claude", type="anthropic", base_url=claude.base_url, timeout=5,
                                       api_key_envs=CLAUDE_ENVS)
    pool("claude-pool", [(provider, {"upstream_model": "claude-sonnet-4-5"})])
    pool("mixed", [(provider, {"upstream_model": "claude-sonnet-4-5", "priority": 1}),
                   (add_provider("openai", openai.base_url), {"priority": 2})])
    key, secret = free_key

    error = assert_error(chat(client, secret, "claude-pool", BAIT), 400, "invalid_request_error")
    assert "credit balance is too low" in error["message"]  # the upstream's 400, passed on
    response = post(client, "/v1/messages", {
        "model": "claude-pool", "max_tokens": 5, "billing": "credit balance is too low",
        "metadata": {"billing": "billing_error"}, "messages": [{"role": "user", "content": BAIT}]},
        secret, HTTP_ANTHROPIC_VERSION="2023-06-01", HTTP_ANTHROPIC_BETA="billing")
    assert response.status_code == 400, response.content
    assert "billing" in json.dumps(response.json())
    assert len(claude.calls) == 2  # each refusal is final: no other deployment was asked

    untouched("claude-pool", "mixed")
    claude.echoing = False
    assert chat(client, secret, "claude-pool").status_code == 200
    assert chat(client, secret, "mixed").status_code == 200
    assert openai.calls == []  # the anthropic deployment of the mixed pool still serves it
    assert credits_of(key) == 98 and mismatches() == []


def test_only_anthropics_error_type_refuses_a_secret(client, fakes, free_key):
    claude = fakes(FakeAnthropic)
    provider = Provider.objects.create(name="claude", type="anthropic", base_url=claude.base_url, timeout=5,
                                       api_key_envs=CLAUDE_ENVS)
    pool("claude-pool", [(provider, {"upstream_model": "claude-sonnet-4-5"})])
    pool("other", [(provider, {"upstream_model": "claude-haiku-4-5"})])
    claude.fail(400, error_body("billing_error", "This organization has been disabled."))
    _, secret = free_key
    assert_error(chat(client, secret, "claude-pool"), 502, "upstream_unavailable", "upstream_error")
    # Both secrets were tried and refused: each is disabled for every model using it.
    assert Deployment.objects.filter(disabled_at__isnull=False).count() == 4


@pytest.mark.parametrize("code, word", [(400, "INVALID_ARGUMENT"), (403, "INVALID_ARGUMENT")])
def test_a_google_refusal_quoting_the_request_disables_nothing(client, fakes, free_key, code, word):
    """Google's error is read by its status and ErrorInfo reason: 'enable billing' in a message (here the
    client's own text) says nothing; a 403 still refuses the key."""
    gemini = fakes(FakeGemini)
    gemini.echo_request(code, word)
    pool("gem", [(add_gemini("google", gemini), {"upstream_model": "gemini-2.5-flash"})])
    key, secret = free_key
    response = chat(client, secret, "gem", BAIT)
    if code == 400:
        error = assert_error(response, 400, "invalid_argument")
        assert "enable billing" in error["message"]
        untouched("gem")
    else:
        assert_error(response, 502, "upstream_unavailable", "upstream_error")
        assert Deployment.objects.get().disabled_at is not None
    assert credits_of(key) == 100


def test_a_google_failed_precondition_moves_on_and_disables_nothing(client, fakes, free_key):
    """FAILED_PRECONDITION may be the project's (no free tier in its country) or the request's (a file not
    ready): the next deployment serves the request, and alone the refusal is passed on."""
    gemini, openai = fakes(FakeGemini), fakes(FakeOpenAI)
    gemini.echo_request(400, "FAILED_PRECONDITION")
    google = add_gemini("google", gemini)
    pool("gem", [(google, {"upstream_model": "gemini-2.5-flash"})])
    pool("mixed", [(google, {"upstream_model": "gemini-2.5-flash", "priority": 1}),
                   (add_provider("openai", openai.base_url), {"priority": 2})])
    key, secret = free_key
    served = chat(client, secret, "mixed", BAIT)
    assert served.json()["choices"][0]["message"]["content"] == "Hello from OpenAI"
    error = assert_error(chat(client, secret, "gem", BAIT), 400, "failed_precondition")
    assert "billing" in error["message"]
    untouched("gem", "mixed")
    assert credits_of(key) == 99 and mismatches() == []


def test_googles_error_info_reason_refuses_the_key(client, fakes, free_key):
    gemini = fakes(FakeGemini)
    gemini.fail(403, google_error(403, "PERMISSION_DENIED", "Billing is not enabled.", [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "BILLING_DISABLED",
         "domain": "googleapis.com"}]))
    pool("gem", [(add_gemini("google", gemini), {"upstream_model": "gemini-2.5-flash"})])
    _, secret = free_key
    assert_error(chat(client, secret, "gem"), 502, "upstream_unavailable", "upstream_error")
    assert "403" in Deployment.objects.get().disabled_reason


def test_an_openai_400_quoting_quota_words_is_passed_on(client, fakes, free_key):
    openai = fakes(FakeOpenAI)
    openai.echo = (None, None)
    pool("gpt", [(add_provider("openai", openai.base_url), {})])
    _, secret = free_key
    error = assert_error(chat(client, secret, "gpt", BAIT), 400, "upstream_rejected")
    assert "insufficient_quota" in error["message"]
    untouched("gpt")
    openai.echo = ("insufficient_quota", None)  # OpenAI's own type says it: the secret is refused
    assert_error(chat(client, secret, "gpt"), 502, "upstream_unavailable", "upstream_error")
    assert Deployment.objects.get().disabled_at is not None


# ---------------------------------------------------------------- 2. failures the request caused

def test_a_prompt_too_large_for_the_tokens_per_minute_cools_nothing_and_is_passed_on(client, fakes, free_key):
    a, b = fakes(FakeOpenAI), fakes(FakeOpenAI)
    for fake in (a, b):
        fake.tpm = 30000
    pool("gpt", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    key, secret = free_key
    error = assert_error(chat(client, secret, "gpt", "word " * 30000), 429, "rate_limit_exceeded")
    assert error["message"].startswith("Request too large")
    assert (len(a.calls), len(b.calls)) == (1, 1)  # another deployment's limit might have been larger
    untouched("gpt")
    assert chat(client, secret, "gpt").status_code == 200 and len(a.calls) == 2  # a still first in line
    # Asking for more output than the whole minute holds is the same: the request's.
    assert_error(chat(client, secret, "gpt", max_tokens=40000), 429, "rate_limit_exceeded")
    untouched("gpt")
    assert credits_of(key) == 99 and mismatches() == []


def test_a_deployment_out_of_tokens_is_cooled_whatever_the_size_of_the_request(client, fakes, free_key):
    """A small request refused on tokens proves the deployment spent; so does a large one when the upstream
    says it has less left than a small request needs: a large request cannot hide a spent deployment."""
    a, b = fakes(FakeOpenAI), fakes(FakeOpenAI)
    a.tpm, a.used = 30000, 29990
    pool("gpt", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    _, secret = free_key
    assert chat(client, secret, "gpt").json()["choices"][0]["message"]["content"] == "Hello from OpenAI"
    deployment_a = Deployment.objects.get(provider__name="a")
    assert state(deployment_a).state == "cooling"
    deployment_health.enable(deployment_a)
    assert chat(client, secret, "gpt", "word " * 5000).status_code == 200  # large, but a has 10 tokens left
    assert state(deployment_a).state == "cooling" and len(a.calls) == 2


def test_a_large_requests_token_429_leaves_room_for_a_small_one(client, fakes, free_key):
    """Between the two: the deployment still has room for a small request, the large one did not fit."""
    a, b = fakes(FakeOpenAI), fakes(FakeOpenAI)
    a.tpm, a.used = 30000, 20000
    pool("gpt", [(add_provider("a", a.base_url), {"priority": 1}), (add_provider("b", b.base_url), {"priority": 2})])
    _, secret = free_key
    assert chat(client, secret, "gpt", "word " * 12000).status_code == 200  # b served it
    untouched("gpt")
    assert chat(client, secret, "gpt").status_code == 200 and len(a.calls) == 2 and len(b.calls) == 1


def test_a_gemini_token_quota_429_of_a_large_request_cools_nothing(client, fakes, free_key):
    gemini = fakes(FakeGemini)
    gemini.fail(*token_quota_exceeded())
    pool("gem", [(add_gemini("google", gemini), {"upstream_model": "gemini-2.5-flash"})])
    _, secret = free_key
    assert_error(chat(client, secret, "gem", "word " * 2000), 429, "rate_limit_exceeded")
    untouched("gem")
    assert_error(chat(client, secret, "gem"), 429, "rate_limit_exceeded")  # a small one: spent, cooled
    assert state(Deployment.objects.get()).state == "cooling"


def slow_pool(fake: FakeOpenAI, *, timeout: float = 0.5, allowed_fails: int = 2) -> Deployment:
    model = pool("slow", [(add_provider("slow", fake.base_url, timeout=timeout), {})], allowed_fails=allowed_fails,
                 cooldown_seconds=60)
    return model.deployments.get()


def test_long_answers_past_the_timeout_do_not_cool_a_deployment_that_serves(client, fakes, free_key):
    fake = fakes(FakeOpenAI)
    fake.seconds_per_token = 0.01  # 100 tokens a second: 5 tokens in 0.05 s, 4000 in 40 s
    deployment = slow_pool(fake)
    key, secret = free_key
    assert chat(client, secret, "slow", max_tokens=5).status_code == 200
    for _ in range(3):
        assert_error(chat(client, secret, "slow", max_tokens=4000), 504, "upstream_timeout", "upstream_error")
    assert (state(deployment).state, state(deployment).failures) == ("healthy", 0)
    assert chat(client, secret, "slow", max_tokens=5).status_code == 200
    assert credits_of(key) == 98 and mismatches() == []


def test_a_dead_deployment_is_cooled_by_long_and_short_requests_alike(client, fakes, free_key):
    """Behind a live socket nothing answers: no success proves it alive, so long answers cannot hide it."""
    fake = fakes(FakeOpenAI)
    fake.hang = True
    deployment = slow_pool(fake, timeout=0.3)
    _, secret = free_key
    for _ in range(2):
        assert_error(chat(client, secret, "slow", max_tokens=4000), 504, "upstream_timeout", "upstream_error")
    assert state(deployment).state == "cooling"
    deployment_health.enable(deployment)
    for _ in range(2):  # a tiny request's timeout always counts
        assert_error(chat(client, secret, "slow"), 504, "upstream_timeout", "upstream_error")
    assert state(deployment).state == "cooling"


def test_a_success_ages_out_of_the_proof_of_life(client, fakes, free_key, clock):
    """A success of more than two minutes ago proves nothing: the clock is moved, not waited for."""
    fake = fakes(FakeOpenAI)
    fake.seconds_per_token = 0.01
    deployment = slow_pool(fake, allowed_fails=1)
    _, secret = free_key
    assert chat(client, secret, "slow", max_tokens=5).status_code == 200
    clock.advance(120)
    assert_error(chat(client, secret, "slow", max_tokens=4000), 504, "upstream_timeout", "upstream_error")
    assert state(deployment).state == "cooling"


def test_which_timeouts_are_the_requests():
    """Only a timeout after the connection was made, of a request allowing more output than its time carries
    at UPSTREAM_MIN_TOKENS_PER_SECOND (20 a second by default), is left to the deployment's proof of life."""
    transport = HttpTransport(name="p", base_url="http://127.0.0.1:9", timeout=10, headers={}, secret="",
                              read_error=lambda status, content: None)
    transport.demand = Demand(body_bytes=100, output_tokens=4000)
    assert transport.timed_out().health == SLOW_ANSWER
    assert transport.transport_error(requests.ReadTimeout()).health == SLOW_ANSWER
    assert transport.transport_error(requests.ConnectTimeout()).health == "failure"  # never reached the model
    transport.demand = Demand(body_bytes=100, output_tokens=200)  # 200 tokens fit in 10 s
    assert transport.timed_out().health == "failure"
    assert transport.timed_out(seconds=5).health == SLOW_ANSWER  # a stream's silence of 5 s
