from datetime import datetime, time, timedelta, timezone as dt_timezone

import pytest
from django.utils import timezone

from keys.models import ApiKey
from models_catalog.models import AiModel, UsageEvent
from tests.conftest import bearer
from utils_app import clock as product_clock

pytestmark = pytest.mark.django_db

COUNTER_MEMBERS = {"totalRequests", "completedRequests", "failedRequests", "inputTokens", "outputTokens",
                   "creditsSpent"}


def record(key, model_id, *, success=True, tokens=(10, 4), when=None):
    model = AiModel.objects.get(model_id=model_id)
    return UsageEvent.objects.create(
        key=key, model=model, operation=model.type, status=200 if success else 502, success=success,
        input_tokens=tokens[0], output_tokens=tokens[1], credits_charged=model.cost if success else 0,
        latency_ms=40, created_at=when or product_clock.utcnow())


def counters(requests, completed, input_tokens, output_tokens, credits):
    return {"totalRequests": requests, "completedRequests": completed, "failedRequests": requests - completed,
            "inputTokens": input_tokens, "outputTokens": output_tokens, "creditsSpent": credits}


def at_noon(clock) -> None:
    """The stopped clock at noon (UTC) of a day of its own, so a test that records usage "today" and then
    reads the thirty days ending today cannot see the day turn between the two."""
    clock.set(datetime(2030, 6, 15, 12, tzinfo=dt_timezone.utc).timestamp())


def key_statistics(client, secret):
    response = client.get("/v1/statistic/key", **bearer(secret))
    assert response.status_code == 200, response.content
    return response.json()


# ---------------------------------------------------------------- GET /v1/statistic/key

def test_key_statistics_count_the_callers_own_usage_all_time_and_last_24_hours(client, seeded, make_key):
    key, secret = make_key(tier="premium", credits=40, max_credits=50)
    other, _ = make_key()
    now = timezone.now()
    record(key, "local-chat", tokens=(12, 30))                                        # completed, 1 credit
    record(key, "local-chat", success=False, tokens=(5, 0))                           # failed, refunded
    record(key, "gpt-4.1-mini", tokens=(100, 50), when=now - timedelta(hours=23))     # 5 credits
    record(key, "gpt-4.1-mini", tokens=(1, 1), when=now - timedelta(hours=25))        # outside the 24 h
    record(key, "local-image", tokens=(0, 0), when=now - timedelta(days=90))          # 2 credits
    record(other, "local-chat", tokens=(999, 999))                                    # someone else's

    body = key_statistics(client, secret)
    assert body["object"] == "statistic.key"
    assert body["key"] == {"prefix": key.prefix, "tier": "premium", "credits": 40, "maxCredits": 50}
    all_time = body["allTime"]
    assert {name: all_time[name] for name in COUNTER_MEMBERS} == counters(5, 4, 118, 81, 1 + 5 + 5 + 2)
    assert all_time["models"] == [
        {"id": "gpt-4.1-mini", **counters(2, 2, 101, 51, 10)},
        {"id": "local-chat", **counters(2, 1, 17, 30, 1)},
        {"id": "local-image", **counters(1, 1, 0, 0, 2)},
    ]
    recent = body["last24Hours"]
    assert {name: recent[name] for name in COUNTER_MEMBERS} == counters(3, 2, 117, 80, 6)
    assert recent["models"] == [
        {"id": "gpt-4.1-mini", **counters(1, 1, 100, 50, 5)},
        {"id": "local-chat", **counters(2, 1, 17, 30, 1)},
    ]


def test_key_statistics_of_an_unused_key_are_zero(client, seeded, free_key):
    _, secret = free_key
    body = key_statistics(client, secret)
    for block in ("allTime", "last24Hours"):
        assert {name: body[block][name] for name in COUNTER_MEMBERS} == counters(0, 0, 0, 0, 0)
        assert body[block]["models"] == []


def test_key_statistics_need_a_key(client, seeded):
    response = client.get("/v1/statistic/key")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"


def test_key_statistics_refuse_a_revoked_key(client, seeded, free_key):
    key, secret = free_key
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)
    response = client.get("/v1/statistic/key", **bearer(secret))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_key_statistics_cost_nothing_and_take_three_queries(client, seeded, free_key, django_assert_num_queries):
    key, secret = free_key
    record(key, "local-chat")
    with django_assert_num_queries(3):  # the key, its daily rollup, its last 24 hours
        key_statistics(client, secret)
    key.refresh_from_db()
    assert key.credits == 100
    assert UsageEvent.objects.count() == 1


def test_key_statistics_are_limited_per_client_address(client, seeded, free_key, settings):
    _, secret = free_key
    settings.PUBLIC_RATE_LIMIT = "2/m"
    assert [client.get("/v1/statistic/key", **bearer(secret)).status_code for _ in range(3)] == [200, 200, 429]


# ---------------------------------------------------------------- GET /v1/statistic/global

def test_global_statistics_have_totals_and_thirty_days_ending_today(client, seeded, make_key, clock):
    first, _ = make_key()
    second, _ = make_key()
    at_noon(clock)
    today = product_clock.today()

    def noon(days_ago):
        return datetime.combine(today - timedelta(days=days_ago), time(12), tzinfo=dt_timezone.utc)

    record(first, "local-chat", tokens=(3, 7))
    record(second, "local-chat", success=False, tokens=(2, 0))
    record(first, "local-embedding", tokens=(40, 0), when=noon(1))
    record(second, "gpt-4.1-mini", tokens=(10, 20), when=noon(29))
    record(first, "gpt-4.1-mini", tokens=(1000, 1000), when=noon(30))   # before the series, still in the totals

    response = client.get("/v1/statistic/global")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "statistic.global"
    assert body["totals"] == counters(5, 4, 1055, 1027, 1 + 1 + 5 + 5)
    days = body["days"]
    assert [day["date"] for day in days] == [(today - timedelta(days=n)).isoformat() for n in range(29, -1, -1)]
    by_date = {day.pop("date"): day for day in days}
    assert by_date[today.isoformat()] == counters(2, 1, 5, 7, 1)
    assert by_date[(today - timedelta(days=1)).isoformat()] == counters(1, 1, 40, 0, 1)
    assert by_date[(today - timedelta(days=29)).isoformat()] == counters(1, 1, 10, 20, 5)
    quiet = [d for n, d in enumerate(by_date.values()) if n not in (0, 28, 29)]
    assert all(day == counters(0, 0, 0, 0, 0) for day in quiet)


def test_global_statistics_need_no_key(client, seeded):
    response = client.get("/v1/statistic/global")
    assert response.status_code == 200
    assert response.json()["totals"] == counters(0, 0, 0, 0, 0)
    assert len(response.json()["days"]) == 30


# ---------------------------------------------------------------- through the chat endpoint

def chat(client, secret, content):
    body = {"model": "local-chat", "messages": [{"role": "user", "content": content}]}
    return client.post("/v1/chat/completions", body, content_type="application/json", **bearer(secret))


def test_statistics_match_the_chats_the_test_made(client, seeded, make_key, clock):
    key, secret = make_key(credits=10, max_credits=10)
    at_noon(clock)
    usages = []
    for content in ("one", "two words", "three words here"):
        response = chat(client, secret, content)
        assert response.status_code == 200, response.content
        usages.append(response.json()["usage"])
    prompt = sum(u["prompt_tokens"] for u in usages)
    completion = sum(u["completion_tokens"] for u in usages)
    cost = AiModel.objects.get(model_id="local-chat").cost

    body = key_statistics(client, secret)
    expected = counters(3, 3, prompt, completion, 3 * cost)
    for block in ("allTime", "last24Hours"):
        assert {name: body[block][name] for name in COUNTER_MEMBERS} == expected
        assert body[block]["models"] == [{"id": "local-chat", **expected}]
    assert body["key"]["credits"] == 10 - 3 * cost

    global_body = client.get("/v1/statistic/global").json()
    assert global_body["totals"] == expected
    assert global_body["days"][-1] == {"date": product_clock.today().isoformat(), **expected}


def test_reading_statistics_does_not_count_against_the_keys_rate_limit(client, seeded, make_key, clock):
    _, secret = make_key(rpm=1)
    for _ in range(3):
        key_statistics(client, secret)
    assert chat(client, secret, "first metered request of the minute").status_code == 200
    response = chat(client, secret, "second")
    assert response.status_code == 429
    assert response.json()["error"]["param"] == "rpm"


def test_the_statistics_bodies_keep_their_member_order(client, seeded, free_key):
    key, secret = free_key
    record(key, "local-chat")
    body = key_statistics(client, secret)
    assert list(body) == ["object", "key", "allTime", "last24Hours", "generatedAt"]
    assert list(body["key"]) == ["prefix", "tier", "credits", "maxCredits"]
    counter_order = ["totalRequests", "completedRequests", "failedRequests", "inputTokens", "outputTokens",
                     "creditsSpent"]
    assert list(body["allTime"]) == [*counter_order, "models"]
    assert list(body["last24Hours"]["models"][0]) == ["id", *counter_order]
    assert body["generatedAt"].endswith("+00:00")  # isoformat(), not DRF's "Z"

    body = client.get("/v1/statistic/global").json()
    assert list(body) == ["object", "totals", "days", "generatedAt"]
    assert list(body["totals"]) == counter_order
    assert list(body["days"][-1]) == ["date", *counter_order]
