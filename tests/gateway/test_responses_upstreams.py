"""/v1/responses towards real-protocol upstreams: passed through to a deployment that speaks the Responses API
(responses_fake, held to the openai SDK's types), translated for an OpenAI-compatible one without it
(``responses_api = false``) and for an Anthropic one; state and encrypted reasoning across them."""
import json

import openai
import pytest
from django.utils import timezone

from gateway.models import StoredResponse
from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider, UsageEvent
from tests.gateway.anthropic_fake import ANTHROPIC_KEY, ANTHROPIC_KEY_ENV, FakeAnthropic, answer, tool_block
from tests.gateway.anthropic_fake import message as anthropic_message
from tests.gateway.conftest import (
    DROP,
    UPSTREAM_KEY_ENV,
    add_provider,
    assert_told_nowhere,
    chat_completion,
    chunk,
    closed_port_url,
    serve,
)
from tests.gateway.responses_fake import FakeResponsesAPI
from tests.gateway.test_anthropic_gateway import add_anthropic

SECRET = "sk-fake-responses-upstream-0123456789"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}


@pytest.fixture
def native(db, monkeypatch):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, SECRET)
    fake = FakeResponsesAPI(account="acct-a").start()
    yield fake
    fake.stop()


@pytest.fixture
def second_native(db):
    fake = FakeResponsesAPI(account="acct-b").start()
    yield fake
    fake.stop()


@pytest.fixture
def client_of(live_server, free_key):
    key, secret = free_key
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


def test_a_native_deployment_gets_the_request_passed_through_and_the_client_the_gateways_response(
        native, client_of):
    serve("gpt-native", [(add_provider("openai-native", native.base_url), "gpt-up", 1)])
    client, key = client_of
    response = client.responses.create(model="gpt-native", input="Hello", instructions="Be kind.",
                                       extra_body={"client_metadata": {"session": "s1"}})
    sent = native.calls[0]
    assert sent["model"] == "gpt-up" and sent["store"] is False and sent["instructions"] == "Be kind."
    assert sent["client_metadata"] == {"session": "s1"}  # passed through: the upstream judges it
    assert native.problems == []
    assert response.id.startswith("resp_") and response.id != "resp_upstream_1"
    assert response.model == "gpt-native" and response.output_text == "Hello from the Responses API"
    assert response.usage.input_tokens == 12 and response.usage.input_tokens_details.cached_tokens == 2
    usage = UsageEvent.objects.get()
    assert (usage.operation, usage.input_tokens, usage.output_tokens, usage.cached_tokens) == ("responses", 12, 5, 2)
    assert StoredResponse.objects.get(pk=response.id).response["model"] == "gpt-native"
    assert mismatches() == []


def test_a_native_stream_is_relayed_renumbered_and_stored(native, client_of):
    serve("gpt-native", [(add_provider("openai-native", native.base_url), "gpt-up", 1)])
    client, key = client_of
    events = list(client.responses.create(model="gpt-native", input="Stream it", stream=True))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert {event.response.id for event in events if hasattr(event, "response")} == {events[-1].response.id}
    assert events[-1].type == "response.completed" and events[-1].response.model == "gpt-native"
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == "Hello from the Responses API"
    assert native.calls[0]["stream"] is True and native.calls[0]["store"] is False
    assert StoredResponse.objects.get(pk=events[-1].response.id).response["output"][0]["type"] == "message"
    assert UsageEvent.objects.get().input_tokens == 12 and mismatches() == []


def test_previous_response_id_rebuilds_the_conversation_for_a_native_deployment(native, client_of):
    serve("gpt-native", [(add_provider("openai-native", native.base_url), "gpt-up", 1)])
    client, _ = client_of
    first = client.responses.create(model="gpt-native", input="use get_weather: Paris", tools=[WEATHER])
    call = first.output[-1]
    assert call.type == "function_call"
    second = client.responses.create(model="gpt-native", previous_response_id=first.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"}])
    assert second.output_text.endswith("the tool said Sunny")
    sent = native.calls[1]["input"]
    assert [item.get("type", "message") for item in sent] == ["message", "function_call", "function_call_output"]
    assert all("id" not in item for item in sent) and "previous_response_id" not in native.calls[1]
    assert native.problems == []


def test_encrypted_reasoning_goes_back_to_the_deployment_that_made_it_and_is_left_out_elsewhere(
        native, second_native, client_of):
    provider_a = add_provider("openai-a", native.base_url)
    provider_b = add_provider("openai-b", second_native.base_url)
    model = serve("gpt-native", [(provider_a, "gpt-up", 1), (provider_b, "gpt-up", 1)])
    client, _ = client_of
    include = ["reasoning.encrypted_content"]
    first = client.responses.create(model="gpt-native", input="Think", include=include, store=False)
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content.startswith("gw1.")
    made_by = native if native.calls else second_native
    # Codex sends the whole conversation back, store false, the reasoning item included.
    turn = [{"role": "user", "content": "Think"}, reasoning.model_dump(exclude_none=True),
            {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "And now?"}]
    for _ in range(4):  # whatever the weights would pick, the deployment that made the reasoning answers
        client.responses.create(model="gpt-native", input=turn, include=include, store=False)
    assert len(made_by.calls) == 5 and native.problems == second_native.problems == []
    # That deployment gone: the other one answers, without the reasoning it could not read.
    other = second_native if made_by is native else native
    Deployment.objects.filter(model=model, provider__base_url=made_by.base_url).update(
        disabled_at=timezone.now(), disabled_by_hand=True)
    catalog.invalidate()
    answered = client.responses.create(model="gpt-native", input=turn, include=include, store=False)
    assert answered.status == "completed" and other.problems == []
    assert [item.get("type", "message") for item in other.calls[-1]["input"]] == ["message", "message", "message"]


def test_a_chat_only_openai_compatible_deployment_is_translated(upstream, monkeypatch, client_of, db):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, SECRET)
    provider = add_provider("compatible", upstream.base_url)
    Provider.objects.filter(pk=provider.pk).update(responses_api=False)
    serve("compat-chat", [(Provider.objects.get(pk=provider.pk), "up-chat", 1)])
    upstream.json("/chat/completions", chat_completion("Translated hello", prompt_tokens=7))
    client, key = client_of
    response = client.responses.with_raw_response.create(
        model="compat-chat", input="Hi", instructions="Short.", reasoning={"effort": "high"},
        text={"format": {"type": "json_schema", "name": "doc", "schema": {"type": "object"}}},
        max_output_tokens=50)
    parsed = response.parse()
    assert parsed.output_text == "Translated hello" and parsed.usage.input_tokens == 7
    sent = upstream.posts()[-1].body
    assert sent["messages"][0] == {"role": "system", "content": "Short."}
    assert sent["reasoning_effort"] == "high" and sent["max_completion_tokens"] == 50
    assert sent["response_format"]["json_schema"]["name"] == "doc"
    assert "x-gateway-ignored" not in response.headers
    assert UsageEvent.objects.get().operation == "responses" and mismatches() == []


def test_an_anthropic_deployment_is_translated_tool_calls_included(db, monkeypatch, client_of):
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    claude = FakeAnthropic().start()
    try:
        serve("claude-chat", [(add_anthropic("anthropic", claude), "claude-sonnet-4-5", 1)])
        client, _ = client_of
        claude.answer(anthropic_message([tool_block("get_weather", {"text": "Paris"}, id="toolu_1")],
                                        stop_reason="tool_use"))
        first = client.responses.create(model="claude-chat", input="Weather?", tools=[WEATHER],
                                        reasoning={"effort": "low"})
        call = first.output[-1]
        assert (call.type, call.name, call.call_id) == ("function_call", "get_weather", "toolu_1")
        claude.answer(answer("It is sunny in Paris"))
        second = client.responses.create(model="claude-chat", previous_response_id=first.id, tools=[WEATHER],
                                         input=[{"type": "function_call_output", "call_id": "toolu_1",
                                                 "output": "Sunny"}])
        assert second.output_text == "It is sunny in Paris"
        sent = claude.calls[-1].body
        assert [turn["role"] for turn in sent["messages"]] == ["user", "assistant", "user"]
        assert sent["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"
        assert claude.problems() == []
    finally:
        claude.stop()
    assert LedgerEntry.objects.filter(kind="charge", status="completed").count() == 2 and mismatches() == []


def test_the_fake_answers_what_the_sdk_parses(native):
    """The fake's own answers are the SDK's types (its check would refuse anything else)."""
    response = native.response({"model": "m", "input": "use get_weather", "tools": [WEATHER], "store": False})
    assert response["output"][0]["type"] == "function_call"
    assert native.check({"model": "m", "input": "Hi"}) is not None  # store must be false
    assert native.check({"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}],
                         "store": False})[0] == "invalid_encrypted_content"
    assert AiModel.objects.count() == 0


def test_a_translated_stream_that_breaks_after_its_first_text_ends_with_error_and_response_failed(
        upstream, monkeypatch, client_of, db):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, SECRET)
    provider = add_provider("compatible", upstream.base_url)
    Provider.objects.filter(pk=provider.pk).update(responses_api=False)
    serve("compat-chat", [(Provider.objects.get(pk=provider.pk), "up-chat", 1)])
    upstream.sse("/chat/completions", [chunk("Hel"), chunk("lo"), DROP])
    client, key = client_of
    events = list(client.responses.create(model="compat-chat", input="Hi", stream=True))
    kinds = [event.type for event in events]
    assert kinds[-2:] == ["error", "response.failed"] and "response.output_text.delta" in kinds
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None
    assert failed.output[0].content[0].text == "Hello"  # what was streamed is in the failed response
    assert [event.sequence_number for event in events] == list(range(len(events)))
    charge = LedgerEntry.objects.get(kind="charge")
    assert charge.status == "completed"  # the client had output: charged (CONTRACT section 5)
    assert StoredResponse.objects.get(pk=failed.id).response["status"] == "failed"
    assert mismatches() == []


def test_the_catalog_reads_responses_api_for_openai_and_azure_providers_only():
    from models_catalog.catalog import CatalogError, check_provider

    assert check_provider("compatible", {"type": "openai", "base_url": "https://llm.example/v1",
                                         "responses_api": False})["responses_api"] is False
    assert check_provider("openai", {"type": "openai", "base_url": "https://api.openai.com/v1"})["responses_api"] is True
    with pytest.raises(CatalogError, match="responses_api"):
        check_provider("claude", {"type": "anthropic", "responses_api": True})
    with pytest.raises(CatalogError, match="responses_api"):
        check_provider("compatible", {"type": "openai", "base_url": "https://llm.example/v1", "responses_api": "no"})


def test_a_part_chat_cannot_carry_reaches_a_native_deployment_and_is_named_towards_a_translated_one(
        native, client_of, live_server, seeded):
    serve("gpt-native", [(add_provider("openai-native", native.base_url), "gpt-up", 1)])
    client, _ = client_of
    content = [{"type": "input_text", "text": "Read this"}, {"type": "input_file", "file_id": "file-abc"}]
    client.responses.create(model="gpt-native", input=[{"role": "user", "content": content}])
    assert native.calls[0]["input"][0]["content"][1] == {"type": "input_file", "file_id": "file-abc"}
    assert native.problems == []
    raw = client.responses.with_raw_response.create(model="local-chat", input=[{"role": "user", "content": content}])
    assert raw.headers["x-gateway-ignored"] == "input.0.content.1"


def test_a_native_upstream_refusing_its_secret_or_down_leaves_it_and_its_url_nowhere(
        native, client, free_key, caplog, settings):
    """A native deployment whose upstream answers 401 quoting the secret and its own address, and one whose
    address refuses connections: the client gets the contract's error, and neither the secret nor either
    upstream's URL reaches an answer, the log, /metrics or a row."""
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    native.refusal = (401, {"error": {"message": f"Incorrect API key {SECRET} at {native.base_url}/responses",
                                      "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}})
    down = closed_port_url()
    serve("gpt-native", [(add_provider("openai-native", native.base_url), "gpt-up", 1),
                         (add_provider("openai-down", down), "gpt-up", 2)])
    _, secret = free_key
    caplog.set_level("INFO")
    answers = []
    for stream in (False, True):
        response = client.post("/v1/responses", json.dumps({"model": "gpt-native", "input": "Hello", "stream": stream}),
                               content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert response.status_code >= 400
        answers.append(response.content.decode() + json.dumps(dict(response.items())))
    assert native.calls  # the secret was sent, and refused
    assert_told_nowhere(client, [*answers, caplog.text], SECRET, native.base_url, native.root, down,
                        down.removesuffix("/v1"))
    assert mismatches() == []
