"""Idempotency-Key on the metered operations: charged once, replayed, refused when in flight or different."""
from datetime import timedelta

import pytest
from django.utils import timezone

from keys.ledger import mismatches
from keys.models import ApiKey, IdempotentRequest, LedgerEntry
from tests.gateway.conftest import assert_error, body_for, post

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


def with_key(value: str) -> dict:
    return {"HTTP_IDEMPOTENCY_KEY": value}


def charges(key) -> int:
    return LedgerEntry.objects.filter(key=key, kind="charge").count()


@pytest.mark.parametrize("operation", ["chat", "image", "speech", "embedding"])
def test_a_retry_after_completion_is_charged_once_and_gets_the_first_answer(client, seeded, local_key, operation):
    key, secret = local_key
    path, body = body_for(operation)
    first = post(client, path, body, secret, **with_key(f"retry-{operation}"))
    again = post(client, path, body, secret, **with_key(f"retry-{operation}"))
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"]
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert again["X-Remaining-Credits"] == first["X-Remaining-Credits"]
    assert charges(key) == 1
    assert mismatches() == []


def test_a_replayed_stream_is_the_same_event_stream(client, seeded, free_key):
    key, secret = free_key
    body = {**HELLO, "stream": True}
    first = b"".join(post(client, CHAT, body, secret, **with_key("stream-1")).streaming_content)
    replay = post(client, CHAT, body, secret, **with_key("stream-1"))
    assert replay["Content-Type"].startswith("text/event-stream")
    assert b"".join(replay.streaming_content) == first
    assert first.endswith(b"data: [DONE]\n\n")
    assert charges(key) == 1


def test_the_same_key_with_another_body_is_a_422(client, seeded, free_key):
    key, secret = free_key
    assert post(client, CHAT, HELLO, secret, **with_key("k")).status_code == 200
    other = {**HELLO, "messages": [{"role": "user", "content": "Something else"}]}
    assert_error(post(client, CHAT, other, secret, **with_key("k")), 422, "idempotency_mismatch",
                 param="Idempotency-Key")
    path, body = body_for("embedding")
    assert_error(post(client, path, body, secret, **with_key("k")), 422, "idempotency_mismatch")
    assert charges(key) == 1


def test_a_retry_while_the_first_is_in_flight_is_a_409(client, seeded, free_key):
    key, secret = free_key
    body = {**HELLO, "stream": True}
    running = post(client, CHAT, body, secret, **with_key("busy"))  # its stream is not read yet
    assert_error(post(client, CHAT, body, secret, **with_key("busy")), 409, "idempotency_conflict",
                 param="Idempotency-Key")
    b"".join(running.streaming_content)
    assert charges(key) == 1
    assert ApiKey.objects.get(pk=key.pk).credits == 99


def test_a_retry_after_a_failure_runs_again(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(500)
    body = {**HELLO, "model": "fake-chat"}
    assert post(client, CHAT, body, secret, **with_key("after-failure")).status_code == 502
    upstream.succeed_all()
    assert post(client, CHAT, body, secret, **with_key("after-failure")).status_code == 200
    assert ApiKey.objects.get(pk=key.pk).credits == 99
    assert mismatches() == []


def test_the_same_idempotency_key_of_another_api_key_is_its_own_request(client, seeded, make_key):
    one, one_secret = make_key()
    two, two_secret = make_key()
    assert post(client, CHAT, HELLO, one_secret, **with_key("shared")).status_code == 200
    response = post(client, CHAT, HELLO, two_secret, **with_key("shared"))
    assert "Idempotent-Replayed" not in response
    assert charges(one) == charges(two) == 1


def test_a_claim_older_than_a_day_starts_a_new_request(client, seeded, free_key):
    key, secret = free_key
    assert post(client, CHAT, HELLO, secret, **with_key("yesterday")).status_code == 200
    IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
    response = post(client, CHAT, HELLO, secret, **with_key("yesterday"))
    assert "Idempotent-Replayed" not in response
    assert charges(key) == 2


def test_a_response_too_large_to_keep_is_not_replayed_nor_charged_again(client, seeded, free_key, settings):
    key, secret = free_key
    settings.IDEMPOTENCY_MAX_BODY_BYTES = 10
    assert post(client, CHAT, HELLO, secret, **with_key("big")).status_code == 200
    error = assert_error(post(client, CHAT, HELLO, secret, **with_key("big")), 409, "idempotency_conflict")
    assert "too large" in error["message"]
    assert charges(key) == 1


@pytest.mark.parametrize("value", ["", "x" * 256, "tab\there", "é"])
def test_a_malformed_idempotency_key_is_a_400(client, seeded, free_key, value):
    key, secret = free_key
    assert_error(post(client, CHAT, HELLO, secret, **with_key(value)), 400, "invalid_value",
                 param="Idempotency-Key")
    assert charges(key) == 0
