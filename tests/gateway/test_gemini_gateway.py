"""Gemini deployments behind the gateway, driven by the clients users have: the official openai SDK on
/v1/chat/completions and /v1/embeddings, served by a live server, against the fake Gemini upstream
(gemini_fake.py, itself held to the google-genai SDK). Each test checks the answer, what reached
Google's API, and the money: one charge, the usage row's tokens, and a ledger that reconciles."""
import base64
import json
import logging
import struct

import openai
import pytest

from gateway import deployment_health, probes
from gateway.upstream import images
from keys.ledger import mismatches
from models_catalog.models import Deployment, Provider, UsageEvent
from tests.gateway.conftest import (
    PNG_1X1,
    UPSTREAM_SECRET,
    assert_told_nowhere,
    charged_once,
    chat_completion,
    closed_port_url,
    credits_of,
    failed_answers,
    serve,
)
from tests.gateway.fake_servers import DROP, Gate
from tests.gateway.gemini_fake import (  # noqa: F401 (fixtures)
    GEMINI_KEY,
    GEMINI_KEY_ENV,
    Reply,
    answer,
    blocked,
    call_part,
    embedding,
    error_body,
    gemini,
    rate_limited,
    response,
    second_gemini,
    text_part,
    unit,
    usage,
)
from utils_app import metrics

SIGNATURE = base64.b64encode(b"thought-signature-of-the-model").decode()
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"], "additionalProperties": False}}}
HELLO = [{"role": "user", "content": "Hello"}]


def add_gemini(name: str, fake, *, timeout: float = 5.0, api_key_env: str = GEMINI_KEY_ENV) -> Provider:
    return Provider.objects.create(name=name, type="gemini", base_url=fake.base_url if fake else closed_port_url(),
                                   api_key_env=api_key_env, timeout=timeout)


@pytest.fixture
def google(gemini, monkeypatch, db):
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    provider = add_gemini("google", gemini)
    serve("gem-chat", [(provider, "gemini-2.5-flash", 1)])
    serve("gem-embed", [(provider, "text-embedding-004", 1)], type="embedding")
    return provider


def sent(fake, method: str = "generateContent"):
    """The one call of ``method`` that reached the fake, checked for the key's place."""
    [call] = fake.posts(method)
    assert call.headers["x-goog-api-key"] == GEMINI_KEY and "key" not in call.query
    assert GEMINI_KEY not in call.path and "Authorization" not in call.headers
    return call


# ---------------------------------------------------------------- chat

def test_a_chat_completion_is_translated_to_generate_content_and_back(sdk, google, gemini):
    client, key = sdk
    gemini.answer(answer("Bonjour !", meta=usage(40, 6, cached=32, thoughts=10)))
    completion = client.chat.completions.create(
        model="gem-chat", messages=[{"role": "system", "content": "Answer in French."},
                                    {"role": "user", "content": "Hello"}],
        temperature=0.2, top_p=0.9, max_tokens=50, stop=["END"], seed=4)
    assert completion.model == "gem-chat" and completion.object == "chat.completion"
    assert completion.choices[0].message.content == "Bonjour !"
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (40, 16)
    assert completion.usage.prompt_tokens_details.cached_tokens == 32
    call = sent(gemini)
    assert call.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert call.body == {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}],
                         "systemInstruction": {"parts": [{"text": "Answer in French."}]},
                         "generationConfig": {"temperature": 0.2, "topP": 0.9, "seed": 4, "maxOutputTokens": 50,
                                              "stopSequences": ["END"]}}
    event = charged_once(key, "google")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (40, 16, 32)


def test_a_streamed_chat_is_relayed_event_by_event_with_usage_and_cached_tokens(sdk, google, gemini):
    client, key = sdk
    gate = Gate()
    gemini.stream(response([text_part("Hel")], finish=None), gate,
                  response([text_part("lo!")], finish="STOP", meta=usage(25, 3, cached=20)))
    stream = client.chat.completions.create(model="gem-chat", messages=HELLO, stream=True,
                                            stream_options={"include_usage": True})
    chunks = iter(stream)
    first = next(chunks)
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == "Hel"
    gate.open()  # the first piece reached the client while Gemini was still holding the rest
    rest = list(chunks)
    assert gate.opened_in_time
    assert rest[0].choices[0].delta.content == "lo!" and rest[0].choices[0].finish_reason == "stop"
    assert rest[-1].choices == [] and rest[-1].usage.prompt_tokens == 25
    assert rest[-1].usage.prompt_tokens_details.cached_tokens == 20
    call = sent(gemini, "streamGenerateContent")
    assert call.query == {"alt": ["sse"]}
    event = charged_once(key, "google")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (25, 3, 20)


def test_a_stream_without_include_usage_gets_no_usage_chunk_but_is_still_metered(sdk, google, gemini):
    client, key = sdk
    chunks = list(client.chat.completions.create(model="gem-chat", messages=HELLO, stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Hello from Gemini"
    assert all(chunk.choices for chunk in chunks)
    event = charged_once(key, "google")
    assert (event.input_tokens, event.output_tokens) == (11, 5)  # the fake's usage, asked for on our account


def test_streamed_tool_calls_keep_their_ids_and_the_results_go_back_in_order(sdk, google, gemini):
    client, key = sdk
    gemini.stream(response([text_part("Checking both.")], finish=None),
                  response([call_part("get_weather", {"city": "Paris"}, signature=SIGNATURE)], finish=None),
                  response([call_part("get_weather", {"city": "Rome"})], finish="STOP", meta=usage()))
    chunks = list(client.chat.completions.create(model="gem-chat", messages=HELLO, tools=[WEATHER], stream=True))
    calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or ()]
    assert [(call.index, call.function.name, json.loads(call.function.arguments)) for call in calls] == [
        (0, "get_weather", {"city": "Paris"}), (1, "get_weather", {"city": "Rome"})]
    assert all(call.id and call.type == "function" for call in calls) and calls[0].id != calls[1].id
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert calls[0].model_extra["extra_content"] == {"google": {"thought_signature": SIGNATURE}}
    assert sent(gemini, "streamGenerateContent").body["tools"][0]["functionDeclarations"][0]["parameters"] == {
        "type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}

    # The client runs the tools and sends the results back, in another order; Gemini needs them in the calls'.
    gemini.answer(answer("Sunny in Paris, rain in Rome."))
    assistant = {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                         "arguments": call.function.arguments},
         **({"extra_content": call.model_extra["extra_content"]} if call.model_extra.get("extra_content") else {})}
        for call in calls]}
    completion = client.chat.completions.create(model="gem-chat", tools=[WEATHER], messages=[
        *HELLO, assistant, {"role": "tool", "tool_call_id": calls[1].id, "content": "rain"},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"}])
    assert completion.choices[0].message.content == "Sunny in Paris, rain in Rome."
    body = sent(gemini).body
    assert body["contents"][1:] == [
        {"role": "model", "parts": [
            {"text": "Checking both."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "rain"}}}]}]
    assert gemini.problems() == []
    assert credits_of(key) == 98 and mismatches() == []


def test_a_function_call_answer_is_tool_calls_whatever_geminis_finish_reason(sdk, google, gemini):
    client, _ = sdk
    gemini.answer(response([call_part("get_weather", {"city": "Lima"}, id="fc-9")], finish="STOP", meta=usage()))
    completion = client.chat.completions.create(model="gem-chat", messages=HELLO, tools=[WEATHER],
                                                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert (choice.message.tool_calls[0].id, choice.message.tool_calls[0].function.arguments) == (
        "fc-9", '{"city": "Lima"}')
    assert sent(gemini).body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY",
                                                                         "allowedFunctionNames": ["get_weather"]}}


def test_stop_reasons_map_to_openais(sdk, google, gemini):
    client, _ = sdk
    for reason, expected in [("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
                             ("STOP", "stop")]:
        gemini.answer(response([text_part("Partial")] if reason != "SAFETY" else None, finish=reason, meta=usage()))
        completion = client.chat.completions.create(model="gem-chat", messages=HELLO)
        assert completion.choices[0].finish_reason == expected, reason


def test_a_prompt_gemini_blocks_is_a_400_content_filter_and_costs_nothing(sdk, google, gemini):
    client, key = sdk
    gemini.answer(blocked("PROHIBITED_CONTENT"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gem-chat", messages=HELLO)
    assert (refused.value.code, refused.value.param) == ("content_filter", "messages")
    assert credits_of(key) == 100 and mismatches() == []
    assert deployment_health.states([Deployment.objects.get(model__model_id="gem-chat")])[
        Deployment.objects.get(model__model_id="gem-chat").pk].failures == 0


def test_images_by_data_url_and_by_url_reach_gemini_inline(sdk, google, gemini, monkeypatch):
    client, key = sdk
    # A client's image URL is fetched from public addresses only: the fake's loopback address stands for one.
    monkeypatch.setattr(images, "is_public", lambda address: True)
    gemini.serve_file("/files/cat.png", PNG_1X1, "image/png")
    png = base64.b64encode(PNG_1X1).decode()
    client.chat.completions.create(model="gem-chat", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Compare these."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "image_url", "image_url": {"url": f"{gemini.root}/files/cat.png", "detail": "low"}}]}])
    assert sent(gemini).body["contents"][0]["parts"] == [
        {"text": "Compare these."}, {"inlineData": {"mimeType": "image/png", "data": png}},
        {"inlineData": {"mimeType": "image/png", "data": png}}]
    charged_once(key, "google")


def test_an_image_url_the_gateway_may_not_fetch_is_a_400_that_costs_nothing(sdk, google, gemini, upstream):
    client, key = sdk
    upstream.serve_file("/cat.png", PNG_1X1, "image/png")  # another local server: a private address, not Google's
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gem-chat", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"{upstream.base_url}/cat.png"}}]}])
    assert refused.value.param == "messages.0.content.0.image_url.url"
    assert upstream.calls == [] and gemini.posts() == []
    assert credits_of(key) == 100 and mismatches() == []
    deployment = Deployment.objects.get(model__model_id="gem-chat")
    assert deployment_health.states([deployment])[deployment.pk].failures == 0 and not deployment.disabled_at


@pytest.mark.parametrize("extra, param", [({"logit_bias": {"1734": 5}}, "logit_bias"),
                                          ({"parallel_tool_calls": False, "tools": [WEATHER]}, "parallel_tool_calls")])
def test_a_parameter_gemini_cannot_honour_is_left_out_and_named(sdk, google, gemini, extra, param):
    """CONTRACT section 8: the answer is still one of the shape the client parses without it, so it is left out
    and named in X-Gateway-Ignored rather than refused."""
    client, key = sdk
    raw = client.chat.completions.with_raw_response.create(model="gem-chat", messages=HELLO, **extra)
    assert raw.parse().choices[0].message.content and raw.headers["X-Gateway-Ignored"] == param
    [call] = gemini.posts()
    assert call.problems == [] and "parallel_tool_calls" not in json.dumps(call.body)
    assert credits_of(key) == 99 and mismatches() == []


# ---------------------------------------------------------------- failures

def test_a_refused_key_disables_the_gemini_deployment_and_the_openai_one_answers(sdk, gemini, upstream, monkeypatch,
                                                                                 caplog):
    """A mixed pool (CONTRACT section 7): one model served by a gemini and an openai deployment."""
    client, key = sdk
    monkeypatch.setenv(GEMINI_KEY_ENV, "AIzaSy-a-revoked-key-0000000000000")  # Google answers 400 API_KEY_INVALID
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    upstream.json("/chat/completions", chat_completion("from openai"))
    openai_side = Provider.objects.create(name="oa", base_url=upstream.base_url, api_key_env="GATEWAY_UPSTREAM_FAKE_KEY",
                                          timeout=5)
    serve("mixed", [(add_gemini("google", gemini), "gemini-2.5-flash", 1), (openai_side, "gpt-x", 2)])
    with caplog.at_level(logging.INFO):
        completion = client.chat.completions.create(model="mixed", messages=HELLO)
    assert completion.choices[0].message.content == "from openai"
    disabled = Deployment.objects.get(provider__name="google")
    assert disabled.disabled_at and "HTTP 400" in disabled.disabled_reason
    assert upstream.posts()[0].body["messages"] == HELLO  # the openai deployment got the request untranslated
    client.chat.completions.create(model="mixed", messages=HELLO)
    assert len(gemini.posts()) == 1  # never tried again
    assert "disabled" in caplog.text and "AIzaSy-a-revoked" not in caplog.text and gemini.base_url not in caplog.text
    assert credits_of(key) == 98 and mismatches() == []
    assert set(UsageEvent.objects.filter(success=True).values_list("provider", flat=True)) == {"oa"}


def test_a_gemini_503_is_retried_on_the_next_deployment_and_charged_once(sdk, gemini, second_gemini, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    gemini.fail(503, error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later."))
    second_gemini.answer(answer("from the second"))
    serve("gem-chat", [(add_gemini("google", gemini), "gemini-2.5-flash", 1),
                       (add_gemini("google-b", second_gemini), "gemini-2.5-flash", 2)])
    assert client.chat.completions.create(model="gem-chat", messages=HELLO).choices[0].message.content == \
        "from the second"
    first = Deployment.objects.get(provider__name="google")
    assert deployment_health.states([first])[first.pk].failures == 1 and not first.disabled_at
    charged_once(key, provider="google-b")


def test_a_gemini_429_cools_the_deployment_for_googles_retry_delay(sdk, gemini, second_gemini, monkeypatch):
    client, key = sdk
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    gemini.fail(*rate_limited("42s"))
    serve("gem-chat", [(add_gemini("google", gemini), "gemini-2.5-flash", 1),
                       (add_gemini("google-b", second_gemini), "gemini-2.5-flash", 2)])
    client.chat.completions.create(model="gem-chat", messages=HELLO)
    client.chat.completions.create(model="gem-chat", messages=HELLO)
    assert len(gemini.posts()) == 1
    cooled = Deployment.objects.get(provider__name="google")
    state = deployment_health.states([cooled])[cooled.pk]
    assert state.state == "cooling" and not cooled.disabled_at
    assert 35 < state.cooldown_until - __import__("time").time() <= 42


def test_a_lone_gemini_429_is_passed_on_with_googles_retry_delay(sdk, google, gemini):
    client, key = sdk
    gemini.fail(*rate_limited("9s"))
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="gem-chat", messages=HELLO)
    assert limited.value.response.headers["retry-after"] == "9"
    assert credits_of(key) == 100 and mismatches() == []


def test_the_key_is_in_no_url_error_log_line_metric_or_row_with_a_provider_that_refuses_it_or_is_down(
        sdk, gemini, second_gemini, monkeypatch, caplog, settings, client):
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    metrics.reset()
    sdk_client, key = sdk
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    gemini.fail(401, error_body(401, "UNAUTHENTICATED", f"Request had invalid authentication credentials: "
                                                         f"{GEMINI_KEY} at {gemini.base_url}/models/x"))
    serve("refusing", [(add_gemini("refusing", gemini), "gemini-2.5-flash", 1)])
    serve("refusing-streamed", [(add_gemini("refusing-streamed", gemini), "gemini-2.5-flash", 1)])
    second_gemini.fail(403, error_body(403, "PERMISSION_DENIED", f"Your API key {GEMINI_KEY} was reported as leaked."))
    serve("forbidden", [(add_gemini("forbidden", second_gemini), "gemini-2.5-flash", 1)])
    serve("down", [(add_gemini("down", None), "gemini-2.5-flash", 1)])
    down_url = Provider.objects.get(name="down").base_url
    with caplog.at_level(logging.DEBUG, logger="gateway"), caplog.at_level(logging.INFO):
        messages = failed_answers(sdk_client, [("refusing", False), ("refusing-streamed", True), ("forbidden", True),
                                               ("down", False), ("down", True)])
    assert len(gemini.calls) == 2
    assert_told_nowhere(client, [*messages, caplog.text], GEMINI_KEY, down_url, gemini.base_url,
                        second_gemini.base_url, "?key=", "&key=")
    assert Deployment.objects.filter(disabled_at__isnull=False).count() == 3  # the two refusing and the forbidden
    assert all(call.query in ({}, {"alt": ["sse"]}) for call in gemini.calls + second_gemini.calls)
    assert credits_of(key) == 100 and mismatches() == []


def test_an_upstream_quoting_the_key_in_a_refusal_is_scrubbed(sdk, google, gemini):
    client, _ = sdk
    gemini.fail(400, error_body(400, "INVALID_ARGUMENT", f"Invalid value at 'contents' (key {GEMINI_KEY})"))
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="gem-chat", messages=HELLO)
    assert GEMINI_KEY not in refused.value.message and "[redacted]" in refused.value.message
    assert refused.value.code == "invalid_argument"


def test_a_stream_that_breaks_after_its_first_content_ends_with_an_error_event_and_is_charged(sdk, google, gemini):
    client, key = sdk
    gemini.stream(response([text_part("Half an ans")], finish=None), DROP)
    received = []
    with pytest.raises(openai.APIError) as broken:
        for chunk in client.chat.completions.create(model="gem-chat", messages=HELLO, stream=True):
            received.append(chunk.choices[0].delta.content)
    assert received == ["Half an ans"] and broken.value.code == "upstream_unavailable"
    assert credits_of(key) == 99 and mismatches() == []
    assert UsageEvent.objects.get().status == 502


def test_an_error_event_before_any_content_moves_the_stream_to_the_next_deployment(sdk, gemini, second_gemini,
                                                                                   monkeypatch):
    client, key = sdk
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    gemini.stream(response([text_part("")], finish=None), error_body(500, "INTERNAL", "An internal error occurred."))
    serve("gem-chat", [(add_gemini("google", gemini), "gemini-2.5-flash", 1),
                       (add_gemini("google-b", second_gemini), "gemini-2.5-flash", 2)])
    chunks = list(client.chat.completions.create(model="gem-chat", messages=HELLO, stream=True))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Hello from Gemini"
    charged_once(key, provider="google-b")


# ---------------------------------------------------------------- embeddings

def test_embeddings_through_the_sdk_in_base64_and_floats_with_dimensions(sdk, google, gemini):
    client, key = sdk
    gemini.script("batchEmbedContents", Reply(body={"embeddings": [embedding([0.1, 0.2, 0.3]),
                                                                   embedding([0.4, 0.5, 0.6])]}),
                  Reply(body={"embeddings": [embedding([3.0, 4.0])]}))
    result = client.embeddings.create(model="gem-embed", input=["alpha", "beta"])  # the SDK asks for base64
    assert [item.embedding for item in result.data] == [pytest.approx([0.1, 0.2, 0.3]),
                                                        pytest.approx([0.4, 0.5, 0.6])]
    assert result.usage.prompt_tokens > 0
    call = sent(gemini, "batchEmbedContents")
    assert call.path == "/v1beta/models/text-embedding-004:batchEmbedContents"
    assert call.body == {"requests": [
        {"model": "models/text-embedding-004", "content": {"parts": [{"text": "alpha"}]}},
        {"model": "models/text-embedding-004", "content": {"parts": [{"text": "beta"}]}}]}
    cut = client.embeddings.create(model="gem-embed", input="gamma", dimensions=2, encoding_format="float")
    assert cut.data[0].embedding == pytest.approx(unit([3.0, 4.0]))
    assert gemini.posts("batchEmbedContents")[-1].body["requests"][0]["outputDimensionality"] == 2
    assert credits_of(key) == 98 and mismatches() == []
    assert UsageEvent.objects.filter(success=True, operation="embedding").count() == 2


def test_a_base64_embedding_is_openais_little_endian_float32(sdk, google, gemini):
    client, _ = sdk
    gemini.script("batchEmbedContents", Reply(body={"embeddings": [embedding([0.25, -0.5])]}))
    raw = client.embeddings.with_raw_response.create(model="gem-embed", input="x", encoding_format="base64")
    encoded = json.loads(raw.text)["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(encoded)) == (0.25, -0.5)


# ---------------------------------------------------------------- probes

def test_a_disabled_gemini_deployment_is_probed_with_one_token_and_one_word(google, gemini):
    chat, embed = (Deployment.objects.get(model__model_id=name) for name in ("gem-chat", "gem-embed"))
    deployment_health.disable(chat, reason="HTTP 400")  # and the embedding one, which shares its key
    assert [(result.ok, result.enabled) for result in probes.probe_disabled()] == [(True, True)]
    assert not Deployment.objects.filter(disabled_at__isnull=False).exists()
    assert probes.probe(Deployment.objects.select_related("model", "provider").get(pk=embed.pk)).ok
    assert sent(gemini).body["generationConfig"] == {"maxOutputTokens": 1}
    assert sent(gemini, "batchEmbedContents").body["requests"][0]["content"] == {"parts": [{"text": "ping"}]}
