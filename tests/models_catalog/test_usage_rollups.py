from datetime import datetime, timezone

import pytest

from models_catalog.models import AiModel, KeyDailyUsage, ModelHourlyUsage, UsageEvent

pytestmark = pytest.mark.django_db


def record(key, model, when, success=True, tokens=(10, 5), credits=1, latency=40):
    return UsageEvent.objects.create(key=key, model=model, operation=model.type, status=200 if success else 502,
                                     success=success, input_tokens=tokens[0], output_tokens=tokens[1],
                                     credits_charged=credits if success else 0, latency_ms=latency, created_at=when)


def test_inserting_usage_updates_hourly_and_daily_rollups(seeded, make_key):
    key, _ = make_key()
    other, _ = make_key()
    chat = AiModel.objects.get(model_id="local-chat")
    at = datetime(2026, 3, 1, 10, 15, tzinfo=timezone.utc)
    record(key, chat, at)
    record(key, chat, at.replace(minute=59), success=False, tokens=(3, 0))
    record(other, chat, at.replace(hour=11))

    hours = list(ModelHourlyUsage.objects.filter(model=chat).order_by("hour").values(
        "hour", "requests", "completed", "failed", "input_tokens", "output_tokens", "credits", "latency_ms_total"))
    assert hours == [
        {"hour": at.replace(minute=0), "requests": 2, "completed": 1, "failed": 1, "input_tokens": 13,
         "output_tokens": 5, "credits": 1, "latency_ms_total": 80},
        {"hour": at.replace(hour=11, minute=0), "requests": 1, "completed": 1, "failed": 0, "input_tokens": 10,
         "output_tokens": 5, "credits": 1, "latency_ms_total": 40},
    ]
    daily = KeyDailyUsage.objects.get(key=key, model=chat)
    assert (str(daily.day), daily.requests, daily.completed, daily.failed) == ("2026-03-01", 2, 1, 1)
    assert ModelHourlyUsage.objects.totals()["requests"] == UsageEvent.objects.totals()["requests"] == 3


def test_the_request_paths_record_writes_what_create_writes(seeded, make_key):
    key, _ = make_key()
    chat = AiModel.objects.get(model_id="local-chat")
    at = datetime(2026, 3, 1, 10, 15, 30, 123456, tzinfo=timezone.utc)
    created = record(key, chat, at, tokens=(7, 2), latency=12)
    UsageEvent.objects.record(key=key, model=chat, operation="chat", status=200, success=True, input_tokens=7,
                              output_tokens=2, credits_charged=1, latency_ms=12, created_at=at)
    columns = ("key_id", "model_id", "operation", "status", "success", "input_tokens", "output_tokens",
               "credits_charged", "latency_ms", "provider", "created_at")
    rows = list(UsageEvent.objects.order_by("id").values_list(*columns))
    assert rows[1] == rows[0] == tuple(getattr(created, column) for column in columns)
    assert rows[1][-1] == at  # stored as the same instant, microseconds included
    hour = ModelHourlyUsage.objects.get(model=chat)
    assert (hour.requests, hour.input_tokens, hour.latency_ms_total) == (2, 14, 24)


def test_record_refuses_a_field_the_event_does_not_have(seeded, make_key):
    key, _ = make_key()
    with pytest.raises(TypeError, match="colour"):
        UsageEvent.objects.record(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat",
                                  status=200, success=True, created_at=datetime.now(timezone.utc), colour="red")
    assert not UsageEvent.objects.exists()
