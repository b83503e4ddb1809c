"""The usage dashboard and the read-only usage list."""
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from models_catalog import dashboard
from models_catalog.admin import CappedCountPaginator
from models_catalog.models import AiModel, UsageEvent

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:models_catalog_dashboard")
EVENTS = reverse("admin:models_catalog_usageevent_changelist")


@pytest.fixture
def traffic(make_key, record_usage):
    """Three keys over a week: a busy premium key, a quiet free key, a revoked one."""
    busy, _ = make_key(tier="premium", credits=500, name="busy")
    quiet, _ = make_key(tier="free", name="quiet")
    gone, _ = make_key(tier="free", name="gone")
    from keys.services import set_active
    set_active(key=gone, active=False, actor="test")
    for latency in range(1, 21):  # 20 chat requests in the last hour, latencies 10..200 ms, 2 failed
        record_usage(busy, "local-chat", ago=timedelta(minutes=latency), latency=latency * 10,
                     success=latency not in (7, 13))
    record_usage(busy, "local-image", ago=timedelta(days=2), credits=4, latency=300)
    record_usage(quiet, "local-chat", ago=timedelta(days=6), credits=1)
    record_usage(quiet, "local-chat", ago=timedelta(days=45), credits=1)  # outside a 30-day window
    return {"busy": busy, "quiet": quiet, "gone": gone}


def test_the_dashboard_shows_daily_charts_rankings_latency_and_tiers(staff_client, traffic):
    response = staff_client.get(DASHBOARD)
    assert response.status_code == 200
    d = response.context["d"]
    assert d["days"] == 30
    assert (d["totals"]["requests"], d["totals"]["failed"], d["totals"]["credits"]) == (22, 2, 23)
    assert d["totals"]["error_pct"] == 9.1

    chart = d["requests_chart"]
    assert chart.total == 22 and len(chart.x_ticks) >= 4
    assert {bar.css for bar in chart.bars} == {"bar-ok", "bar-failed"}
    completed = [int(bar.title.split(": ")[1].split()[0]) for bar in chart.bars if bar.css == "bar-ok"]
    failed = [int(bar.title.split(": ")[1].split()[0]) for bar in chart.bars if bar.css == "bar-failed"]
    assert (sum(completed), sum(failed)) == (20, 2)
    assert d["credits_chart"].total == 23

    assert [row["key"].name for row in d["top_keys"]] == ["busy", "quiet"]
    assert [row["requests"] for row in d["top_keys"]] == [21, 1]
    assert [(row["model__model_id"], row["requests"]) for row in d["top_models"]] == [
        ("local-chat", 21), ("local-image", 1)]

    chat = next(row for row in d["models_24h"] if row["model__model_id"] == "local-chat")
    assert (chat["requests"], chat["failed"], chat["error_pct"]) == (20, 2, 10.0)
    assert chat["p95_latency"] == 190  # nearest rank: the 19th of 20 sorted latencies
    assert chat["mean_latency"] == 105
    assert dict(d["tiers"]) == {tier: count for tier, count in zip(
        ("free", "augmented", "premium", "cool", "partner", "limited", "exclusive", "special"),
        (1, 0, 1, 0, 0, 0, 0, 0))}

    body = response.content.decode()
    assert body.count('<rect class="bar ') == len(chart.bars) + len(d["credits_chart"].bars)
    assert 'id="top-keys"' in body and '<td class="num">190</td>' in body


def test_the_dashboard_window_can_be_a_week_or_a_quarter(staff_client, traffic):
    assert staff_client.get(DASHBOARD, {"days": "7"}).context["d"]["totals"]["requests"] == 22
    quarter = staff_client.get(DASHBOARD, {"days": "90"}).context["d"]
    assert quarter["totals"]["requests"] == 23 and len(quarter["requests_chart"].x_ticks) <= 9
    assert staff_client.get(DASHBOARD, {"days": "100000"}).context["d"]["days"] == 30


def test_the_dashboard_with_no_usage_says_so(staff_client, seeded):
    response = staff_client.get(DASHBOARD)
    assert response.status_code == 200
    assert "No requests in this period." in response.content.decode()
    assert not response.context["d"]["requests_chart"].bars


def test_the_dashboard_query_count_does_not_grow_with_events(staff_client, traffic, record_usage):
    with CaptureQueriesContext(connection) as before:
        staff_client.get(DASHBOARD)
    for minutes in range(40):
        record_usage(traffic["quiet"], "local-chat", ago=timedelta(minutes=minutes, days=minutes % 5))
    with CaptureQueriesContext(connection) as after:
        staff_client.get(DASHBOARD)
    assert len(after.captured_queries) == len(before.captured_queries)


def test_p95_is_the_nearest_rank(seeded, make_key, record_usage):
    key, _ = make_key()
    for latency in (5, 1, 4, 2, 3):
        record_usage(key, "local-embedding", latency=latency)
    model = AiModel.objects.get(model_id="local-embedding")
    since = timezone.now() - timedelta(hours=1)
    assert dashboard.p95_latency_by_model(since, [model.pk]) == {model.pk: 5}
    record_usage(key, "local-embedding", latency=100, ago=timedelta(hours=2))  # before the window
    assert dashboard.p95_latency_by_model(since, [model.pk]) == {model.pk: 5}


def test_nice_axis_ceilings():
    assert [dashboard.nice_ceiling(v) for v in (0, 1, 3, 7, 18, 230, 999)] == [1, 1, 5, 10, 20, 500, 1000]


# ------------------------------------------------------------------ the usage list

def test_the_usage_list_filters_by_key_time_and_status(staff_client, traffic, record_usage):
    busy, quiet = traffic["busy"], traffic["quiet"]
    record_usage(quiet, "local-chat", ago=timedelta(minutes=1), success=False, status=504)

    def rows(**params):
        return list(staff_client.get(EVENTS, params).context["cl"].result_list)

    assert {e.key_id for e in rows(key=quiet.pk)} == {quiet.pk}
    assert len(rows(key=quiet.pk)) == 3
    assert len(rows(since="24h")) == 21
    assert [e.status for e in rows(status_class="5")] == [504, 502, 502]
    assert len(rows(q=busy.prefix)) == 21
    page = staff_client.get(EVENTS, {"key": quiet.pk}).content.decode()
    assert f"{quiet.prefix}…" in page


def test_the_usage_list_counts_at_most_the_cap(staff_client, traffic, monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 10)
    response = staff_client.get(EVENTS)
    assert response.context["cl"].result_count == 10
    assert "More than 10 usage events" in response.content.decode()
    response = staff_client.get(EVENTS, {"key": traffic["quiet"].pk})
    assert response.context["cl"].result_count == 2
    assert "2 usage events" in response.content.decode()


def test_usage_events_are_read_only(staff_client, traffic):
    event = UsageEvent.objects.first()
    assert staff_client.get(reverse("admin:models_catalog_usageevent_add")).status_code == 403
    url = reverse("admin:models_catalog_usageevent_change", args=[event.pk])
    assert staff_client.get(url).status_code == 200
    assert staff_client.post(url, {"status": "200"}).status_code == 403
    assert UsageEvent.objects.get(pk=event.pk).status == event.status


def test_chart_gridlines_fall_on_round_numbers_and_bars_stack():
    chart = dashboard.column_chart(title="t", labels=["a", "b"], unit="requests",
                                   series=[("completed", "bar-ok", [30, 5]), ("failed", "bar-failed", [9, 0])])
    assert [tick.label for tick in chart.y_ticks] == ["0", "10", "20", "30", "40"]
    ok, failed = chart.bars[0], chart.bars[1]
    assert ok.y + ok.height == chart.baseline and failed.y + failed.height == ok.y  # failed sits on completed
    assert round(ok.height + failed.height) == round(chart.plot_height * 39 / 40)
    assert len(chart.bars) == 3 and chart.total == 44
