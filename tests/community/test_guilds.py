import pytest
import requests
from django.contrib import admin
from django.core.exceptions import ValidationError

from community.models import Guild
from tests.community.conftest import invite_url, platform_invite

pytestmark = pytest.mark.django_db


@pytest.fixture
def guilds():
    return [
        Guild.objects.create(name="Gateway Hall", invite_code="gateway", description="Main server.", position=1),
        Guild.objects.create(name="Builders", invite_code="builders", description="Show your apps.", position=2),
        Guild.objects.create(name="Archive", invite_code="archive", listed=False),
    ]


def test_listed_guilds_come_in_order_with_live_invite_data(client, platform, guilds):
    platform.get(invite_url("gateway"), json=platform_invite("gateway"))
    platform.get(invite_url("builders"), json={**platform_invite("builders"), "approximate_member_count": 55})
    response = client.get("/v1/community/guilds")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [guild["name"] for guild in body["data"]] == ["Gateway Hall", "Builders"]
    first, second = body["data"]
    assert first["invite_code"] == "gateway" and first["invite_url"] == "https://discord.gg/gateway"
    assert first["description"] == "Main server."
    assert first["invite"]["member_count"] == 1234 and first["error"] is None
    assert second["invite"]["member_count"] == 55
    assert sorted(call.request.url.split("?")[0] for call in platform.calls) == [
        invite_url("builders"), invite_url("gateway")]


def test_a_guild_whose_invite_fails_is_listed_with_the_reason(client, platform, guilds):
    platform.get(invite_url("gateway"), json=platform_invite("gateway"))
    platform.get(invite_url("builders"), status=404, json={"message": "Unknown Invite"})
    data = client.get("/v1/community/guilds").json()["data"]
    assert data[0]["invite"] is not None
    assert data[1]["invite"] is None
    assert data[1]["error"] == "Unknown invite: it does not exist or has expired."


def test_the_platform_down_still_lists_the_guilds(client, platform, guilds):
    platform.get(invite_url("gateway"), body=requests.ConnectionError("down"))
    platform.get(invite_url("builders"), body=requests.ReadTimeout("slow"))
    response = client.get("/v1/community/guilds")
    assert response.status_code == 200
    assert [(guild["name"], guild["invite"], guild["error"]) for guild in response.json()["data"]] == [
        ("Gateway Hall", None, "The community platform could not be reached."),
        ("Builders", None, "The community platform did not answer in time."),
    ]


def test_guilds_share_the_invite_lookups_cache(client, platform, guilds, django_assert_num_queries):
    platform.get(invite_url("gateway"), json=platform_invite("gateway"))
    platform.get(invite_url("builders"), json=platform_invite("builders"))
    client.get("/v1/community/invites", {"link": "discord.gg/gateway"})
    assert len(platform.calls) == 1
    with django_assert_num_queries(1):
        client.get("/v1/community/guilds")
    assert len(platform.calls) == 2  # only builders was missing
    client.get("/v1/community/guilds")
    assert len(platform.calls) == 2


def test_no_guilds_is_an_empty_list(client, platform):
    assert client.get("/v1/community/guilds").json() == {"object": "list", "data": []}
    assert len(platform.calls) == 0


def test_staff_may_paste_a_whole_link_and_the_code_is_kept():
    guild = Guild(name="Gateway Hall", invite_code="  https://discord.com/invite/gateway/?ref=site ")
    guild.full_clean()
    guild.save()
    assert Guild.objects.get().invite_code == "gateway"


def test_a_guild_with_a_bad_invite_cannot_be_saved_through_validation():
    with pytest.raises(ValidationError) as raised:
        Guild(name="Bad", invite_code="https://example.com/x").full_clean()
    assert "invite_code" in raised.value.message_dict


def test_staff_edit_guilds_in_the_admin(admin_client):
    assert admin.site.is_registered(Guild)
    response = admin_client.post("/admin/community/guild/add/", {
        "name": "Gateway Hall", "invite_code": "discord.gg/gateway", "description": "", "position": 3,
        "listed": "on"})
    assert response.status_code == 302, response.content
    guild = Guild.objects.get()
    assert (guild.name, guild.invite_code, guild.position, guild.listed) == ("Gateway Hall", "gateway", 3, True)


@pytest.mark.parametrize("row_id", ["999999", "", "abc"])
def test_a_list_save_naming_no_guild_is_an_error_on_the_page_not_a_500(admin_client, row_id):
    # The list edits position and listed only: the invite check ran on a form without the invite field,
    # whose error could not be shown (a 500).
    guild = Guild.objects.create(name="Gateway Hall", invite_code="gateway", position=3)
    response = admin_client.post("/admin/community/guild/", {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0", "form-MAX_NUM_FORMS": "1000",
        "form-0-id": row_id, "form-0-position": "1", "form-0-listed": "on", "_save": "Save"})
    assert response.status_code == 200
    assert response.context["cl"].formset.errors[0]
    assert Guild.objects.get() == guild and guild.position == 3


@pytest.mark.parametrize("path", ["/admin/community/guild/", "/admin/utils_app/fact/"])
@pytest.mark.parametrize("row_id", [str(2**70), str(-(2**70)), str(2**63), "9" * 5000, " +" + "0" * 30 + "9" * 20])
def test_a_list_save_naming_a_row_past_a_bigint_is_sent_back_to_reload_not_a_500(admin_client, path, row_id):
    guild = Guild.objects.create(name="Gateway Hall", invite_code="gateway", position=3)
    response = admin_client.post(path, {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0", "form-MAX_NUM_FORMS": "1000",
        "form-0-id": row_id, "form-0-position": "1", "form-0-listed": "on", "form-0-enabled": "on", "_save": "Save"})
    assert response.status_code == 302 and response["Location"] == path
    followed = admin_client.get(path)
    assert "reload it" in " ".join(str(message) for message in followed.context["messages"])
    assert Guild.objects.get() == guild and guild.position == 3


def test_the_list_saves_a_guilds_position_and_keeps_its_invite(admin_client):
    guild = Guild.objects.create(name="Gateway Hall", invite_code="gateway", position=3)
    response = admin_client.post("/admin/community/guild/", {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0", "form-MAX_NUM_FORMS": "1000",
        "form-0-id": str(guild.pk), "form-0-position": "1", "_save": "Save"})
    assert response.status_code == 302
    guild.refresh_from_db()
    assert (guild.position, guild.listed, guild.invite_code) == (1, False, "gateway")
