"""CONTRACT section 8, "what a deployment cannot honour", on chat completions and /v1/messages.

Agent clients send, on every request, members that steer one vendor's own server features. A deployment
of another type translates what has an equivalent (thinking and effort as reasoning_effort, as Anthropic's
thinking budget, as Gemini's thinkingConfig; a system message among the turns in place), leaves out and
names (X-Gateway-Ignored) what an answer of the same shape does without, and refuses only what would change
the shape the client parses. The proof is a real Claude Code request (tests/gateway/recorded), served by
every deployment type, streamed and not.
"""
import json
import re
from pathlib import Path

import pytest

from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog.models import UsageEvent
from tests.conftest import bearer
from tests.gateway.anthropic_fake import ANTHROPIC_KEY, ANTHROPIC_KEY_ENV, claude  # noqa: F401 (fixture)
from tests.gateway.anthropic_fake import stream_events, usage as anthropic_usage
from tests.gateway.conftest import (
    UPSTREAM_KEY_ENV,
    UPSTREAM_SECRET,
    add_provider,
    chat_completion,
    chunk,
    credits_of,
    serve,
    usage_chunk,
)
from tests.gateway.fake_servers import FakeHandler, FakeServer
from tests.gateway.gemini_fake import GEMINI_KEY, GEMINI_KEY_ENV, gemini  # noqa: F401 (fixture)
from tests.gateway.gemini_fake import answer as gemini_answer
from tests.gateway.gemini_fake import text_events
from tests.gateway.test_anthropic_gateway import add_anthropic
from tests.gateway.test_gemini_gateway import add_gemini

RECORDED = json.loads((Path(__file__).parent / "recorded" / "claude_code_2_1_332.json").read_text())
FIRST_TURN, AFTER_A_TOOL = RECORDED["requests"]
HELLO = [{"role": "user", "content": "Hello"}]
# What every deployment of another type than anthropic goes without in Claude Code's request, by name.
CLAUDE_CODE_LEFT_OUT = {"cache_control", "thinking.display", "context_management", "tools:DeferredToolPlaceholder",
                        "anthropic-beta"}


@pytest.fixture
def openai_model(upstream, monkeypatch, db):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    serve("gpt-chat", [(add_provider("oa", upstream.base_url), "gpt-x", 1)])
    return upstream


@pytest.fixture
def gemini_model(gemini, monkeypatch, db):  # noqa: F811 (the fixture)
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    serve("gem-chat", [(add_gemini("google", gemini), "gemini-2.5-flash", 1)])
    return gemini


@pytest.fixture
def claude_model(claude, monkeypatch, db):  # noqa: F811 (the fixture)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1)])
    return claude


def send(client, secret: str, recorded: dict, model: str, *, stream: bool, path: str = "/v1/messages?beta=true"):
    """A recorded Claude Code request, as Claude Code sends it (its headers, its query), for ``model``."""
    body = {**recorded["body"], "model": model, "stream": stream}
    return client.post(path, json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret,
                       HTTP_ANTHROPIC_BETA=recorded["headers"]["anthropic-beta"],
                       HTTP_ANTHROPIC_VERSION=recorded["headers"]["anthropic-version"])


def events_of(response) -> list[dict]:
    """The data of each event of an Anthropic event stream."""
    text = b"".join(response.streaming_content).decode()
    return [json.loads(line.removeprefix("data: ")) for line in text.splitlines() if line.startswith("data: ")]


def ignored(response) -> set[str]:
    return {name.strip() for name in response.get("X-Gateway-Ignored", "").split(",") if name.strip()}


def served(response, *, stream: bool) -> dict:
    """The answer of a 200: the message object, or the message the events build (with each event's usage)."""
    assert response.status_code == 200, response.content
    if not stream:
        return response.json()
    events = events_of(response)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    start, delta = events[0]["message"], next(event for event in events if event["type"] == "message_delta")
    return {**start, "start_usage": start["usage"], "usage": delta["usage"], "stop_reason": delta["delta"]["stop_reason"]}


# ---------------------------------------------------------------- Claude Code, on every deployment type

@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_request_reaches_an_openai_deployment_translated_with_what_it_cannot_honour_named(
        client, openai_model, free_key, stream):
    key, secret = free_key
    if stream:
        openai_model.sse("/chat/completions", [chunk("Done."), chunk(finish_reason="stop"), usage_chunk(900, 4),
                                               "[DONE]"])
    else:
        openai_model.json("/chat/completions", chat_completion("Done.", prompt_tokens=900, completion_tokens=4))
    response = send(client, secret, AFTER_A_TOOL, "gpt-chat", stream=stream)
    message = served(response, stream=stream)
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (900, 4)
    # The earlier turn's thinking block (with its signature) is Anthropic's alone; so is the cache mark.
    assert ignored(response) == CLAUDE_CODE_LEFT_OUT | {"messages.2.content.0"}
    [call] = openai_model.posts()
    sent = call.body
    assert sent["model"] == "gpt-x" and sent["reasoning_effort"] == "medium"  # adaptive thinking, effort medium
    assert sent["max_completion_tokens"] == 128000 and "max_tokens" not in sent
    assert sent["user"] == AFTER_A_TOOL["body"]["metadata"]["user_id"]
    assert not {"context_management", "thinking", "output_config", "metadata"} & set(sent)
    roles = [message["role"] for message in sent["messages"]]
    # The system prompt, the user's turn, Claude Code's system reminder where it stood, the call, its result.
    assert roles == ["system", "user", "system", "assistant", "tool"]
    assert sent["messages"][2]["content"].startswith("# Environment")
    assert sent["messages"][3]["tool_calls"][0]["id"] == "toolu_01" and sent["messages"][4]["tool_call_id"] == "toolu_01"
    names = [tool["function"]["name"] for tool in sent["tools"]]
    assert "DeferredToolPlaceholder" not in names and {"Read", "Bash", "Write"} <= set(names)
    event = UsageEvent.objects.get()
    assert (event.input_tokens, event.output_tokens) == (900, 4)
    assert credits_of(key) == 99 and mismatches() == []


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_request_reaches_a_gemini_deployment_with_its_thinking_as_a_budget(
        client, gemini_model, free_key, stream):
    key, secret = free_key
    if stream:
        gemini_model.stream(*text_events("Do", "ne."))
    else:
        gemini_model.answer(gemini_answer("Done."))
    response = send(client, secret, FIRST_TURN, "gem-chat", stream=stream)
    message = served(response, stream=stream)
    assert message["stop_reason"] == "end_turn"
    assert ignored(response) == CLAUDE_CODE_LEFT_OUT
    [call] = gemini_model.posts()
    assert call.problems == []
    assert call.body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 8192}
    # Gemini takes no system turn: the reminder among the turns joins the system instruction.
    system = " ".join(part["text"] for part in call.body["systemInstruction"]["parts"])
    assert "# Environment" in system and [turn["role"] for turn in call.body["contents"]] == ["user"]
    assert credits_of(key) == 99 and mismatches() == []


@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_request_reaches_an_anthropic_deployment_as_it_was_sent(client, claude_model, free_key, stream):
    key, secret = free_key
    if stream:
        claude_model.stream(*stream_events(["Done."], counts=anthropic_usage(700, 3)))
    response = send(client, secret, AFTER_A_TOOL, "claude-chat", stream=stream)
    served(response, stream=stream)
    assert "X-Gateway-Ignored" not in response
    [call] = claude_model.posts()
    assert call.problems == []
    assert call.body == {**AFTER_A_TOOL["body"], "model": "claude-sonnet-4-5", "stream": stream}
    assert call.headers["anthropic-beta"] == AFTER_A_TOOL["headers"]["anthropic-beta"]
    assert credits_of(key) == 99 and mismatches() == []


@pytest.mark.parametrize("recorded", [FIRST_TURN, AFTER_A_TOOL], ids=["first turn", "after a tool"])
@pytest.mark.parametrize("stream", [False, True])
def test_claude_codes_request_is_served_by_local_chat_which_names_the_thinking_it_cannot_do(
        client, seeded, free_key, recorded, stream):
    key, secret = free_key
    response = send(client, secret, recorded, "local-chat", stream=stream)
    message = served(response, stream=stream)
    assert message["model"] == "local-chat" and message["usage"]["output_tokens"] > 0
    # reasoning_effort, which the local model cannot honour, is named by the client's word for it.
    assert {"thinking", *CLAUDE_CODE_LEFT_OUT} <= ignored(response)
    assert "reasoning_effort" not in ignored(response)
    assert credits_of(key) == 99 and mismatches() == []


def test_count_tokens_takes_claude_codes_whole_request(client, seeded, free_key):
    _, secret = free_key
    body = {name: value for name, value in FIRST_TURN["body"].items() if name not in ("max_tokens", "stream")}
    response = client.post("/v1/messages/count_tokens?beta=true", json.dumps({**body, "model": "local-chat"}),
                           content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    assert response.json()["input_tokens"] > 1000  # the conversation, the system prompt and the tools


# ---------------------------------------------------------------- the stream's usage

def test_message_start_carries_the_gateways_count_when_the_upstreams_comes_last(client, openai_model, free_key):
    _, secret = free_key
    openai_model.sse("/chat/completions", [chunk("Hi"), chunk(finish_reason="stop"), usage_chunk(321, 2), "[DONE]"])
    body = {"model": "gpt-chat", "max_tokens": 64, "stream": True, "system": "Be brief. " * 40, "messages": HELLO}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    message = served(response, stream=True)
    assert message["start_usage"]["input_tokens"] > 40  # the gateway's own count, never 0
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (321, 2)  # the final figures


def test_message_start_carries_the_upstreams_count_when_it_comes_first(client, openai_model, free_key):
    _, secret = free_key
    first = {**chunk("Hi"), "usage": {"prompt_tokens": 555, "completion_tokens": 1, "total_tokens": 556}}
    openai_model.sse("/chat/completions", [first, chunk(finish_reason="stop"), usage_chunk(555, 2), "[DONE]"])
    body = {"model": "gpt-chat", "max_tokens": 64, "stream": True, "messages": HELLO}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    message = served(response, stream=True)
    assert message["start_usage"]["input_tokens"] == 555 and message["usage"]["output_tokens"] == 2


def test_message_delta_carries_the_gateways_counts_when_the_upstream_reports_none(client, openai_model, free_key):
    _, secret = free_key
    openai_model.sse("/chat/completions", [chunk("Hello there, friend"), chunk(finish_reason="stop"), "[DONE]"])
    body = {"model": "gpt-chat", "max_tokens": 64, "stream": True, "messages": HELLO}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    message = served(response, stream=True)
    assert message["usage"]["input_tokens"] == message["start_usage"]["input_tokens"] > 0
    assert message["usage"]["output_tokens"] > 0


# ---------------------------------------------------------------- /v1/messages, member by member

def test_messages_translations_reach_an_openai_deployment(client, openai_model, free_key):
    """A budget reads as a step of effort; metadata.user_id is user; a tool result's image follows it as the
    user's; a search result and a text document are text; Anthropic's server tools are left out by type."""
    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion("ok"))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    body = {"model": "gpt-chat", "max_tokens": 30000, "thinking": {"type": "enabled", "budget_tokens": 20000},
            "metadata": {"user_id": "u-7"}, "service_tier": "auto", "top_k": 5, "container": "c-1",
            "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "m"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"type": "bash_20250124", "name": "bash"},
                      {"name": "look", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "Look."},
                {"role": "assistant", "content": [
                    {"type": "redacted_thinking", "data": "xyz"},
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
                    {"type": "tool_use", "id": "toolu_9", "name": "look", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_9", "content": [{"type": "text", "text": "seen"}, image]},
                    {"type": "search_result", "source": "https://s.example", "title": "S",
                     "content": [{"type": "text", "text": "found"}]},
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}]}]}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    assert ignored(response) == {"service_tier", "top_k", "container", "mcp_servers", "tools:web_search_20250305",
                                 "tools:bash_20250124", "cache_control", "messages.1.content.0",
                                 "messages.1.content.1"}
    sent = openai_model.posts()[0].body
    assert (sent["reasoning_effort"], sent["user"], sent["parallel_tool_calls"]) == ("high", "u-7", False)
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["look"]
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "toolu_9", "content": "seen"}
    assert sent["messages"][3] == {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "S https://s.example\nfound"}, {"type": "text", "text": "notes"}]}


@pytest.mark.parametrize("body, effort", [
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, None),
    ({"output_config": {"effort": "low"}}, "low"),
    ({"thinking": {"type": "adaptive"}}, "medium"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "low"),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, "high"),
])
def test_thinking_and_effort_become_one_reasoning_effort(client, openai_model, free_key, body, effort):
    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion("ok"))
    body = {"model": "gpt-chat", "max_tokens": 8192, "messages": HELLO, **body}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    assert openai_model.posts()[0].body.get("reasoning_effort") == effort
    # Thinking disabled asks for nothing: honoured by not thinking. An effort it cannot go with is named.
    assert ignored(response) == ({"output_config.effort"} if "disabled" in json.dumps(body) else set())


def test_a_model_the_gateway_does_not_serve_is_a_404_whatever_else_the_body_holds(client, free_key, db):
    _, secret = free_key
    body = {"model": "claude-opus-5-5", "max_tokens": "lots", "messages": "hi", "thinking": "yes"}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        response = client.post(path, json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
        assert response.status_code == 404, (path, response.content)
        assert response.json()["error"]["type"] == "not_found_error"
    assert credits_of(free_key[0]) == 100


# ---------------------------------------------------------------- chat completions

SDK_MEMBERS = {"reasoning_effort": "high", "verbosity": "low", "service_tier": "flex", "metadata": {"run": "7"},
               "store": True, "prompt_cache_key": "session-1", "safety_identifier": "u-hash",
               "prediction": {"type": "content", "content": "x"},
               "web_search_options": {"search_context_size": "low"}, "modalities": ["text"]}
# What each translating adapter leaves out of SDK_MEMBERS and names (modalities ["text"] asks for nothing new).
LEFT_OUT_BY_TRANSLATORS = {"verbosity", "service_tier", "metadata", "store", "prompt_cache_key", "safety_identifier",
                           "prediction", "web_search_options"}


def chat(client, secret: str, **body):
    body.setdefault("messages", HELLO)
    return client.post("/v1/chat/completions", json.dumps(body), content_type="application/json", **bearer(secret))


def test_the_openai_sdks_members_pass_unchanged_to_an_openai_deployment(client, openai_model, free_key):
    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion("ok"))
    response = chat(client, secret, model="gpt-chat", max_tokens=50, **SDK_MEMBERS)
    assert response.status_code == 200, response.content
    assert "X-Gateway-Ignored" not in response
    sent = openai_model.posts()[0].body
    assert {name: sent[name] for name in SDK_MEMBERS} == SDK_MEMBERS and sent["max_tokens"] == 50


def test_an_anthropic_deployment_thinks_on_reasoning_effort_and_names_what_it_leaves_out(
        client, claude_model, free_key):
    _, secret = free_key
    response = chat(client, secret, model="claude-chat", max_completion_tokens=20000, seed=4, presence_penalty=0.5,
                    **SDK_MEMBERS)
    assert response.status_code == 200, response.content
    assert ignored(response) == LEFT_OUT_BY_TRANSLATORS | {"seed", "presence_penalty"}
    [call] = claude_model.posts()
    assert call.problems == []
    assert call.body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert not {"seed", "metadata", "service_tier", "reasoning_effort"} & set(call.body)


@pytest.mark.parametrize("extra", [{"temperature": 0.2}, {"max_tokens": 1000},
                                   {"tool_choice": "required", "tools": [{"type": "function", "function": {
                                       "name": "now", "parameters": {"type": "object", "properties": {}}}}]}])
def test_anthropic_thinks_only_where_the_rest_of_the_request_allows_it(client, claude_model, free_key, extra):
    _, secret = free_key
    response = chat(client, secret, model="claude-chat", reasoning_effort="medium", **extra)
    assert response.status_code == 200, response.content
    assert "thinking" not in claude_model.posts()[0].body and ignored(response) == {"reasoning_effort"}


def test_anthropic_does_not_think_in_the_middle_of_a_tool_round_trip(client, claude_model, free_key):
    """Anthropic wants the thinking block of the turn that called the tool back, which a chat conversation
    does not carry: that turn's continuation goes without thinking."""
    _, secret = free_key
    conversation = [{"role": "user", "content": "Time?"},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "noon"}]
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
    response = chat(client, secret, model="claude-chat", reasoning_effort="high", messages=conversation, tools=tools)
    assert response.status_code == 200, response.content
    assert "thinking" not in claude_model.posts()[0].body and ignored(response) == {"reasoning_effort"}


def test_a_gemini_deployment_thinks_on_a_budget_and_names_what_it_leaves_out(client, gemini_model, free_key):
    _, secret = free_key
    response = chat(client, secret, model="gem-chat", logit_bias={"1": 2}, **SDK_MEMBERS)
    assert response.status_code == 200, response.content
    assert ignored(response) == LEFT_OUT_BY_TRANSLATORS | {"logit_bias"}
    [call] = gemini_model.posts()
    assert call.problems == [] and call.body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 16384}


def test_local_chat_names_what_it_leaves_out_and_refuses_audio_output_before_any_charge(client, seeded, free_key):
    key, secret = free_key
    response = chat(client, secret, model="local-chat", **SDK_MEMBERS)
    assert response.status_code == 200, response.content
    assert ignored(response) == LEFT_OUT_BY_TRANSLATORS | {"reasoning_effort"}
    refused = chat(client, secret, model="local-chat", modalities=["text", "audio"], audio={"voice": "alloy",
                                                                                            "format": "wav"})
    assert refused.status_code == 400
    assert (refused.json()["error"]["code"], refused.json()["error"]["param"]) == ("unsupported_parameter",
                                                                                   "modalities")
    assert credits_of(key) == 99 and mismatches() == []
    # Refused before the charge: one charge (the first request's), nothing taken and given back.
    assert LedgerEntry.objects.filter(key=key, kind="charge").count() == 1
    assert not LedgerEntry.objects.filter(key=key, kind="refund").exists()


@pytest.mark.parametrize("body, param", [({"reasoning_effort": "enormous"}, "reasoning_effort"),
                                         ({"metadata": {"k": 5}}, "metadata.k"), ({"store": "yes"}, "store"),
                                         ({"not_an_openai_member": 1}, "not_an_openai_member")])
def test_chat_still_checks_the_types_and_refuses_members_openai_does_not_have(client, seeded, free_key, body, param):
    _, secret = free_key
    response = chat(client, secret, model="local-chat", **body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param, response.content


def test_a_tool_choice_that_needs_a_tool_left_out_is_left_out_too(client, openai_model, free_key):
    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion("ok"))
    body = {"model": "gpt-chat", "max_tokens": 64, "messages": HELLO,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "tool", "name": "web_search"}}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    assert ignored(response) == {"tools:web_search_20250305", "tool_choice"}
    assert not {"tools", "tool_choice"} & set(openai_model.posts()[0].body)


def test_a_json_schema_format_reaches_anthropic_as_its_structured_output(client, claude_model, free_key):
    _, secret = free_key
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    response = chat(client, secret, model="claude-chat", response_format={
        "type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}})
    assert response.status_code == 200, response.content
    [call] = claude_model.posts()
    assert call.problems == [] and call.body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


def test_the_names_of_what_was_left_out_are_safe_in_a_header_and_bounded(client, openai_model, free_key):
    """The names come from the client's body; they go into a header and a log line."""
    _, secret = free_key
    openai_model.json("/chat/completions", chat_completion("ok"))
    body = {"model": "gpt-chat", "max_tokens": 64, "messages": HELLO, "bad\r\nX-Injected: 1": 1, "café": 2,
            **{f"extra_{n}": n for n in range(200)}}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    names = response["X-Gateway-Ignored"].split(", ")
    assert "X-Injected" not in response and "bad__X-Injected:_1" in names and "caf_" in names
    assert len(names) == 65 and names[-1] == "more"


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/responses", {"model": "local-chat", "input": [
        {"role": "user", "content": "Hi"}, *({"type": f"x{n}\u202e\nX-Injected: 1"} for n in range(100))]}),
    ("/v1/responses", {"model": "local-chat", "input": "Hi", "tools": [{"type": "bad\r\nX-Injected: 1"}]}),
    ("/v1beta/models/local-chat:generateContent", {"contents": [{"parts": [{"text": "Hi"}]}], "bad\nX-Injected": 1,
                                                   **{f"extra{n}": n for n in range(100)}}),
])
def test_every_api_names_what_was_left_out_safely_and_boundedly(client, seeded, free_key, path, body):
    """The Responses API's item and tool types and the Gemini ingress's member names come from the client too:
    a line break in one was a 500 after the charge, when the header was written."""
    key, secret = free_key
    response = client.post(path, json.dumps(body), content_type="application/json", **bearer(secret))
    assert response.status_code == 200, response.content
    names = response["X-Gateway-Ignored"].split(", ")
    assert "X-Injected" not in response and all(re.fullmatch(r"[A-Za-z0-9_.:-]{1,100}", name) for name in names)
    assert len(names) <= 65 and credits_of(key) == 99


def test_every_server_feature_the_adapters_leave_out_is_in_the_providers_doc():
    from gateway.upstream.base import SERVER_FEATURES
    doc = (Path(__file__).resolve().parents[2] / "docs" / "providers.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `verbosity`"))
    assert all(f"`{name}`" in row for name in SERVER_FEATURES)


def test_what_no_deployment_of_the_pool_can_serve_is_refused_before_the_charge(claude_model, upstream, monkeypatch):
    """CONTRACT section 8: a refusal comes before any credit is taken; in a pool with a deployment that can
    serve the request, nothing is refused (the attempts skip the ones that would refuse it)."""
    from gateway.upstream.base import refuse_before_charge
    from models_catalog import catalog
    from utils_app.errors import UnsupportedParameter

    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    serve("mixed-chat", [(add_anthropic("anthropic-b", None), "claude-x", 1),
                         (add_provider("oa", upstream.base_url), "gpt-x", 2)])
    two_choices = {"model": "m", "messages": HELLO, "n": 2}
    with pytest.raises(UnsupportedParameter) as refused:
        refuse_before_charge(catalog.get_model("claude-chat"), two_choices)
    assert refused.value.param == "n"
    refuse_before_charge(catalog.get_model("mixed-chat"), two_choices)  # the openai deployment serves it
    refuse_before_charge(catalog.get_model("claude-chat"), two_choices, passed_through=("anthropic",))


FILE_IMAGE = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                           {"type": "image", "source": {"type": "file", "file_id": "file_011"}}]}]


def test_a_block_only_anthropic_can_read_is_refused_before_the_charge_where_no_anthropic_deployment_serves(
        client, openai_model, free_key):
    key, secret = free_key
    body = {"model": "gpt-chat", "max_tokens": 64, "messages": FILE_IMAGE}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 400 and "messages.0.content.1.source" in response.json()["error"]["message"]
    assert openai_model.posts() == [] and credits_of(key) == 100
    from keys.models import LedgerEntry
    assert not LedgerEntry.objects.filter(kind="charge").exists()


def test_a_block_only_anthropic_can_read_goes_to_the_pools_anthropic_deployment(client, claude, upstream, free_key,  # noqa: F811
                                                                                 monkeypatch):
    key, secret = free_key
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    serve("mixed-chat", [(add_provider("oa", upstream.base_url), "gpt-x", 1),
                         (add_anthropic("anthropic", claude), "claude-sonnet-4-5", 2)])
    body = {"model": "mixed-chat", "max_tokens": 64, "messages": FILE_IMAGE}
    response = client.post("/v1/messages", json.dumps(body), content_type="application/json", HTTP_X_API_KEY=secret)
    assert response.status_code == 200, response.content
    assert upstream.posts() == [] and claude.posts()[0].body["messages"] == FILE_IMAGE
    assert credits_of(key) == 99 and mismatches() == []


class NoReasoningModel(FakeServer):
    """An OpenAI chat upstream whose model does not reason: a request with reasoning_effort gets OpenAI's 400
    naming it, any other an answer (streamed when asked)."""

    def __init__(self):
        self.bodies: list[dict] = []
        fake = self

        class Handler(FakeHandler):
            def do_POST(self):
                body = self.read_json()
                fake.bodies.append(body)
                if "reasoning_effort" in body:
                    return self.send_body(400, {"error": {
                        "message": "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                        "type": "invalid_request_error", "param": "reasoning_effort", "code": "unsupported_parameter"}})
                if body.get("stream"):
                    return self.send_events(200, [chunk("Plain."), chunk(finish_reason="stop"), usage_chunk(5, 1),
                                                  "[DONE]"],
                                            lambda event: f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode())
                self.send_body(200, chat_completion("Plain."))

        self.serve(Handler)


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_that_does_not_reason_is_asked_again_without_reasoning_effort(client, free_key, monkeypatch, stream):
    """OpenAI's API has reasoning_effort, but a model without reasoning refuses it: Claude Code's thinking
    reaches such a deployment as reasoning_effort, which is left out on a second try and named."""
    key, secret = free_key
    fake = NoReasoningModel().start()
    try:
        monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
        serve("plain-chat", [(add_provider("plain", fake.root + "/v1"), "gpt-4o", 1)])
        body = {"model": "plain-chat", "max_tokens": 64, "messages": HELLO, "stream": stream,
                "thinking": {"type": "adaptive"}}
        response = client.post("/v1/messages", json.dumps(body), content_type="application/json",
                               HTTP_X_API_KEY=secret)
        served(response, stream=stream)
        assert ignored(response) == {"thinking"}
        assert [("reasoning_effort" in sent) for sent in fake.bodies] == [True, False]
        assert credits_of(key) == 99 and mismatches() == []
    finally:
        fake.stop()
