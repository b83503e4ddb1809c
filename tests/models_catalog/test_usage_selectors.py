"""models_catalog.usage: every read of recorded usage, its figures and what each costs in queries."""
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest

from models_catalog import usage
from models_catalog.models import AiModel, UsageEvent

pytestmark = pytest.mark.django_db

# Half past noon: an event a few minutes back stays in the same UTC hour and day.
NOW = datetime(2026, 3, 10, 12, 30, tzinfo=dt_timezone.utc)


def record(key, model_id, *, ago, success=True, tokens=(10, 4), latency=40):
    model = AiModel.objects.get(model_id=model_id)
    return UsageEvent.objects.create(
        key=key, model=model, operation=model.type, status=200 if success else 502, success=success,
        input_tokens=tokens[0], output_tokens=tokens[1], credits_charged=model.cost if success else 0,
        latency_ms=latency, created_at=NOW - ago)


def block(requests, completed, input_tokens, output_tokens, credits, latency):
    return {"requests": requests, "completed": completed, "failed": requests - completed,
            "input_tokens": input_tokens, "output_tokens": output_tokens, "credits": credits,
            "latency_ms_total": latency}


def pk(model_id):
    return AiModel.objects.get(model_id=model_id).pk


@pytest.fixture
def history(seeded, make_key):
    """Two keys; local-chat costs 1 credit, gpt-4.1-mini 5, local-embedding 1."""
    key, _ = make_key(tier="premium")
    other, _ = make_key(tier="premium")
    record(key, "local-chat", ago=timedelta(minutes=5), tokens=(12, 30), latency=100)
    record(key, "local-chat", ago=timedelta(minutes=10), success=False, tokens=(5, 0), latency=900)
    record(key, "gpt-4.1-mini", ago=timedelta(hours=23, minutes=59), tokens=(100, 50), latency=300)
    record(key, "gpt-4.1-mini", ago=timedelta(hours=24, minutes=1), tokens=(1, 1), latency=20)
    record(key, "local-embedding", ago=timedelta(days=40), tokens=(7, 0), latency=5)
    record(other, "local-chat", ago=timedelta(minutes=1), tokens=(3, 3), latency=60)
    return {"key": key, "other": other}


# ---------------------------------------------------------------- blocks of counters

def test_counters_are_zero_where_the_database_summed_nothing():
    assert usage.counters({"requests": 2, "credits": None}) == {**usage.zero(), "requests": 2}
    assert usage.add_up([block(2, 1, 3, 4, 5, 6), {"requests": 1, "failed": 1}, {}]) == block(3, 1, 3, 4, 5, 6)
    assert usage.add_up([]) == usage.zero()


def test_the_nearest_rank_is_the_one_percentile_disc_picks():
    assert [usage.nearest_rank(0.95, n) for n in (1, 2, 19, 20, 21, 100)] == [1, 2, 19, 19, 20, 95]
    assert [usage.nearest_rank(0.5, n) for n in (1, 2, 3, 20)] == [1, 1, 2, 10]


# ---------------------------------------------------------------- per model, from the hourly rollup

def test_model_totals_count_all_time_per_model_and_cache_the_closed_hours(history, django_assert_num_queries):
    with django_assert_num_queries(2):  # the closed hours, then the open ones
        totals = usage.model_totals(now=NOW)
    assert totals == {
        pk("local-chat"): block(3, 2, 20, 33, 2, 1060),
        pk("gpt-4.1-mini"): block(2, 2, 101, 51, 10, 320),
        pk("local-embedding"): block(1, 1, 7, 0, 1, 5),
    }
    with django_assert_num_queries(1):  # the closed hours come from the cache
        assert usage.model_totals(now=NOW) == totals


def test_model_totals_keep_a_model_disabled_since(history):
    model = AiModel.objects.get(model_id="gpt-4.1-mini")
    model.enabled = False
    model.save()
    assert usage.model_totals(now=NOW)[model.pk]["requests"] == 2


def test_models_since_sums_the_hours_from_the_given_one_busiest_first(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        rows = usage.models_since(hour=usage.floor_hour(NOW) - timedelta(hours=24))
    assert rows == [
        {"model_id": pk("local-chat"), "model__model_id": "local-chat", **block(3, 2, 20, 33, 2, 1060)},
        {"model_id": pk("gpt-4.1-mini"), "model__model_id": "gpt-4.1-mini", **block(2, 2, 101, 51, 10, 320)},
    ]
    # Whole hours: both gpt-4.1-mini requests fell in the hour 24 hours back, so neither is in the last 24 rows.
    last_24_rows = usage.models_since(hour=usage.floor_hour(NOW) - timedelta(hours=23))
    assert [row["model__model_id"] for row in last_24_rows] == ["local-chat"]


def test_daily_totals_are_per_utc_day_from_the_first_day_on(history, django_assert_num_queries):
    today = NOW.date()
    with django_assert_num_queries(1):
        days = usage.daily_totals(first_day=today - timedelta(days=29))
    assert days == {today: block(3, 2, 20, 33, 2, 1060),
                    today - timedelta(days=1): block(2, 2, 101, 51, 10, 320)}


# ---------------------------------------------------------------- per key, from the daily rollup

def test_busiest_keys_rank_keys_by_requests_within_the_window(history, django_assert_num_queries):
    key, other = history["key"], history["other"]
    with django_assert_num_queries(1):
        rows = usage.busiest_keys(first_day=NOW.date() - timedelta(days=29), limit=10)
    assert [(row["key_id"], row["requests"], row["credits"]) for row in rows] == [(key.pk, 4, 11), (other.pk, 1, 1)]
    assert [row["key_id"] for row in usage.busiest_keys(first_day=NOW.date(), limit=1)] == [key.pk]


def test_key_models_are_one_keys_counters_all_time_or_from_a_day_on(history, django_assert_num_queries):
    key = history["key"]
    with django_assert_num_queries(1):
        all_time = usage.key_models(key)
    assert [(row["model__model_id"], row["requests"]) for row in all_time] == [
        ("gpt-4.1-mini", 2), ("local-chat", 2), ("local-embedding", 1)]
    assert all_time[1] == {"model_id": pk("local-chat"), "model__model_id": "local-chat",
                           **block(2, 1, 17, 30, 1, 1000)}
    month = usage.key_models(key, first_day=NOW.date() - timedelta(days=29))
    assert [row["model__model_id"] for row in month] == ["gpt-4.1-mini", "local-chat"]


def test_key_days_are_one_keys_counters_per_day(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        days = usage.key_days(history["key"], first_day=NOW.date() - timedelta(days=29))
    assert {day: row["requests"] for day, row in days.items()} == {
        NOW.date(): 2, NOW.date() - timedelta(days=1): 2}


# ---------------------------------------------------------------- from the events

def test_a_keys_last_24_hours_cut_at_exactly_24_hours_ago(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        rows = usage.key_last_24_hours(history["key"], now=NOW)
    assert rows == [
        {"model_id": pk("local-chat"), "model__model_id": "local-chat", **block(2, 1, 17, 30, 1, 1000)},
        {"model_id": pk("gpt-4.1-mini"), "model__model_id": "gpt-4.1-mini", **block(1, 1, 100, 50, 5, 300)},
    ]


def test_events_by_model_count_every_key_in_the_window(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        rows = usage.events_by_model(since=NOW - timedelta(hours=1))
    assert [(row["model__model_id"], row["requests"], row["completed"], row["failed"]) for row in rows] == [
        ("local-chat", 3, 2, 1)]


def test_latency_percentiles_are_recorded_values_at_the_nearest_rank(seeded, free_key, vendor,
                                                                     django_assert_num_queries):
    key, _ = free_key
    for latency in range(10, 210, 10):  # 20 completed requests: 10, 20, ... 200 ms
        record(key, "local-chat", ago=timedelta(minutes=5), latency=latency)
    record(key, "local-chat", ago=timedelta(minutes=5), latency=30000, success=False)
    record(key, "local-chat", ago=timedelta(hours=2), latency=1)  # before the window
    record(key, "local-embedding", ago=timedelta(minutes=5), latency=7, success=False)
    chat, embedding, image = pk("local-chat"), pk("local-embedding"), pk("local-image")
    since = NOW - timedelta(hours=1)

    # PostgreSQL: one query. SQLite: a count per model, then one fetch per fraction for each of the
    # two models with events.
    with django_assert_num_queries(1 if vendor == "postgresql" else 3 + 2 * 2):
        every = usage.latency_percentiles(since=since, fractions=(0.5, 0.95), model_ids=[chat, embedding, image])
    # 21 requests: the 11th and the 20th of them sorted; the failure's 30 s is the 21st.
    assert every == {chat: [110, 200], embedding: [7, 7]}
    completed = usage.latency_percentiles(since=since, fractions=(0.5, 0.95), model_ids=[chat, embedding],
                                          completed_only=True)
    assert completed == {chat: [100, 190]}  # the 10th and 19th of 20; the embedding model never completed


def test_recent_events_are_newest_first_with_their_models(history, django_assert_num_queries):
    with django_assert_num_queries(1):
        events = usage.recent_events(history["key"], limit=3)
        assert [(event.model.model_id, event.success) for event in events] == [
            ("local-chat", True), ("local-chat", False), ("gpt-4.1-mini", True)]
