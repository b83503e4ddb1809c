"""Prices by the token (CONTRACT section 12): the hold before the call, the settlement to the upstream's usage.

The fake upstream reports the usage each test chooses, so every price here is worked out by hand from
the catalog's unit prices: a request fee plus the tokens' part rounded up once. Both backends.
"""
import math
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gateway import metering, metering_groups, prices
from gateway.tokens import count_tokens
from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from keys.pricing import TokenPrices, mispriced
from models_catalog import catalog
from models_catalog.models import AiModel, UsageEvent
from tests.gateway.conftest import (
    DROP,
    add_models,
    add_provider,
    assert_error,
    chat_completion,
    chunk,
    post,
    usage_chunk,
)
from tests.gateway.test_chat import _statements
from tests.gateway.test_streaming import events, streamed_text
from utils_app import metrics

PATH = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]
# Credits per million tokens, the catalog's kind of numbers (one with a fraction, to see the rounding).
PRICES = {"pricing_input": Decimal("250.5"), "pricing_cached_input": Decimal("25"), "pricing_output": Decimal("2000")}
MODEL_CAP = 100_000


@pytest.fixture
def priced(seeded, upstream, monkeypatch):
    """fake-chat and fake-embedding priced by the token (fee 1), fake-image and fake-speech by the request."""
    from tests.gateway.conftest import UPSTREAM_SECRET

    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    ids = add_models(add_provider("fake", upstream.base_url), max_output_tokens=MODEL_CAP, **PRICES)
    catalog.snapshot()
    return ids


def reconciled() -> bool:
    return mismatches() == [] and mispriced() == []


def hold_for(messages, cap: int, *, fee: int = 1) -> int:
    """The hold the contract's rule gives: the gateway's count of the prompt (with each message's share) and
    the output cap, at the test's prices."""
    prompt = prices.prompt_tokens_held({"messages": messages})
    return fee + math.ceil((prompt * Decimal("250.5") + cap * 2000) / 1_000_000)


def big_usage(prompt=100_000, cached=40_000, completion=20_000, reasoning=5_000) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning}}


def test_the_price_is_the_fee_and_the_tokens_part_rounded_up_once():
    terms = TokenPrices.of(request_fee=3, input=Decimal("2.5"), cached_input=None, output=Decimal("10"))
    assert terms.cached_input == terms.input  # cached_input defaults to input
    assert terms.price(input_tokens=0, output_tokens=0) == 3
    assert terms.price(input_tokens=1, output_tokens=0) == 4  # 2.5 millionths of a credit: one more credit
    assert terms.price(input_tokens=400_000, output_tokens=0) == 4  # exactly 1: no rounding up
    assert terms.price(input_tokens=400_001, output_tokens=0) == 5
    assert terms.price(input_tokens=1_000_000, output_tokens=100_000, cached_tokens=2_000_000) == 3 + 3 + 1
    with pytest.raises(ValueError):
        TokenPrices.of(request_fee=0, input="0.0000001", cached_input=None, output=None)


@pytest.mark.django_db
def test_a_completion_is_charged_its_price_from_the_upstreams_usage_with_cached_and_reasoning_tokens(
        client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.json("/chat/completions", {**chat_completion(), "usage": big_usage()})
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_tokens": 30_000}, secret)
    assert response.status_code == 200, response.content
    # 60,000 uncached at 250.5, 40,000 cached at 25, 20,000 out (reasoning included) at 2000: 56.03 → 57, fee 1.
    price = 1 + math.ceil((60_000 * Decimal("250.5") + 40_000 * 25 + 20_000 * 2000) / 1_000_000)
    assert price == 58
    assert response["X-Credits-Charged"] == "58"
    assert response.json()["usage"]["cost"] == 58
    assert response.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 40_000}
    assert response["X-Remaining-Credits"] == str(1000 - 58)
    assert ApiKey.objects.get(pk=key.pk).credits == 1000 - 58
    row = LedgerEntry.objects.get(key=key, kind="charge")
    held = hold_for(HELLO, 30_000)
    assert held > 58  # the rest of the hold was given back by the settlement
    assert (row.status, row.amount, row.held, row.uncovered) == ("completed", -58, held, 0)
    assert (row.input_tokens, row.cached_tokens, row.output_tokens) == (100_000, 40_000, 20_000)
    assert (row.request_fee, row.price_input, row.price_cached_input, row.price_output) == (
        1, Decimal("250.5"), Decimal("25"), Decimal("2000"))
    assert UsageEvent.objects.get(key=key).credits_charged == 58
    assert reconciled()


@pytest.mark.django_db
def test_a_hold_the_key_cannot_pay_is_refused_before_any_upstream_call(client, priced, upstream, make_key):
    key, secret = make_key(credits=150, max_credits=150)
    # No cap named: the model's 100,000 output tokens at 2000 per million are 200 credits.
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret)
    assert_error(response, 402, "insufficient_credits", "insufficient_credits_error")
    assert str(hold_for(HELLO, MODEL_CAP)) in response.json()["error"]["message"]
    assert upstream.posts() == []
    assert not LedgerEntry.objects.filter(key=key, kind="charge").exists()
    # A cap the key can pay for is held instead, and answered.
    upstream.json("/chat/completions", chat_completion(prompt_tokens=7, completion_tokens=4))
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_completion_tokens": 50_000},
                    secret)
    assert response.status_code == 200, response.content
    assert response["X-Credits-Charged"] == "2"  # fee 1 and a fraction of a credit of tokens
    assert ApiKey.objects.get(pk=key.pk).credits == 148
    assert reconciled()


@pytest.mark.django_db
def test_a_request_cap_above_the_models_is_held_as_named(client, priced, upstream, make_key):
    """Section 12: the request's own cap, else the model's. 10,000,000 tokens at 2,000 credits per million is
    20,000 credits: a key of 1,000 is refused before any upstream call."""
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.json("/chat/completions", chat_completion())
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_tokens": 10_000_000}, secret)
    assert response.status_code == 402, response.content
    assert response.json()["error"]["code"] == "insufficient_credits"
    assert upstream.calls == []
    assert not LedgerEntry.objects.filter(key=key, kind="charge").exists()


@pytest.mark.django_db
def test_a_price_above_the_hold_is_charged_up_to_the_hold_and_the_rest_written_as_uncovered(
        client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    # The upstream ignored max_tokens: 400,000 tokens out where 1,000 were asked for.
    upstream.json("/chat/completions", {**chat_completion(), "usage": big_usage(prompt=10, cached=0,
                                                                                 completion=400_000, reasoning=0)})
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_tokens": 1000}, secret)
    assert response.status_code == 200, response.content
    held = hold_for(HELLO, 1000)
    price = 1 + math.ceil((10 * Decimal("250.5") + 400_000 * 2000) / 1_000_000)
    assert response["X-Credits-Charged"] == str(held)
    assert response.json()["usage"]["cost"] == held
    row = LedgerEntry.objects.get(key=key, kind="charge")
    assert (row.amount, row.held, row.uncovered) == (-held, held, price - held)
    assert ApiKey.objects.get(pk=key.pk).credits == 1000 - held  # never taken below the hold
    metrics.flush()
    assert metrics.CREDITS_UNCOVERED.labels("fake-chat")._value.get() == price - held
    assert reconciled()


@pytest.mark.django_db
def test_a_failed_call_gives_the_whole_hold_back(client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.fail_all(500)
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_tokens": 1000}, secret)
    assert response.status_code == 502
    assert response["X-Remaining-Credits"] == "1000"
    assert "X-Credits-Charged" not in response
    charge = LedgerEntry.objects.get(key=key, kind="charge")
    assert charge.status == "refunded" and LedgerEntry.objects.get(key=key, kind="refund").amount == charge.held
    assert ApiKey.objects.get(pk=key.pk).credits == 1000
    assert reconciled()


@pytest.mark.django_db
def test_a_stream_cut_before_its_usage_is_charged_the_gateways_count_of_what_was_delivered(
        client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.sse("/chat/completions", [chunk("Half"), chunk(" an answer"), DROP])
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True, "max_tokens": 1000},
                    secret)
    held = hold_for(HELLO, 1000)
    assert response["X-Remaining-Credits"] == str(1000 - held)  # a stream's headers leave after the hold
    assert "X-Credits-Charged" not in response
    found = events(response)
    assert streamed_text(found) == "Half an answer"
    price = 1 + math.ceil((count_tokens("Hello") * Decimal("250.5") + count_tokens("Half an answer") * 2000)
                          / 1_000_000)
    row = LedgerEntry.objects.get(key=key, kind="charge")
    assert (row.status, row.amount, row.input_tokens, row.output_tokens) == (
        "completed", -price, count_tokens("Hello"), count_tokens("Half an answer"))
    assert ApiKey.objects.get(pk=key.pk).credits == 1000 - price
    assert reconciled()


@pytest.mark.django_db
def test_a_stream_that_asked_for_usage_gets_its_cost_in_the_last_chunk(client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.sse("/chat/completions", [chunk("Hi"), chunk(finish_reason="stop"), usage_chunk(3000, 1000),
                                       "[DONE]"])
    body = {"model": "fake-chat", "messages": HELLO, "stream": True, "max_tokens": 2000,
            "stream_options": {"include_usage": True}}
    found = events(post(client, PATH, body, secret))
    price = 1 + math.ceil((3000 * Decimal("250.5") + 1000 * 2000) / 1_000_000)
    assert found[-2]["usage"]["cost"] == price
    assert LedgerEntry.objects.get(key=key, kind="charge").amount == -price
    assert ApiKey.objects.get(pk=key.pk).credits == 1000 - price
    assert reconciled()


@pytest.mark.django_db
def test_embeddings_are_priced_by_their_input(client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    text = "Hello " * 9000  # the gateway counts 9,000 tokens: the hold
    upstream.json("/embeddings", {"object": "list", "model": "up", "usage": {"prompt_tokens": 5000,
                                                                             "total_tokens": 5000},
                                  "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]})
    response = post(client, "/v1/embeddings", {"model": "fake-embedding", "input": text}, secret)
    assert response.status_code == 200, response.content
    held, price = (1 + math.ceil(tokens * Decimal("250.5") / 1_000_000) for tokens in (count_tokens(text), 5000))
    assert (held, price) == (4, 3)
    body = response.json()
    assert (body["usage"]["cost"], body["remaining_credits"]) == (price, 1000 - price)
    assert (response["X-Credits-Charged"], response["X-Remaining-Credits"]) == (str(price), str(1000 - price))
    row = LedgerEntry.objects.get(key=key, kind="charge")
    assert (row.held, row.amount, row.price_output) == (held, -price, Decimal("0"))
    assert ApiKey.objects.get(pk=key.pk).credits == 1000 - price
    assert reconciled()


@pytest.mark.django_db
def test_a_model_priced_by_the_request_answers_as_before_with_what_it_charged(client, fake_models, upstream,
                                                                              free_key):
    key, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO}, secret)
    assert (response["X-Credits-Charged"], response["X-Remaining-Credits"]) == ("1", "99")
    assert response.json()["usage"]["cost"] == 1  # section 12: every chat answer says what it cost
    row = LedgerEntry.objects.get(key=key, kind="charge")
    assert (row.amount, row.held, row.price_input, row.request_fee) == (-1, 1, None, None)
    assert reconciled()


@pytest.mark.django_db
def test_a_price_change_leaves_the_settled_rows_as_they_were(client, priced, upstream, make_key):
    key, secret = make_key(credits=1000, max_credits=1000)
    upstream.json("/chat/completions", {**chat_completion(), "usage": big_usage()})
    assert post(client, PATH, {"model": "fake-chat", "messages": HELLO, "max_tokens": 30_000},
                secret).status_code == 200
    AiModel.objects.filter(model_id="fake-chat").update(pricing_input=Decimal("9999"), pricing_output=1)
    catalog.invalidate()
    row = LedgerEntry.objects.get(key=key, kind="charge")
    assert (row.amount, row.price_input, row.price_output) == (-58, Decimal("250.5"), Decimal("2000"))
    assert reconciled()  # the check prices each row by its own terms
    # A row whose amount disagrees with its terms is named.
    LedgerEntry.objects.filter(pk=row.pk).update(uncovered=1)
    assert [found.entry for found in mispriced()] == [row.pk]


@pytest.mark.django_db
def test_the_give_back_never_lifts_a_key_above_its_max_credits(priced, make_key):
    key, _ = make_key(credits=100, max_credits=100)
    model = AiModel.objects.get(model_id="fake-chat")
    terms = prices.token_prices(model)
    entry = metering.charge(key=key, model=model, operation="chat", amount=10, request_id="r", prices=terms)
    # A refill meanwhile brings the key back to its maxCredits, with its ledger row.
    LedgerEntry.objects.create(key=key, kind="refill", amount=10, balance_after=100, created_at=row_time(entry))
    ApiKey.objects.filter(pk=key.pk).update(credits=100)
    assert metering.complete(entry=entry, key=key, model=model, operation="chat", provider="fake", input_tokens=1,
                             output_tokens=1, latency_ms=1, give=9)
    key.refresh_from_db()
    assert key.credits == 100
    assert LedgerEntry.objects.get(pk=entry).amount == -10  # what the key was actually charged
    assert reconciled()


def row_time(entry: int):
    return LedgerEntry.objects.get(pk=entry).created_at


@pytest.mark.django_db
def test_a_token_priced_request_still_costs_two_statements(client, seeded, free_key, vendor):
    AiModel.objects.filter(model_id="local-chat").update(pricing_input=1000, pricing_output=1000,
                                                         max_output_tokens=100)
    catalog.invalidate()
    _, secret = free_key
    body = {"model": "local-chat", "messages": HELLO}
    assert post(client, PATH, body, secret).status_code == 200  # authenticates: the key is cached
    with CaptureQueriesContext(connection) as captured:
        response = post(client, PATH, body, secret)
    assert response.status_code == 200 and "cost" in response.json()["usage"]
    if vendor == "postgresql":
        assert _statements(captured.captured_queries) == ["WITH keys_apikey", "WITH keys_ledgerentry"]
    else:
        assert _statements(captured.captured_queries) == [
            "UPDATE keys_apikey", "INSERT keys_ledgerentry",
            "UPDATE keys_ledgerentry", "UPDATE keys_apikey", "INSERT models_catalog_usageevent"]
    assert reconciled()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_group_settles_holds_of_different_sizes_as_they_would_settle_alone(priced, make_key):
    from django.utils import timezone

    from utils_app.db import release_connection

    release_connection(connection)
    model = AiModel.objects.get(model_id="fake-chat")
    terms = prices.token_prices(model)
    keys = [make_key(credits=100, max_credits=100)[0] for _ in range(3)]
    holds = [7, 30, 12]
    charge_items = [{"amount": hold, "now": timezone.now(), "key": key.pk, "tier": key.tier, "request_id": str(n),
                     "idempotency_key": None, "operation": "chat", "model": "fake-chat",
                     **metering._terms(terms)} for n, (key, hold) in enumerate(zip(keys, holds))]
    charged = metering_groups.run_group([(metering_groups.CHARGE, item) for item in charge_items])
    assert [balance for _, balance in charged] == [93, 70, 88]
    gives = [2, 0, 11]
    settle_items = [{"entry": entry, "key": key.pk, "model_pk": model.pk, "operation": "chat", "provider": "fake",
                     "input_tokens": 5, "output_tokens": 3, "cached_tokens": 0, "latency_ms": 1,
                     "now": timezone.now(), "status": 200, "success": True, "deployment": None, "give": give,
                     "uncovered": 4 if give == 0 else 0}
                    for (entry, _), key, give in zip(charged, keys, gives)]
    assert metering_groups.run_group([(metering_groups.SETTLEMENT, item) for item in settle_items]) == [True] * 3
    for key, hold, give in zip(keys, holds, gives):
        key.refresh_from_db()
        assert (key.credits, key.in_flight, key.tpm_used) == (100 - hold + give, 0, 8)
    assert [row.amount for row in LedgerEntry.objects.filter(kind="charge").order_by("id")] == [-5, -30, -1]
    assert LedgerEntry.objects.get(pk=charged[1][0]).uncovered == 4
    assert mismatches() == []


@pytest.mark.django_db
def test_a_messages_answer_says_what_it_cost_as_a_chat_answer_does(client, fake_models, upstream, free_key):
    """Section 12: the usage of a Messages answer carries cost beside Anthropic's counts, whatever the pricing."""
    key, secret = free_key
    upstream.json("/chat/completions", chat_completion())
    response = post(client, "/v1/messages", {"model": "fake-chat", "max_tokens": 64, "messages": HELLO}, secret)
    assert response.status_code == 200, response.content
    assert response.json()["usage"]["cost"] == int(response["X-Credits-Charged"]) == 1
    assert reconciled()
