"""Budgets per UTC calendar period (CONTRACT section 12): holds included, checked inside the charge statement.

The clock is moved, never waited for; the concurrent test serves the tree with two gunicorn workers on
PostgreSQL, as tests/gateway/test_concurrency.py does.
"""
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from decimal import Decimal

import pytest
import requests

from gateway import metering, prices
from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from keys.pricing import mispriced
from models_catalog import catalog
from models_catalog.models import AiModel
from tests.gateway.conftest import LOCAL_BODIES, assert_error, chat_completion, gunicorn, post
from tests.gateway.test_token_prices import HELLO, PATH, big_usage, hold_for, priced  # noqa: F401  (fixture)

EMBEDDING = LOCAL_BODIES["embedding"]  # local-embedding: 1 credit a request


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def budgeted(make_key, *, credits: int = 1000, budget: int, period: str = "day", **fields):
    key, secret = make_key(credits=credits, max_credits=credits, rpm=1000, rph=10000, **fields)
    ApiKey.objects.filter(pk=key.pk).update(budget_credits=budget, budget_period=period)
    return key, secret


@pytest.mark.django_db
def test_a_hold_past_the_budget_is_402_budget_exceeded_with_what_is_left_and_when_it_resets(
        client, seeded, make_key, clock):
    clock.set(at("2026-03-04 15:20:00"))  # a Wednesday
    key, secret = budgeted(make_key, budget=3)
    for left in ("2", "1", "0"):
        response = post(client, *EMBEDDING, secret)
        assert response.status_code == 200, response.content
    response = post(client, *EMBEDDING, secret)
    assert_error(response, 402, "budget_exceeded", "insufficient_credits_error")
    assert (response["X-Budget-Remaining"], response["X-Budget-Reset"]) == ("0", "2026-03-05T00:00:00Z")
    key.refresh_from_db()
    assert (key.credits, key.budget_spent) == (997, 3)
    assert key.budget_period_start == datetime(2026, 3, 4, tzinfo=timezone.utc)
    assert mismatches() == []


@pytest.mark.django_db
@pytest.mark.parametrize("period, now, reset, later", [
    ("week", "2026-03-08 23:59:00", "2026-03-09T00:00:00Z", 120),  # Sunday: the week ends at Monday's start
    ("month", "2026-02-27 12:00:00", "2026-03-01T00:00:00Z", 2 * 86400),
    ("day", "2026-12-31 23:59:59", "2027-01-01T00:00:00Z", 1),
])
def test_a_new_period_opens_by_itself_when_the_clock_passes_its_start(client, seeded, make_key, clock, period,
                                                                      now, reset, later):
    clock.set(at(now))
    key, secret = budgeted(make_key, budget=2, period=period)
    for _ in range(2):
        assert post(client, *EMBEDDING, secret).status_code == 200
    response = post(client, *EMBEDDING, secret)
    assert response.status_code == 402 and response["X-Budget-Reset"] == reset
    clock.advance(later)
    assert post(client, *EMBEDDING, secret).status_code == 200  # no job ran: the charge opened the period
    key.refresh_from_db()
    assert key.budget_spent == 1
    assert key.budget_period_start == datetime.fromisoformat(reset.replace("Z", "+00:00"))
    assert mismatches() == []


@pytest.mark.django_db
def test_the_budget_counts_the_hold_and_gets_back_what_the_settlement_gives_back(client, priced, upstream,
                                                                                 make_key, clock):
    key, secret = budgeted(make_key, budget=100)
    held = hold_for(HELLO, 30_000)
    upstream.json("/chat/completions", {**chat_completion(), "usage": big_usage()})  # a price of 58
    body = {"model": "fake-chat", "messages": HELLO, "max_tokens": 30_000}
    assert post(client, PATH, body, secret).status_code == 200
    key.refresh_from_db()
    assert key.budget_spent == 58
    # 42 left: the next request's hold of more is refused, though its price would fit.
    assert held > 42
    response = post(client, PATH, body, secret)
    assert_error(response, 402, "budget_exceeded", "insufficient_credits_error")
    assert response["X-Budget-Remaining"] == "42"
    # A smaller cap holds less, and fits.
    upstream.json("/chat/completions", chat_completion())
    assert post(client, PATH, {**body, "max_tokens": 1000}, secret).status_code == 200
    key.refresh_from_db()
    assert key.budget_spent == 58 + 2
    assert mismatches() == [] and mispriced() == []


@pytest.mark.django_db
def test_a_refund_gives_the_budget_back(client, fake_models, upstream, make_key, clock):
    key, secret = budgeted(make_key, budget=1)
    upstream.fail_all(500)
    for _ in range(3):
        assert post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret).status_code == 502
    key.refresh_from_db()
    assert (key.budget_spent, key.credits) == (0, 1000)
    assert mismatches() == []


@pytest.mark.django_db
def test_a_settlement_after_its_period_ended_gives_nothing_back_to_the_new_one(priced, make_key, clock):
    clock.set(at("2026-03-04 23:59:00"))
    key, _ = budgeted(make_key, budget=100)
    model = AiModel.objects.get(model_id="fake-chat")
    terms = prices.token_prices(model)
    first = metering.charge(key=key, model=model, operation="chat", amount=30, request_id="a", prices=terms)
    clock.advance(120)  # the next day: the next charge opens a new period
    second = metering.charge(key=key, model=model, operation="chat", amount=10, request_id="b", prices=terms)
    for entry, give in ((first, 20), (second, 4)):
        assert metering.complete(entry=entry, key=key, model=model, operation="chat", provider="fake",
                                 input_tokens=1, output_tokens=1, latency_ms=1, give=give)
    key.refresh_from_db()
    assert (key.budget_spent, key.credits) == (10 - 4, 1000 - 10 - 10 + 4)
    assert mismatches() == []


@pytest.mark.postgres
@pytest.mark.served
def test_forty_concurrent_requests_across_two_workers_never_overshoot_a_budget(transactional_db, seeded, make_key,
                                                                                tmp_path):
    # A token-priced chat: each request holds more than its price, and the budget fits a few holds only.
    AiModel.objects.filter(model_id="local-chat").update(pricing_input=Decimal("100000"),
                                                         pricing_output=Decimal("100000"), max_output_tokens=200)
    catalog.invalidate()
    key, secret = budgeted(make_key, budget=150, max_concurrent=40)
    path, body = LOCAL_BODIES["chat"]
    parallel = 40
    start = threading.Barrier(parallel)
    with gunicorn(tmp_path / "server", workers=2, threads=parallel // 2) as base:
        def call(_):
            start.wait(timeout=30)
            return requests.post(base + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=60)

        with ThreadPoolExecutor(parallel) as pool:
            responses = list(pool.map(call, range(parallel)))
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 402} and 200 in statuses and 402 in statuses, statuses
    assert all(response.json()["error"]["code"] == "budget_exceeded" for response in responses
               if response.status_code == 402)
    charged = sum(int(response.headers["X-Credits-Charged"]) for response in responses if response.status_code == 200)
    key.refresh_from_db()
    assert key.budget_spent == charged <= 150
    assert (key.credits, key.in_flight) == (1000 - charged, 0)
    assert LedgerEntry.objects.filter(key=key, kind="charge", status="pending").count() == 0
    assert mismatches() == [] and mispriced() == []
