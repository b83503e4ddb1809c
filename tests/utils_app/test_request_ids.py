"""X-Request-ID: made by the gateway for every request, on every answer, in the ledger and the usage records;
a sane client X-Request-ID is kept beside it (X-Client-Request-ID), never used in its place."""
import re

import pytest
from django.urls import reverse

from gateway import metering, sweeper
from keys.models import LedgerEntry
from models_catalog.models import AiModel, UsageEvent
from tests.gateway.conftest import UPSTREAM_KEY_ENV, UPSTREAM_SECRET, add_models, add_provider, closed_port_url, post

CHAT = "/v1/chat/completions"
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}
GENERATED = re.compile(r"^[0-9a-f]{32}$")


def charge_of(key) -> LedgerEntry:
    return LedgerEntry.objects.get(key=key, kind="charge")


def made_id(response) -> str:
    made = response["X-Request-ID"]
    assert GENERATED.match(made), made
    return made


@pytest.mark.django_db
def test_a_sane_client_id_is_answered_beside_the_made_one_which_names_the_charge_and_the_usage_row(
        client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="client-trace:42/a")
    assert response.status_code == 200
    made = made_id(response)
    assert response["X-Client-Request-ID"] == "client-trace:42/a"
    assert charge_of(key).request_id == made
    assert UsageEvent.objects.get(key=key).request_id == made


@pytest.mark.django_db
def test_two_requests_sending_the_same_client_id_keep_records_of_their_own(client, seeded, free_key, make_key):
    (first_key, first_secret), (second_key, second_secret) = free_key, make_key()
    first = post(client, CHAT, HELLO, first_secret, HTTP_X_REQUEST_ID="same-id")
    second = post(client, CHAT, HELLO, second_secret, HTTP_X_REQUEST_ID="same-id")

    assert first["X-Client-Request-ID"] == second["X-Client-Request-ID"] == "same-id"
    assert made_id(first) != made_id(second)
    assert charge_of(first_key).request_id == first["X-Request-ID"]
    assert charge_of(second_key).request_id == second["X-Request-ID"]
    assert LedgerEntry.objects.filter(request_id="same-id").count() == 0
    assert UsageEvent.objects.filter(request_id="same-id").count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("offered", ["two words", "x" * 129, "tab\there", "é-accent"])
def test_an_unusable_client_id_is_neither_answered_nor_kept(client, seeded, free_key, offered):
    key, secret = free_key
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID=offered)
    assert response.status_code == 200
    made = made_id(response)
    assert "X-Client-Request-ID" not in response
    assert UsageEvent.objects.get(key=key).request_id == made == charge_of(key).request_id


@pytest.mark.django_db
def test_every_answer_carries_an_id_even_a_404_a_413_and_a_refusal(client, settings):
    ids = [
        client.get("/no/such/page")["X-Request-ID"],
        client.post(CHAT, "x" * 2048, content_type="application/json",
                    CONTENT_LENGTH=str(settings.MAX_REQUEST_BYTES + 1))["X-Request-ID"],
        post(client, CHAT, HELLO)["X-Request-ID"],  # 401: no key
        client.get("/health")["X-Request-ID"],
    ]
    assert all(GENERATED.match(made) for made in ids)
    assert len(set(ids)) == 4
    answer = client.get("/no/such/page", HTTP_X_REQUEST_ID="mine-1")
    assert (answer["X-Client-Request-ID"], made_id(answer) != "mine-1") == ("mine-1", True)


@pytest.mark.django_db
def test_the_id_round_trips_through_a_stream(client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, {**HELLO, "stream": True}, secret, HTTP_X_REQUEST_ID="stream-7")
    made = made_id(response)
    assert response["X-Client-Request-ID"] == "stream-7"
    assert b"".join(response.streaming_content).endswith(b"data: [DONE]\n\n")
    assert charge_of(key).request_id == made
    assert UsageEvent.objects.get(key=key).request_id == made


@pytest.mark.django_db
def test_the_id_round_trips_through_an_upstream_failure_and_its_refund(client, seeded, free_key, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    add_models(add_provider("down", closed_port_url()), prefix="down")
    key, secret = free_key
    response = post(client, CHAT, {**HELLO, "model": "down-chat"}, secret, HTTP_X_REQUEST_ID="fails-9")
    assert response.status_code == 502
    made = made_id(response)
    assert response["X-Client-Request-ID"] == "fails-9"
    charge = charge_of(key)
    assert (charge.status, charge.request_id) == ("refunded", made)
    failure = UsageEvent.objects.get(key=key)
    assert (failure.success, failure.status, failure.request_id) == (False, 502, made)


@pytest.mark.django_db
def test_a_charge_the_sweeper_abandons_records_its_request_id(seeded, free_key):
    key, _ = free_key
    metering.charge(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat", amount=1,
                    request_id="left-behind")
    assert sweeper.settle_stale(older_than=0) == 1
    abandoned = UsageEvent.objects.get(key=key)
    assert (abandoned.status, abandoned.request_id) == (0, "left-behind")


@pytest.mark.django_db
def test_the_staff_key_page_lists_recent_requests_with_their_ids(client, seeded, free_key, django_user_model):
    key, secret = free_key
    shown = made_id(post(client, CHAT, HELLO, secret))
    client.force_login(django_user_model.objects.create_superuser("alice", "a@example.com", "correct horse battery"))
    page = client.get(reverse("admin:keys_apikey_change", args=[key.pk])).content.decode()
    recent = page[page.index('id="key-recent-requests"'):]
    assert "<th>Request id</th>" in recent
    assert f'<td class="nowrap">{shown}</td>' in recent
