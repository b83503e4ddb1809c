"""Per-key rpm and rph: counted across the four operations, and across processes sharing Redis."""
import pytest
import requests

from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.gateway.conftest import (
    LOCAL_BODIES,
    LOCAL_TIER,
    OPERATIONS,
    assert_error,
    gunicorn,
    key_clear_of_window_edges,
    post,
)


@pytest.mark.django_db
def test_the_minute_limit_counts_every_operation_of_the_key(client, seeded, make_key, clock):
    key, secret = make_key(tier=LOCAL_TIER, credits=100, max_credits=100, rpm=4)
    remaining = []
    for operation in OPERATIONS:
        response = post(client, *LOCAL_BODIES[operation], secret)
        assert response.status_code == 200
        remaining.append(response["X-RateLimit-Remaining-Requests"])
    assert remaining == ["3", "2", "1", "0"]
    response = post(client, *LOCAL_BODIES["chat"], secret)
    assert_error(response, 429, "rate_limit_exceeded", "rate_limit_error", param="rpm")
    assert response["X-RateLimit-Limit-Requests"] == "4"
    assert UsageEvent.objects.count() == 4


@pytest.mark.django_db
def test_the_hour_limit_is_reported_with_its_own_param(client, seeded, make_key, clock):
    key, secret = make_key(credits=100, max_credits=100, rpm=1000, rph=2)
    for _ in range(2):
        assert post(client, *LOCAL_BODIES["embedding"], secret).status_code == 200
    response = post(client, *LOCAL_BODIES["embedding"], secret)
    assert_error(response, 429, "rate_limit_exceeded", "rate_limit_error", param="rph")
    assert 1 <= int(response["Retry-After"]) <= 3600


@pytest.mark.django_db
def test_limits_belong_to_the_key_not_to_the_client(client, seeded, make_key, clock):
    _, first_secret = make_key(credits=100, max_credits=100, rpm=1)
    _, second_secret = make_key(credits=100, max_credits=100, rpm=1)
    assert post(client, *LOCAL_BODIES["embedding"], first_secret).status_code == 200
    assert post(client, *LOCAL_BODIES["embedding"], first_secret).status_code == 429
    assert post(client, *LOCAL_BODIES["embedding"], second_secret).status_code == 200


# ---------------------------------------------------------------- two processes sharing Redis

@pytest.fixture
def two_servers(transactional_db, seeded, tmp_path):
    with gunicorn(tmp_path / "a") as first, gunicorn(tmp_path / "b") as second:
        yield first, second


def send(base: str, secret: str) -> requests.Response:
    path, body = LOCAL_BODIES["embedding"]
    return requests.post(base + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_the_minute_limit_holds_across_two_processes(two_servers, make_key):
    first, second = two_servers
    # The servers' windows turn on the real clock: a key whose minute has at least 20 s left.
    key, secret = key_clear_of_window_edges(make_key, credits=100, max_credits=100, rpm=3)
    statuses = [send(base, secret) for base in (first, second, first)]
    assert [response.status_code for response in statuses] == [200, 200, 200]
    assert [response.headers["X-RateLimit-Remaining-Requests"] for response in statuses] == ["2", "1", "0"]
    refused = send(second, secret)
    assert refused.status_code == 429
    assert refused.json()["error"]["param"] == "rpm"
    assert "Retry-After" in refused.headers
    assert UsageEvent.objects.filter(key=key).count() == 3


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_the_hour_limit_holds_across_two_processes(two_servers, make_key):
    first, second = two_servers
    _, secret = key_clear_of_window_edges(make_key, credits=100, max_credits=100, rpm=1000, rph=2)
    assert send(first, secret).status_code == 200
    assert send(second, secret).status_code == 200
    refused = send(first, secret)
    assert refused.status_code == 429
    assert refused.json()["error"]["param"] == "rph"



@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.served
def test_one_key_driven_through_two_instances_at_once_keeps_credits_and_limits_exact(two_servers, make_key):
    from concurrent.futures import ThreadPoolExecutor

    from keys.ledger import mismatches

    first, second = two_servers
    key, secret = key_clear_of_window_edges(make_key, credits=20, max_credits=20, rpm=1000, rph=30)
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda i: send((first, second)[i % 2], secret), range(40)))
    statuses = sorted(response.status_code for response in responses)
    # 30 requests fit the hour; of those, 20 had credits.
    assert statuses == [200] * 20 + [402] * 10 + [429] * 10
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (0, 0)
    assert mismatches() == []


@pytest.mark.django_db
def test_an_invalid_request_uses_its_slot_but_costs_nothing(client, seeded, make_key, clock):
    key, secret = make_key(credits=100, max_credits=100, rpm=2)
    invalid = post(client, "/v1/embeddings", {"model": "local-embedding"}, secret)
    assert_error(invalid, 400, "missing_field", param="input")
    assert invalid["X-RateLimit-Remaining-Requests"] == "1"
    assert post(client, *LOCAL_BODIES["embedding"], secret).status_code == 200
    assert_error(post(client, *LOCAL_BODIES["embedding"], secret), 429, "rate_limit_exceeded", "rate_limit_error")
    assert ApiKey.objects.get(pk=key.pk).credits == 99
