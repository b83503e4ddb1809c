from datetime import timedelta

import httpx2
import pytest
import responses as responses_lib
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from openai import OpenAI

from keys.models import TIERS
from models_catalog import catalog, usage
from models_catalog.models import AiModel, UsageEvent
from tests.conftest import bearer

pytestmark = pytest.mark.django_db

ENTRY_MEMBERS = {"id", "object", "created", "type", "owned_by", "cost", "access"}
ANALYTICS_MEMBERS = {"totalRequests", "completedRequests", "failedRequests", "inputTokens", "outputTokens"}


def record(key, model_id, *, success=True, tokens=(10, 4), when=None, latency=50):
    model = AiModel.objects.get(model_id=model_id)
    return UsageEvent.objects.create(
        key=key, model=model, operation=model.type, status=200 if success else 502, success=success,
        input_tokens=tokens[0], output_tokens=tokens[1], credits_charged=model.cost if success else 0,
        latency_ms=latency, created_at=when or timezone.now())


def disable(model_id):
    # Through save(), as the admin UI does, so the catalog snapshot is dropped.
    model = AiModel.objects.get(model_id=model_id)
    model.enabled = False
    model.save()


def web_view(client):
    response = client.get("/v1/models?web-view=true")
    assert response.status_code == 200, response.content
    body = response.json()
    return {entry["id"]: entry["analytics"] for entry in body["models"]}, body["globalStats"]


def chat(client, secret, model="local-chat", content="Count me"):
    return client.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": content}]},
                       content_type="application/json", **bearer(secret))


# ---------------------------------------------------------------- default view

def test_the_default_view_is_the_openai_list_of_enabled_models(client, seeded):
    disable("gpt-5")
    response = client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"object", "data"}
    assert body["object"] == "list"
    enabled = AiModel.objects.filter(enabled=True)
    assert [entry["id"] for entry in body["data"]] == sorted(m.model_id for m in enabled)
    assert "gpt-5" not in {entry["id"] for entry in body["data"]}
    for entry in body["data"]:
        model = enabled.get(model_id=entry["id"])
        # pricing and aliases only where the model has them (tests/models_catalog/test_pricing_catalog.py).
        assert ENTRY_MEMBERS <= set(entry) <= ENTRY_MEMBERS | {"pricing", "aliases"}
        assert entry["object"] == "model"
        assert (entry["type"], entry["owned_by"], entry["cost"]) == (model.type, model.owned_by, model.cost)
        assert isinstance(entry["cost"], int)
        assert list(entry["access"]) == list(TIERS)
        assert entry["access"] == {tier: tier in model.tiers for tier in TIERS}


def test_each_entry_is_created_when_its_model_joined_the_catalog_and_keeps_that_time(client, seeded):
    AiModel.objects.filter(model_id="gpt-4.1-mini").update(created_at=timezone.now() - timedelta(days=400, seconds=0.6))
    catalog.invalidate()
    first = {entry["id"]: entry["created"] for entry in client.get("/v1/models").json()["data"]}
    for model in AiModel.objects.filter(enabled=True):
        assert first[model.model_id] == int(model.created_at.timestamp())
    assert first["gpt-4.1-mini"] < first["local-chat"] - 399 * 86400
    AiModel.objects.filter(model_id="gpt-4.1-mini").update(cost=999)
    catalog.load_catalog()  # seeding again updates the rows (gpt-4.1-mini's cost back), and keeps when each was added
    again = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    assert again["gpt-4.1-mini"]["cost"] != 999
    assert {model_id: entry["created"] for model_id, entry in again.items()} == first


def test_a_restricted_model_shows_false_for_the_tiers_it_excludes(client, seeded):
    entry = next(e for e in client.get("/v1/models").json()["data"] if e["id"] == "gpt-4.1-mini")
    assert entry["access"]["free"] is False and entry["access"]["premium"] is True


def test_the_default_view_costs_no_query_once_the_catalog_is_loaded(client, seeded, django_assert_num_queries):
    client.get("/v1/models")
    with django_assert_num_queries(0):
        assert client.get("/v1/models").status_code == 200


@pytest.mark.parametrize("value", ["false", "False", "0"])
def test_web_view_false_is_the_default_view(client, seeded, value):
    body = client.get(f"/v1/models?web-view={value}").json()
    assert set(body) == {"object", "data"}


def sdk_through_django(secret: str) -> OpenAI:
    """The official SDK, its requests answered by Django's test client."""
    django_client = Client()

    def through_django(request: httpx2.Request) -> httpx2.Response:
        response = django_client.get(request.url.path, dict(request.url.params),
                                      HTTP_AUTHORIZATION=request.headers.get("authorization", ""))
        return httpx2.Response(response.status_code, headers={"content-type": response["Content-Type"]},
                               content=response.content)

    return OpenAI(api_key=secret, base_url="http://gateway.test/v1", max_retries=0,
                  http_client=httpx2.Client(transport=httpx2.MockTransport(through_django)))


def test_the_openai_sdk_lists_the_models(seeded, free_key):
    sdk = sdk_through_django(free_key[1])
    listed = sdk.models.list()
    ids = [model.id for model in listed]
    assert ids == sorted(AiModel.objects.filter(enabled=True).values_list("model_id", flat=True))
    local_chat = next(model for model in listed if model.id == "local-chat")
    assert (local_chat.object, local_chat.owned_by) == ("model", "local")
    # OpenAI's Model has ``created``: the moment the model joined the catalog, in whole seconds.
    added = AiModel.objects.get(model_id="local-chat").created_at
    assert local_chat.created == int(added.timestamp()) and isinstance(local_chat.created, int)


def test_a_model_is_retrieved_by_id_as_its_entry_in_the_list(client, seeded):
    listed = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    for model_id in ("local-chat", "gpt-4.1-mini"):
        response = client.get(f"/v1/models/{model_id}")
        assert response.status_code == 200
        assert response.json() == listed[model_id]
    assert list(client.get("/v1/models/local-chat").json()) == ["id", "object", "created", "type", "owned_by", "cost",
                                                                 "access"]


def test_an_id_with_a_slash_is_retrieved_too(client, seeded):
    model = AiModel.objects.get(model_id="local-chat")
    model.model_id = "acme/local-chat"
    model.save()
    response = client.get("/v1/models/acme/local-chat")
    assert response.status_code == 200
    assert response.json()["id"] == "acme/local-chat"


@pytest.mark.parametrize("model_id", ["no-such-model", "gpt-5"])
def test_an_unknown_or_disabled_model_is_a_404_model_not_found(client, seeded, model_id):
    disable("gpt-5")
    response = client.get(f"/v1/models/{model_id}")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": f"The model '{model_id}' does not exist or is not available.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    assert AiModel.objects.filter(model_id="gpt-5", enabled=False).exists()


def test_the_openai_sdk_retrieves_a_model_and_reads_a_404(seeded, free_key):
    import openai

    sdk = sdk_through_django(free_key[1])
    model = sdk.models.retrieve("local-chat")
    assert (model.id, model.object, model.owned_by) == ("local-chat", "model", "local")
    with pytest.raises(openai.NotFoundError) as refused:
        sdk.models.retrieve("no-such-model")
    assert refused.value.body["code"] == "model_not_found"


def test_a_call_with_a_key_counts_against_the_key_not_the_client_address(client, seeded, make_key, settings,
                                                                          clock):
    settings.PUBLIC_RATE_LIMIT = "2/m"
    key, secret = make_key(rpm=3, credits=50)
    assert [client.get("/utils/facts").status_code for _ in range(3)] == [200, 200, 429]  # the address is spent
    assert client.get("/v1/models").status_code == 429
    answers = [client.get(path, **bearer(secret)) for path in ("/v1/models", "/v1/models/local-chat",
                                                               "/v1/models?web-view=true", "/v1/models")]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    assert [answer["X-RateLimit-Remaining-Requests"] for answer in answers] == ["2", "1", "0", "0"]
    assert answers[0]["X-RateLimit-Limit-Requests"] == "3"
    assert answers[-1].json()["error"]["param"] == "rpm"
    key.refresh_from_db()
    assert key.credits == 50  # listing models costs nothing


@pytest.mark.parametrize("header", ["Bearer sk-" + "n" * 40, "Basic abc"])
def test_a_bad_key_on_the_catalog_is_a_401(client, seeded, header):
    for path in ("/v1/models", "/v1/models/local-chat"):
        response = client.get(path, HTTP_AUTHORIZATION=header)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"


def test_a_revoked_key_on_the_catalog_is_a_401(client, seeded, make_key):
    key, secret = make_key()
    key.is_active = False
    key.save()
    response = client.get("/v1/models", **bearer(secret))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


# ---------------------------------------------------------------- web view

@pytest.mark.parametrize("value", ["true", "True", "1"])
def test_the_web_view_has_analytics_and_global_stats(client, seeded, value):
    response = client.get(f"/v1/models?web-view={value}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"object", "success", "models", "globalStats"}
    assert (body["object"], body["success"]) == ("list", True)
    assert [e["id"] for e in body["models"]] == sorted(AiModel.objects.values_list("model_id", flat=True))
    for entry in body["models"]:
        assert ENTRY_MEMBERS | {"analytics"} <= set(entry) <= ENTRY_MEMBERS | {"analytics", "pricing", "aliases"}
        assert entry["object"] == "model" and list(entry["access"]) == list(TIERS)
        assert entry["analytics"] == dict.fromkeys(ANALYTICS_MEMBERS, 0)
    assert body["globalStats"] == {"totalRequests": 0, "totalInputTokens": 0, "totalOutputTokens": 0}


@pytest.mark.parametrize("value", ["maybe", "", "2", "yes please", "[true]"])
def test_a_web_view_that_is_not_a_boolean_is_a_400(client, seeded, value):
    response = client.get("/v1/models", {"web-view": value})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "web-view"
    assert response.json()["error"]["code"] == "invalid_value"


def test_analytics_count_completed_and_failed_requests_with_their_tokens(client, seeded, free_key):
    key, _ = free_key
    record(key, "local-chat", tokens=(12, 30))
    record(key, "local-chat", tokens=(8, 2))
    record(key, "local-chat", success=False, tokens=(5, 0))
    record(key, "local-embedding", tokens=(100, 0), when=timezone.now() - timedelta(days=40))

    per_model, global_stats = web_view(client)
    assert per_model["local-chat"] == {"totalRequests": 3, "completedRequests": 2, "failedRequests": 1,
                                       "inputTokens": 25, "outputTokens": 32}
    assert per_model["local-embedding"] == {"totalRequests": 1, "completedRequests": 1, "failedRequests": 0,
                                            "inputTokens": 100, "outputTokens": 0}
    assert per_model["gpt-4.1-mini"]["totalRequests"] == 0
    assert global_stats == {"totalRequests": 4, "totalInputTokens": 125, "totalOutputTokens": 32}
    assert global_stats["totalRequests"] == UsageEvent.objects.count()


def test_global_stats_keep_the_usage_of_a_model_disabled_since(client, seeded, free_key):
    key, _ = free_key
    record(key, "gpt-5", tokens=(7, 3))
    record(key, "local-chat", tokens=(1, 1))
    disable("gpt-5")
    per_model, global_stats = web_view(client)
    assert "gpt-5" not in per_model
    assert global_stats == {"totalRequests": 2, "totalInputTokens": 8, "totalOutputTokens": 4}


def test_a_new_request_shows_in_the_very_next_answer(client, seeded, free_key):
    key, _ = free_key
    record(key, "local-chat", when=timezone.now() - timedelta(hours=5))
    before, _ = web_view(client)
    record(key, "local-chat", success=False, tokens=(3, 0))
    after, global_stats = web_view(client)
    assert before["local-chat"]["totalRequests"] == 1
    assert after["local-chat"] == {"totalRequests": 2, "completedRequests": 1, "failedRequests": 1,
                                   "inputTokens": 13, "outputTokens": 4}
    assert global_stats["totalRequests"] == 2


def test_the_web_view_is_one_query_once_closed_hours_are_cached(client, seeded, free_key,
                                                                  django_assert_num_queries):
    key, _ = free_key
    for hours_ago in (0, 3, 30, 24 * 200):
        record(key, "local-chat", when=timezone.now() - timedelta(hours=hours_ago))
    web_view(client)
    with django_assert_num_queries(1):
        per_model, _ = web_view(client)
    assert per_model["local-chat"]["totalRequests"] == 4


def test_a_back_dated_import_is_counted_from_the_next_hour_on(seeded, free_key):
    key, _ = free_key
    chat = AiModel.objects.get(model_id="local-chat")
    now = timezone.now()
    assert usage.model_totals(now=now).get(chat.pk) is None
    record(key, "local-chat", when=now - timedelta(hours=6))
    # Hours past the settle margin are served from the cache filled above ...
    assert usage.model_totals(now=now).get(chat.pk) is None
    # ... and summed afresh once the boundary hour moves on.
    assert usage.model_totals(now=now + timedelta(hours=1))[chat.pk]["requests"] == 1


def test_the_web_view_is_served_when_the_cache_is_down(client, seeded, free_key, monkeypatch):
    key, _ = free_key
    record(key, "local-chat", when=timezone.now() - timedelta(days=2))

    def unreachable(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "get", unreachable)
    monkeypatch.setattr(cache, "set", unreachable)
    per_model, global_stats = web_view(client)
    assert per_model["local-chat"]["totalRequests"] == 1 and global_stats["totalRequests"] == 1


# ---------------------------------------------------------------- through the chat endpoint

def test_a_chat_moves_its_model_and_global_stats_by_exactly_one_request_and_its_tokens(client, seeded, free_key):
    key, secret = free_key
    before, global_before = web_view(client)
    response = chat(client, secret)
    assert response.status_code == 200, response.content
    usage = response.json()["usage"]
    after, global_after = web_view(client)

    assert after["local-chat"] == {
        "totalRequests": before["local-chat"]["totalRequests"] + 1,
        "completedRequests": before["local-chat"]["completedRequests"] + 1,
        "failedRequests": before["local-chat"]["failedRequests"],
        "inputTokens": before["local-chat"]["inputTokens"] + usage["prompt_tokens"],
        "outputTokens": before["local-chat"]["outputTokens"] + usage["completion_tokens"],
    }
    assert global_after == {
        "totalRequests": global_before["totalRequests"] + 1,
        "totalInputTokens": global_before["totalInputTokens"] + usage["prompt_tokens"],
        "totalOutputTokens": global_before["totalOutputTokens"] + usage["completion_tokens"],
    }
    assert {m: a for m, a in after.items() if m != "local-chat"} == \
        {m: a for m, a in before.items() if m != "local-chat"}
    event = UsageEvent.objects.get()
    assert (event.key_id, event.model.model_id, event.success) == (key.pk, "local-chat", True)


@responses_lib.activate
def test_a_failed_upstream_call_counts_as_failed_and_adds_no_tokens(client, seeded, free_key, monkeypatch):
    key, secret = free_key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-test")
    responses_lib.add(responses_lib.POST, "https://api.openai.com/v1/chat/completions",
                      json={"error": {"message": "overloaded"}}, status=503)
    before, global_before = web_view(client)
    response = chat(client, secret, model="gpt-5-mini")
    assert response.status_code == 502, response.content
    after, global_after = web_view(client)

    assert after["gpt-5-mini"] == {**before["gpt-5-mini"],
                                    "totalRequests": before["gpt-5-mini"]["totalRequests"] + 1,
                                    "failedRequests": before["gpt-5-mini"]["failedRequests"] + 1}
    assert global_after == {**global_before, "totalRequests": global_before["totalRequests"] + 1}
    event = UsageEvent.objects.get()
    assert (event.success, event.credits_charged) == (False, 0)
    key.refresh_from_db()
    assert key.credits == 100


def test_both_views_keep_their_member_order(client, seeded):
    # The first model of the shipped catalog (claude-haiku-4-5) has token prices and an alias.
    entry_order = ["id", "object", "created", "type", "owned_by", "cost", "access", "pricing", "aliases"]
    body = client.get("/v1/models").json()
    assert list(body) == ["object", "data"] and list(body["data"][0]) == entry_order
    body = client.get("/v1/models?web-view=true").json()
    assert list(body) == ["object", "success", "models", "globalStats"]
    assert list(body["models"][0]) == [*entry_order, "analytics"]
    assert list(body["models"][0]["analytics"]) == ["totalRequests", "completedRequests", "failedRequests",
                                                    "inputTokens", "outputTokens"]
    assert list(body["globalStats"]) == ["totalRequests", "totalInputTokens", "totalOutputTokens"]
