"""Unknown API keys are counted per client address: past AUTH_FAILURES_PER_MINUTE, a 429 without a lookup."""
import pytest

from keys.models import ApiKey
from models_catalog.models import UsageEvent
from tests.conftest import bearer
from tests.gateway.conftest import post
from utils_app import windows

pytestmark = pytest.mark.django_db

GUESSER = "203.0.113.66"
NEIGHBOUR = "198.51.100.7"
LIMIT = 5
CHAT = "/v1/chat/completions"
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture(autouse=True)
def small_limit(settings, clock):
    """The guesser's minute is a fixed window: on the stopped clock no test straddles two of them."""
    settings.AUTH_FAILURES_PER_MINUTE = LIMIT


def guess(client, number: int, address: str = GUESSER, path: str = "/probe/key"):
    return client.get(path, REMOTE_ADDR=address, **bearer(f"sk-guess-{number:040d}"))


def error_of(response) -> dict:
    return response.json()["error"]


@pytest.mark.urls("tests.probe_urls")
def test_unknown_keys_past_the_limit_get_429_and_then_cost_no_lookup(client, django_assert_num_queries):
    statuses = [guess(client, number).status_code for number in range(LIMIT)]
    assert statuses == [401] * LIMIT

    over = guess(client, LIMIT)
    assert over.status_code == 429
    assert error_of(over) == {"message": f"Too many failed authentications from this address: the limit is "
                                         f"{LIMIT} a minute.", "type": "rate_limit_error", "param": None,
                              "code": "too_many_failed_authentications"}
    assert 1 <= int(over["Retry-After"]) <= 60
    with django_assert_num_queries(0):
        assert guess(client, LIMIT + 1).status_code == 429


@pytest.mark.urls("tests.probe_urls")
def test_another_address_is_not_refused_for_the_guesses_of_one(client):
    for number in range(LIMIT + 1):
        guess(client, number)

    assert guess(client, 99, address=NEIGHBOUR).status_code == 401


@pytest.mark.urls("tests.probe_urls")
def test_a_key_this_process_holds_keeps_working_from_the_refused_address(client, free_key,
                                                                        django_assert_num_queries):
    key, secret = free_key
    assert client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret)).status_code == 200
    for number in range(LIMIT + 1):
        guess(client, number)

    with django_assert_num_queries(0):
        response = client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret))
    assert (response.status_code, response.json()) == (200, {"prefix": key.prefix})


@pytest.mark.urls("tests.probe_urls")
def test_a_key_this_process_does_not_hold_waits_out_the_minute_like_a_guess(client, free_key):
    _, secret = free_key
    for number in range(LIMIT + 1):
        guess(client, number)

    assert client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret)).status_code == 429
    assert client.get("/probe/key", REMOTE_ADDR=NEIGHBOUR, **bearer(secret)).status_code == 200


@pytest.mark.urls("tests.probe_urls")
def test_known_keys_and_malformed_headers_are_not_counted(client, free_key, monkeypatch):
    """The success path adds no round trip: only a lookup that found nothing counts."""
    counted = []
    real = windows.count_and_read
    monkeypatch.setattr(windows, "count_and_read", lambda name, *args, **kwargs: (
        counted.append(name), real(name, *args, **kwargs))[1])
    key, secret = free_key
    for _ in range(LIMIT * 2):
        assert client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret)).status_code == 200
        assert client.get("/probe/key", REMOTE_ADDR=GUESSER, HTTP_AUTHORIZATION="Bearer not-a-key").status_code == 401
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)
    client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret))  # revoked: a key, not a guess

    assert counted == []
    assert guess(client, 1).status_code == 401
    assert counted == [f"auth-failures:{GUESSER}"]


def test_a_metered_operation_refuses_the_guesser_before_anything_else(client, seeded, free_key):
    for number in range(LIMIT):
        assert post(client, CHAT, HELLO, f"sk-guess-{number:040d}", REMOTE_ADDR=GUESSER).status_code == 401

    response = post(client, CHAT, HELLO, f"sk-guess-{99:040d}", REMOTE_ADDR=GUESSER)
    assert response.status_code == 429
    assert error_of(response)["code"] == "too_many_failed_authentications"
    assert not UsageEvent.objects.exists()


@pytest.mark.urls("tests.probe_urls")
def test_the_refusal_ends_with_the_addresses_minute(client, free_key, clock):
    _, secret = free_key
    for number in range(LIMIT + 1):
        guess(client, number)
    assert client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret)).status_code == 429

    clock.advance(windows.seconds_left(f"auth-failures:{GUESSER}", 60))  # the minute's last second has gone
    assert client.get("/probe/key", REMOTE_ADDR=GUESSER, **bearer(secret)).status_code == 200


@pytest.mark.parametrize("method, path", [("post", "/admin/update-key"), ("post", "/admin/create-key"),
                                          ("post", "/admin/revoke-key"), ("get", "/v1/statistic/key"),
                                          ("post", "/v1/chat/completions")])
def test_every_operation_that_takes_a_key_documents_the_429(client, method, path):
    operation = client.get("/openapi.json").json()["paths"][path][method]

    assert "429" in operation["responses"]
    assert "too_many_failed_authentications" in operation["responses"]["429"]["description"]
