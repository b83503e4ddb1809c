"""The provider client: fallbacks, how each upstream failure is reported, connection reuse."""
import pytest

from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.gateway.conftest import (
    OPERATIONS,
    add_models,
    add_provider,
    assert_error,
    body_for,
    chat_completion,
    closed_port_url,
    post,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain(seeded, upstream, backup_upstream, monkeypatch):
    """Models on provider 'primary' (the fake upstream) falling back to 'backup' (a second one)."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    # Timeouts with room for a loaded CI machine; the deliberately late answers wait 10 s.
    add_provider("backup", backup_upstream.base_url, timeout=2)
    return add_models(add_provider("primary", upstream.base_url, timeout=1), prefix="fb", fallbacks=["backup"])


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_failing_provider_falls_back_to_the_next_one_and_charges_once(client, chain, upstream, backup_upstream,
                                                                       free_key, operation):
    key, secret = free_key
    upstream.fail_all(502)
    backup_upstream.succeed_all()
    response = post(client, *body_for(operation, model=chain[operation]), secret)
    assert response.status_code == 200, response.content
    assert len(upstream.posts()) == 1 and len(backup_upstream.posts()) == 1
    assert backup_upstream.posts()[0].body["model"] == f"up-{operation}"
    assert credits_of(key) == 99
    event = UsageEvent.objects.get()
    assert (event.success, event.provider) == (True, "backup")


def test_a_provider_that_cannot_be_reached_falls_back(client, seeded, backup_upstream, free_key, monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    add_provider("backup", backup_upstream.base_url)
    ids = add_models(add_provider("down", closed_port_url()), prefix="down", fallbacks=["backup"])
    backup_upstream.json("/chat/completions", chat_completion("backup here"))
    _, secret = free_key
    response = post(client, *body_for("chat", model=ids["chat"]), secret)
    assert response.json()["choices"][0]["message"]["content"] == "backup here"


def test_a_provider_that_times_out_falls_back(client, chain, upstream, backup_upstream, free_key):
    _, secret = free_key
    upstream.fail_all(200, {"late": True}, delay=10)
    backup_upstream.json("/chat/completions", chat_completion("on time"))
    response = post(client, *body_for("chat", model=chain["chat"]), secret)
    assert response.json()["choices"][0]["message"]["content"] == "on time"


def test_a_refused_request_is_not_retried_elsewhere(client, chain, upstream, backup_upstream, free_key):
    key, secret = free_key
    upstream.fail_all(400, {"error": {"message": "max_tokens is too large", "param": "max_tokens",
                                      "code": "invalid_value"}})
    backup_upstream.succeed_all()
    response = post(client, *body_for("chat", model=chain["chat"]), secret)
    error = assert_error(response, 400, "invalid_value", param="max_tokens")
    assert error["message"] == "max_tokens is too large"
    assert backup_upstream.posts() == []
    assert credits_of(key) == 100


def test_when_every_provider_fails_the_last_failure_decides_the_status(client, chain, upstream, backup_upstream,
                                                                       free_key):
    key, secret = free_key
    upstream.fail_all(500)
    backup_upstream.fail_all(200, {"late": True}, delay=10)
    response = post(client, *body_for("chat", model=chain["chat"]), secret)
    assert_error(response, 504, "upstream_timeout", "upstream_error")
    assert credits_of(key) == 100
    event = UsageEvent.objects.get()
    assert (event.success, event.status, event.provider) == (False, 504, "backup")


def test_an_upstream_refusing_the_gateways_credential_is_not_shown_as_the_clients_fault(client, fake_models,
                                                                                       upstream, free_key):
    key, secret = free_key
    upstream.fail_all(401, {"error": {"message": "Incorrect API key provided: sk-up***", "code": "invalid_api_key"}})
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    error = assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert "sk-up" not in error["message"]
    assert credits_of(key) == 100


def test_an_upstream_rate_limit_is_passed_on_when_no_fallback_is_left(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.fail_all(429, {"error": {"message": "Slow down", "code": "rate_limit_exceeded"}})
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    error = assert_error(response, 429, "rate_limit_exceeded")
    assert error["message"] == "Slow down"


def test_an_upstream_answer_that_is_not_json_is_upstream_unavailable(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.raw("/chat/completions", b"<html>gateway error</html>", content_type="text/html")
    assert_error(post(client, *body_for("chat", model=fake_models["chat"]), secret), 502, "upstream_unavailable",
                 "upstream_error")
    assert credits_of(key) == 100


def test_requests_to_one_provider_reuse_a_kept_alive_connection(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.succeed_all()
    for operation in ("chat", "embedding", "chat"):
        assert post(client, *body_for(operation, model=fake_models[operation]), secret).status_code == 200
    ports = {call.peer_port for call in upstream.posts()}
    assert len(upstream.posts()) == 3
    assert len(ports) == 1


def test_the_request_id_is_sent_upstream_with_a_call_and_a_stream(client, fake_models, upstream, free_key):
    from tests.gateway.conftest import chat_completion, chunk

    _, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    body = {"model": "fake-chat", "messages": [{"role": "user", "content": "Hello"}]}
    call = post(client, "/v1/chat/completions", body, secret, HTTP_X_REQUEST_ID="client-chosen")
    assert call.status_code == 200
    upstream.sse("/chat/completions", [chunk("hi"), "[DONE]"])
    stream = post(client, "/v1/chat/completions", {**body, "stream": True}, secret)
    b"".join(stream.streaming_content)
    # The gateway's own id, not one a client chose.
    sent = [received.headers.get("X-Request-ID") for received in upstream.posts()]
    assert sent == [call["X-Request-ID"], stream["X-Request-ID"]]
