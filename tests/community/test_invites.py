from datetime import datetime, timedelta, timezone

import pytest
import requests

from community import links
from tests.community.conftest import invite_url, platform_invite

pytestmark = pytest.mark.django_db

LINK_FORMS = [
    "gateway",
    "  gateway  ",
    "discord.gg/gateway",
    "https://discord.gg/gateway",
    "http://discord.gg/gateway",
    "https://www.discord.gg/gateway",
    "https://discord.gg/gateway/",
    "https://discord.gg/gateway?event=123",
    "https://discord.gg/gateway#rules",
    "HTTPS://DISCORD.GG/gateway",
    "discord.com/invite/gateway",
    "https://discord.com/invite/gateway",
    "https://www.discord.com/invite/gateway/?utm_source=x",
    "discordapp.com/invite/gateway",
    "https://discordapp.com/invite/gateway",
    "www.discordapp.com/invite/gateway#top",
    "\thttps://discord.gg/gateway/\n",
]

MALFORMED = [
    "",
    "   ",
    "g",
    "a" * 33,
    "gate way",
    "gate/way",
    "../users/@me",
    "gateway%2F..",
    "https://example.com/gateway",
    "https://discord.gg.evil.test/gateway",
    "https://evil.test/discord.gg/gateway",
    "https://discord.gg/",
    "https://discord.gg/invite/gateway",
    "https://discord.com/gateway",
    "https://discord.com/invite/",
    "https://discord.com/invite/gateway/extra",
    "https://discord.gg:8443/gateway",
    "https://user@discord.gg/gateway",
    "ftp://discord.gg/gateway",
    "javascript:alert(1)",
    "https://discord.gg/gate%20way",
    "https://discord.gg/" + "a" * 300,
]


def test_a_found_invite_is_reduced_to_the_specs_fields(client, platform):
    platform.get(invite_url("gateway"), json=platform_invite())
    response = client.get("/v1/community/invites", {"link": "https://discord.gg/gateway"})
    assert response.status_code == 200
    assert response.json() == {
        "success": True,
        "error": None,
        "data": {
            "code": "gateway", "type": 0, "expires_at": None, "expires_in": None,
            "member_count": 1234, "presence_count": 321,
            "guild": {"id": "1100000000000000001", "name": "Gateway Hall", "splash": None, "banner": "b4nn3r",
                      "description": "Where gateway users meet.", "icon": "1c0n", "vanity_url_code": None,
                      "features": ["COMMUNITY", "NEWS"], "verification_level": 2},
            "channel": {"id": "1100000000000000002", "name": "welcome", "type": 0},
            "inviter": {"id": "1100000000000000003", "username": "ada", "global_name": "Ada", "avatar": "a1b2c3"},
        },
    }
    call = platform.calls[0].request
    assert call.url == invite_url("gateway") + "?with_counts=true&with_expiration=true"
    assert "Authorization" not in call.headers


@pytest.mark.parametrize("link", LINK_FORMS)
def test_every_accepted_link_form_looks_up_the_code(client, platform, link):
    platform.get(invite_url("gateway"), json=platform_invite())
    response = client.get("/v1/community/invites", {"link": link})
    assert response.status_code == 200, response.json()
    assert response.json()["data"]["code"] == "gateway"
    assert len(platform.calls) == 1


def test_codes_keep_their_case_and_hyphens(platform, client):
    platform.get(invite_url("Vanity-Club9"), json=platform_invite("Vanity-Club9"))
    response = client.get("/v1/community/invites", {"link": "discord.com/invite/Vanity-Club9"})
    assert response.json()["data"]["code"] == "Vanity-Club9"


@pytest.mark.parametrize("link", MALFORMED)
def test_anything_else_is_a_400_in_the_invite_shape_without_a_platform_call(client, platform, link):
    response = client.get("/v1/community/invites", {"link": link})
    assert response.status_code == 400
    body = response.json()
    assert body["success"] is False and body["data"] is None
    assert isinstance(body["error"], str) and body["error"]
    assert len(platform.calls) == 0


def test_a_missing_link_is_a_400_naming_the_parameter(client, platform):
    response = client.get("/v1/community/invites")
    assert response.status_code == 400
    assert response.json() == {"success": False, "data": None,
                               "error": "Missing 'link': send an invite link or code."}


def test_the_parser_returns_only_safe_codes():
    for link in LINK_FORMS:
        assert links.invite_code(link) == "gateway"
    for link in MALFORMED:
        with pytest.raises(links.MalformedLink):
            links.invite_code(link)


def test_an_unknown_invite_is_a_404_and_is_cached(client, platform):
    platform.get(invite_url("gone"), status=404, json={"message": "Unknown Invite", "code": 10006})
    for _ in range(2):
        response = client.get("/v1/community/invites", {"link": "discord.gg/gone"})
        assert response.status_code == 404
        assert response.json() == {"success": False, "data": None,
                                   "error": "Unknown invite: it does not exist or has expired."}
    assert len(platform.calls) == 1


def test_a_second_lookup_is_served_from_the_cache(client, platform):
    platform.get(invite_url("gateway"), json=platform_invite())
    first = client.get("/v1/community/invites", {"link": "gateway"})
    second = client.get("/v1/community/invites", {"link": "https://discord.com/invite/gateway"})
    assert first.json() == second.json()
    assert len(platform.calls) == 1


def test_expires_in_counts_down_from_the_invites_expiry(client, platform):
    expires_at = (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()
    platform.get(invite_url("soon"), json=platform_invite("soon", expires_at=expires_at))
    data = client.get("/v1/community/invites", {"link": "soon"}).json()["data"]
    assert data["expires_at"] == expires_at
    assert 7190 <= data["expires_in"] <= 7200


def test_an_invite_without_inviter_has_inviter_null(client, platform):
    platform.get(invite_url("vanity"), json=platform_invite("vanity", inviter=False))
    assert client.get("/v1/community/invites", {"link": "vanity"}).json()["data"]["inviter"] is None


def test_the_bot_token_is_sent_when_configured_and_never_echoed(client, platform, settings):
    settings.DISCORD_BOT_TOKEN = "bot-token-secret"
    platform.get(invite_url("gateway"), json=platform_invite())
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert platform.calls[0].request.headers["Authorization"] == "Bot bot-token-secret"
    assert b"bot-token-secret" not in response.content


@pytest.mark.parametrize("failure, status, message", [
    (requests.ConnectionError("refused"), 502, "The community platform could not be reached."),
    (requests.ReadTimeout("slow"), 504, "The community platform did not answer in time."),
    (requests.ConnectTimeout("slow"), 504, "The community platform did not answer in time."),
])
def test_a_platform_that_is_down_or_slow_is_a_502_or_504(client, platform, failure, status, message):
    platform.get(invite_url("gateway"), body=failure)
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert response.status_code == status
    assert response.json() == {"success": False, "data": None, "error": message}
    assert "platform.test" not in response.content.decode()


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_platform_server_error_is_a_502(client, platform, status):
    platform.get(invite_url("gateway"), status=status, body="<html>oops</html>")
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert response.status_code == 502
    assert response.json()["success"] is False


def test_a_body_that_is_not_json_is_a_502(client, platform):
    platform.get(invite_url("gateway"), status=200, body="not json")
    assert client.get("/v1/community/invites", {"link": "gateway"}).status_code == 502


def test_a_refused_bot_token_is_a_502_not_the_callers_fault(client, platform, settings):
    settings.DISCORD_BOT_TOKEN = "revoked"
    platform.get(invite_url("gateway"), status=401, json={"message": "401: Unauthorized", "code": 0})
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert response.status_code == 502
    assert "revoked" not in response.content.decode()


def test_the_platforms_rate_limit_is_a_429_with_its_retry_after(client, platform):
    platform.get(invite_url("gateway"), status=429, headers={"Retry-After": "7"},
                 json={"message": "You are being rate limited.", "retry_after": 6.2, "global": False})
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert response.status_code == 429
    assert response["Retry-After"] == "7"
    assert response.json() == {"success": False, "data": None,
                               "error": "The community platform is rate limiting lookups; retry later."}


def test_during_the_platforms_rate_limit_the_platform_is_not_asked_again(client, platform):
    platform.get(invite_url("gateway"), status=429, json={"retry_after": 30.5})
    client.get("/v1/community/invites", {"link": "gateway"})
    again = client.get("/v1/community/invites", {"link": "gateway"})
    assert again.status_code == 429
    assert 1 <= int(again["Retry-After"]) <= 31
    assert len(platform.calls) == 1


def test_a_platform_outage_is_remembered_briefly_so_clients_do_not_all_wait(client, platform):
    platform.get(invite_url("gateway"), body=requests.ReadTimeout("slow"))
    assert client.get("/v1/community/invites", {"link": "gateway"}).status_code == 504
    assert client.get("/v1/community/invites", {"link": "gateway"}).status_code == 504
    assert len(platform.calls) == 1


def test_a_cache_outage_still_answers(client, platform, monkeypatch):
    from django.core.cache import cache

    def down(*args, **kwargs):
        raise ConnectionError("cache unreachable")

    monkeypatch.setattr(cache, "get_many", down)
    monkeypatch.setattr(cache, "set", down)
    platform.get(invite_url("gateway"), json=platform_invite())
    response = client.get("/v1/community/invites", {"link": "gateway"})
    assert response.status_code == 200
    assert response.json()["data"]["member_count"] == 1234


def test_the_lookup_makes_no_database_query(client, platform, django_assert_num_queries):
    platform.get(invite_url("gateway"), json=platform_invite())
    with django_assert_num_queries(0):
        assert client.get("/v1/community/invites", {"link": "gateway"}).status_code == 200


def test_other_methods_are_a_405_in_the_error_shape(client):
    response = client.post("/v1/community/invites", {"link": "gateway"}, content_type="application/json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_link_urlsplit_cannot_read_is_a_400_not_a_500(client, platform):
    response = client.get("/v1/community/invites", {"link": "[x"})
    assert response.status_code == 400
    assert response.json()["success"] is False and "not an invite link" in response.json()["error"]
