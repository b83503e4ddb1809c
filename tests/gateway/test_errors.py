"""Every error of CONTRACT §4, on each of the four metered operations.

Each test also checks what the database kept: a request refused before the
upstream call costs nothing and leaves no usage event; an upstream failure is
refunded and recorded as a failed request.
"""
import pytest

from gateway.upstream.local import LocalAdapter
from keys.models import ApiKey
from keys.services import update_key
from models_catalog import catalog
from models_catalog.models import AiModel, UsageEvent
from tests.gateway.conftest import (
    LOCAL_BODIES,
    LOCAL_TIER,
    OPERATIONS,
    add_models,
    add_provider,
    assert_error,
    body_for,
    closed_port_url,
    post,
)

pytestmark = pytest.mark.django_db
OTHER_TYPE = {"chat": "local-image", "image": "local-speech", "speech": "local-embedding", "embedding": "local-chat"}


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def assert_untouched(key, before: int):
    assert credits_of(key) == before
    assert not UsageEvent.objects.exists()


@pytest.fixture(params=OPERATIONS)
def operation(request, seeded):
    return request.param


# ---------------------------------------------------------------- 401

def test_a_request_without_a_key_is_missing_api_key(client, operation):
    path, body = LOCAL_BODIES[operation]
    response = post(client, path, body)
    assert_error(response, 401, "missing_api_key", "authentication_error")
    assert not UsageEvent.objects.exists()


def test_a_malformed_authorization_header_is_missing_api_key(client, operation):
    path, body = LOCAL_BODIES[operation]
    response = post(client, path, body, HTTP_AUTHORIZATION="Token abc")
    assert_error(response, 401, "missing_api_key", "authentication_error")


def test_an_unknown_key_is_invalid_api_key(client, operation, free_key):
    key, _ = free_key
    path, body = LOCAL_BODIES[operation]
    response = post(client, path, body, "sk-" + "z" * 43)
    assert_error(response, 401, "invalid_api_key", "authentication_error")
    assert_untouched(key, 100)


def test_a_revoked_key_is_invalid_api_key(client, operation, free_key):
    key, secret = free_key
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)
    path, body = LOCAL_BODIES[operation]
    assert_error(post(client, path, body, secret), 401, "invalid_api_key", "authentication_error")
    assert_untouched(key, 100)


# ---------------------------------------------------------------- 400 / 413 / 405

@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"a string"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_invalid_json(client, operation, free_key, raw):
    key, secret = free_key
    path, _ = LOCAL_BODIES[operation]
    assert_error(post(client, path, raw, secret), 400, "invalid_json")
    assert_untouched(key, 100)


def test_a_missing_model_is_missing_field(client, operation, free_key):
    key, secret = free_key
    path, body = LOCAL_BODIES[operation]
    body = {name: value for name, value in body.items() if name != "model"}
    assert_error(post(client, path, body, secret), 400, "missing_field", param="model")
    assert_untouched(key, 100)


def test_a_model_of_the_wrong_json_type_is_invalid_value(client, operation, free_key):
    key, secret = free_key
    path, body = body_for(operation)
    assert_error(post(client, path, {**body, "model": 42}, secret), 400, "invalid_value", param="model")
    assert_untouched(key, 100)


def test_an_unknown_top_level_member_is_unknown_parameter(client, operation, local_key):
    # A key whose tier may use the model: the tier is judged before the rest of the body (section 4).
    key, secret = local_key
    path, body = body_for(operation, surprise=True)
    assert_error(post(client, path, body, secret), 400, "unknown_parameter", param="surprise")
    assert_untouched(key, 100)


def test_an_unknown_model_is_named_before_the_rest_of_the_body(client, operation, free_key):
    """Section 4: a model the gateway does not serve is what the client learns first, whatever else the body
    holds (an agent CLI's default model name with members the endpoint refuses)."""
    key, secret = free_key
    path, body = body_for(operation, model="claude-sonnet-4-6-unknown", surprise=True, stream="yes")
    assert_error(post(client, path, body, secret), 404, "model_not_found", param="model")
    assert_untouched(key, 100)


def test_a_model_the_tier_may_not_use_is_refused_before_the_rest_of_the_body(client, free_key, seeded):
    key, secret = free_key
    path, body = body_for("image", surprise=True)
    assert_error(post(client, path, body, secret), 403, "model_not_allowed", "permission_error", param="model")
    assert_untouched(key, 100)


def test_a_body_over_the_size_limit_is_request_too_large(client, operation, free_key, settings):
    settings.MAX_REQUEST_BYTES = 2048
    key, secret = free_key
    path, body = body_for(operation, user="x" * 4000)
    assert_error(post(client, path, body, secret), 413, "request_too_large")
    assert_untouched(key, 100)


def test_a_get_is_method_not_allowed(client, operation, free_key):
    key, secret = free_key
    path, _ = LOCAL_BODIES[operation]
    from tests.conftest import bearer

    assert_error(client.get(path, **bearer(secret)), 405, "method_not_allowed")
    assert_untouched(key, 100)


# ---------------------------------------------------------------- 404 / 400 model / 403

def test_an_unknown_model_is_model_not_found(client, operation, free_key):
    key, secret = free_key
    path, body = body_for(operation, model="no-such-model")
    assert_error(post(client, path, body, secret), 404, "model_not_found", param="model")
    assert_untouched(key, 100)


def test_a_disabled_model_is_model_not_found(client, operation, free_key):
    key, secret = free_key
    path, body = LOCAL_BODIES[operation]
    AiModel.objects.filter(model_id=body["model"]).update(enabled=False)
    catalog.invalidate()
    assert_error(post(client, path, body, secret), 404, "model_not_found", param="model")
    assert_untouched(key, 100)


def test_a_model_of_another_type_is_model_type_mismatch(client, operation, free_key):
    key, secret = free_key
    path, body = body_for(operation, model=OTHER_TYPE[operation])
    response = post(client, path, body, secret)
    assert_error(response, 400, "model_type_mismatch", param="model")
    other = catalog.get_model(OTHER_TYPE[operation])
    assert response.json()["error"]["message"].startswith(
        f"The model '{other.model_id}' serves {other.type}, not {operation}: choose a {operation} model")
    assert_untouched(key, 100)


def test_a_model_the_tier_may_not_use_is_model_not_allowed(client, operation, free_key):
    key, secret = free_key
    ids = add_models(add_provider("premium-only", "http://127.0.0.1:9/v1"), prefix="premium", tiers=["premium"])
    path, body = body_for(operation, model=ids[operation])
    assert_error(post(client, path, body, secret), 403, "model_not_allowed", "permission_error", param="model")
    assert_untouched(key, 100)


@pytest.mark.parametrize("heavy", ["image", "speech"])
def test_the_shipped_catalog_keeps_the_heaviest_local_models_from_free_keys(client, seeded, free_key, local_key,
                                                                            heavy):
    key, secret = free_key
    path, body = LOCAL_BODIES[heavy]
    error = assert_error(post(client, path, body, secret), 403, "model_not_allowed", "permission_error",
                         param="model")
    assert error["message"] == f"Keys of the 'free' tier may not use the model '{body['model']}'."
    assert_untouched(key, 100)
    assert post(client, path, body, local_key[1]).status_code == 200


# ---------------------------------------------------------------- 402 / 429

def test_a_key_without_enough_credits_is_insufficient_credits(client, operation, make_key):
    key, secret = make_key(tier=LOCAL_TIER, credits=0, max_credits=10)
    path, body = LOCAL_BODIES[operation]
    response = post(client, path, body, secret)
    assert_error(response, 402, "insufficient_credits", "insufficient_credits_error")
    assert response["X-Remaining-Credits"] == "0"
    assert "X-RateLimit-Limit-Requests" in response
    assert_untouched(key, 0)


def test_images_cost_the_model_cost_times_n_so_a_short_balance_is_refused(client, seeded, make_key):
    # local-image costs 2: three images need 6 credits.
    key, secret = make_key(tier=LOCAL_TIER, credits=5, max_credits=10)
    path, body = body_for("image", n=3)
    assert_error(post(client, path, body, secret), 402, "insufficient_credits", "insufficient_credits_error")
    assert_untouched(key, 5)


def test_the_request_over_the_minute_limit_is_rate_limited(client, operation, make_key, clock):
    key, secret = make_key(tier=LOCAL_TIER, credits=100, max_credits=100, rpm=1)
    path, body = LOCAL_BODIES[operation]
    assert post(client, path, body, secret).status_code == 200
    charged = 100 - credits_of(key)
    response = post(client, path, body, secret)
    assert_error(response, 429, "rate_limit_exceeded", "rate_limit_error", param="rpm")
    assert 1 <= int(response["Retry-After"]) <= 60
    assert response["X-RateLimit-Remaining-Requests"] == "0"
    assert credits_of(key) == 100 - charged
    assert UsageEvent.objects.count() == 1


# ---------------------------------------------------------------- upstream errors

@pytest.fixture
def on_fake(operation, fake_models):
    """The operation's body aimed at the fake upstream's model."""
    return body_for(operation, model=fake_models[operation])


def test_an_upstream_refusal_passes_on_its_status_code_and_message(client, operation, on_fake, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(422, {"error": {"message": "prompt rejected by policy", "type": "invalid_request_error",
                                      "param": "prompt", "code": "content_policy_violation"}})
    error = assert_error(post(client, *on_fake, secret), 422, "content_policy_violation", param="prompt")
    assert error["message"] == "prompt rejected by policy"
    assert credits_of(key) == 100
    event = UsageEvent.objects.get()
    assert (event.success, event.status, event.credits_charged) == (False, 422, 0)


def test_an_upstream_server_error_is_upstream_unavailable_and_refunded(client, operation, on_fake, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(503)
    response = post(client, *on_fake, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert response["X-Remaining-Credits"] == "100"
    assert credits_of(key) == 100
    event = UsageEvent.objects.get()
    assert (event.success, event.status, event.provider) == (False, 502, "fake")


def test_an_upstream_that_does_not_answer_in_time_is_upstream_timeout(client, operation, seeded, upstream, free_key,
                                                                       monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    ids = add_models(add_provider("slow", upstream.base_url, timeout=0.5), prefix="slow")
    upstream.fail_all(200, {"late": True}, delay=10)
    key, secret = free_key
    response = post(client, *body_for(operation, model=ids[operation]), secret)
    assert_error(response, 504, "upstream_timeout", "upstream_error")
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().status == 504


def test_an_unreachable_upstream_is_upstream_unavailable(client, operation, seeded, free_key, monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    ids = add_models(add_provider("gone", closed_port_url()), prefix="gone")
    key, secret = free_key
    assert_error(post(client, *body_for(operation, model=ids[operation]), secret), 502, "upstream_unavailable",
                 "upstream_error")
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().success is False


def test_an_unexpected_failure_is_internal_error_without_details_and_refunded(client, operation, local_key,
                                                                              monkeypatch):
    def explode(self, payload):
        raise RuntimeError("secret-internal-detail /srv/app")

    method = {"chat": "chat", "image": "images", "speech": "speech", "embedding": "embeddings"}[operation]
    monkeypatch.setattr(LocalAdapter, method, explode)
    key, secret = local_key
    path, body = LOCAL_BODIES[operation]
    response = post(client, path, body, secret)
    error = assert_error(response, 500, "internal_error", "server_error")
    assert "secret-internal-detail" not in response.content.decode()
    assert error["message"] == "The server failed to handle the request."
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().status == 500


def test_no_error_body_reveals_the_upstream_address_or_secret(client, operation, on_fake, upstream, free_key):
    _, secret = free_key
    upstream.fail_all(400, {"error": {"message": f"bad call to {upstream.base_url} with key "
                                                 "sk-upstream-secret-0123456789abcdef", "code": "bad"}})
    response = post(client, *on_fake, secret)
    assert response.status_code == 400
    text = response.content.decode()
    assert upstream.base_url not in text
    assert "sk-upstream-secret" not in text


def test_a_lowered_limit_applies_to_the_keys_next_request(client, seeded, make_key, clock):
    key, secret = make_key(credits=100, max_credits=100, rpm=10)
    path, body = LOCAL_BODIES["embedding"]
    assert post(client, path, body, secret).status_code == 200
    assert post(client, path, body, secret).status_code == 200
    update_key(key=key, changes={"rpm": 2}, actor="test")
    assert_error(post(client, path, body, secret), 429, "rate_limit_exceeded", "rate_limit_error", param="rpm")
    update_key(key=key, changes={"rpm": 5}, actor="test")
    assert post(client, path, body, secret).status_code == 200

