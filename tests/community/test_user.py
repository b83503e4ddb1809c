import pytest
import requests

from tests.community.conftest import PLATFORM

pytestmark = pytest.mark.django_db

USER_ID = "80351110224678912"


@pytest.fixture
def token(settings):
    settings.DISCORD_BOT_TOKEN = "bot-token-secret"


def user_url(user_id=USER_ID):
    return f"{PLATFORM}/users/{user_id}"


def error_of(response, status):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    return body["error"]


def test_a_user_is_looked_up_with_the_bot_token(client, platform, token):
    platform.get(user_url(), json={"id": USER_ID, "username": "nelly", "global_name": "Nelly",
                                   "avatar": "8342729096ea3675442027381ff50dfe", "discriminator": "0",
                                   "public_flags": 131328, "banner": None})
    response = client.get("/v1/community/user", {"id": USER_ID})
    assert response.status_code == 200
    assert response.json() == {
        "id": USER_ID, "username": "nelly", "global_name": "Nelly",
        "avatar": f"https://cdn.discordapp.com/avatars/{USER_ID}/8342729096ea3675442027381ff50dfe.png",
    }
    assert platform.calls[0].request.headers["Authorization"] == "Bot bot-token-secret"
    assert b"bot-token-secret" not in response.content


def test_an_animated_avatar_is_a_gif(client, platform, token):
    platform.get(user_url(), json={"id": USER_ID, "username": "nelly", "global_name": None,
                                   "avatar": "a_1269e74af4df7417b13759eae50c83dc", "discriminator": "0"})
    assert client.get("/v1/community/user", {"id": USER_ID}).json()["avatar"].endswith(
        "/a_1269e74af4df7417b13759eae50c83dc.gif")


def test_a_user_without_avatar_gets_the_platforms_default_one(client, platform, token):
    platform.get(user_url(), json={"id": USER_ID, "username": "nelly", "global_name": None, "avatar": None,
                                   "discriminator": "0"})
    expected = (int(USER_ID) >> 22) % 6
    assert client.get("/v1/community/user", {"id": USER_ID}).json()["avatar"] == (
        f"https://cdn.discordapp.com/embed/avatars/{expected}.png")


def test_without_a_bot_token_the_lookup_is_a_clear_503(client, platform):
    error = error_of(client.get("/v1/community/user", {"id": USER_ID}), 503)
    assert error["code"] == "platform_not_configured"
    assert "DISCORD_BOT_TOKEN" in error["message"]
    assert len(platform.calls) == 0


@pytest.mark.parametrize("raw", ["abc", "123", "8035111022467891x", "-80351110224678912", "1" * 21,
                                 "18446744073709551616", " 80351110224678912/../x", "8.0e16"])
def test_a_malformed_id_is_a_400_naming_id(client, platform, token, raw):
    error = error_of(client.get("/v1/community/user", {"id": raw}), 400)
    assert (error["code"], error["param"]) == ("invalid_value", "id")
    assert len(platform.calls) == 0


def test_a_missing_id_is_a_400(client, token):
    error = error_of(client.get("/v1/community/user"), 400)
    assert (error["code"], error["param"]) == ("missing_field", "id")


def test_an_unknown_user_is_a_404_and_is_cached(client, platform, token):
    platform.get(user_url(), status=404, json={"message": "Unknown User", "code": 10013})
    for _ in range(2):
        error = error_of(client.get("/v1/community/user", {"id": USER_ID}), 404)
        assert error["code"] == "user_not_found"
    assert len(platform.calls) == 1


def test_a_found_user_is_cached(client, platform, token):
    platform.get(user_url(), json={"id": USER_ID, "username": "nelly", "global_name": None, "avatar": None})
    client.get("/v1/community/user", {"id": USER_ID})
    assert client.get("/v1/community/user", {"id": USER_ID}).json()["username"] == "nelly"
    assert len(platform.calls) == 1


@pytest.mark.parametrize("failure, status, code", [
    (requests.ConnectionError("refused"), 502, "upstream_unavailable"),
    (requests.ReadTimeout("slow"), 504, "upstream_timeout"),
])
def test_a_platform_that_is_down_or_slow_is_a_502_or_504(client, platform, token, failure, status, code):
    platform.get(user_url(), body=failure)
    error = error_of(client.get("/v1/community/user", {"id": USER_ID}), status)
    assert (error["type"], error["code"]) == ("upstream_error", code)


def test_the_platforms_rate_limit_is_a_429_with_retry_after(client, platform, token):
    platform.get(user_url(), status=429, headers={"Retry-After": "3"}, json={"retry_after": 2.5})
    response = client.get("/v1/community/user", {"id": USER_ID})
    assert error_of(response, 429)["code"] == "rate_limit_exceeded"
    assert response["Retry-After"] == "3"


def test_a_refused_token_is_a_503_that_says_so(client, platform, token):
    platform.get(user_url(), status=401, json={"message": "401: Unauthorized", "code": 0})
    error = error_of(client.get("/v1/community/user", {"id": USER_ID}), 503)
    assert error["code"] == "platform_token_rejected"
    assert "bot-token-secret" not in error["message"]
