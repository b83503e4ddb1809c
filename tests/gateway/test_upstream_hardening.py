"""Nothing an upstream sends is trusted: malformed or oversized answers, slow drips, endless
streams, image URLs aimed inside the network, and secrets a provider may not name."""
import json
import time

import pytest

from gateway.upstream import images
from keys.models import ApiKey
from models_catalog import catalog
from models_catalog.models import Deployment, Provider, UsageEvent
from tests.gateway.conftest import (
    PNG_1X1,
    Pause,
    add_models,
    add_provider,
    assert_error,
    body_for,
    chat_completion,
    chunk,
    post,
)

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"
IMAGES = "/v1/images/generations"
HELLO = [{"role": "user", "content": "Hello"}]


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def events(response) -> list:
    raw = b"".join(response.streaming_content).decode()
    return [data if data == "[DONE]" else json.loads(data)
            for data in (block.removeprefix("data: ") for block in raw.strip().split("\n\n"))]


def assert_refunded_upstream_failure(response, key, status: int, code: str):
    error = assert_error(response, status, code, "upstream_error")
    assert credits_of(key) == 100
    event = UsageEvent.objects.get()
    assert (event.success, event.status, event.credits_charged) == (False, status, 0)
    return error


# ---------------------------------------------------------------- malformed answers

@pytest.mark.parametrize("body", [
    b'{"choices": [',                                                     # cut off
    b"[" * 100_000 + b"]" * 100_000,                                      # nested past any recursion limit
    b'\xff\xfe{"choices": []}',                                           # not UTF-8
    json.dumps({"choices": ["hello"]}).encode(),                          # a choice that is no object
    json.dumps({"choices": [{"message": "hello"}]}).encode(),             # a message that is no object
    json.dumps({"choices": [{"message": {"content": ["hi"]}}]}).encode(),  # content parts that are no objects
])
def test_a_malformed_upstream_completion_is_a_502_and_refunded(client, fake_models, upstream, free_key, body):
    key, secret = free_key
    upstream.raw("/chat/completions", body, content_type="application/json")
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")


@pytest.mark.parametrize("data", [[{"embedding": [0.1], "index": "0"}, {"embedding": [0.2], "index": 1}],
                                  [{"embedding": {"x": 1}}], [{"embedding": [0.1], "index": True}]])
def test_malformed_upstream_embeddings_are_a_502_and_refunded(client, fake_models, upstream, free_key, data):
    key, secret = free_key
    upstream.json("/embeddings", {"object": "list", "data": data})
    response = post(client, *body_for("embedding", model=fake_models["embedding"]), secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")


def test_a_malformed_stream_event_ends_the_stream_with_an_error_event(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi"), {"choices": "not a list"}, "[DONE]"])
    found = events(post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret))
    assert found[1]["error"]["code"] == "upstream_unavailable"
    assert found[-1] == "[DONE]"
    assert credits_of(key) == 99  # "Hi" reached the client


def test_a_malformed_first_stream_event_is_an_ordinary_error_and_refunded(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [{"choices": "not a list"}, "[DONE]"])
    response = post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")


# ---------------------------------------------------------------- size

def test_an_upstream_answer_over_upstream_max_bytes_is_a_502_and_refunded(client, fake_models, upstream, free_key,
                                                                          settings):
    key, secret = free_key
    settings.UPSTREAM_MAX_BYTES = 64 * 1024
    upstream.json("/chat/completions", chat_completion("x" * 100_000))
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    error = assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")
    assert str(64 * 1024) in error["message"]


def test_an_answer_just_under_upstream_max_bytes_is_served(client, fake_models, upstream, free_key, settings):
    key, secret = free_key
    settings.UPSTREAM_MAX_BYTES = 64 * 1024
    upstream.json("/chat/completions", chat_completion("x" * 60_000))
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    assert response.status_code == 200, response.content
    assert credits_of(key) == 99


def test_one_stream_event_over_upstream_max_bytes_ends_the_stream(client, fake_models, upstream,
                                                                             free_key, settings):
    key, secret = free_key
    settings.UPSTREAM_MAX_BYTES = 64 * 1024
    upstream.sse("/chat/completions", [chunk("Hi"), chunk("y" * 100_000), "[DONE]"])
    found = events(post(client, CHAT, {"model": fake_models["chat"], "messages": HELLO, "stream": True}, secret))
    assert found[1]["error"]["code"] == "upstream_unavailable"
    assert found[-1] == "[DONE]"
    assert credits_of(key) == 99  # "Hi" reached the client


# ---------------------------------------------------------------- time

@pytest.fixture
def dripping(seeded, upstream, monkeypatch):
    """Models on a provider with a 1-second budget."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    return add_models(add_provider("drip", upstream.base_url, timeout=1), prefix="drip")


def test_an_answer_dripping_in_under_the_read_timeout_still_ends_at_the_providers_timeout(client, dripping, upstream,
                                                                                         free_key):
    key, secret = free_key
    # Each piece comes within 0.4 s, so no single read ever waits the 1 s: only a total deadline stops it.
    upstream.sse("/chat/completions", [step for _ in range(15) for step in (chunk("."), Pause(0.4))])
    started = time.monotonic()
    response = post(client, *body_for("chat", model=dripping["chat"]), secret)
    assert time.monotonic() - started < 3
    assert_refunded_upstream_failure(response, key, 504, "upstream_timeout")


def test_a_stream_longer_than_stream_max_seconds_ends_with_the_error_event(client, dripping, upstream, free_key,
                                                                          settings):
    key, secret = free_key
    settings.STREAM_MAX_SECONDS = 1.0
    upstream.sse("/chat/completions", [step for _ in range(15) for step in (chunk("word "), Pause(0.3))] + ["[DONE]"])
    started = time.monotonic()
    found = events(post(client, CHAT, {"model": dripping["chat"], "messages": HELLO, "stream": True}, secret))
    assert time.monotonic() - started < 3
    assert found[-2]["error"]["code"] == "upstream_timeout"
    assert "1 seconds" in found[-2]["error"]["message"]
    assert found[-1] == "[DONE]"
    assert 2 <= len(found) - 2 < 15  # some chunks were relayed before the cut
    # The client has the chunks relayed before the cut (CONTRACT section 5): the charge stands.
    assert credits_of(key) == 99
    event = UsageEvent.objects.get()
    assert (event.status, event.success, event.credits_charged) == (504, False, 1)


# ---------------------------------------------------------------- image URLs

def image_answer(upstream, url: str):
    upstream.json("/images/generations", {"created": 1, "data": [{"url": url}]})


def test_an_image_redirected_within_the_providers_own_host_is_fetched(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.serve_file("/files/final.png", PNG_1X1, "image/png")
    upstream.redirect("/files/moved.png", upstream.base_url + "/files/final.png")
    image_answer(upstream, upstream.base_url + "/files/moved.png")
    response = post(client, IMAGES, {"model": fake_models["image"], "prompt": "fox", "response_format": "b64_json"},
                    secret)
    assert response.status_code == 200, response.content
    assert response.json()["data"][0]["b64_json"]
    assert credits_of(key) == 99


def test_an_image_redirect_to_a_loopback_address_is_refused_and_refunded(client, fake_models, upstream, free_key):
    key, secret = free_key
    port = upstream.server.server_address[1]
    upstream.serve_file("/files/inside.png", PNG_1X1, "image/png")
    # Another name for this machine: not the provider's host, so it must be a public address.
    upstream.redirect("/files/moved.png", f"http://localhost:{port}/v1/files/inside.png")
    image_answer(upstream, upstream.base_url + "/files/moved.png")
    response = post(client, IMAGES, {"model": fake_models["image"], "prompt": "fox"}, secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")
    assert [call.path for call in upstream.calls if call.method == "GET"] == ["/v1/files/moved.png"]


def test_an_image_url_on_a_private_address_is_never_fetched(client, fake_models, upstream, free_key):
    key, secret = free_key
    port = upstream.server.server_address[1]
    upstream.serve_file("/files/inside.png", PNG_1X1, "image/png")
    image_answer(upstream, f"http://localhost:{port}/v1/files/inside.png")
    response = post(client, IMAGES, {"model": fake_models["image"], "prompt": "fox"}, secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")
    assert not [call for call in upstream.calls if call.method == "GET"]


@pytest.mark.parametrize("address, public", [
    ("93.184.216.34", True), ("2606:2800:220:1:248:1893:25c8:1946", True),
    ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.9", False), ("192.168.1.1", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
    ("::1", False), ("fd00::1", False), ("fe80::1%eth0", False), ("::ffff:127.0.0.1", False), ("not-an-ip", False),
])
def test_only_public_addresses_count_as_public(address, public):
    assert images.is_public(address) is public


# ---------------------------------------------------------------- the provider's secret

def test_a_provider_naming_a_variable_outside_the_allowlist_is_treated_as_unconfigured(client, seeded, upstream,
                                                                                      free_key, monkeypatch):
    key, secret = free_key
    monkeypatch.setenv("SECRET_KEY", "the-django-signing-key")
    # Written straight to the database, past the catalog loader and the staff form that refuse it.
    ids = add_models(add_provider("leaky", upstream.base_url, api_key_env="SECRET_KEY"), prefix="leaky")
    upstream.succeed_all()
    response = post(client, *body_for("chat", model=ids["chat"]), secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")
    assert upstream.posts() == []  # the secret went nowhere
    assert "the-django-signing-key" not in response.content.decode()


def test_a_variable_named_in_upstream_secret_env_allow_is_used(client, seeded, upstream, free_key, monkeypatch,
                                                               settings):
    key, secret = free_key
    settings.UPSTREAM_SECRET_ENV_ALLOW = ("PARTNER_TOKEN",)
    monkeypatch.setenv("PARTNER_TOKEN", "sk-partner")
    ids = add_models(add_provider("partner", upstream.base_url, api_key_env="PARTNER_TOKEN"), prefix="partner")
    upstream.succeed_all()
    response = post(client, *body_for("chat", model=ids["chat"]), secret)
    assert response.status_code == 200, response.content
    assert upstream.posts()[0].headers["Authorization"] == "Bearer sk-partner"
    assert credits_of(key) == 99


def test_the_allowlist_check_happens_at_request_time_not_only_when_saved(client, fake_models, upstream, free_key,
                                                                        monkeypatch):
    key, secret = free_key
    monkeypatch.setenv("DATABASE_URL", "postgres://gateway:db-password@db.internal/gateway")
    upstream.succeed_all()
    Provider.objects.filter(name="fake").update(api_key_env="DATABASE_URL")
    Deployment.objects.filter(provider__name="fake").update(secret_env="DATABASE_URL")
    catalog.invalidate()
    response = post(client, *body_for("chat", model=fake_models["chat"]), secret)
    assert_refunded_upstream_failure(response, key, 502, "upstream_unavailable")
    assert upstream.posts() == []
    assert "db-password" not in response.content.decode()
