"""A key's budget and tpm through every door: the admin API, the staff pages, issue_key and refill_credits.

The budget's enforcement (the charge statement's 402 budget_exceeded) is the metering's and is tested
there; here: the configuration is read, checked, stored, shown and audited alike whichever door it
comes through, and a key's page says what it has spent this period.
"""
import json
from datetime import datetime, timezone
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.urls import reverse

from keys.models import ApiKey, AuditLog, LedgerEntry, budget_bounds, digest_secret
from keys.services import update_key
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def post(client, path, body, secret):
    return client.post(path, json.dumps(body), content_type="application/json", **bearer(secret))


def refused(response) -> str:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error["param"]


def utc(*parts) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


# ------------------------------------------------------------------ the admin API

def test_a_key_is_created_with_a_budget_and_tpm_and_shows_them(client, admin_key):
    _, admin_secret = admin_key
    response = post(client, "/admin/create-key", {"config": {"credits": 500, "budget": {"credits": 120, "period": "week"},
                                                             "tpm": 40000}}, admin_secret)
    assert response.status_code == 201, response.content
    record = response.json()["apiKey"]
    assert record["config"]["budget"] == {"credits": 120, "period": "week"}
    assert record["config"]["tpm"] == 40000
    key = ApiKey.objects.get(digest=digest_secret(record["key"]))
    assert (key.budget_credits, key.budget_period, key.tpm) == (120, "week", 40000)
    entry = AuditLog.objects.get(action="create_key", key=key)
    assert entry.after["budget"] == {"credits": 120, "period": "week"} and entry.after["tpm"] == 40000


def test_a_budget_is_set_changed_and_cleared_with_null_each_change_audited(client, admin_key, make_key):
    _, admin_secret = admin_key
    key, secret = make_key(credits=50, max_credits=100)

    answer = post(client, "/admin/update-key", {"key": secret, "update": {"budget": {"credits": 30, "period": "day"},
                                                                          "tpm": 1000}}, admin_secret)
    assert answer.status_code == 200, answer.content
    assert answer.json()["apiKey"]["config"]["budget"] == {"credits": 30, "period": "day"}
    key.refresh_from_db()
    assert (key.budget_credits, key.budget_period, key.tpm) == (30, "day", 1000)

    # Members left out keep their value: a change of rpm leaves the budget and tpm alone.
    post(client, "/admin/update-key", {"key": secret, "update": {"rpm": 5}}, admin_secret)
    key.refresh_from_db()
    assert (key.budget_credits, key.budget_period, key.tpm, key.rpm) == (30, "day", 1000, 5)

    answer = post(client, "/admin/update-key", {"key": secret, "update": {"budget": None, "tpm": None}}, admin_secret)
    assert answer.status_code == 200, answer.content
    assert (answer.json()["apiKey"]["config"]["budget"], answer.json()["apiKey"]["config"]["tpm"]) == (None, None)
    key.refresh_from_db()
    assert (key.budget_credits, key.budget_period, key.tpm) == (None, "", None)

    changes = [(entry.before["budget"], entry.after["budget"], entry.before["tpm"], entry.after["tpm"])
               for entry in AuditLog.objects.filter(action="update_key", key=key).order_by("id")]
    assert changes == [(None, {"credits": 30, "period": "day"}, None, 1000),
                       ({"credits": 30, "period": "day"}, {"credits": 30, "period": "day"}, 1000, 1000),
                       ({"credits": 30, "period": "day"}, None, 1000, None)]
    # A budget is no balance: none of these moved the ledger.
    assert not LedgerEntry.objects.filter(key=key, kind=LedgerEntry.ADJUSTMENT).exists()


@pytest.mark.parametrize("update, param", [
    ({"budget": {"credits": 10}}, "update.budget.period"),
    ({"budget": {"period": "week"}}, "update.budget.credits"),
    ({"budget": {"credits": 0, "period": "day"}}, "update.budget.credits"),
    ({"budget": {"credits": "10", "period": "day"}}, "update.budget.credits"),
    ({"budget": {"credits": 10, "period": "year"}}, "update.budget.period"),
    ({"budget": {"credits": 10, "period": "day", "reset": True}}, "update.budget.reset"),
    ({"budget": 10}, "update.budget"),
    ({"tpm": 0}, "update.tpm"),
    ({"tpm": 1_000_000_001}, "update.tpm"),
    ({"tpm": 1.5}, "update.tpm"),
])
def test_a_bad_budget_or_tpm_is_a_400_naming_the_member_and_changes_nothing(client, admin_key, make_key, update,
                                                                             param):
    _, admin_secret = admin_key
    key, secret = make_key()
    assert refused(post(client, "/admin/update-key", {"key": secret, "update": update}, admin_secret)) == param
    key.refresh_from_db()
    assert (key.budget_credits, key.budget_period, key.tpm) == (None, "", None)
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_the_schema_describes_budget_and_tpm(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    budget = schemas["Budget"]
    assert set(budget["required"]) == {"credits", "period"}
    assert budget["properties"]["credits"]["minimum"] == 1
    assert schemas[budget["properties"]["period"]["$ref"].rsplit("/", 1)[1]]["enum"] == ["day", "week", "month"]
    config = schemas["ApiKeyConfig"]["properties"]
    assert (config["tpm"]["minimum"], config["tpm"]["maximum"], config["tpm"]["nullable"]) == (1, 1_000_000_000, True)
    out = schemas["ApiKeyConfigOut"]["properties"]
    assert {"budget", "tpm"} <= set(out)


# ------------------------------------------------------------------ the rules and the database

def test_a_half_budget_is_refused_by_the_rules_and_by_the_database(make_key):
    key, _ = make_key()
    with pytest.raises(Exception) as raised:
        update_key(key=key, changes={"budget_credits": 10}, actor="test")
    assert raised.value.field == "budget_period"
    with pytest.raises(Exception) as raised:
        update_key(key=key, changes={"budget_period": "month"}, actor="test")
    assert raised.value.field == "budget_credits"
    for half in ({"budget_credits": 10}, {"budget_period": "week"}, {"budget_period": "year", "budget_credits": 5}):
        with pytest.raises(IntegrityError), transaction.atomic():
            ApiKey.objects.filter(pk=key.pk).update(**half)


@pytest.mark.parametrize("period, now, start, end", [
    ("day", utc(2026, 11, 28, 15, 30), utc(2026, 11, 28), utc(2026, 11, 29)),
    ("week", utc(2026, 11, 28, 15, 30), utc(2026, 11, 23), utc(2026, 11, 30)),  # a Saturday: weeks from Monday
    ("week", utc(2026, 11, 23, 0, 0), utc(2026, 11, 23), utc(2026, 11, 30)),
    ("month", utc(2026, 12, 31, 23, 59), utc(2026, 12, 1), utc(2027, 1, 1)),
    ("month", utc(2028, 2, 29, 12), utc(2028, 2, 1), utc(2028, 3, 1)),
])
def test_budget_periods_are_utc_calendar_days_weeks_from_monday_and_months(period, now, start, end):
    assert budget_bounds(period, now) == (start, end)


def test_what_a_key_has_spent_counts_for_its_current_period_only(make_key):
    key, _ = make_key()
    update_key(key=key, changes={"budget_credits": 100, "budget_period": "day"}, actor="test")
    key.refresh_from_db()
    now = utc(2026, 11, 28, 15)
    assert key.budget_state(now).spent == 0
    # As the charge statement leaves it: 70 charged in the period that began today.
    ApiKey.objects.filter(pk=key.pk).update(budget_spent=70, budget_period_start=utc(2026, 11, 28))
    key.refresh_from_db()
    state = key.budget_state(now)
    assert (state.spent, state.left, state.end) == (70, 30, utc(2026, 11, 29))
    # The next day the same row has spent nothing of the new period: no job resets it.
    assert key.budget_state(utc(2026, 11, 29, 0, 1)).spent == 0
    assert make_key()[0].budget_state(now) is None


# ------------------------------------------------------------------ issue_key and refill_credits

def test_issue_key_takes_a_budget_and_tpm(capsys):
    call_command("issue_key", "--tier", "premium", "--credits", "900", "--budget-credits", "300", "--budget-period",
                 "month", "--tpm", "20000")
    out = capsys.readouterr().out.splitlines()
    assert "budget=300/month tpm=20000" in out[0]
    key = ApiKey.objects.get(digest=digest_secret(out[-1]))
    assert (key.budget_credits, key.budget_period, key.tpm) == (300, "month", 20000)
    assert AuditLog.objects.get(action="create_key", key=key).after["budget"] == {"credits": 300, "period": "month"}


@pytest.mark.parametrize("options, message", [
    (["--budget-credits", "300"], "a budget needs its period"),
    (["--budget-period", "week"], "a budget period needs the budget's credits"),
    (["--tpm", "0"], "tpm must be between 1 and 1000000000."),
])
def test_issue_key_refuses_a_half_budget_and_a_bad_tpm_with_the_rules_message(options, message):
    with pytest.raises(CommandError, match=message):
        call_command("issue_key", "--tier", "free", *options, stdout=StringIO())
    assert not ApiKey.objects.exists()


def test_refill_leaves_budgets_alone_and_names_the_keys_whose_budget_is_used_up(make_key, clock):
    clock.set(utc(2026, 11, 28, 15).timestamp())
    spent, _ = make_key(credits=0, max_credits=100)
    fresh, _ = make_key(credits=0, max_credits=100)
    for key in (spent, fresh):
        update_key(key=key, changes={"budget_credits": 50, "budget_period": "week"}, actor="test")
    ApiKey.objects.filter(pk=spent.pk).update(budget_spent=50, budget_period_start=utc(2026, 11, 23))

    out = StringIO()
    call_command("refill_credits", stdout=out)
    assert "refilled 2 key(s)" in out.getvalue()
    assert "1 key(s) have used up this period's budget" in out.getvalue()
    assert "2026-11-30T00:00:00+00:00" in out.getvalue()
    spent.refresh_from_db()
    assert (spent.credits, spent.budget_spent, spent.budget_period_start) == (100, 50, utc(2026, 11, 23))

    # Next Monday the budget has renewed by itself: nothing to report.
    clock.set(utc(2026, 11, 30, 0, 5).timestamp())
    out = StringIO()
    call_command("refill_credits", "--dry-run", stdout=out)
    assert "budget" not in out.getvalue()


# ------------------------------------------------------------------ the staff pages

@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("alice", "alice@example.com", "pass phrase 1"))
    return client


def edit_post(key: ApiKey, **changes) -> dict:
    """The key's edit page as the browser sends it back: each field with its value as drawn."""
    from keys.forms import ApiKeyChangeForm

    shown = ApiKeyChangeForm(instance=key)
    data = {}
    for bound in shown:
        initial = shown.get_initial_for_field(bound.field, bound.name)
        data[bound.html_name] = data[bound.html_initial_name] = "" if initial is None else initial
    return {**data, **{name: str(value) for name, value in changes.items()}}


def test_staff_set_a_budget_and_tpm_on_a_keys_page_audited(staff_client, make_key):
    key, _ = make_key(credits=10, max_credits=10)
    url = reverse("admin:keys_apikey_change", args=[key.pk])
    page = staff_client.get(url).content.decode()
    assert 'name="budget_credits"' in page and 'name="budget_period"' in page and 'name="tpm"' in page
    assert 'id="budget-none"' in page

    response = staff_client.post(url, edit_post(key, budget_credits=25, budget_period="week", tpm=500))
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.budget_credits, key.budget_period, key.tpm) == (25, "week", 500)
    entry = AuditLog.objects.get(action="update_key", key=key)
    assert entry.actor == "staff alice" and entry.after["budget"] == {"credits": 25, "period": "week"}


def test_a_half_budget_on_the_keys_page_is_refused_on_its_field(staff_client, make_key):
    key, _ = make_key()
    url = reverse("admin:keys_apikey_change", args=[key.pk])
    response = staff_client.post(url, edit_post(key, budget_credits=25))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["budget_period"] == [
        "a budget needs its period: day, week or month."]
    key.refresh_from_db()
    assert key.budget_credits is None


def test_the_keys_page_shows_what_it_spent_this_period_and_what_is_left(staff_client, make_key, clock):
    clock.set(utc(2026, 11, 28, 15).timestamp())
    key, _ = make_key()
    update_key(key=key, changes={"budget_credits": 80, "budget_period": "month"}, actor="test")
    ApiKey.objects.filter(pk=key.pk).update(budget_spent=55, budget_period_start=utc(2026, 11, 1))
    page = staff_client.get(reverse("admin:keys_apikey_change", args=[key.pk])).content.decode()
    assert 'id="budget-spent">55<' in page and 'id="budget-left">25<' in page
    assert "until 2026-12-01 00:00 UTC" in page

    ApiKey.objects.filter(pk=key.pk).update(budget_spent=80)
    page = staff_client.get(reverse("admin:keys_apikey_change", args=[key.pk])).content.decode()
    assert 'id="budget-left">0<' in page and 'id="budget-used-up"' in page

    # In December the November spend is history: the page shows a fresh period.
    clock.set(utc(2026, 12, 2).timestamp())
    page = staff_client.get(reverse("admin:keys_apikey_change", args=[key.pk])).content.decode()
    assert 'id="budget-spent">0<' in page and 'id="budget-left">80<' in page


def test_the_issue_form_takes_a_budget_and_tpm(staff_client):
    response = staff_client.post(reverse("admin:keys_apikey_add"), {
        "tier": "free", "credits": "10", "budget_credits": "7", "budget_period": "day", "tpm": "900", "rpm": "60",
        "rph": "1000"})
    assert response.status_code == 200 and "secret" in response.context
    key = ApiKey.objects.get()
    assert (key.budget_credits, key.budget_period, key.tpm) == (7, "day", 900)
