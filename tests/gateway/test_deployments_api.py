"""The admin API of upstream pools (CONTRACT section 7): GET /admin/deployments, POST …/{id}/disable and
…/{id}/enable; their shapes, who may call them, the audit log, and what a change does to routing."""
import json
import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from gateway import deployment_health, routing
from keys.models import AuditLog
from keys.services import set_active
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider
from tests.conftest import bearer
from tests.gateway.conftest import FakeUpstream, assert_error, chat_completion, post

pytestmark = pytest.mark.django_db

LIST = "/admin/deployments"
SECRETS = {"GATEWAY_UPSTREAM_POOL_ONE": "sk-recognisable-secret-one-4f1d",
           "GATEWAY_UPSTREAM_POOL_TWO": "sk-recognisable-secret-two-9c2e",
           "GATEWAY_UPSTREAM_POOL_B": "sk-recognisable-secret-bee-77aa"}
MEMBERS = {"id", "model", "provider", "secret_env", "upstream_model", "priority", "weight", "rpm", "state",
           "cooldown_until", "disabled_reason", "disabled_at", "last_hour"}
ISO_8601 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def disable_url(deployment_id) -> str:
    return f"/admin/deployments/{deployment_id}/disable"


def enable_url(deployment_id) -> str:
    return f"/admin/deployments/{deployment_id}/enable"


@pytest.fixture
def upstreams(monkeypatch):
    """Two fake upstreams, a and b, each answering chat with its own name."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    servers = {}
    for name in ("a", "b"):
        server = FakeUpstream()
        server.start()
        server.json("/chat/completions", chat_completion(f"from {name}"))
        servers[name] = server
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def pool(upstreams):
    """Model "pooled": provider a with two secrets (two deployments, upstream name "a-name", weight 3) at
    priority 1, provider b at priority 2; model "other" on provider a too (two more deployments)."""
    a = Provider.objects.create(name="a", base_url=upstreams["a"].base_url, timeout=3,
                                api_key_envs=["GATEWAY_UPSTREAM_POOL_ONE", "GATEWAY_UPSTREAM_POOL_TWO"])
    b = Provider.objects.create(name="b", base_url=upstreams["b"].base_url, timeout=3,
                                api_key_env="GATEWAY_UPSTREAM_POOL_B")
    pooled = AiModel.objects.create(model_id="pooled", type="chat", owned_by="test", cost=1, tiers=["free"])
    other = AiModel.objects.create(model_id="other", type="chat", owned_by="test", cost=1, tiers=["free"])
    catalog.save_pool(pooled, [{"provider": a, "upstream_model": "a-name", "priority": 1, "weight": 3, "rpm": 0},
                               {"provider": b, "upstream_model": "", "priority": 2, "weight": 1, "rpm": 50}])
    catalog.save_pool(other, [{"provider": a, "upstream_model": "", "priority": 1, "weight": 1, "rpm": 0}])
    return pooled


def deployment_of(model_id: str, provider: str, secret_env: str) -> Deployment:
    return Deployment.objects.get(model__model_id=model_id, provider__name=provider, secret_env=secret_env)


def post_without_body(client, path, secret):
    # As curl -X POST sends it: no body at all (the test client's own default is an empty multipart form).
    return client.post(path, b"", content_type="application/json", **bearer(secret))


def get(client, path, secret):
    return client.get(path, **bearer(secret))


def chat(client, secret, model="pooled"):
    return post(client, "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Hi"}]},
                secret)


def answered_by(response) -> str:
    assert response.status_code == 200, response.content
    return response.json()["choices"][0]["message"]["content"].removeprefix("from ")


def assert_deployment_shape(item: dict) -> None:
    assert set(item) == MEMBERS
    for name in ("id", "priority", "weight", "rpm"):
        assert type(item[name]) is int, name
    for name in ("model", "provider", "secret_env", "upstream_model"):
        assert type(item[name]) is str, name
    assert item["state"] in ("healthy", "cooling", "disabled")
    for name in ("cooldown_until", "disabled_at"):
        assert item[name] is None or ISO_8601.match(item[name]), (name, item[name])
    assert item["disabled_reason"] is None or type(item["disabled_reason"]) is str
    assert set(item["last_hour"]) == {"requests", "failures", "p50_ms"}
    assert type(item["last_hour"]["requests"]) is int and type(item["last_hour"]["failures"]) is int
    assert item["last_hour"]["p50_ms"] is None or type(item["last_hour"]["p50_ms"]) in (int, float)


# ---------------------------------------------------------------- listing

def test_the_list_has_every_member_of_the_contract_with_its_type(client, pool, admin_key):
    response = get(client, LIST, admin_key[1])
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"deployments"}
    items = body["deployments"]
    assert len(items) == Deployment.objects.count() == 5
    for item in items:
        assert_deployment_shape(item)
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    assert next(item for item in items if item["id"] == one.pk) == {
        "id": one.pk, "model": "pooled", "provider": "a", "secret_env": "GATEWAY_UPSTREAM_POOL_ONE",
        "upstream_model": "a-name", "priority": 1, "weight": 3, "rpm": 0, "state": "healthy",
        "cooldown_until": None, "disabled_reason": None, "disabled_at": None,
        "last_hour": {"requests": 0, "failures": 0, "p50_ms": None}}
    # By model, then priority, then id.
    assert [(item["model"], item["priority"]) for item in items] == [
        ("other", 1), ("other", 1), ("pooled", 1), ("pooled", 1), ("pooled", 2)]


def test_the_upstream_name_is_the_model_id_when_none_is_set(client, pool, admin_key):
    items = get(client, LIST + "?model=pooled", admin_key[1]).json()["deployments"]
    b = next(item for item in items if item["provider"] == "b")
    assert deployment_of("pooled", "b", "GATEWAY_UPSTREAM_POOL_B").upstream_model == ""
    assert (b["upstream_model"], b["rpm"], b["secret_env"]) == ("pooled", 50, "GATEWAY_UPSTREAM_POOL_B")


def test_the_list_filters_by_model_and_an_unknown_model_is_404(client, pool, admin_key):
    items = get(client, LIST + "?model=other", admin_key[1]).json()["deployments"]
    assert [item["model"] for item in items] == ["other", "other"]
    assert {item["secret_env"] for item in items} == {"GATEWAY_UPSTREAM_POOL_ONE", "GATEWAY_UPSTREAM_POOL_TWO"}
    # A disabled model still has its deployments listed: staff look at it to decide whether to enable it.
    AiModel.objects.filter(model_id="other").update(enabled=False)
    assert len(get(client, LIST + "?model=other", admin_key[1]).json()["deployments"]) == 2
    assert_error(get(client, LIST + "?model=no-such-model", admin_key[1]), 404, "model_not_found", param="model")
    assert_error(get(client, LIST + "?model=a%00b", admin_key[1]), 404, "model_not_found", param="model")


def test_a_local_provider_has_an_empty_secret_name(client, seeded, admin_key):
    items = get(client, LIST + "?model=local-chat", admin_key[1]).json()["deployments"]
    assert [(item["provider"], item["secret_env"], item["upstream_model"]) for item in items] == [
        ("local", "", "local-chat")]


def test_the_last_hour_counts_requests_and_failures_with_the_median_latency(client, pool, admin_key, free_key,
                                                                           upstreams):
    _, secret = free_key
    for _ in range(3):
        assert answered_by(chat(client, secret, model="other")) == "a"
    upstreams["a"].fail_all(500)
    upstreams["a"].replies.clear()
    chat(client, secret, model="other")  # both of other's deployments fail once: a 502
    items = get(client, LIST + "?model=other", admin_key[1]).json()["deployments"]
    assert sum(item["last_hour"]["requests"] for item in items) == 5
    assert sum(item["last_hour"]["failures"] for item in items) == 2
    served = [item for item in items if item["last_hour"]["requests"] > 1]
    assert served and all(0 <= item["last_hour"]["p50_ms"] < 3000 for item in served)


def test_a_deployment_whose_secret_is_not_set_here_is_not_configured(client, pool, admin_key, monkeypatch):
    monkeypatch.delenv("GATEWAY_UPSTREAM_POOL_TWO")
    _, secret = admin_key
    items = {item["secret_env"]: item for item in get(client, LIST + "?model=pooled", secret).json()["deployments"]}
    assert items["GATEWAY_UPSTREAM_POOL_TWO"]["state"] == "not_configured"
    assert items["GATEWAY_UPSTREAM_POOL_ONE"]["state"] == items["GATEWAY_UPSTREAM_POOL_B"]["state"] == "healthy"


def test_a_cooling_deployment_says_until_when(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    deployment_health.cool_down(Deployment.objects.select_related("model", "provider").get(pk=one.pk), 30, why="a test")
    item = next(i for i in get(client, LIST, admin_key[1]).json()["deployments"] if i["id"] == one.pk)
    assert item["state"] == "cooling"
    until = datetime.fromisoformat(item["cooldown_until"].replace("Z", "+00:00"))
    assert timedelta(seconds=25) < until - timezone.now() <= timedelta(seconds=31)


# ---------------------------------------------------------------- who may call

@pytest.mark.parametrize("method, path", [("get", LIST), ("post", disable_url(1)), ("post", enable_url(1))])
def test_only_admin_keys_may_call_the_deployment_operations(client, pool, free_key, make_key, method, path):
    call = getattr(client, method)
    assert_error(call(path), 401, "missing_api_key", "authentication_error")
    assert_error(call(path, **bearer("sk-not-a-key-0123456789")), 401, "invalid_api_key", "authentication_error")
    assert_error(call(path, **bearer(free_key[1])), 401, "admin_required", "authentication_error")
    revoked, secret = make_key(is_admin=True)
    set_active(key=revoked, active=False, actor="test")
    assert_error(call(path, **bearer(secret)), 401, "invalid_api_key", "authentication_error")
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    assert not AuditLog.objects.filter(action__endswith="_deployment").exists()


# ---------------------------------------------------------------- disable

def test_a_disable_takes_out_that_one_deployment_and_is_audited(client, pool, admin_key, free_key):
    key, admin_secret = admin_key
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    response = post(client, disable_url(one.pk), {"reason": "provider maintenance"}, admin_secret)
    assert response.status_code == 200
    item = response.json()["deployment"]
    assert set(response.json()) == {"deployment"}
    assert_deployment_shape(item)
    assert (item["id"], item["state"], item["disabled_reason"], item["cooldown_until"]) == (
        one.pk, "disabled", "provider maintenance", None)
    one.refresh_from_db()
    assert one.disabled_reason == "provider maintenance"
    assert abs(one.disabled_at - timezone.now()) < timedelta(seconds=5)
    assert datetime.fromisoformat(item["disabled_at"].replace("Z", "+00:00")) == one.disabled_at
    # Only that one: the same secret serving another model, and the provider's other secret, stay in.
    assert list(Deployment.objects.filter(disabled_at__isnull=False)) == [one]
    entry = AuditLog.objects.get(action="disable_deployment")
    assert (entry.actor, entry.key) == (f"key {key.prefix}…", None)
    assert (entry.before["id"], entry.before["state"], entry.before["disabled_at"]) == (one.pk, "healthy", None)
    assert (entry.after["state"], entry.after["disabled_reason"]) == ("disabled", "provider maintenance")
    # Routing skips it from the next request on, and the model's other secret serves.
    _, secret = free_key
    for _ in range(8):
        assert answered_by(chat(client, secret)) == "a"
    sent = {item["secret_env"]: item["last_hour"]["requests"]
            for item in get(client, LIST + "?model=pooled", admin_secret).json()["deployments"]}
    assert sent == {"GATEWAY_UPSTREAM_POOL_ONE": 0, "GATEWAY_UPSTREAM_POOL_TWO": 8, "GATEWAY_UPSTREAM_POOL_B": 0}


def test_a_disable_by_hand_reaches_every_process_before_its_catalog_snapshot_does(client, pool, admin_key):
    # Another worker holds a snapshot taken before the disable, for up to CATALOG_CACHE_SECONDS.
    stale = catalog.get_model("pooled")
    one = next(d for d in stale.pool if d.secret_env == "GATEWAY_UPSTREAM_POOL_ONE")
    assert post(client, disable_url(one.pk), {}, admin_key[1]).status_code == 200
    assert not one.disabled  # that snapshot's row still says enabled
    health = routing.read_health(stale)
    assert health.disabled == {one.pk}
    chosen = {routing.choose(stale, health, skip=set()).pk for _ in range(50)}
    assert one.pk not in chosen


def test_a_disable_without_a_body_gives_a_default_reason_naming_who(client, pool, admin_key):
    key, secret = admin_key
    one = deployment_of("pooled", "b", "GATEWAY_UPSTREAM_POOL_B")
    response = post_without_body(client, disable_url(one.pk), secret)
    assert response.status_code == 200
    assert response.json()["deployment"]["disabled_reason"] == f"disabled by hand (key {key.prefix}…)"
    one.refresh_from_db()
    assert one.disabled and one.disabled_reason == f"disabled by hand (key {key.prefix}…)"
    # null means "not given" too.
    two = deployment_of("other", "a", "GATEWAY_UPSTREAM_POOL_TWO")
    assert post(client, disable_url(two.pk), {"reason": None}, secret).json()["deployment"]["disabled_reason"] \
        .startswith("disabled by hand")


@pytest.mark.parametrize("body, code, param", [
    ({"reason": "x", "until": "tomorrow"}, "unknown_parameter", "until"),
    ({"reason": 5}, "invalid_value", "reason"),
    ({"reason": ""}, "missing_field", "reason"),
    ({"reason": "x" * 301}, "invalid_value", "reason"),
    ("[]", "invalid_json", None),
    ("{not json", "invalid_json", None),
])
def test_a_disable_body_is_parsed_strictly_and_a_refusal_changes_nothing(client, pool, admin_key, body, code, param):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    assert_error(post(client, disable_url(one.pk), body, admin_key[1]), 400, code, param=param)
    one.refresh_from_db()
    assert not one.disabled
    assert not AuditLog.objects.filter(action="disable_deployment").exists()


def test_a_reason_of_the_longest_length_is_kept_whole(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    reason = "r" * 300
    assert post(client, disable_url(one.pk), {"reason": reason}, admin_key[1]).json()["deployment"][
        "disabled_reason"] == reason


def test_disabling_a_disabled_deployment_keeps_its_reason_and_writes_nothing(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    first = post(client, disable_url(one.pk), {"reason": "HTTP 401 from upstream"}, admin_key[1]).json()
    again = post(client, disable_url(one.pk), {"reason": "something else"}, admin_key[1])
    assert again.status_code == 200
    assert again.json() == first
    assert AuditLog.objects.filter(action="disable_deployment").count() == 1


# ---------------------------------------------------------------- enable

def test_an_enable_puts_the_deployment_back_in_rotation_and_is_audited(client, pool, admin_key, free_key,
                                                                       upstreams):
    key, admin_secret = admin_key
    b = deployment_of("pooled", "b", "GATEWAY_UPSTREAM_POOL_B")
    Deployment.objects.filter(model__model_id="pooled", provider__name="a").update(
        disabled_at=timezone.now(), disabled_reason="HTTP 401 from upstream")
    post(client, disable_url(b.pk), {"reason": "maintenance"}, admin_secret)
    _, secret = free_key
    assert_error(chat(client, secret), 502, "upstream_unavailable", "upstream_error")
    response = post_without_body(client, enable_url(b.pk), admin_secret)
    assert response.status_code == 200
    item = response.json()["deployment"]
    assert_deployment_shape(item)
    assert (item["id"], item["state"], item["disabled_reason"], item["disabled_at"]) == (b.pk, "healthy", None, None)
    b.refresh_from_db()
    assert (b.disabled_at, b.disabled_reason) == (None, "")
    entry = AuditLog.objects.get(action="enable_deployment")
    assert entry.actor == f"key {key.prefix}…"
    assert (entry.before["state"], entry.before["disabled_reason"], entry.after["state"]) == (
        "disabled", "maintenance", "healthy")
    assert answered_by(chat(client, secret)) == "b"


def test_an_enable_ends_a_cooldown_at_once(client, pool, admin_key):
    one = Deployment.objects.select_related("model", "provider").get(
        pk=deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE").pk)
    deployment_health.cool_down(one, 30, why="a test")
    item = post(client, enable_url(one.pk), {}, admin_key[1]).json()["deployment"]
    assert (item["state"], item["cooldown_until"]) == ("healthy", None)
    assert routing.read_health(catalog.get_model("pooled")).cooling == {}
    entry = AuditLog.objects.get(action="enable_deployment")
    assert (entry.before["state"], entry.after["state"]) == ("cooling", "healthy")
    assert entry.before["cooldown_until"]


def test_enabling_a_healthy_deployment_answers_it_and_writes_nothing(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    response = post(client, enable_url(one.pk), {}, admin_key[1])
    assert response.status_code == 200 and response.json()["deployment"]["state"] == "healthy"
    assert not AuditLog.objects.filter(action="enable_deployment").exists()


def test_an_enable_body_may_only_be_an_empty_object(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    post(client, disable_url(one.pk), {}, admin_key[1])
    assert_error(post(client, enable_url(one.pk), {"force": True}, admin_key[1]), 400, "unknown_parameter",
                 param="force")
    one.refresh_from_db()
    assert one.disabled


# ---------------------------------------------------------------- unknown ids, methods

@pytest.mark.parametrize("deployment_id", ["999999", "abc", "-1", "1.5", "99999999999999999999999", "%C2%B2"])
@pytest.mark.parametrize("url", [disable_url, enable_url])
def test_an_unknown_deployment_is_404_deployment_not_found(client, pool, admin_key, deployment_id, url):
    assert_error(post_without_body(client, url(deployment_id), admin_key[1]), 404, "deployment_not_found", param="id")
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    assert not AuditLog.objects.filter(action__endswith="_deployment").exists()


def test_the_wrong_method_is_405(client, pool, admin_key):
    one = deployment_of("pooled", "a", "GATEWAY_UPSTREAM_POOL_ONE")
    assert_error(get(client, disable_url(one.pk), admin_key[1]), 405, "method_not_allowed")
    assert_error(post(client, LIST, {}, admin_key[1]), 405, "method_not_allowed")


# ---------------------------------------------------------------- secrets

def test_no_answer_or_audit_entry_ever_holds_a_secret_value(client, pool, admin_key):
    secret = admin_key[1]
    answers = [get(client, LIST, secret).content]
    for deployment in Deployment.objects.all():
        answers.append(post(client, disable_url(deployment.pk), {"reason": "check"}, secret).content)
        answers.append(post(client, enable_url(deployment.pk), {}, secret).content)
    answers.append(get(client, LIST, secret).content)
    written = json.dumps([[entry.before, entry.after, entry.actor] for entry in AuditLog.objects.all()])
    assert AuditLog.objects.filter(action__endswith="_deployment").count() == 10
    for value in SECRETS.values():
        assert all(value.encode() not in answer for answer in answers)
        assert value not in written
    assert b"GATEWAY_UPSTREAM_POOL_ONE" in answers[0]  # the name is shown, only the value never is


# ---------------------------------------------------------------- schema

@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        return json.loads(Client().get("/openapi.json").content)


def component(schema, reference: dict) -> dict:
    return schema["components"]["schemas"][reference["$ref"].split("/")[-1]]


def test_the_schema_describes_the_three_operations_exactly(schema):
    listing = schema["paths"]["/admin/deployments"]["get"]
    assert listing["tags"] == ["admin"] and {"ApiKeyAuth": []} in listing["security"]
    assert {"200", "401", "404", "500"} <= set(listing["responses"])
    body = component(schema, listing["responses"]["200"]["content"]["application/json"]["schema"])
    item = component(schema, body["properties"]["deployments"]["items"])
    assert set(item["properties"]) == MEMBERS
    assert set(item["required"]) == MEMBERS
    assert item["properties"]["state"].get("enum") or "$ref" in item["properties"]["state"]
    for name in ("cooldown_until", "disabled_at"):
        assert item["properties"][name]["format"] == "date-time" and item["properties"][name]["nullable"]
    for path in ("/admin/deployments/{id}/disable", "/admin/deployments/{id}/enable"):
        operation = schema["paths"][path]["post"]
        (parameter,) = operation["parameters"]
        assert (parameter["name"], parameter["in"], parameter["schema"]["type"]) == ("id", "path", "integer")
        assert {"200", "401", "404"} <= set(operation["responses"])
        answer = component(schema, operation["responses"]["200"]["content"]["application/json"]["schema"])
        assert set(answer["properties"]) == {"deployment"}
    disable = schema["paths"]["/admin/deployments/{id}/disable"]["post"]
    assert disable["requestBody"]["required"] is False  # the body may be left out
    request = component(schema, disable["requestBody"]["content"]["application/json"]["schema"])
    assert set(request["properties"]) == {"reason"} and request["additionalProperties"] is False
    assert request["properties"]["reason"]["maxLength"] == 300
