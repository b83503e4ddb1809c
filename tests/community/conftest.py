"""A fake community platform: every test talks to it through `responses`, never the network."""
import pytest
import responses as responses_lib

PLATFORM = "https://platform.test/api/v10"


@pytest.fixture(autouse=True)
def platform_settings(settings):
    settings.DISCORD_API_BASE = PLATFORM
    settings.DISCORD_BOT_TOKEN = ""
    return settings


@pytest.fixture
def platform():
    # assert_all_requests_are_fired=False: several tests register an answer and then
    # prove, with len(calls) == 0, that it was never needed.
    with responses_lib.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def invite_url(code: str) -> str:
    return f"{PLATFORM}/invites/{code}"


def platform_invite(code: str = "gateway", *, expires_at=None, inviter=True) -> dict:
    """An invite object as the platform sends it, with members the gateway must drop."""
    body = {
        "type": 0,
        "code": code,
        "expires_at": expires_at,
        "guild": {
            "id": "1100000000000000001", "name": "Gateway Hall", "splash": None, "banner": "b4nn3r",
            "description": "Where gateway users meet.", "icon": "1c0n", "features": ["COMMUNITY", "NEWS"],
            "verification_level": 2, "vanity_url_code": None, "nsfw_level": 0, "premium_subscription_count": 7,
        },
        "guild_id": "1100000000000000001",
        "channel": {"id": "1100000000000000002", "type": 0, "name": "welcome"},
        "approximate_member_count": 1234,
        "approximate_presence_count": 321,
    }
    if inviter:
        body["inviter"] = {"id": "1100000000000000003", "username": "ada", "global_name": "Ada",
                           "avatar": "a1b2c3", "discriminator": "0", "public_flags": 0}
    return body
