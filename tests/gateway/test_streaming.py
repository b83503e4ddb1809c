"""Streamed chat completions: the relay, its metering, and its failures.

The upstream here is the real fake server of conftest.py; the tests that need
real sockets on the client side too (incremental delivery, a client that goes
away) run the gateway under pytest-django's live server.
"""
import json
import time

import openai
import pytest
import requests

from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import (
    DROP,
    Gate,
    Pause,
    UPSTREAM_SECRET,
    add_models,
    add_provider,
    assert_error,
    chunk,
    gunicorn,
    post,
    usage_chunk,
    wait_for,
)

PATH = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]


def events(response) -> list:
    """The data of each event of a streamed test-client response ("[DONE]" kept as a string)."""
    assert response["Content-Type"].startswith("text/event-stream")
    raw = b"".join(response.streaming_content).decode()
    assert raw.endswith("\n\n")
    found = []
    for block in raw.strip().split("\n\n"):
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        found.append(data if data == "[DONE]" else json.loads(data))
    return found


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def streamed_text(found: list) -> str:
    return "".join(event["choices"][0]["delta"].get("content", "")
                   for event in found if isinstance(event, dict) and event.get("choices"))


# ---------------------------------------------------------------- the relay (test client)

@pytest.mark.django_db
def test_a_local_stream_is_server_sent_events_that_end_with_done(client, seeded, free_key):
    key, secret = free_key
    body = {"model": "local-chat", "messages": [{"role": "user", "content": "Stream this please"}]}
    response = post(client, PATH, {**body, "stream": True}, secret)
    assert response.status_code == 200
    assert response["X-Remaining-Credits"] == "99"
    assert response["Cache-Control"] == "no-cache"
    found = events(response)
    assert found[-1] == "[DONE]"
    assert all(event["object"] == "chat.completion.chunk" and event["model"] == "local-chat"
               for event in found[:-1])
    assert not any("usage" in event for event in found[:-1])
    plain = post(client, PATH, body, secret).json()["choices"][0]["message"]["content"]
    assert streamed_text(found) == plain
    assert len([event for event in found[:-1] if event["choices"][0]["delta"].get("content")]) > 3
    stream_event = UsageEvent.objects.order_by("created_at").first()
    assert (stream_event.success, stream_event.status, stream_event.credits_charged) == (True, 200, 1)
    assert stream_event.output_tokens > 0 and stream_event.input_tokens > 0


@pytest.mark.django_db
def test_the_gateway_asks_upstream_for_usage_but_hides_it_from_a_client_that_did_not(client, fake_models, upstream,
                                                                                    free_key):
    _, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hel"), chunk("lo"), chunk(finish_reason="stop"),
                                       usage_chunk(11, 2), "[DONE]"])
    found = events(post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret))
    assert streamed_text(found) == "Hello"
    assert found[-1] == "[DONE]"
    assert not any("usage" in event for event in found[:-1])
    assert upstream.posts()[0].body["stream_options"] == {"include_usage": True}
    assert upstream.posts()[0].body["stream"] is True
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.output_tokens, event.success) == (11, 2, True)


@pytest.mark.django_db
def test_a_client_that_asks_for_usage_gets_the_usage_chunk(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi"), chunk(finish_reason="stop"), usage_chunk(5, 1), "[DONE]"])
    body = {"model": "fake-chat", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}}
    found = events(post(client, PATH, body, secret))
    assert found[-2]["choices"] == []
    # With what it cost (CONTRACT section 12): fake-chat's cost of 1 credit.
    assert found[-2]["usage"] == {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "cost": 1}
    assert found[-2]["model"] == "fake-chat"


@pytest.mark.django_db
def test_a_finished_stream_leaves_its_upstream_connection_for_the_next_call(client, fake_models, upstream, free_key):
    _, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi"), chunk(finish_reason="stop"), usage_chunk(5, 1), "[DONE]"])
    for _ in range(3):
        found = events(post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret))
        assert streamed_text(found) == "Hi" and found[-1] == "[DONE]"
    # One connection to the provider for the three streams (a new one each would be a new TLS
    # handshake with a real provider).
    assert len({call.peer_port for call in upstream.posts()}) == 1


@pytest.mark.django_db
def test_a_stream_whose_body_goes_on_after_done_has_its_connection_dropped(client, fake_models, upstream, free_key,
                                                                          monkeypatch):
    monkeypatch.setattr("gateway.upstream.sse.STREAM_END_SECONDS", 0.2)
    _, secret = free_key
    # The body does not end after [DONE] within the wait: the connection is not kept for reuse.
    upstream.sse("/chat/completions", [chunk("Hi"), usage_chunk(5, 1), "[DONE]", Pause(2)])
    started = time.monotonic()
    for _ in range(2):
        found = events(post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret))
        assert streamed_text(found) == "Hi" and found[-1] == "[DONE]"
    assert time.monotonic() - started < 2  # neither response waited for the body's end
    first, second = upstream.posts()
    assert first.peer_port != second.peer_port


@pytest.mark.django_db
def test_a_failure_before_the_first_byte_is_an_ordinary_json_error_and_refunded(client, fake_models, upstream,
                                                                                free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [DROP])
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret)
    assert not response.streaming
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert credits_of(key) == 100
    assert UsageEvent.objects.get().success is False


@pytest.mark.django_db
def test_an_upstream_that_refuses_a_stream_gets_an_ordinary_json_error(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(500)
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert credits_of(key) == 100


@pytest.mark.django_db
def test_a_failure_mid_stream_sends_one_error_event_then_done_and_charges_what_was_delivered(client, fake_models,
                                                                                           upstream, free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("Half"), chunk(" an answer"), DROP])
    response = post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret)
    assert response.status_code == 200
    found = events(response)
    assert streamed_text(found[:2]) == "Half an answer"
    assert found[2]["error"]["code"] == "upstream_unavailable"
    assert set(found[2]["error"]) == {"message", "type", "param", "code"}
    assert found[3:] == ["[DONE]"]
    # The client has half an answer (CONTRACT section 5): charged, and the usage row says how it ended.
    assert credits_of(key) == 99
    event = UsageEvent.objects.get()
    assert (event.success, event.status, event.credits_charged) == (False, 502, 1)
    assert event.output_tokens > 0
    assert LedgerEntry.objects.get(kind="charge").status == "completed"


@pytest.mark.django_db
def test_an_error_event_from_the_upstream_mid_stream_ends_the_stream_and_is_charged(client, fake_models, upstream,
                                                                                    free_key):
    key, secret = free_key
    upstream.sse("/chat/completions", [chunk("Hi"), {"error": {"message": "overloaded"}}, "[DONE]"])
    found = events(post(client, PATH, {"model": "fake-chat", "messages": HELLO, "stream": True}, secret))
    assert found[1]["error"]["code"] == "upstream_unavailable"
    assert "overloaded" in found[1]["error"]["message"]
    assert found[-1] == "[DONE]"
    assert credits_of(key) == 99


@pytest.mark.django_db
def test_a_stream_that_stalls_longer_than_the_timeout_ends_with_upstream_timeout(client, seeded, upstream, free_key,
                                                                                 monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    ids = add_models(add_provider("stalling", upstream.base_url, timeout=1), prefix="stall")
    upstream.sse("/chat/completions", [chunk("Hi"), Pause(10), chunk("late"), "[DONE]"])
    key, secret = free_key
    found = events(post(client, PATH, {"model": ids["chat"], "messages": HELLO, "stream": True}, secret))
    assert found[1]["error"]["code"] == "upstream_timeout"
    assert found[-1] == "[DONE]"
    assert credits_of(key) == 99
    assert UsageEvent.objects.get().status == 504


@pytest.mark.django_db
def test_a_stream_falls_back_to_the_next_provider_when_the_first_fails_early(client, seeded, upstream,
                                                                             backup_upstream, free_key, monkeypatch):
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", "sk-up")
    add_provider("backup", backup_upstream.base_url)
    ids = add_models(add_provider("primary", upstream.base_url), prefix="fb", fallbacks=["backup"])
    upstream.fail_all(503)
    backup_upstream.sse("/chat/completions", [chunk("From backup"), "[DONE]"])
    key, secret = free_key
    found = events(post(client, PATH, {"model": ids["chat"], "messages": HELLO, "stream": True}, secret))
    assert streamed_text(found) == "From backup"
    assert credits_of(key) == 99
    assert UsageEvent.objects.get().provider == "backup"


# ---------------------------------------------------------------- real sockets (live server)

@pytest.fixture
def sdk(live_server, free_key):
    # Closed at the end: a kept-alive connection would hold a live-server thread and its database session.
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=free_key[1], max_retries=0, timeout=30) as client:
        yield client


def test_chunks_reach_the_client_while_the_upstream_is_still_sending(sdk, fake_models, upstream):
    """Lockstep: the upstream sends its next chunk only after the client has received the
    previous one. Any buffering between them (view, middleware, server) would hold the
    first chunk back, the gates would time out and the test fail."""
    gates = [Gate(timeout=10), Gate(timeout=10)]
    upstream.sse("/chat/completions", [chunk("one "), gates[0], chunk("two "), gates[1], chunk("three"),
                                       usage_chunk(), "[DONE]"])
    stream = sdk.chat.completions.create(model="fake-chat", messages=HELLO, stream=True)
    received = []
    for part in stream:
        received.append(part.choices[0].delta.content)
        if len(received) <= len(gates):
            gates[len(received) - 1].open()
    assert received == ["one ", "two ", "three"]
    assert [gate.opened_in_time for gate in gates] == [True, True]


def test_chunks_arrive_spread_out_as_the_upstream_sends_them(sdk, fake_models, upstream):
    upstream.sse("/chat/completions", [chunk("a"), Pause(0.4), chunk("b"), Pause(0.4), chunk("c"), "[DONE]"])
    arrivals = []
    for _ in sdk.chat.completions.create(model="fake-chat", messages=HELLO, stream=True):
        arrivals.append(time.monotonic())
    assert len(arrivals) == 3
    # Relayed as they come: the first chunk arrives about 0.8 s before the last, not with it.
    assert arrivals[-1] - arrivals[0] >= 0.6


def test_a_client_that_goes_away_closes_the_upstream_connection(live_server, fake_models, upstream, free_key):
    key, secret = free_key
    steps = []
    for index in range(200):
        steps += [chunk(f"w{index} "), Pause(0.05)]
    upstream.sse("/chat/completions", steps + ["[DONE]"])
    response = requests.post(f"{live_server.url}{PATH}", json={"model": "fake-chat", "messages": HELLO,
                                                               "stream": True},
                             headers={"Authorization": f"Bearer {secret}"}, stream=True, timeout=10)
    assert response.status_code == 200
    assert response.raw.read1(65536).startswith(b"data: ")
    response.close()
    assert wait_for(upstream.client_gone.is_set, timeout=8)
    assert upstream.events_sent < 200
    # The upstream did the work up to there: the charge stands and the request is recorded.
    assert wait_for(lambda: UsageEvent.objects.filter(success=True).exists(), timeout=5)
    assert credits_of(key) == 99


@pytest.mark.postgres
@pytest.mark.served
def test_gunicorn_relays_each_chunk_as_it_arrives(transactional_db, fake_models, upstream, free_key, tmp_path,
                                                   monkeypatch):
    """The same lockstep as above, through the production server (gunicorn's gthread workers)."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)  # inherited by the gunicorn process
    gates = [Gate(timeout=10), Gate(timeout=10)]
    upstream.sse("/chat/completions", [chunk("one "), gates[0], chunk("two "), gates[1], chunk("three"), "[DONE]"])
    with gunicorn(tmp_path / "server") as base:
        with openai.OpenAI(base_url=f"{base}/v1", api_key=free_key[1], max_retries=0, timeout=30) as client:
            received = []
            for part in client.chat.completions.create(model="fake-chat", messages=HELLO, stream=True):
                received.append(part.choices[0].delta.content)
                if len(received) <= len(gates):
                    gates[len(received) - 1].open()
    assert received == ["one ", "two ", "three"]
    assert [gate.opened_in_time for gate in gates] == [True, True]
