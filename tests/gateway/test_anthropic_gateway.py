"""Anthropic deployments behind the gateway, driven by the official openai SDK on /v1/chat/completions
(served by a live server) against the fake Anthropic upstream (anthropic_fake.py, itself held to the
anthropic SDK). Each test checks the answer, what reached Anthropic's API, and the money: one
charge, the usage row's tokens, and a ledger that reconciles."""
import base64
import json
import logging

import openai
import pytest

from gateway import deployment_health, probes
from keys.ledger import mismatches
from models_catalog.models import Deployment, Provider, UsageEvent
from tests.gateway.anthropic_fake import (  # noqa: F401 (fixtures)
    ANTHROPIC_KEY,
    ANTHROPIC_KEY_ENV,
    answer,
    claude,
    error_body,
    message,
    second_claude,
    stream_error,
    stream_events,
    tool_block,
    usage,
)
from tests.gateway.conftest import (
    PNG_1X1,
    UPSTREAM_SECRET,
    charged_once,
    chat_completion,
    closed_port_url,
    credits_of,
    serve,
)
from tests.gateway.fake_servers import DROP, Gate

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
HELLO = [{"role": "user", "content": "Hello"}]


def add_anthropic(name: str, fake, *, timeout: float = 5.0, max_tokens_default: int = 4096) -> Provider:
    return Provider.objects.create(name=name, type="anthropic",
                                   base_url=fake.base_url if fake else closed_port_url().removesuffix("/v1"),
                                   api_key_env=ANTHROPIC_KEY_ENV, timeout=timeout,
                                   max_tokens_default=max_tokens_default)


@pytest.fixture
def anthropic_provider(claude, monkeypatch, db):
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    provider = add_anthropic("anthropic", claude, max_tokens_default=777)
    serve("claude-chat", [(provider, "claude-sonnet-4-5", 1)])
    return provider


def sent(fake):
    """The one request that reached the fake, checked for the key's place and the API version."""
    [call] = fake.posts()
    assert call.path == "/v1/messages" and call.problems == []
    assert call.headers["x-api-key"] == ANTHROPIC_KEY and call.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in call.headers
    return call


# ---------------------------------------------------------------- chat

def test_a_chat_completion_is_translated_to_a_message_and_back(sdk, anthropic_provider, claude):
    client, key = sdk
    claude.answer(answer("Bonjour !", counts=usage(10, 6, cache_read=30, cache_creation=2)))
    completion = client.chat.completions.create(
        model="claude-chat", messages=[{"role": "system", "content": "Answer in French."},
                                       {"role": "developer", "content": "Be brief."},
                                       {"role": "user", "content": "Hello"},
                                       {"role": "assistant", "content": "Hi! What can I do?"},
                                       {"role": "user", "content": "Greet me"}],
        temperature=0.2, top_p=0.9, max_completion_tokens=50, stop="END", user="user-7")
    assert completion.model == "claude-chat" and completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Bonjour !" and completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (42, 6)
    assert completion.usage.prompt_tokens_details.cached_tokens == 30
    assert sent(claude).body == {
        "model": "claude-sonnet-4-5", "max_tokens": 50, "temperature": 0.2, "top_p": 0.9,
        "system": [{"type": "text", "text": "Answer in French."}, {"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]},
                     {"role": "assistant", "content": [{"type": "text", "text": "Hi! What can I do?"}]},
                     {"role": "user", "content": [{"type": "text", "text": "Greet me"}]}],
        "stop_sequences": ["END"], "metadata": {"user_id": "user-7"}}
    event = charged_once(key, "anthropic")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (42, 6, 30)


def test_max_tokens_defaults_to_the_providers_max_tokens_default(sdk, anthropic_provider, claude):
    client, _ = sdk
    client.chat.completions.create(model="claude-chat", messages=HELLO)
    assert sent(claude).body["max_tokens"] == 777


def test_a_streamed_chat_is_relayed_event_by_event_with_usage_and_cached_tokens(sdk, anthropic_provider, claude):
    client, key = sdk
    gate = Gate()
    claude.stream(*stream_events("Hel", gate, "lo!", counts=usage(5, 3, cache_read=20)))
    stream = client.chat.completions.create(model="claude-chat", messages=HELLO, stream=True,
                                            stream_options={"include_usage": True})
    chunks = iter(stream)
    first = next(chunks)
    assert first.choices[0].delta.role == "assistant"
    content = first.choices[0].delta.content or next(chunks).choices[0].delta.content
    assert content == "Hel"
    gate.open()  # the first piece reached the client while Anthropic was still holding the rest
    rest = list(chunks)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in rest if chunk.choices) == "lo!"
    assert [chunk.choices[0].finish_reason for chunk in rest if chunk.choices][-1] == "stop"
    assert rest[-1].choices == [] and rest[-1].usage.prompt_tokens == 25
    assert rest[-1].usage.prompt_tokens_details.cached_tokens == 20
    assert sent(claude).body["stream"] is True
    event = charged_once(key, "anthropic")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (25, 3, 20)


def test_streamed_tool_calls_keep_their_ids_and_arguments_and_the_results_go_back(sdk, anthropic_provider, claude):
    client, key = sdk
    claude.stream(*stream_events("Checking.", ("get_weather", ['{"city":', ' "Paris"}'], "toolu_A"),
                                 ("get_weather", ['{"city": "Oslo"}'], "toolu_B"), stop_reason="tool_use"))
    chunks = list(client.chat.completions.create(model="claude-chat", messages=HELLO, tools=[WEATHER],
                                                 tool_choice="required", parallel_tool_calls=False, stream=True))
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or ():
            found = calls.setdefault(delta.index, {"id": None, "name": None, "arguments": ""})
            found["id"] = delta.id or found["id"]
            found["name"] = (delta.function.name if delta.function else None) or found["name"]
            found["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert calls == {0: {"id": "toolu_A", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                     1: {"id": "toolu_B", "name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    request = claude.calls[0].body
    assert request["tools"] == [{"name": "get_weather", "description": "The weather in a city",
                                 "input_schema": WEATHER["function"]["parameters"]}]
    assert request["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}

    claude.answer(answer("Paris is sunny, Oslo rainy."))
    client.chat.completions.create(model="claude-chat", tools=[WEATHER], messages=[
        *HELLO, {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_A", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call:B", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_A", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call:B", "content": [{"type": "text", "text": "rainy"}]},
        {"role": "user", "content": "And so?"}])
    follow_up = claude.calls[1]
    assert follow_up.problems == []
    assert follow_up.body["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_A", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_B", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "call_B", "content": "rainy"},
                                     {"type": "text", "text": "And so?"}]}]
    assert credits_of(key) == 98 and mismatches() == []


def test_a_tool_call_answer_is_tool_calls_with_its_id(sdk, anthropic_provider, claude):
    client, _ = sdk
    claude.answer(message([tool_block("get_weather", {"city": "Rome"}, id="toolu_R")], stop_reason="end_turn"))
    completion = client.chat.completions.create(model="claude-chat", messages=HELLO, tools=[WEATHER],
                                                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert (choice.message.tool_calls[0].id, choice.message.tool_calls[0].function.arguments) == \
        ("toolu_R", '{"city": "Rome"}')
    assert sent(claude).body["tool_choice"] == {"type": "tool", "name": "get_weather"}


@pytest.mark.parametrize("stop_reason, finish", [("end_turn", "stop"), ("stop_sequence", "stop"),
                                                 ("max_tokens", "length"), ("refusal", "content_filter")])
def test_stop_reasons_map_to_openais(sdk, anthropic_provider, claude, stop_reason, finish):
    client, _ = sdk
    claude.answer(answer("Some", stop_reason=stop_reason))
    assert client.chat.completions.create(model="claude-chat", messages=HELLO).choices[0].finish_reason == finish


def test_images_by_data_url_and_https_url_reach_anthropic_as_sources(sdk, anthropic_provider, claude):
    client, key = sdk
    png = base64.b64encode(PNG_1X1).decode()
    client.chat.completions.create(model="claude-chat", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Compare these."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}]}])
    assert sent(claude).body["messages"][0]["content"] == [
        {"type": "text", "text": "Compare these."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]
    charged_once(key, "anthropic")


@pytest.mark.parametrize("extra, param", [({"n": 2}, "n"), ({"logprobs": True}, "logprobs"),
                                          ({"modalities": ["text", "audio"]}, "modalities"),
                                          ({"response_format": {"type": "json_object"}}, "response_format"),
                                          ({"temperature": 1.5}, "temperature")])
def test_a_parameter_anthropic_cannot_honour_is_refused_by_name_and_costs_nothing(sdk, anthropic_provider, claude,
                                                                                  extra, param):
    client, key = sdk
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="claude-chat", messages=HELLO, **extra)
    assert (refused.value.code, refused.value.param) == ("unsupported_parameter", param)
    assert claude.calls == []
    assert credits_of(key) == 100 and mismatches() == []


def test_an_upstream_400_is_passed_on_and_costs_nothing(sdk, anthropic_provider, claude):
    client, key = sdk
    claude.fail(400, error_body("invalid_request_error", f"prompt is too long (key {ANTHROPIC_KEY})"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="claude-chat", messages=HELLO)
    assert refused.value.code == "invalid_request_error" and ANTHROPIC_KEY not in refused.value.message
    assert credits_of(key) == 100 and mismatches() == []
    assert not Deployment.objects.get().disabled_at


# ---------------------------------------------------------------- failures

def test_a_401_disables_the_deployment_and_the_secret_is_in_no_answer_or_log(sdk, claude, monkeypatch, caplog):
    client, key = sdk
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, "sk-ant-api03-a-revoked-key-000000000000")
    serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1)])
    with caplog.at_level(logging.DEBUG, logger="gateway"), caplog.at_level(logging.INFO):
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as failed:
                result = client.chat.completions.create(model="claude-chat", messages=HELLO, stream=stream)
                list(result) if stream else None
            assert failed.value.status_code == 502
            body = json.dumps(failed.value.body)
            assert "a-revoked-key" not in body and claude.base_url not in body
    disabled = Deployment.objects.get()
    assert disabled.disabled_at and "HTTP 401" in disabled.disabled_reason
    assert len(claude.calls) == 1  # disabled after the first: the second request tried no one
    assert "a-revoked-key" not in caplog.text and claude.base_url not in caplog.text
    assert credits_of(key) == 100 and mismatches() == []


def test_a_400_speaking_of_credit_is_passed_on_and_disables_nothing(sdk, anthropic_provider, claude):
    """Only Anthropic's error type says the secret is spent (billing_error): a 400's words may be the client's."""
    client, key = sdk
    claude.fail(400, error_body("invalid_request_error", "Your credit balance is too low to access the Anthropic "
                                                         "API. Please go to Plans & Billing to upgrade."))
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="claude-chat", messages=HELLO)
    assert refused.value.code == "invalid_request_error" and not Deployment.objects.get().disabled_at
    assert credits_of(key) == 100 and mismatches() == []


def test_an_upstream_that_is_down_is_a_502_that_costs_nothing(sdk, monkeypatch, db):
    client, key = sdk
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    serve("claude-chat", [(add_anthropic("down", None), "claude-sonnet-4-5", 1)])
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="claude-chat", messages=HELLO)
    assert (failed.value.status_code, failed.value.code) == (502, "upstream_unavailable")
    assert credits_of(key) == 100 and mismatches() == []
    assert UsageEvent.objects.get().success is False


def test_an_overloaded_529_moves_to_the_next_deployment_and_charges_once(sdk, claude, second_claude, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    claude.fail(529, error_body("overloaded_error", "Overloaded"))
    second_claude.answer(answer("from the second"))
    serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1),
                          (add_anthropic("anthropic-b", second_claude), "claude-sonnet-4-5", 2)])
    assert client.chat.completions.create(model="claude-chat", messages=HELLO).choices[0].message.content == \
        "from the second"
    assert not Deployment.objects.get(provider__name="anthropic").disabled_at
    charged_once(key, provider="anthropic-b")


def test_a_lone_429_is_passed_on_with_its_retry_after(sdk, anthropic_provider, claude):
    client, key = sdk
    claude.fail(429, error_body("rate_limit_error", "Number of request tokens has exceeded your per-minute rate "
                                                    "limit"), headers={"retry-after": "7"})
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="claude-chat", messages=HELLO)
    assert limited.value.response.headers["retry-after"] == "7"
    assert credits_of(key) == 100 and mismatches() == []


def test_a_mid_stream_error_event_after_content_ends_the_stream_and_is_charged(sdk, anthropic_provider, claude):
    client, key = sdk
    events = stream_events("Half an ans")
    claude.stream(*events[:4], stream_error("overloaded_error", "Overloaded"))
    received = []
    with pytest.raises(openai.APIError) as broken:
        for chunk in client.chat.completions.create(model="claude-chat", messages=HELLO, stream=True):
            received.append(chunk.choices[0].delta.content)
    assert "".join(text or "" for text in received) == "Half an ans"
    assert broken.value.code == "upstream_unavailable"
    assert credits_of(key) == 99 and mismatches() == []
    assert UsageEvent.objects.get().status == 502


def test_a_stream_that_breaks_before_content_moves_to_the_next_deployment(sdk, claude, second_claude, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    claude.stream(*stream_events("never")[:2], stream_error("api_error", "Internal server error"))
    serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1),
                          (add_anthropic("anthropic-b", second_claude), "claude-sonnet-4-5", 2)])
    chunks = list(client.chat.completions.create(model="claude-chat", messages=HELLO, stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Hello from Claude"
    charged_once(key, provider="anthropic-b")


def test_a_dropped_stream_after_content_ends_with_an_error_event_and_is_charged(sdk, anthropic_provider, claude):
    client, key = sdk
    claude.stream(*stream_events("Half", DROP))
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="claude-chat", messages=HELLO, stream=True))
    assert credits_of(key) == 99 and mismatches() == []


def test_a_pool_mixing_openai_and_anthropic_serves_each_in_its_protocol(sdk, claude, upstream, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    upstream.json("/chat/completions", chat_completion("from openai"))
    claude.fail(503, error_body("api_error", "Internal server error"))
    openai_side = Provider.objects.create(name="oa", base_url=upstream.base_url,
                                          api_key_env="GATEWAY_UPSTREAM_FAKE_KEY", timeout=5)
    serve("mixed", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1), (openai_side, "gpt-x", 2)])
    completion = client.chat.completions.create(model="mixed", messages=HELLO)
    assert completion.choices[0].message.content == "from openai"
    assert claude.calls[0].body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    assert upstream.posts()[0].body["messages"] == HELLO  # the openai deployment got the request untranslated
    charged_once(key, provider="oa")


def test_a_disabled_anthropic_deployment_is_probed_with_one_token(anthropic_provider, claude):
    deployment_health.disable(Deployment.objects.get(), reason="HTTP 401")
    assert [(result.ok, result.enabled) for result in probes.probe_disabled()] == [(True, True)]
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    request = sent(claude).body
    assert request["max_tokens"] == 1 and request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "ping"}]}]
