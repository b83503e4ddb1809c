"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API for clients built on Anthropic's
SDK, driven here by the official anthropic SDK against a live server. A request is served by an openai-type
deployment (translated both ways) or an anthropic-type one (through its adapter), and metered exactly like a
chat completion: one charge, its ledger row, its usage row, Idempotency-Key, limits, and errors in
Anthropic's shape with section 4's statuses."""
import json
import logging

import anthropic
import openai
import pytest
import requests
from django.db import connection
from django.test.utils import CaptureQueriesContext

from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog.models import Deployment, Provider, UsageEvent
from tests.gateway.anthropic_fake import (  # noqa: F401 (fixtures)
    ANTHROPIC_KEY,
    ANTHROPIC_KEY_ENV,
    answer,
    claude,
    error_body,
    start_event,
    stream_error,
    stream_events,
    usage,
)
from tests.gateway import conftest
from tests.gateway.conftest import (
    UPSTREAM_KEY_ENV,
    UPSTREAM_SECRET,
    add_provider,
    assert_told_nowhere,
    chat_completion,
    chunk,
    credits_of,
    failed_answers,
    serve,
    usage_chunk,
)
from tests.gateway.fake_servers import DROP, Gate
from tests.gateway.test_anthropic_gateway import add_anthropic
from utils_app import metrics

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def openai_model(upstream, monkeypatch, db):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    serve("gpt-chat", [(add_provider("oa", upstream.base_url), "gpt-x", 1)])
    return upstream


@pytest.fixture
def claude_model(claude, monkeypatch, db):
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1)])
    return claude


@pytest.fixture
def sdk(live_server, free_key):
    key, secret = free_key
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


def charged_once(key, provider: str) -> UsageEvent:
    return conftest.charged_once(key, provider, "chat")


# ---------------------------------------------------------------- served

def test_a_message_is_served_by_an_openai_deployment_translated_both_ways(sdk, openai_model):
    client, key = sdk
    openai_model.json("/chat/completions", chat_completion("Hi there!", prompt_tokens=12, completion_tokens=3))
    reply = client.messages.create(model="gpt-chat", max_tokens=64, system="Be kind.", messages=HELLO,
                                   stop_sequences=["END"], metadata={"user_id": "u-1"}, extra_body={"temperature": 0.5})
    assert reply.type == "message" and reply.role == "assistant" and reply.model == "gpt-chat"
    assert [block.type for block in reply.content] == ["text"] and reply.content[0].text == "Hi there!"
    assert reply.stop_reason == "end_turn" and reply.id.startswith("msg_")
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (12, 3)
    assert openai_model.posts()[0].body == {
        "model": "gpt-x", "max_tokens": 64, "temperature": 0.5, "stop": ["END"], "user": "u-1", "stream": False,
        "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello"}]}
    event = charged_once(key, "oa")
    assert (event.input_tokens, event.output_tokens) == (12, 3)


def test_a_message_is_served_by_an_anthropic_deployment(sdk, claude_model):
    client, key = sdk
    claude_model.answer(answer("Bonjour", counts=usage(4, 2, cache_read=10)))
    reply = client.messages.create(model="claude-chat", max_tokens=64, messages=HELLO)
    assert reply.content[0].text == "Bonjour" and reply.model == "claude-chat"
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens, reply.usage.output_tokens) == (4, 10, 2)
    [call] = claude_model.posts()
    # Passed through: the request as the client sent it, under the deployment's name for the model.
    assert call.problems == []
    assert call.body == {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": HELLO, "stream": False}
    event = charged_once(key, "anthropic")
    assert (event.input_tokens, event.cached_tokens) == (14, 10)


THINKING = {"type": "thinking", "thinking": "The user greets me.", "signature": "EqQBCkYIBxgCKkB0c2lnbmF0dXJl"}


def test_an_anthropic_deployment_gets_the_request_as_sent_and_its_answer_reaches_the_client_as_it_came(
        sdk, claude_model):
    """What only Anthropic's API takes (top_k, extended thinking, cache marks, a thinking block of an
    earlier turn) reaches an anthropic deployment untouched, and its answer comes back block for block."""
    client, key = sdk
    sent_back = answer("Bonjour", counts=usage(30, 9, cache_read=20, cache_creation=5))
    sent_back["content"].insert(0, THINKING)
    claude_model.answer(sent_back)
    system = [{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}]
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": [THINKING, {"type": "text", "text": "Hello!"}]},
               {"role": "user", "content": [{"type": "text", "text": "Again", "cache_control": {"type": "ephemeral"}}]}]
    reply = client.messages.create(model="claude-chat", max_tokens=2048, system=system, messages=history,
                                   thinking={"type": "enabled", "budget_tokens": 1024}, extra_body={"top_k": 5})
    [call] = claude_model.posts()
    assert call.problems == []
    assert call.body == {"model": "claude-sonnet-4-5", "max_tokens": 2048, "system": system, "messages": history,
                         "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": False}
    # As it came, with what it cost beside Anthropic's counts (CONTRACT section 12).
    assert reply.to_dict() == {**sent_back, "model": "claude-chat",
                               "usage": {**sent_back["usage"], "cost": reply.to_dict()["usage"]["cost"]}}
    assert reply.to_dict()["usage"]["cost"] >= 1
    event = charged_once(key, "anthropic")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (55, 9, 20)


def test_a_stream_from_an_anthropic_deployment_is_relayed_event_for_event(sdk, claude_model):
    client, key = sdk
    events = stream_events(["Hel", "lo"], counts=usage(5, 2))
    thinking = [{"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}},
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "signature_delta", "signature": THINKING["signature"]}},
                {"type": "content_block_stop", "index": 0}]
    for event in events:  # the text block after the thinking one
        if "index" in event:
            event["index"] += 1
    events[2:2] = thinking
    claude_model.stream(*events)
    # On the wire: Anthropic's events, each as it came, the model named as the client named it.
    body = {"model": "claude-chat", "max_tokens": 2048, "messages": HELLO, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 1024}}
    with requests.post(f"{str(client.base_url).rstrip('/')}/v1/messages", json=body, stream=True, timeout=30,
                       headers={"x-api-key": client.api_key, "anthropic-version": "2023-06-01"}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    expected = [dict(event) for event in events]
    expected[0] = {**expected[0], "message": {**expected[0]["message"], "model": "claude-chat"}}
    assert [json.loads(line.removeprefix("data: ")) for line in lines] == expected
    # And as the SDK reads it.
    with client.messages.stream(model="claude-chat", max_tokens=2048, messages=HELLO,
                                thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].signature == THINKING["signature"] and final.content[1].text == "Hello"
    first, _ = claude_model.posts()
    assert first.body == {**body, "model": "claude-sonnet-4-5"}
    assert credits_of(key) == 98 and mismatches() == []
    assert [(event.input_tokens, event.output_tokens) for event in UsageEvent.objects.all()] == [(5, 2), (5, 2)]


def test_a_passed_through_stream_reaches_the_client_while_the_model_is_still_thinking(sdk, claude_model):
    """Thinking is output: its first delta is the stream's commit point, so the client reads it while the
    provider still holds the rest, and a stream that breaks off after it is charged."""
    client, key = sdk
    gate = Gate()
    claude_model.stream(
        start_event(usage(5, 2)),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}},
        gate, DROP)
    body = {"model": "claude-chat", "max_tokens": 2048, "messages": HELLO, "stream": True,
            "thinking": {"type": "enabled", "budget_tokens": 1024}}
    with requests.post(f"{str(client.base_url).rstrip('/')}/v1/messages", json=body, stream=True, timeout=30,
                       headers={"x-api-key": client.api_key}) as response:
        assert response.status_code == 200
        # A byte at a time: the test server ends the body by closing, so a larger read would wait for the end.
        lines = response.iter_lines(chunk_size=1, decode_unicode=True)
        seen = []
        for line in lines:
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: ")))
                if seen[-1]["type"] == "content_block_delta":
                    break
        assert seen[-1]["delta"] == {"type": "thinking_delta", "thinking": "Hm."}
        gate.open()  # the thinking reached the client while Anthropic was still holding the rest
        rest = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert rest[-1]["type"] == "error", rest
    assert gate.opened_in_time, rest
    assert credits_of(key) == 99 and mismatches() == []


def test_a_member_this_gateway_does_not_know_and_the_beta_header_reach_an_anthropic_deployment(sdk, claude_model):
    """Anthropic's API grows: a newer member (context_management, with the beta that enables it) is passed
    through to an anthropic deployment as it came, header included, rather than refused."""
    client, key = sdk
    management = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    reply = client.messages.create(model="claude-chat", max_tokens=64, messages=HELLO,
                                   extra_body={"context_management": management},
                                   extra_headers={"anthropic-beta": "context-management-2025-06-27"})
    assert reply.content[0].text == "Hello from Claude"
    [call] = claude_model.posts()
    assert call.problems == [] and call.body["context_management"] == management
    assert call.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert call.headers["x-api-key"] == ANTHROPIC_KEY
    charged_once(key, "anthropic")


def test_a_member_only_anthropic_takes_is_left_out_and_named_for_another_type(sdk, openai_model):
    """CONTRACT section 8: what another type cannot honour is left out and named (X-Gateway-Ignored), no
    longer refused: Claude Code sends context_management on every request."""
    client, key = sdk
    openai_model.json("/chat/completions", chat_completion("Hi there!"))
    raw = client.messages.with_raw_response.create(model="gpt-chat", max_tokens=64, messages=HELLO,
                                                   extra_body={"context_management": {"edits": []}})
    assert raw.parse().content[0].text == "Hi there!"
    assert raw.headers["X-Gateway-Ignored"] == "context_management"
    assert "context_management" not in openai_model.posts()[0].body
    charged_once(key, "oa")


@pytest.mark.parametrize("beta", ["a b", "x" * 101, "ok,<script>"])
def test_an_anthropic_beta_header_that_is_not_a_list_of_names_is_a_400(client, claude_model, free_key, beta):
    key, secret = free_key
    response = client.post("/v1/messages", json.dumps({"model": "claude-chat", "max_tokens": 5, "messages": HELLO}),
                           content_type="application/json", HTTP_X_API_KEY=secret, HTTP_ANTHROPIC_BETA=beta)
    assert response.status_code == 400 and "anthropic-beta" in response.json()["error"]["message"]
    assert claude_model.posts() == [] and credits_of(key) == 100


def test_what_only_anthropic_takes_reaches_a_pools_anthropic_deployment_and_is_named_by_the_others(
        sdk, claude, upstream, monkeypatch):
    """A pool of an openai deployment first and an anthropic one after it: a request with top_k is served by
    the first, which goes without top_k and names it; once that one is down, the anthropic one gets top_k."""
    client, key = sdk
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    serve("mixed-chat", [(add_provider("oa", upstream.base_url), "gpt-x", 1),
                         (add_anthropic("anthropic", claude), "claude-sonnet-4-5", 2)])
    upstream.json("/chat/completions", chat_completion("From GPT"))
    raw = client.messages.with_raw_response.create(model="mixed-chat", max_tokens=64, messages=HELLO,
                                                   extra_body={"top_k": 3})
    assert raw.parse().content[0].text == "From GPT" and raw.headers["X-Gateway-Ignored"] == "top_k"
    assert "top_k" not in upstream.posts()[0].body
    upstream.json("/chat/completions", {"error": {"message": "down"}}, status=503)
    claude.answer(answer("From Claude"))
    raw = client.messages.with_raw_response.create(model="mixed-chat", max_tokens=64, messages=HELLO,
                                                   extra_body={"top_k": 3})
    assert raw.parse().content[0].text == "From Claude" and "X-Gateway-Ignored" not in raw.headers
    assert claude.posts()[0].body["top_k"] == 3
    assert credits_of(key) == 98 and mismatches() == []


def test_a_stream_from_an_openai_deployment_reads_as_anthropics_events(sdk, openai_model):
    client, key = sdk
    openai_model.sse("/chat/completions", [
        {**chunk(), "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        chunk("Hel"), chunk("lo!"), chunk(finish_reason="stop"), usage_chunk(9, 3), "[DONE]"])
    with client.messages.stream(model="gpt-chat", max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello!" and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 3)
    event = charged_once(key, "oa")
    assert (event.input_tokens, event.output_tokens) == (9, 3)


def test_a_stream_from_an_anthropic_deployment_with_its_raw_events(sdk, claude_model):
    client, key = sdk
    claude_model.stream(*stream_events(["Hel", "lo"], counts=usage(5, 2)))
    with client.messages.stream(model="claude-chat", max_tokens=64, messages=HELLO) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == "Hello"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)
    charged_once(key, "anthropic")


def test_tools_round_trip_with_streamed_input_json(sdk, claude_model):
    client, key = sdk
    claude_model.stream(*stream_events("Let me check.", ("get_weather", ['{"city"', ': "Oslo"}'], "toolu_77"),
                                       stop_reason="tool_use"))
    with client.messages.stream(model="claude-chat", max_tokens=64, tools=[WEATHER], messages=[
            {"role": "user", "content": "Weather in Oslo?"}], tool_choice={"type": "auto"}) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    call = final.content[1]
    assert (call.type, call.id, call.name, call.input) == ("tool_use", "toolu_77", "get_weather", {"city": "Oslo"})
    first = claude_model.posts()[0].body
    assert first["tools"] == [WEATHER] and first["tool_choice"] == {"type": "auto"}

    claude_model.answer(answer("Oslo is rainy."))
    reply = client.messages.create(model="claude-chat", max_tokens=64, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in final.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_77", "content": "rainy"},
                                     {"type": "text", "text": "Summarise."}]}])
    assert reply.content[0].text == "Oslo is rainy."
    second = claude_model.posts()[1]
    assert second.problems == []
    assert second.body["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_77", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_77", "content": "rainy"},
                                     {"type": "text", "text": "Summarise."}]}]
    assert credits_of(key) == 98 and mismatches() == []


def test_a_tool_call_from_an_openai_deployment_is_a_tool_use_block(sdk, openai_model):
    client, _ = sdk
    completion = chat_completion()
    completion["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]}
    completion["choices"][0]["finish_reason"] = "tool_calls"
    openai_model.json("/chat/completions", completion)
    reply = client.messages.create(model="gpt-chat", max_tokens=64, tools=[WEATHER], messages=HELLO,
                                   tool_choice={"type": "tool", "name": "get_weather"})
    assert reply.stop_reason == "tool_use"
    assert reply.content[0].model_dump(exclude_none=True) == {"type": "tool_use", "id": "call_1",
                                                              "name": "get_weather", "input": {"city": "Rome"}}
    sent = openai_model.posts()[0].body
    assert sent["tools"] == [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER[
        "input_schema"], "description": "The weather in a city"}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_a_stream_failing_midway_ends_with_an_error_event_and_is_charged(sdk, claude_model):
    client, key = sdk
    claude_model.stream(*stream_events("Half")[:4], stream_error())
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="claude-chat", max_tokens=64, messages=HELLO) as stream:
            "".join(stream.text_stream)
    assert credits_of(key) == 99 and mismatches() == []
    assert UsageEvent.objects.get().status == 502


def test_count_tokens_is_the_gateways_estimate_and_free(sdk, claude_model):
    client, key = sdk
    counted = client.messages.count_tokens(model="claude-chat", system="Be brief.", tools=[WEATHER], messages=[
        {"role": "user", "content": "How many tokens is this sentence, roughly?"}])
    assert counted.input_tokens > 10
    assert credits_of(key) == 100 and not LedgerEntry.objects.filter(kind="charge").exists()
    assert claude_model.posts() == []
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=HELLO)


def test_an_idempotent_retry_is_answered_with_the_first_message_and_charged_once(sdk, openai_model):
    client, key = sdk
    openai_model.json("/chat/completions", chat_completion("Only once"))
    first = client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO,
                                   extra_headers={"Idempotency-Key": "msg-retry-1"})
    again = client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO,
                                   extra_headers={"Idempotency-Key": "msg-retry-1"})
    assert again.model_dump() == first.model_dump()
    assert len(openai_model.posts()) == 1
    charged_once(key, "oa")


def test_an_idempotent_stream_retry_replays_the_same_events(sdk, openai_model):
    client, key = sdk
    openai_model.sse("/chat/completions", [chunk("Once"), chunk(finish_reason="stop"), usage_chunk(), "[DONE]"])
    texts = []
    for _ in range(2):
        with client.messages.stream(model="gpt-chat", max_tokens=64, messages=HELLO,
                                    extra_headers={"Idempotency-Key": "stream-retry-1"}) as stream:
            texts.append("".join(stream.text_stream))
    assert texts == ["Once", "Once"] and len(openai_model.posts()) == 1
    charged_once(key, "oa")


# ---------------------------------------------------------------- errors, in Anthropic's shape

def test_a_bad_key_is_an_authentication_error(live_server, openai_model):
    with anthropic.Anthropic(base_url=live_server.url, api_key="sk-" + "x" * 40, max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "authentication_error"


def test_a_broke_key_is_a_402_billing_error(live_server, openai_model, broke_key):
    _, secret = broke_key
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
    assert refused.value.status_code == 402 and refused.value.body["error"]["type"] == "billing_error"
    assert openai_model.posts() == []


def test_an_unknown_model_is_a_not_found_error(sdk, openai_model):
    client, key = sdk
    with pytest.raises(anthropic.NotFoundError) as refused:
        client.messages.create(model="no-such-model", max_tokens=64, messages=HELLO)
    assert refused.value.body["error"]["type"] == "not_found_error"
    assert credits_of(key) == 100


def test_past_the_keys_rpm_is_a_rate_limit_error(live_server, openai_model, make_key, clock):
    # live_server serves from a thread of this process: its limits read the stopped clock.
    _, secret = make_key(credits=100, max_credits=100, rpm=1)
    openai_model.json("/chat/completions", chat_completion())
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0) as client:
        client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
        with pytest.raises(anthropic.RateLimitError) as limited:
            client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert limited.value.response.headers["retry-after"]


def test_count_tokens_counts_against_the_keys_rpm(live_server, claude_model, make_key, clock):
    key, secret = make_key(credits=100, max_credits=100, rpm=2)
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0) as client:
        for _ in range(2):
            assert client.messages.count_tokens(model="claude-chat", messages=HELLO).input_tokens > 0
        with pytest.raises(anthropic.RateLimitError) as limited:
            client.messages.count_tokens(model="claude-chat", messages=HELLO)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert limited.value.response.headers["retry-after"]


def test_count_tokens_answers_with_the_keys_balance_and_limits_in_headers(client, claude_model, make_key):
    _, secret = make_key(credits=40, max_credits=100, rpm=5)
    response = client.post("/v1/messages/count_tokens", json.dumps({"model": "claude-chat", "messages": HELLO}),
                           content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200 and response.json()["input_tokens"] > 0
    assert response["X-Remaining-Credits"] == "40"
    assert (response["X-RateLimit-Limit-Requests"], response["X-RateLimit-Remaining-Requests"]) == ("5", "4")


def test_an_upstream_that_fails_is_a_502_api_error_that_costs_nothing(sdk, openai_model):
    client, key = sdk
    openai_model.fail_all(500)
    with pytest.raises(anthropic.APIStatusError) as failed:
        client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"
    assert credits_of(key) == 100 and mismatches() == []


@pytest.mark.parametrize("body, fragment", [
    ({"model": "gpt-chat", "messages": HELLO}, "max_tokens"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": []}, "messages"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"model": "gpt-chat", "max_tokens": "five", "messages": HELLO}, "max_tokens"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": HELLO, "thinking": {"type": "sometimes"}}, "thinking.type"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": HELLO, "output_config": "high"}, "output_config"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": [{"role": "user", "content": [{"text": "no type"}]}]},
     "messages.0.content.0"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": HELLO, "tools": [{"name": "x"}]}, "tools.0.input_schema"),
    ({"model": "gpt-chat", "max_tokens": 5, "messages": [{"role": "user", "content": 7}]}, "messages.0.content"),
])
def test_bad_input_is_a_400_invalid_request_error_naming_the_field(client, openai_model, free_key, body, fragment):
    key, secret = free_key
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert fragment in error["error"]["message"]
    assert credits_of(key) == 100


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]"])
def test_a_body_that_is_not_a_json_object_is_a_400_in_anthropics_shape(client, free_key, raw):
    _, secret = free_key
    response = client.post("/v1/messages", raw, content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_the_key_is_read_from_x_api_key_and_a_missing_key_is_a_401(client, openai_model, free_key):
    key, secret = free_key
    openai_model.json("/chat/completions", chat_completion())
    body = json.dumps({"model": "gpt-chat", "max_tokens": 5, "messages": HELLO})
    response = client.post("/v1/messages", body, content_type="application/json", HTTP_X_API_KEY=secret,
                           HTTP_ANTHROPIC_VERSION="2023-06-01")
    assert response.status_code == 200 and response.json()["type"] == "message"
    assert response["X-Remaining-Credits"] == "99"
    missing = client.post("/v1/messages", body, content_type="application/json")
    assert missing.status_code == 401 and missing.json() == {
        "type": "error", "error": {"type": "authentication_error", "message": missing.json()["error"]["message"]}}
    counted = client.post("/v1/messages/count_tokens", body, content_type="application/json")
    assert counted.status_code == 401 and counted.json()["error"]["type"] == "authentication_error"


def test_wrong_methods_answer_405_in_anthropics_shape(client, free_key):
    _, secret = free_key
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = client.get(path, HTTP_X_API_KEY=secret)
        assert response.status_code == 405 and response.json()["error"]["type"] == "invalid_request_error"


def test_a_successful_message_costs_the_same_two_statements_as_a_chat_completion(client, seeded, free_key, vendor):
    _, secret = free_key
    body = json.dumps({"model": "local-chat", "max_tokens": 16, "messages": HELLO})
    assert client.post("/v1/messages", body, content_type="application/json",
                       HTTP_X_API_KEY=secret).status_code == 200  # authenticates: the key is cached
    with CaptureQueriesContext(connection) as captured:
        assert client.post("/v1/messages", body, content_type="application/json",
                           HTTP_X_API_KEY=secret).status_code == 200
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == (2 if vendor == "postgresql" else 5)


def test_a_successful_message_makes_one_shared_cache_round_trip(client, openai_model, free_key, monkeypatch,
                                                                 settings):
    from utils_app import shared

    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion())
    body = json.dumps({"model": "gpt-chat", "max_tokens": 16, "messages": HELLO})

    def send():
        return client.post("/v1/messages", body, content_type="application/json", HTTP_X_API_KEY=secret)

    assert send().status_code == 200
    trips = []

    def counting(function):
        def counted(*args, **kwargs):
            trips.append(args)
            return function(*args, **kwargs)
        return counted

    monkeypatch.setattr(shared, "run", counting(shared.run))
    if settings.SHARED_CACHE:  # Redis: the limits' script and whatever rides with it, in one pipeline
        backend = shared.shared_cache()  # the process's cache object, which the limits' round trip uses
        monkeypatch.setattr(backend, "run_script", counting(backend.run_script))
    else:
        monkeypatch.setattr(shared.memory, "run", counting(shared.memory.run))
    assert send().status_code == 200
    assert len(trips) == 1


def test_an_image_and_a_system_prompt_reach_an_anthropic_deployment_as_they_were_sent(sdk, claude_model):
    client, _ = sdk
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    linked = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    client.messages.create(model="claude-chat", max_tokens=64, system=[{"type": "text", "text": "Be brief."}],
                           messages=[{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                                  image, linked]}])
    [call] = claude_model.posts()
    assert call.problems == [] and call.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert call.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                                  image, linked]}]


def test_a_model_the_tier_may_not_use_is_a_permission_error(live_server, openai_model, make_key):
    _, secret = make_key(tier="premium", credits=100, max_credits=100)  # the model allows "free" only
    with anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0) as client:
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            client.messages.create(model="gpt-chat", max_tokens=64, messages=HELLO)
        assert refused.value.body["error"]["type"] == "permission_error"
        with pytest.raises(anthropic.PermissionDeniedError):
            client.messages.count_tokens(model="gpt-chat", messages=HELLO)
    assert openai_model.posts() == []


def test_the_key_is_in_no_answer_log_line_metric_or_row_with_an_anthropic_upstream_that_refuses_it_or_is_down(
        live_server, claude, free_key, monkeypatch, caplog, settings, client):
    """Both client protocols (openai's translated, Anthropic's passed through), plain and streamed."""
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    metrics.reset()
    key, secret = free_key
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    claude.fail(401, error_body("authentication_error", f"invalid x-api-key {ANTHROPIC_KEY} at {claude.base_url}"))
    for name in ("refusing", "refusing-b", "refusing-c", "refusing-d"):
        serve(name, [(add_anthropic(name, claude), "claude-sonnet-4-5", 1)])
    serve("down", [(add_anthropic("down", None), "claude-sonnet-4-5", 1)])
    down_url = Provider.objects.get(name="down").base_url
    with caplog.at_level(logging.DEBUG, logger="gateway"), caplog.at_level(logging.INFO), \
            openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0) as oai, \
            anthropic.Anthropic(base_url=live_server.url, api_key=secret, max_retries=0) as claude_sdk:
        answers = failed_answers(oai, [("refusing", False), ("refusing-b", True), ("down", False), ("down", True)])
        for model, stream in [("refusing-c", False), ("refusing-d", True), ("down", False), ("down", True)]:
            with pytest.raises(anthropic.APIStatusError) as refused:
                result = claude_sdk.messages.create(model=model, max_tokens=16, messages=HELLO, stream=stream)
                list(result) if stream else None
            assert refused.value.status_code == 502
            answers.append(json.dumps(refused.value.body))
    assert len(claude.calls) == 4  # each refusing deployment once, then disabled
    assert_told_nowhere(client, [*answers, caplog.text], ANTHROPIC_KEY, claude.base_url, down_url)
    assert Deployment.objects.filter(disabled_at__isnull=False).count() == 4
    assert credits_of(key) == 100 and mismatches() == []
