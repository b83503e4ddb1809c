"""X-Request-ID: taken from a sane client header or made, on every answer, in the ledger and the usage records."""
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


@pytest.mark.django_db
def test_a_sane_client_id_is_answered_and_written_on_the_charge_and_the_usage_row(client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="client-trace:42/a")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "client-trace:42/a"
    assert charge_of(key).request_id == "client-trace:42/a"
    assert UsageEvent.objects.get(key=key).request_id == "client-trace:42/a"


@pytest.mark.django_db
@pytest.mark.parametrize("offered", ["two words", "x" * 129, "tab\there", "é-accent"])
def test_an_unusable_client_id_is_replaced_by_a_made_one(client, seeded, free_key, offered):
    key, secret = free_key
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID=offered)
    assert response.status_code == 200
    made = response["X-Request-ID"]
    assert GENERATED.match(made) and made != offered
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
    assert client.get("/no/such/page", HTTP_X_REQUEST_ID="mine-1").get("X-Request-ID") == "mine-1"


@pytest.mark.django_db
def test_the_id_round_trips_through_a_stream(client, seeded, free_key):
    key, secret = free_key
    response = post(client, CHAT, {**HELLO, "stream": True}, secret, HTTP_X_REQUEST_ID="stream-7")
    assert response["X-Request-ID"] == "stream-7"
    assert b"".join(response.streaming_content).endswith(b"data: [DONE]\n\n")
    assert charge_of(key).request_id == "stream-7"
    assert UsageEvent.objects.get(key=key).request_id == "stream-7"


@pytest.mark.django_db
def test_the_id_round_trips_through_an_upstream_failure_and_its_refund(client, seeded, free_key, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    add_models(add_provider("down", closed_port_url()), prefix="down")
    key, secret = free_key
    response = post(client, CHAT, {**HELLO, "model": "down-chat"}, secret, HTTP_X_REQUEST_ID="fails-9")
    assert response.status_code == 502
    assert response["X-Request-ID"] == "fails-9"
    charge = charge_of(key)
    assert (charge.status, charge.request_id) == ("refunded", "fails-9")
    failure = UsageEvent.objects.get(key=key)
    assert (failure.success, failure.status, failure.request_id) == (False, 502, "fails-9")


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
    post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="shown-on-page")
    client.force_login(django_user_model.objects.create_superuser("alice", "a@example.com", "correct horse battery"))
    page = client.get(reverse("admin:keys_apikey_change", args=[key.pk])).content.decode()
    recent = page[page.index('id="key-recent-requests"'):]
    assert "<th>Request id</th>" in recent
    assert '<td class="nowrap">shown-on-page</td>' in recent
