"""Upstreams that attack the gateway: redirects to internal services, secrets quoted back,
absurd usage figures, streams broken off (CONTRACT sections 5 and 6)."""
import json

import pytest

from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import (
    DROP,
    UPSTREAM_SECRET,
    add_models,
    add_provider,
    assert_error,
    body_for,
    chat_completion,
    chunk,
    post,
    usage_chunk,
)

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]
OTHER_SECRET = "sk-another-providers-secret-9876543210"


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def raw_stream(response) -> str:
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content).decode()


def events(response) -> list:
    blocks = raw_stream(response).strip().split("\n\n")
    return [data if data == "[DONE]" else json.loads(data)
            for data in (block.removeprefix("data: ") for block in blocks)]


# ---------------------------------------------------------------- redirects

@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_an_upstream_redirect_is_never_followed_on_a_model_call(client, fake_models, upstream, backup_upstream,
                                                                free_key, status):
    """The internal service the redirect names must receive neither the prompt nor the credential."""
    key, secret = free_key
    backup_upstream.json("/chat/completions", chat_completion("internal service answer"))
    upstream.raw("/chat/completions", b"", content_type="text/plain", status=status,
                 headers={"Location": backup_upstream.base_url + "/chat/completions"})
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    error = assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert "redirect" in error["message"]
    assert backup_upstream.calls == []
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().success is False


def test_a_redirected_stream_is_never_followed_either(client, fake_models, upstream, backup_upstream, free_key):
    key, secret = free_key
    backup_upstream.sse("/chat/completions", [chunk("internal"), "[DONE]"])
    upstream.raw("/chat/completions", b"", content_type="text/plain", status=307,
                 headers={"Location": backup_upstream.base_url + "/chat/completions"})
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert backup_upstream.calls == []
    assert credits_of(key) == 100


@pytest.mark.parametrize("operation", ["image", "speech", "embedding"])
def test_no_operation_follows_a_redirect(client, fake_models, upstream, backup_upstream, free_key, operation):
    key, secret = free_key
    backup_upstream.succeed_all()
    path, body = body_for(operation, model=fake_models[operation])
    upstream.raw({"image": "/images/generations", "speech": "/audio/speech", "embedding": "/embeddings"}[operation],
                 b"", content_type="text/plain", status=307, headers={"Location": backup_upstream.base_url + "/x"})
    assert_error(post(client, path, body, secret), 502, "upstream_unavailable", "upstream_error")
    assert backup_upstream.calls == []
    assert credits_of(key) == 100


# ---------------------------------------------------------------- secrets quoted back

@pytest.fixture
def other_provider_secret(monkeypatch):
    """A second provider's secret, held by the gateway but never sent to this upstream."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_OTHER_KEY", OTHER_SECRET)


def test_a_secret_quoted_in_a_mid_stream_error_never_reaches_the_client(client, fake_models, upstream, free_key,
                                                                         other_provider_secret):
    _, secret = free_key
    upstream.sse("/chat/completions", [
        chunk("Hi"), {"error": {"message": f"oops Bearer {UPSTREAM_SECRET} failed; also {OTHER_SECRET}"}}])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    text = raw_stream(response)
    assert "oops Bearer [redacted] failed" in text
    assert UPSTREAM_SECRET not in text and OTHER_SECRET not in text


def test_secrets_quoted_in_a_refusal_are_taken_out_of_message_code_and_param(client, fake_models, upstream,
                                                                              free_key, other_provider_secret,
                                                                              settings):
    _, secret = free_key
    upstream.json("/chat/completions", {"error": {
        "message": f"key {UPSTREAM_SECRET} at {upstream.base_url}, other {OTHER_SECRET}, ours {settings.SECRET_KEY}",
        "code": f"bad_{UPSTREAM_SECRET}", "param": OTHER_SECRET}}, status=400)
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    assert response.status_code == 400
    text = response.content.decode()
    for needle in (UPSTREAM_SECRET, OTHER_SECRET, settings.SECRET_KEY, upstream.base_url):
        assert needle not in text
    assert response.json()["error"]["message"].startswith("key [redacted] at [upstream]")


# ---------------------------------------------------------------- absurd usage

@pytest.mark.parametrize("tokens", [2**63, 2**31, 10**30, -5, 1.5, "12", True])
def test_absurd_token_counts_are_clamped_and_the_request_settles(client, fake_models, upstream, make_key, tokens):
    key, secret = make_key(credits=10, max_credits=10, max_concurrent=1)
    answer = chat_completion()
    answer["usage"] = {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": tokens}
    upstream.json("/chat/completions", answer)
    for _ in range(2):  # with maxConcurrent 1, the second call proves the first released its slot
        response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
        assert response.status_code == 200, response.content
    assert credits_of(key) == 8
    assert ApiKey.objects.get(pk=key.pk).in_flight == 0
    assert not LedgerEntry.objects.filter(status="pending").exists()
    for event in UsageEvent.objects.all():
        assert 0 <= event.input_tokens <= 10_000_000 and 0 <= event.output_tokens <= 10_000_000
        assert event.success


def test_an_absurd_count_in_a_streams_usage_chunk_is_clamped(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi", finish_reason="stop"), usage_chunk(2**63, 2**63), "[DONE]"])
    found = events(post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret))
    assert found[-1] == "[DONE]"
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.output_tokens, event.credits_charged) == (10_000_000, 10_000_000, 1)
    assert ApiKey.objects.get(pk=key.pk).in_flight == 0


# ---------------------------------------------------------------- streams broken off

def test_a_stream_broken_after_its_opening_role_chunk_moves_to_the_next_provider(client, seeded, upstream,
                                                                                 backup_upstream, free_key,
                                                                                 monkeypatch):
    """Only the role had arrived: nothing reached the client, so the stream is not committed yet."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    add_provider("backup", backup_upstream.base_url)
    ids = add_models(add_provider("first", upstream.base_url), prefix="broken", fallbacks=["backup"])
    role_only = {**chunk(), "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}]}
    upstream.sse("/chat/completions", [role_only, DROP])
    backup_upstream.sse("/chat/completions", [chunk("from the backup", finish_reason="stop"), "[DONE]"])
    key, secret = free_key
    found = events(post(client, CHAT, {"model": ids["chat"], "messages": HELLO, "stream": True}, secret))
    assert [event["choices"][0]["delta"].get("content") for event in found[:-1]] == ["from the backup"]
    assert credits_of(key) == 99
    assert UsageEvent.objects.get().provider == "backup"


def test_a_stream_that_ends_without_any_content_is_an_ordinary_error_and_refunded(client, fake_models, upstream,
                                                                                  free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [{**chunk(), "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
                                       "[DONE]"])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert credits_of(key) == 100


@pytest.fixture
def hang_up(monkeypatch):
    """The client goes away: the server closes the response. Its request_finished handler would close a
    PostgreSQL connection inside the test's transaction (the test client itself avoids that only for a
    body it read to the end), so here the connection stays open."""
    from django.db import connection

    def close(response) -> None:
        monkeypatch.setattr(connection, "close_if_unusable_or_obsolete", lambda: None)
        response.close()
        monkeypatch.undo()
    return close


def test_a_client_that_leaves_after_content_is_charged_and_recorded_as_closed(client, fake_models, upstream,
                                                                               free_key, hang_up):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("one"), chunk("two"), chunk("three", finish_reason="stop"), "[DONE]"])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    next(iter(response.streaming_content))
    hang_up(response)
    assert credits_of(key) == 99
    event = UsageEvent.objects.get()
    assert (event.status, event.success, event.credits_charged) == (499, True, 1)


def test_a_client_that_leaves_before_the_first_event_is_refunded(client, fake_models, upstream, free_key, hang_up):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("one", finish_reason="stop"), "[DONE]"])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    hang_up(response)  # the server never sent a byte of the body
    assert credits_of(key) == 100
    assert LedgerEntry.objects.get(kind="charge").status == "refunded"


def test_a_key_whose_stream_broke_off_is_not_left_in_flight(client, fake_models, upstream, make_key):
    key, secret = make_key(credits=10, max_credits=10, max_concurrent=1)
    upstream.sse("/chat/completions", [chunk("Half"), DROP])
    events(post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret))
    assert ApiKey.objects.get(pk=key.pk).in_flight == 0
    assert credits_of(key) == 9


@pytest.mark.parametrize("content", [5, True, {"text": "x"}])
def test_a_response_objects_message_content_of_another_type_is_read_as_no_text(client, fake_models, upstream, free_key,
                                                                             content):
    """A Responses upstream whose message item holds no list of parts answers with no text from it, as one whose
    content is missing does: the client gets the upstream's response, the key the charge for it."""
    key, secret = free_key
    upstream.json("/responses", {"id": "resp_up", "object": "response", "status": "completed", "model": "m",
                                 "output": [{"type": "message", "role": "assistant", "content": content}],
                                 "usage": {"input_tokens": 3, "output_tokens": 2}})
    response = post(client, "/v1/responses", {"model": fake_models["chat"], "input": "Hello"}, secret)
    assert response.status_code == 200, response.content
    assert response.json()["usage"]["output_tokens"] == 2
    assert UsageEvent.objects.get().success is True


LONE_SURROGATE = (b'{"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", '
                  b'"message": {"role": "assistant", "content": "half \\ud83e of a fox \\udd8a, whole \\ud83e\\udd8a"}}], '
                  b'"usage": {"prompt_tokens": 3, "completion_tokens": 2}}')


@pytest.mark.parametrize(("path", "read"), [
    (CHAT, lambda body: body["choices"][0]["message"]["content"]),
    ("/v1/messages", lambda body: body["content"][0]["text"]),
])
def test_a_lone_surrogate_in_an_answer_reads_as_a_replacement_character(client, fake_models, upstream, free_key,
                                                                         path, read):
    """No UTF-8 can carry half of a UTF-16 pair: written back as it came, the answer was a 500 after its charge.
    It reads as U+FFFD (as a broken UTF-8 sequence does); a whole pair stays the character it makes."""
    key, secret = free_key
    upstream.raw("/chat/completions", LONE_SURROGATE, content_type="application/json")
    response = post(client, path, {"model": fake_models["chat"], "max_tokens": 8, "messages": HELLO}, secret)
    assert response.status_code == 200, response.content
    assert read(response.json()) == "half \ufffd of a fox \ufffd, whole \U0001f98a"
    assert credits_of(key) == 99 and LedgerEntry.objects.get(kind="charge").status == "completed"


def test_a_lone_surrogate_in_a_streamed_chunk_reads_as_a_replacement_character(client, fake_models, upstream,
                                                                               free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("half \ud83e|"), chunk("whole \U0001f98a", finish_reason="stop"),
                                       usage_chunk(), "[DONE]"])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    texts = [event["choices"][0]["delta"].get("content") for event in events(response)
             if event != "[DONE]" and event["choices"]]
    assert "".join(text for text in texts if text) == "half \ufffd|whole \U0001f98a"
    assert credits_of(key) == 99
