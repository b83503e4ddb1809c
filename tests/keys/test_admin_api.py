import json

import pytest

from keys.models import ApiKey, AuditLog, digest_secret
from models_catalog.models import AiModel, Deployment, Provider, UsageEvent
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def post(client, path, body, secret):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, raw, content_type="application/json", **bearer(secret))


def error_of(response, status):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def config_of(key: ApiKey) -> tuple:
    key.refresh_from_db()
    return (key.tier, key.credits, key.max_credits, key.rpm, key.rph, key.owner, key.is_active)


@pytest.fixture
def target(make_key):
    """The key the admin changes: free, 50 of 100 credits, 60/min, 1000/h, with an owner."""
    return make_key(tier="free", credits=50, max_credits=100, rpm=60, rph=1000,
                    owner={"platform_id": "1234", "platform_username": "ann"})


# ---------------------------------------------------------------- update-key

def test_an_admin_updates_a_key_and_gets_its_new_config(client, admin_key, target):
    admin, admin_secret = admin_key
    key, secret = target
    response = post(client, "/admin/update-key",
                    {"key": secret, "update": {"tier": "premium", "credits": 200, "maxCredits": 300, "rpm": 1000,
                                               "rph": 10000, "maxConcurrent": 4}}, admin_secret)
    assert response.status_code == 200, response.content
    assert response.json() == {"apiKey": {"key": secret, "config": {
        "tier": "premium", "credits": 200, "maxCredits": 300, "rpm": 1000, "rph": 10000, "maxConcurrent": 4,
        "owner": {"platform_id": "1234", "platform_username": "ann", "platform_img": "", "category": ""},
        "budget": None, "tpm": None}}}
    assert config_of(key)[:5] == ("premium", 200, 300, 1000, 10000)


def test_members_left_out_keep_their_value_and_owner_is_merged_member_by_member(client, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    response = post(client, "/admin/update-key",
                    {"key": secret, "update": {"owner": {"category": "vip", "platform_img": "https://img/a.png"}}},
                    admin_secret)
    assert response.status_code == 200
    expected_owner = {"platform_id": "1234", "platform_username": "ann", "platform_img": "https://img/a.png",
                      "category": "vip"}
    assert response.json()["apiKey"]["config"]["owner"] == expected_owner
    assert config_of(key) == ("free", 50, 100, 60, 1000, expected_owner, True)


def test_an_empty_string_clears_one_owner_member(client, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    post(client, "/admin/update-key", {"key": secret, "update": {"owner": {"platform_username": ""}}}, admin_secret)
    assert config_of(key)[5] == {"platform_id": "1234", "platform_username": "", "platform_img": "", "category": ""}


def test_every_change_is_audited_with_the_admin_before_and_after_and_never_a_secret(client, admin_key, target):
    admin, admin_secret = admin_key
    key, secret = target
    post(client, "/admin/update-key", {"key": secret, "update": {"tier": "cool", "rpm": 5}}, admin_secret)
    entry = AuditLog.objects.get(action="update_key")
    assert entry.actor == f"key {admin.prefix}…"
    assert (entry.key_id, entry.key_prefix) == (key.pk, key.prefix)
    assert (entry.before["tier"], entry.before["rpm"]) == ("free", 60)
    assert (entry.after["tier"], entry.after["rpm"]) == ("cool", 5)
    for logged in AuditLog.objects.all():
        text = json.dumps([logged.actor, logged.before, logged.after])
        assert secret not in text and admin_secret not in text


@pytest.mark.parametrize("body, param, code", [
    # types: integers are JSON integers, strings are JSON strings
    ({"rpm": "100"}, "update.rpm", "invalid_value"),
    ({"rpm": True}, "update.rpm", "invalid_value"),
    ({"rph": 100.0}, "update.rph", "invalid_value"),
    ({"credits": "10"}, "update.credits", "invalid_value"),
    ({"credits": False}, "update.credits", "invalid_value"),
    ({"maxCredits": [100]}, "update.maxCredits", "invalid_value"),
    ({"credits": 10**30}, "update.credits", "invalid_value"),
    ({"tier": 3}, "update.tier", "invalid_value"),
    ({"tier": None}, "update.tier", "missing_field"),
    ({"owner": "ann"}, "update.owner", "invalid_value"),
    ({"owner": {"platform_id": 1234}}, "update.owner.platform_id", "invalid_value"),
    ({"owner": {"category": None}}, "update.owner.category", "missing_field"),
    ({"owner": {"platform_img": "x" * 501}}, "update.owner.platform_img", "invalid_value"),
    # unknown members
    ({"colour": "red"}, "update.colour", "unknown_parameter"),
    ({"max_credits": 10}, "update.max_credits", "unknown_parameter"),
    ({"owner": {"email": "a@b.c"}}, "update.owner.email", "unknown_parameter"),
    # values: the SPEC's ranges and credits <= maxCredits
    ({"tier": "gold"}, "update.tier", "invalid_value"),
    ({"credits": -1}, "update.credits", "invalid_value"),
    ({"maxCredits": -1}, "update.maxCredits", "invalid_value"),
    ({"rpm": 0}, "update.rpm", "invalid_value"),
    ({"rpm": 1001}, "update.rpm", "invalid_value"),
    ({"rph": 0}, "update.rph", "invalid_value"),
    ({"maxConcurrent": 0}, "update.maxConcurrent", "invalid_value"),
    ({"maxConcurrent": 1001}, "update.maxConcurrent", "invalid_value"),
    ({"rph": 10001}, "update.rph", "invalid_value"),
    ({"credits": 101}, "update.credits", "invalid_value"),
    ({"maxCredits": 49}, "update.credits", "invalid_value"),
    ({"credits": 500, "maxCredits": 400}, "update.credits", "invalid_value"),
])
def test_a_bad_update_is_a_400_naming_the_member_and_changes_nothing(client, admin_key, target, body, param, code):
    _, admin_secret = admin_key
    key, secret = target
    before = config_of(key)
    error = error_of(post(client, "/admin/update-key", {"key": secret, "update": body}, admin_secret), 400)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert config_of(key) == before
    assert not AuditLog.objects.filter(action="update_key").exists()


@pytest.mark.parametrize("body, param, code", [
    ({"update": {"rpm": 5}}, "key", "missing_field"),
    ({"key": "", "update": {"rpm": 5}}, "key", "missing_field"),
    ({"key": 12345, "update": {"rpm": 5}}, "key", "invalid_value"),
    ({"key": "SECRET"}, "update", "missing_field"),
    ({"key": "SECRET", "update": None}, "update", "missing_field"),
    ({"key": "SECRET", "update": [{"rpm": 5}]}, "update", "invalid_value"),
    ({"key": "SECRET", "update": {"rpm": 5}, "dryRun": True}, "dryRun", "unknown_parameter"),
])
def test_a_bad_request_body_is_a_400_naming_the_member(client, admin_key, target, body, param, code):
    _, admin_secret = admin_key
    key, secret = target
    if body.get("key") == "SECRET":
        body["key"] = secret
    error = error_of(post(client, "/admin/update-key", body, admin_secret), 400)
    assert (error["param"], error["code"]) == (param, code)
    assert config_of(key)[3] == 60


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1]", b'"key"'])
def test_a_body_that_is_not_a_json_object_is_invalid_json(client, admin_key, raw):
    _, admin_secret = admin_key
    error = error_of(post(client, "/admin/update-key", raw, admin_secret), 400)
    assert error["code"] == "invalid_json"


def test_the_boundaries_of_the_ranges_are_accepted(client, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    for update in ({"rpm": 1, "rph": 1, "credits": 0, "maxCredits": 0}, {"rpm": 1000, "rph": 10000},
                   {"maxCredits": 7, "credits": 7}):
        assert post(client, "/admin/update-key", {"key": secret, "update": update}, admin_secret).status_code == 200
    assert config_of(key)[:5] == ("free", 7, 7, 1000, 10000)


def test_an_unknown_key_is_a_404_key_not_found(client, admin_key, target):
    _, admin_secret = admin_key
    error = error_of(post(client, "/admin/update-key", {"key": "sk-" + "x" * 43, "update": {"rpm": 5}},
                          admin_secret), 404)
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "key_not_found", "key")
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_a_revoked_key_can_still_be_reconfigured(client, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)
    assert post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 9}}, admin_secret).status_code == 200
    assert config_of(key)[3] == 9


@pytest.mark.parametrize("path", ["/admin/update-key", "/admin/create-key", "/admin/revoke-key"])
def test_an_ordinary_key_gets_401_admin_required(client, free_key, target, path):
    _, secret = free_key
    key, target_secret = target
    before = config_of(key)
    error = error_of(post(client, path, {"key": target_secret, "update": {"tier": "special"}}, secret), 401)
    assert (error["type"], error["code"]) == ("authentication_error", "admin_required")
    assert config_of(key) == before
    assert ApiKey.objects.count() == 2
    assert not AuditLog.objects.exclude(action="create_key").exists()


@pytest.mark.parametrize("path", ["/admin/update-key", "/admin/create-key", "/admin/revoke-key"])
def test_no_key_gets_401_missing_api_key(client, target, path):
    _, target_secret = target
    error = error_of(client.post(path, {"key": target_secret}, content_type="application/json"), 401)
    assert error["code"] == "missing_api_key"


def test_a_revoked_admin_key_gets_401(client, admin_key, target):
    admin, admin_secret = admin_key
    _, secret = target
    ApiKey.objects.filter(pk=admin.pk).update(is_active=False)
    error = error_of(post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 5}}, admin_secret), 401)
    assert error["code"] == "invalid_api_key"


def test_the_admin_operations_only_take_post(client, admin_key):
    _, admin_secret = admin_key
    error = error_of(client.get("/admin/update-key", **bearer(admin_secret)), 405)
    assert error["code"] == "method_not_allowed"


# ---------------------------------------------------------------- create-key

def test_an_admin_creates_a_key_and_sees_its_secret_once(client, admin_key):
    admin, admin_secret = admin_key
    response = post(client, "/admin/create-key", {
        "config": {"tier": "augmented", "credits": 30, "maxCredits": 60, "rpm": 10, "rph": 100,
                   "owner": {"platform_id": "42", "category": "beta"}},
        "name": "beta tester"}, admin_secret)
    assert response.status_code == 201, response.content
    record = response.json()["apiKey"]
    secret = record["key"]
    assert secret.startswith("sk-") and len(secret) >= 35
    assert record["config"] == {"tier": "augmented", "credits": 30, "maxCredits": 60, "rpm": 10, "rph": 100,
                                "maxConcurrent": 16,
                                "owner": {"platform_id": "42", "platform_username": "", "platform_img": "",
                                          "category": "beta"}, "budget": None, "tpm": None}
    assert (record["name"], record["isAdmin"], record["prefix"]) == ("beta tester", False, secret[:10])

    key = ApiKey.objects.get(digest=digest_secret(secret))
    assert (key.tier, key.credits, key.max_credits, key.rpm, key.rph, key.name) == (
        "augmented", 30, 60, 10, 100, "beta tester")
    assert secret not in json.dumps([key.digest, key.prefix])
    entry = AuditLog.objects.get(action="create_key", key=key)
    assert entry.actor == f"key {admin.prefix}…"
    assert entry.before is None and entry.after["tier"] == "augmented"
    assert secret not in json.dumps(entry.after)
    # The new secret works at once.
    assert client.get("/v1/statistic/key", **bearer(secret)).status_code == 200


def test_a_created_key_has_defaults_for_what_is_left_out(client, admin_key):
    _, admin_secret = admin_key
    response = post(client, "/admin/create-key", {}, admin_secret)
    assert response.status_code == 201
    assert response.json()["apiKey"]["config"] == {
        "tier": "free", "credits": 0, "maxCredits": 0, "rpm": 60, "rph": 1000, "maxConcurrent": 16,
        "owner": {"platform_id": "", "platform_username": "", "platform_img": "", "category": ""},
        "budget": None, "tpm": None}


def test_a_created_admin_key_may_call_the_admin_api(client, admin_key, target):
    _, admin_secret = admin_key
    _, secret = target
    new_admin = post(client, "/admin/create-key", {"isAdmin": True}, admin_secret).json()["apiKey"]
    assert new_admin["isAdmin"] is True
    assert post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 7}}, new_admin["key"]).status_code == 200


@pytest.mark.parametrize("body, param, code", [
    ({"config": {"credits": 10, "maxCredits": 5}}, "config.credits", "invalid_value"),
    ({"config": {"rpm": 0}}, "config.rpm", "invalid_value"),
    ({"config": {"tier": "gold"}}, "config.tier", "invalid_value"),
    ({"config": {"rph": "50"}}, "config.rph", "invalid_value"),
    ({"config": {"owner": {"nick": "x"}}}, "config.owner.nick", "unknown_parameter"),
    ({"config": {"secret": "sk-mine"}}, "config.secret", "unknown_parameter"),
    ({"isAdmin": "yes"}, "isAdmin", "invalid_value"),
    ({"name": 5}, "name", "invalid_value"),
    ({"key": "sk-chosen-by-me"}, "key", "unknown_parameter"),
])
def test_a_bad_create_request_is_a_400_and_creates_nothing(client, admin_key, body, param, code):
    _, admin_secret = admin_key
    error = error_of(post(client, "/admin/create-key", body, admin_secret), 400)
    assert (error["param"], error["code"]) == (param, code)
    assert ApiKey.objects.count() == 1


# ---------------------------------------------------------------- revoke-key

def test_a_revoked_key_gets_401_everywhere_and_the_revocation_is_audited(client, admin_key, target):
    admin, admin_secret = admin_key
    key, secret = target
    assert client.get("/v1/statistic/key", **bearer(secret)).status_code == 200
    response = post(client, "/admin/revoke-key", {"key": secret}, admin_secret)
    assert response.status_code == 200
    assert response.json()["apiKey"]["key"] == secret
    assert response.json()["apiKey"]["active"] is False
    assert config_of(key)[6] is False
    error = error_of(client.get("/v1/statistic/key", **bearer(secret)), 401)
    assert error["code"] == "invalid_api_key"
    error = error_of(client.post("/v1/chat/completions", {"model": "local-chat", "messages": []},
                                 content_type="application/json", **bearer(secret)), 401)
    assert error["code"] == "invalid_api_key"
    entry = AuditLog.objects.get(action="revoke_key")
    assert (entry.actor, entry.key_id, entry.before["is_active"], entry.after["is_active"]) == (
        f"key {admin.prefix}…", key.pk, True, False)


def test_revoking_twice_answers_the_same_and_audits_once(client, admin_key, target):
    _, admin_secret = admin_key
    _, secret = target
    first = post(client, "/admin/revoke-key", {"key": secret}, admin_secret)
    second = post(client, "/admin/revoke-key", {"key": secret}, admin_secret)
    assert first.json() == second.json()
    assert AuditLog.objects.filter(action="revoke_key").count() == 1


def test_a_revoked_admin_key_loses_the_admin_api(client, admin_key, make_key, target):
    _, admin_secret = admin_key
    other_admin, other_secret = make_key(is_admin=True)
    _, secret = target
    assert post(client, "/admin/revoke-key", {"key": other_secret}, admin_secret).status_code == 200
    error = error_of(post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 5}}, other_secret), 401)
    assert error["code"] == "invalid_api_key"


def test_revoking_an_unknown_key_is_a_404(client, admin_key):
    _, admin_secret = admin_key
    error = error_of(post(client, "/admin/revoke-key", {"key": "sk-nobody"}, admin_secret), 404)
    assert error["code"] == "key_not_found"


@pytest.mark.parametrize("body, param, code", [
    ({}, "key", "missing_field"),
    ({"key": ["sk-a"]}, "key", "invalid_value"),
    ({"key": "sk-a", "reason": "abuse"}, "reason", "unknown_parameter"),
])
def test_a_bad_revoke_request_is_a_400(client, admin_key, body, param, code):
    _, admin_secret = admin_key
    error = error_of(post(client, "/admin/revoke-key", body, admin_secret), 400)
    assert (error["param"], error["code"]) == (param, code)


# ---------------------------------------------------------------- the next request sees the change

def chat(client, secret, model="local-chat"):
    return client.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}]},
                       content_type="application/json", **bearer(secret))


def test_a_tier_upgrade_unlocks_a_model_on_the_very_next_request(client, seeded, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    model = AiModel.objects.create(model_id="local-chat-premium", type="chat", owned_by="local", cost=1,
                                   tiers=["premium"])
    Deployment.objects.create(model=model, provider=Provider.objects.get(name="local"))
    refused = chat(client, secret, "local-chat-premium")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "model_not_allowed"

    assert post(client, "/admin/update-key", {"key": secret, "update": {"tier": "premium"}},
                admin_secret).status_code == 200
    allowed = chat(client, secret, "local-chat-premium")
    assert allowed.status_code == 200, allowed.content
    assert allowed.json()["model"] == "local-chat-premium"

    assert post(client, "/admin/update-key", {"key": secret, "update": {"tier": "free"}},
                admin_secret).status_code == 200
    assert chat(client, secret, "local-chat-premium").status_code == 403
    assert UsageEvent.objects.filter(key=key).count() == 1


def test_a_lowered_rpm_applies_on_the_very_next_request(client, seeded, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    for _ in range(3):
        assert chat(client, secret).status_code == 200
    assert post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 3}}, admin_secret).status_code == 200
    limited = chat(client, secret)
    assert limited.status_code == 429
    assert (limited.json()["error"]["code"], limited.json()["error"]["param"]) == ("rate_limit_exceeded", "rpm")
    assert limited["X-RateLimit-Limit-Requests"] == "3"
    assert int(limited["Retry-After"]) >= 1
    assert post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 10}}, admin_secret).status_code == 200
    assert chat(client, secret).status_code == 200


def test_credits_set_by_an_admin_apply_on_the_very_next_request(client, seeded, admin_key, target):
    _, admin_secret = admin_key
    key, secret = target
    post(client, "/admin/update-key", {"key": secret, "update": {"credits": 0}}, admin_secret)
    broke = chat(client, secret)
    assert broke.status_code == 402
    assert broke.json()["error"]["code"] == "insufficient_credits"

    post(client, "/admin/update-key", {"key": secret, "update": {"credits": 5}}, admin_secret)
    paid = chat(client, secret)
    assert paid.status_code == 200
    assert paid["X-Remaining-Credits"] == "4"
    key.refresh_from_db()
    assert key.credits == 4
