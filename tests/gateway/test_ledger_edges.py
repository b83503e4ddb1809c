"""Edges of the ledger: a long request's charge is not abandoned while the request could still run; a charged
stream the client closed, retried with its Idempotency-Key; the token counts an answer shows are the ledger's."""
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from gateway import metering, sweeper
from gateway.tokens import count_tokens
from gateway.upstream.shapes import prompt_text
from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog.models import Provider, UsageEvent
from tests.gateway.anthropic_fake import ANTHROPIC_KEY, ANTHROPIC_KEY_ENV, claude  # noqa: F401 (fixture)
from tests.gateway.anthropic_fake import answer as claude_answer
from tests.gateway.anthropic_fake import stream_events as claude_stream
from tests.gateway.anthropic_fake import usage as claude_usage
from tests.gateway.conftest import (
    UPSTREAM_SECRET,
    Gate,
    add_models,
    add_provider,
    assert_error,
    chat_completion,
    chunk,
    credits_of,
    post,
    serve,
    usage_chunk,
)
from tests.gateway.gemini_fake import GEMINI_KEY, GEMINI_KEY_ENV, gemini  # noqa: F401 (fixture)
from tests.gateway.gemini_fake import answer as gemini_answer
from tests.gateway.gemini_fake import usage as gemini_usage

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello there, how are you today?"}]
ABSURD = 2**64  # 18446744073709551616: what an upstream once reported
# What the ledger keeps of it (gateway.metering.MAX_TOKENS).
CLAMPED = metering.MAX_TOKENS


class Clock:
    """timezone.now, moved forward by ``seconds``: the ledger's and the sweeper's clock."""

    def __init__(self):
        self.seconds = 0.0


@pytest.fixture
def clock(monkeypatch):
    moved, real = Clock(), timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + timedelta(seconds=moved.seconds))
    return moved


@pytest.fixture
def fakes(upstream, monkeypatch):
    """fake-chat and the other operations' models, served by the fake OpenAI-compatible upstream."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    return add_models(add_provider("fake", upstream.base_url))


def client_leaves(response, monkeypatch) -> None:
    """The client goes away mid-stream: the server closes the response. Its request_finished handler would
    close a PostgreSQL connection inside the test's transaction, so here the connection stays open."""
    with monkeypatch.context() as patched:
        patched.setattr(connection, "close_if_unusable_or_obsolete", lambda: None)
        response.close()


def charge_rows(key):
    return LedgerEntry.objects.filter(key=key, kind=LedgerEntry.CHARGE)


# ---------------------------------------------------------------- a long request is not made free

def test_a_long_requests_charge_is_not_abandoned_while_the_request_could_still_run(make_key, clock):
    """A reasoning model's 1,200 s timeout: the sweeper used to refund its charge after LEDGER_STALE_SECONDS
    (900 s) while the request still ran, and the finished answer was free."""
    provider = Provider.objects.create(name="reasoning", type="openai", base_url="https://reasoning.example/v1",
                                       timeout=1200)
    model = serve("slow-thinker", [(provider, "", 1)])
    key, _ = make_key(credits=10, max_credits=10)
    entry = metering.charge(key=key, model=model, operation="chat", amount=1, request_id="long-one")
    # The whole pool budget, then a stream begun at its very end, then the margin to settle.
    longest = 1200 + settings.STREAM_MAX_SECONDS + sweeper.SETTLE_MARGIN_SECONDS

    clock.seconds = settings.LEDGER_STALE_SECONDS + 100  # past LEDGER_STALE_SECONDS: it may still be running
    assert sweeper.sweep() == (0, 0)
    out = StringIO()
    call_command("settle_stale", stdout=out)  # the command's default is the same rule
    assert out.getvalue().startswith("abandoned and refunded 0 charge(s)")
    clock.seconds = longest - 1
    assert sweeper.sweep() == (0, 0)
    assert LedgerEntry.objects.get(pk=entry).status == LedgerEntry.PENDING
    assert sweeper.longest_request_seconds() == sweeper.stale_after() == longest > settings.LEDGER_STALE_SECONDS

    clock.seconds = longest + 1  # no request of this catalog can still be running it
    assert sweeper.sweep() == (1, 0)
    assert LedgerEntry.objects.get(pk=entry).status == LedgerEntry.ABANDONED
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (10, 0)
    assert mismatches() == []


def test_ledger_stale_seconds_is_a_floor_and_a_raised_timeout_raises_the_wait(make_key, clock, settings):
    provider = Provider.objects.create(name="quick", type="openai", base_url="https://quick.example/v1", timeout=30)
    serve("quick-chat", [(provider, "", 1)])
    settings.LEDGER_STALE_SECONDS = 7200
    assert sweeper.stale_after() == 7200
    settings.LEDGER_STALE_SECONDS = 60
    assert sweeper.stale_after() == 30 + settings.STREAM_MAX_SECONDS + sweeper.SETTLE_MARGIN_SECONDS
    Provider.objects.filter(pk=provider.pk).update(timeout=3000)  # a staff edit for a slower model
    assert sweeper.stale_after() == 3000 + settings.STREAM_MAX_SECONDS + sweeper.SETTLE_MARGIN_SECONDS


def test_an_explicit_older_than_still_overrides_the_rule(make_key, clock):
    provider = Provider.objects.create(name="reasoning", type="openai", base_url="https://reasoning.example/v1",
                                       timeout=1200)
    model = serve("slow-thinker", [(provider, "", 1)])
    key, _ = make_key(credits=10, max_credits=10)
    metering.charge(key=key, model=model, operation="chat", amount=1, request_id="after-a-full-stop")
    clock.seconds = 120
    out = StringIO()
    call_command("settle_stale", "--older-than", "60", stdout=out)  # every worker was stopped: nothing runs
    assert out.getvalue().startswith("abandoned and refunded 1 charge(s)")
    assert mismatches() == []


# ---------------------------------------------------------------- a stream the client closed, retried

def test_a_stream_the_client_closed_is_charged_and_its_retry_says_so(client, fakes, upstream, free_key,
                                                                      monkeypatch):
    key, secret = free_key
    gate = Gate(timeout=10)
    upstream.sse("/chat/completions", [chunk("Hello "), gate, chunk("world"), "[DONE]"])
    body = {"model": "fake-chat", "messages": HELLO, "stream": True}
    first = post(client, CHAT, body, secret, HTTP_IDEMPOTENCY_KEY="cut-by-client")
    assert next(iter(first.streaming_content)).startswith(b"data: ")  # output reached the client
    client_leaves(first, monkeypatch)
    gate.open()
    [charge] = charge_rows(key)
    assert charge.status == LedgerEntry.COMPLETED
    assert UsageEvent.objects.get(request_id=charge.request_id).status == 499

    retry = post(client, CHAT, body, secret, HTTP_IDEMPOTENCY_KEY="cut-by-client")
    assert_error(retry, 409, "idempotency_conflict", param="Idempotency-Key")
    message = retry.json()["error"]["message"]
    assert "closed after output had reached it" in message and "charged" in message
    assert "too large" not in message
    assert charge_rows(key).count() == 1 and credits_of(key) == 99
    assert mismatches() == []


def test_a_response_too_large_to_keep_is_still_said_so(client, fakes, upstream, free_key, settings):
    key, secret = free_key
    settings.IDEMPOTENCY_MAX_BODY_BYTES = 0
    upstream.json("/chat/completions", chat_completion("Hello"))
    body = {"model": "fake-chat", "messages": HELLO}
    assert post(client, CHAT, body, secret, HTTP_IDEMPOTENCY_KEY="big").status_code == 200
    retry = post(client, CHAT, body, secret, HTTP_IDEMPOTENCY_KEY="big")
    assert_error(retry, 409, "idempotency_conflict", param="Idempotency-Key")
    assert "too large to keep" in retry.json()["error"]["message"]
    assert charge_rows(key).count() == 1


# ---------------------------------------------------------------- the answer shows what the ledger keeps

def recorded(key) -> UsageEvent:
    [event] = UsageEvent.objects.filter(key=key)
    return event


def estimate_of_prompt() -> int:
    return count_tokens(prompt_text(HELLO))


def test_an_absurd_count_is_shown_clamped_as_the_ledger_keeps_it(client, fakes, upstream, free_key):
    key, secret = free_key
    upstream.json("/chat/completions", chat_completion("Hi", prompt_tokens=ABSURD, completion_tokens=4))
    answer = post(client, CHAT, {"model": "fake-chat", "messages": HELLO}, secret).json()
    assert answer["usage"]["prompt_tokens"] == CLAMPED == recorded(key).input_tokens
    assert answer["usage"]["total_tokens"] == CLAMPED + 4
    assert mismatches() == []


def test_a_streams_usage_chunk_shows_the_clamped_counts(client, fakes, upstream, free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi"), chunk(finish_reason="stop"),
                                       usage_chunk(prompt_tokens=ABSURD, completion_tokens=2), "[DONE]"])
    body = {"model": "fake-chat", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}}
    relayed = b"".join(post(client, CHAT, body, secret).streaming_content).decode()
    assert f'"prompt_tokens":{CLAMPED},' in relayed and str(ABSURD) not in relayed
    assert recorded(key).input_tokens == CLAMPED


@pytest.fixture
def anthropic_chat(claude, monkeypatch):  # noqa: F811 (the fixture it takes)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    provider = Provider.objects.create(name="anthropic", type="anthropic", base_url=claude.base_url,
                                       api_key_env=ANTHROPIC_KEY_ENV, timeout=5)
    serve("claude-chat", [(provider, "claude-sonnet-4-5", 1)])
    return "claude-chat"


@pytest.fixture
def gemini_chat(gemini, monkeypatch):  # noqa: F811 (the fixture it takes)
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    provider = Provider.objects.create(name="gemini", type="gemini", base_url=gemini.base_url,
                                       api_key_env=GEMINI_KEY_ENV, timeout=5)
    serve("gemini-chat", [(provider, "gemini-2.5-flash", 1)])
    return "gemini-chat"


def test_a_translated_anthropic_answer_shows_the_clamped_counts(client, anthropic_chat, claude, free_key):  # noqa: F811
    key, secret = free_key
    claude.answer(claude_answer("Hi", counts=claude_usage(ABSURD, 6)))
    answer = post(client, CHAT, {"model": anthropic_chat, "messages": HELLO}, secret).json()
    assert (answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]) == (CLAMPED, 6)
    event = recorded(key)
    assert (event.input_tokens, event.output_tokens) == (CLAMPED, 6)


def test_a_translated_gemini_answer_shows_the_clamped_counts(client, gemini_chat, gemini, free_key):  # noqa: F811
    key, secret = free_key
    gemini.answer(gemini_answer("Hi", meta=gemini_usage(prompt=ABSURD, candidates=3)))
    answer = post(client, CHAT, {"model": gemini_chat, "messages": HELLO}, secret).json()
    assert (answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]) == (CLAMPED, 3)
    assert answer["usage"]["total_tokens"] == CLAMPED + 3
    event = recorded(key)
    assert (event.input_tokens, event.output_tokens) == (CLAMPED, 3)


def test_a_negative_anthropic_count_is_metered_as_the_gateways_estimate(client, anthropic_chat, claude,  # noqa: F811
                                                                         free_key):
    key, secret = free_key
    claude.answer(claude_answer("Hi", counts=claude_usage(-40, 6)))
    answer = post(client, CHAT, {"model": anthropic_chat, "messages": HELLO}, secret).json()
    assert estimate_of_prompt() > 0
    assert answer["usage"]["prompt_tokens"] == estimate_of_prompt() == recorded(key).input_tokens
    assert answer["usage"]["completion_tokens"] == 6 == recorded(key).output_tokens


def test_a_negative_gemini_count_is_metered_as_the_gateways_estimate(client, gemini_chat, gemini,  # noqa: F811
                                                                      free_key):
    key, secret = free_key
    gemini.answer(gemini_answer("Hi", meta=gemini_usage(prompt=-40, candidates=3)))
    answer = post(client, CHAT, {"model": gemini_chat, "messages": HELLO}, secret).json()
    assert answer["usage"]["prompt_tokens"] == estimate_of_prompt() == recorded(key).input_tokens


def test_a_negative_count_in_an_anthropic_stream_is_metered_as_estimated(client, anthropic_chat, claude,  # noqa: F811
                                                                           free_key):
    key, secret = free_key
    claude.stream(*claude_stream("Hi", counts=claude_usage(-40, 2)))
    body = {"model": anthropic_chat, "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}}
    relayed = b"".join(post(client, CHAT, body, secret).streaming_content).decode()
    assert f'"prompt_tokens":{estimate_of_prompt()},' in relayed
    assert recorded(key).input_tokens == estimate_of_prompt()
