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
