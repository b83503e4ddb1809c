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


def test_rows_inserted_in_one_statement_are_counted_as_if_inserted_one_by_one(seeded, make_key):
    # On PostgreSQL the trigger runs once per statement over all its rows (a grouped settlement, a bulk
    # load); on SQLite once per row. The rollups must come out the same either way.
    key, _ = make_key()
    other, _ = make_key()
    chat = AiModel.objects.get(model_id="local-chat")
    embed = AiModel.objects.get(model_id="local-embedding")
    at = datetime(2026, 3, 1, 23, 15, tzinfo=timezone.utc)
    rows = [(key, chat, at, True, (10, 5), 2, 40), (key, chat, at.replace(minute=40), False, (3, 0), 2, 15),
            (other, chat, at, True, (7, 7), 1, 30), (key, embed, at, True, (4, 0), 1, 5),
            (key, chat, datetime(2026, 3, 2, 0, 5, tzinfo=timezone.utc), True, (1, 1), 3, 20)]
    UsageEvent.objects.bulk_create([
        UsageEvent(key=k, model=m, operation=m.type, status=200 if ok else 502, success=ok, input_tokens=tokens[0],
                   output_tokens=tokens[1], credits_charged=credits if ok else 0, latency_ms=latency, created_at=when)
        for k, m, when, ok, tokens, credits, latency in rows])

    columns = ("requests", "completed", "failed", "input_tokens", "output_tokens", "credits", "latency_ms_total")
    expected_hours, expected_days = {}, {}
    for k, m, when, ok, tokens, credits, latency in rows:
        counts = (1, int(ok), int(not ok), tokens[0], tokens[1], credits if ok else 0, latency)
        hour, day = (m.pk, when.replace(minute=0)), (k.pk, m.pk, str(when.date()))
        for table, group in ((expected_hours, hour), (expected_days, day)):
            table[group] = tuple(a + b for a, b in zip(table.get(group, (0,) * 7), counts))
    hours = {(row["model"], row["hour"]): tuple(row[c] for c in columns)
             for row in ModelHourlyUsage.objects.values("model", "hour", *columns)}
    days = {(row["key"], row["model"], str(row["day"])): tuple(row[c] for c in columns)
            for row in KeyDailyUsage.objects.values("key", "model", "day", *columns)}
    assert hours == expected_hours
    assert days == expected_days


def test_two_statements_add_to_the_same_rollup_rows(seeded, make_key):
    key, _ = make_key()
    chat = AiModel.objects.get(model_id="local-chat")
    at = datetime(2026, 3, 1, 10, 15, tzinfo=timezone.utc)
    for _ in range(2):
        UsageEvent.objects.bulk_create([
            UsageEvent(key=key, model=chat, operation="chat", status=200, success=True, input_tokens=2,
                       output_tokens=1, credits_charged=1, latency_ms=10, created_at=at) for _ in range(3)])
    hour = ModelHourlyUsage.objects.get(model=chat)
    day = KeyDailyUsage.objects.get(key=key, model=chat)
    assert (hour.requests, hour.input_tokens, hour.credits, hour.latency_ms_total) == (6, 12, 6, 60)
    assert (day.requests, day.output_tokens) == (6, 6)


def test_on_postgresql_the_rollups_trigger_runs_once_per_statement(seeded, make_key, vendor):
    if vendor != "postgresql":
        pytest.skip("SQLite has row triggers only")
    from django.db import connection

    key, _ = make_key()
    chat = AiModel.objects.get(model_id="local-chat")
    at = datetime(2026, 3, 1, 10, 15, tzinfo=timezone.utc)

    def rollup_writes():
        with connection.cursor() as cursor:
            cursor.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) FROM pg_stat_xact_user_tables "
                           "WHERE relname = 'models_catalog_modelhourlyusage'")
            return cursor.fetchone()[0]

    before = rollup_writes()
    UsageEvent.objects.bulk_create([
        UsageEvent(key=key, model=chat, operation="chat", status=200, success=True, created_at=at)
        for _ in range(4)])
    assert rollup_writes() - before == 1  # one hourly row written once, not once per usage row
    assert ModelHourlyUsage.objects.get(model=chat).requests == 4
