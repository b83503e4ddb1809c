import json

import pytest
import responses as responses_lib

pytestmark = pytest.mark.django_db

KEYLESS = [
    "/",
    "/utils/facts",
    "/v1/neko",
    "/v1/chat/cors-test",
    "/v1/community/invites?link=gateway",
    "/v1/community/guilds",
    "/v1/community/user?id=80351110224678912",
    "/openapi.json",
    "/docs",
]


@pytest.fixture
def limit(settings):
    settings.PUBLIC_RATE_LIMIT = "3/m"
    settings.DISCORD_API_BASE = "https://platform.test/api"
    settings.DISCORD_BOT_TOKEN = "token"
    settings.NEKO_API_URL = "https://neko.test/api"
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.get("https://neko.test/api", json={"url": "https://img.test/1.png"})
        mock.get("https://platform.test/api/invites/gateway", status=404, json={})
        mock.get("https://platform.test/api/users/80351110224678912", status=404, json={})
        yield mock


@pytest.mark.parametrize("path", KEYLESS)
def test_keyless_operations_answer_429_past_the_per_address_limit(client, limit, path):
    for _ in range(3):
        assert client.get(path).status_code != 429
    response = client.get(path)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    if path in ("/", "/docs"):
        # The HTML pages answer with a page (templates/api_exception.html); everything else in the
        # contract's error body.
        assert response["Content-Type"].startswith("text/html")
        assert b"<h1>Too many requests</h1>" in response.content
    else:
        assert json.loads(response.content) == {"error": {
            "message": "Too many requests from this address: the limit is 3/m.",
            "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}}


def test_the_limit_is_counted_per_client_address(client, limit):
    for _ in range(3):
        client.get("/utils/facts", REMOTE_ADDR="203.0.113.1")
    assert client.get("/utils/facts", REMOTE_ADDR="203.0.113.1").status_code == 429
    assert client.get("/utils/facts", REMOTE_ADDR="203.0.113.2").status_code == 200


def test_all_keyless_operations_share_one_budget_per_address(client, limit):
    client.get("/utils/facts")
    client.get("/v1/chat/cors-test")
    client.get("/v1/neko")
    assert client.get("/v1/community/guilds").status_code == 429


def test_a_cache_outage_lets_keyless_requests_through(client, limit, monkeypatch):
    from django_ratelimit import core

    def down(*args, **kwargs):
        raise ConnectionError("cache unreachable")

    monkeypatch.setattr(core, "get_usage", down)
    monkeypatch.setattr("utils_app.limits.get_usage", down)
    for _ in range(5):
        assert client.get("/utils/facts").status_code == 200
