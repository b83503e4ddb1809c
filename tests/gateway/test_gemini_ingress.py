"""Google's Gemini API, inbound (CONTRACT section 10): /v1beta/ and /v1/ models, generateContent,
streamGenerateContent (SSE and JSON array), countTokens, embedContent and batchEmbedContents, driven by the
official google-genai SDK against a live server and by raw requests. A request is served by the local models
(translated both ways) or by a gemini deployment (passed through to the fake Gemini upstream), and metered
exactly like a chat completion or an embedding: one charge, its ledger row and its usage row (operations
``gemini`` and ``embedding``), Idempotency-Key, limits, the query budget, and errors in Google's shape."""
import base64
import json
import logging
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import credits_of, serve
from tests.gateway.gemini_fake import (  # noqa: F401 (fixtures)
    GEMINI_KEY,
    GEMINI_KEY_ENV,
    call_part,
    gemini,
    response,
    text_part,
    usage,
)
from tests.gateway.test_gemini_gateway import add_gemini
from utils_app import metrics

SIGNATURE = base64.b64encode(b"\x00\x01thought-signature-of-the-model\xff").decode()
HELLO = [{"role": "user", "parts": [{"text": "Hello"}]}]
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}


def google_client(base_url: str, secret: str, version: str = "v1beta") -> genai.Client:
    return genai.Client(api_key=secret, http_options=types.HttpOptions(base_url=base_url, api_version=version,
                                                                      timeout=30_000))


@pytest.fixture
def google_sdk(live_server, seeded, local_key):
    """google-genai on a live server with the shipped catalog, and a key that may use its local models."""
    key, secret = local_key
    with google_client(live_server.url, secret) as client:  # closed: no connection left for the server to drop
        yield client, key


@pytest.fixture
def google_upstream(gemini, monkeypatch, db):
    """A chat model and an embedding model served by a gemini deployment (the fake Gemini API)."""
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    provider = add_gemini("google", gemini)
    serve("gem-chat", [(provider, "gemini-2.5-flash", 1)])
    serve("gem-embed", [(provider, "text-embedding-004", 1)], type="embedding")
    return gemini


def post(client, path: str, body, secret: str, **extra):
    return client.post(path, json.dumps(body) if not isinstance(body, (bytes, str)) else body,
                       content_type="application/json", HTTP_X_GOOG_API_KEY=secret, **extra)


def charged(key, operation: str, credits: int = 1) -> UsageEvent:
    """One completed charge of ``credits`` for ``operation``, its usage row, and a ledger that reconciles."""
    [charge] = LedgerEntry.objects.filter(kind="charge")
    assert (charge.status, charge.operation) == ("completed", operation)
    assert credits_of(key) == 100 - credits
    assert mismatches() == []
    [event] = UsageEvent.objects.filter(success=True)
    assert event.operation == operation
    return event


def streamed(content: bytes) -> list[dict]:
    """The items of an SSE answer of Google's (``data: {...}`` events)."""
    return [json.loads(line[len("data: "):]) for line in content.decode().splitlines() if line.startswith("data: ")]


# ---------------------------------------------------------------- the SDK, translated (local models)

def test_generate_content_through_the_sdk_is_a_chat_translated_both_ways_and_metered_as_gemini(google_sdk):
    client, key = google_sdk
    answer = client.models.generate_content(
        model="local-chat", contents="Hello there",
        config=types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.5, max_output_tokens=64))
    assert answer.text and "local-chat" in answer.text
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    assert answer.model_version == "local-chat" and answer.response_id
    meta = answer.usage_metadata
    assert meta.prompt_token_count > 0 and meta.candidates_token_count > 0
    assert meta.total_token_count == meta.prompt_token_count + meta.candidates_token_count
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens) == (meta.prompt_token_count, meta.candidates_token_count)


def test_a_streamed_answer_through_the_sdk_arrives_as_server_sent_events_with_the_usage_last(google_sdk):
    client, key = google_sdk
    chunks = list(client.models.generate_content_stream(model="local-chat", contents="Tell me a story"))
    assert len(chunks) > 1
    text = "".join(chunk.text or "" for chunk in chunks)
    assert "local-chat" in text
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert all(chunk.usage_metadata is None for chunk in chunks[:-1])
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens) == (last.usage_metadata.prompt_token_count,
                                                         last.usage_metadata.candidates_token_count)


def weather_tool() -> types.Tool:
    return types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="The weather in a city",
        parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_round_trip_through_the_sdk(google_sdk, stream):
    client, key = google_sdk
    config = types.GenerateContentConfig(tools=[weather_tool()],
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    asked = types.Content(role="user", parts=[types.Part(text="use get_weather: Paris")])

    def ask(contents):
        if not stream:
            return client.models.generate_content(model="local-chat", contents=contents, config=config)
        chunks = list(client.models.generate_content_stream(model="local-chat", contents=contents, config=config))
        parts = [part for chunk in chunks if chunk.candidates and chunk.candidates[0].content
                 for part in chunk.candidates[0].content.parts or ()]
        return types.GenerateContentResponse(candidates=[types.Candidate(content=types.Content(role="model",
                                                                                              parts=parts))])

    first = ask([asked])
    [call] = first.function_calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"}
    result = types.Part.from_function_response(name="get_weather", response={"output": "Sunny, 21 C"})
    second = ask([asked, first.candidates[0].content, types.Content(role="user", parts=[result])])
    assert "Sunny, 21 C" in second.text
    assert LedgerEntry.objects.filter(kind="charge", status="completed", operation="gemini").count() == 2
    assert credits_of(key) == 98 and mismatches() == []


def test_count_tokens_is_free_and_counts_against_the_keys_limits(client, seeded, make_key):
    key, secret = make_key(tier="partner", credits=100, max_credits=100, rpm=2)
    body = {"contents": HELLO, "systemInstruction": {"parts": [{"text": "Be brief."}]}}
    answers = [post(client, "/v1beta/models/local-chat:countTokens", body, secret) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    assert answers[0].json()["totalTokens"] > 0 and answers[0]["X-RateLimit-Limit-Requests"] == "2"
    assert answers[2].json()["error"]["status"] == "RESOURCE_EXHAUSTED" and answers[2]["Retry-After"]
    assert credits_of(key) == 100 and not LedgerEntry.objects.filter(kind="charge").exists()


def test_count_tokens_through_the_sdk(google_sdk):
    client, key = google_sdk
    counted = client.models.count_tokens(model="local-chat", contents="Hello there, how are you?")
    assert counted.total_tokens > 0
    assert credits_of(key) == 100


def test_embeddings_through_the_sdk_are_metered_as_embeddings(google_sdk):
    client, key = google_sdk
    one = client.models.embed_content(model="local-embedding", contents="Hello")
    assert len(one.embeddings) == 1 and len(one.embeddings[0].values) > 1
    event = charged(key, "embedding")
    assert event.input_tokens > 0
    several = client.models.embed_content(model="local-embedding", contents=["Hello", "World"],
                                          config=types.EmbedContentConfig(output_dimensionality=8))
    assert [len(item.values) for item in several.embeddings] == [8, 8]
    assert several.embeddings[0].values != several.embeddings[1].values
    assert credits_of(key) == 98 and mismatches() == []


def test_the_models_the_key_may_use_are_listed_in_googles_shape_under_both_versions(live_server, seeded, local_key):
    _, secret = local_key
    for version in ("v1beta", "v1"):
        with google_client(live_server.url, secret, version) as client:
            listed = {model.name: model for model in client.models.list()}
            assert {"models/local-chat", "models/local-embedding"} <= set(listed)
            assert "models/local-image" not in listed  # not a model of Google's API
            chat = listed["models/local-chat"]
            assert "generateContent" in chat.supported_actions and chat.input_token_limit > 0
            assert chat.output_token_limit > 0 and chat.display_name == "local-chat"
            assert listed["models/local-embedding"].supported_actions == ["embedContent", "batchEmbedContents"]
            assert client.models.get(model="local-chat").name == "models/local-chat"


def test_generate_content_under_v1_as_google_genai_sends_it_by_default(live_server, seeded, local_key):
    key, secret = local_key
    with google_client(live_server.url, secret, "v1") as client:
        assert "local-chat" in client.models.generate_content(model="local-chat", contents="Hello").text
    charged(key, "gemini")


def test_v1_models_answers_google_clients_in_googles_shape_and_openai_clients_in_openais(client, seeded, local_key):
    _, secret = local_key
    google = client.get("/v1/models", HTTP_X_GOOG_API_KEY=secret)
    assert google.status_code == 200 and "data" not in google.json()
    names = [model["name"] for model in google.json()["models"]]
    assert len(names) == len(set(names)) and "models/local-chat" in names  # a model once, whatever its aliases
    by_query = client.get(f"/v1/models?key={secret}")
    assert by_query.status_code == 200 and "models" in by_query.json()
    openai_shape = client.get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert openai_shape.json()["object"] == "list" and openai_shape.json()["data"]
    assert client.get("/v1/models").json()["object"] == "list"  # keyless: the public catalog
    one = client.get("/v1/models/local-chat", HTTP_X_GOOG_API_KEY=secret).json()
    assert one["name"] == "models/local-chat"
    assert client.get("/v1/models/local-chat", HTTP_AUTHORIZATION=f"Bearer {secret}").json()["object"] == "model"
    missing = client.get("/v1beta/models/no-such-model", HTTP_X_GOOG_API_KEY=secret)
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"


# ---------------------------------------------------------------- raw requests: shapes and errors

def test_a_stream_without_alt_sse_is_one_json_array(client, seeded, local_key):
    key, secret = local_key
    answer = post(client, "/v1beta/models/local-chat:streamGenerateContent", {"contents": HELLO}, secret)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("application/json")
    items = json.loads(b"".join(answer.streaming_content))
    assert isinstance(items, list) and len(items) > 1
    assert items[-1]["candidates"][0]["finishReason"] == "STOP" and items[-1]["usageMetadata"]["totalTokenCount"] > 0
    assert "local-chat" in "".join(part["text"] for item in items for part in item["candidates"][0]["content"]["parts"])
    charged(key, "gemini")


def test_alt_json_is_the_default_and_a_format_the_gateway_cannot_write_is_a_400(client, seeded, local_key):
    key, secret = local_key
    array = post(client, "/v1beta/models/local-chat:streamGenerateContent?alt=json", {"contents": HELLO}, secret)
    assert array.status_code == 200 and isinstance(json.loads(b"".join(array.streaming_content)), list)
    charged(key, "gemini")
    paths = ["/v1beta/models/local-chat:generateContent", "/v1beta/models/local-chat:streamGenerateContent",
             "/v1beta/models/local-chat:countTokens", "/v1beta/models/local-embedding:embedContent"]
    for path in paths:
        for alt in ("proto", "media", "", "SSE"):
            refused = post(client, f"{path}?alt={alt}", {"contents": HELLO, "content": HELLO[0]}, secret)
            assert refused.status_code == 400, (path, alt, refused.content)
            assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"
            assert refused.json()["error"]["message"].startswith("alt: ")
    # The model is still what a client learns first (CONTRACT section 4).
    unknown = post(client, "/v1beta/models/no-such-model:generateContent?alt=proto", {"contents": HELLO}, secret)
    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    assert LedgerEntry.objects.filter(kind="charge").count() == 1 and credits_of(key) == 99


@pytest.mark.parametrize("path", ["/v1beta/cachedContents", "/v1beta/files/abc", "/v1beta/", "/v1beta",
                                  "/upload/v1beta/files", "/v1beta/models/"])
def test_a_path_under_v1beta_the_gateway_does_not_serve_is_googles_404(client, db, path):
    for send in (client.get, client.post):
        answer = send(path)
        assert answer.status_code == 404
        assert answer.json() == {"error": {"code": 404, "message": f"No operation at {path}.",
                                           "status": "NOT_FOUND"}}
    # Under v1/, which the OpenAI-shaped API shares, an unknown path keeps the service's own shape.
    assert client.get("/v1/cachedContents").json()["error"]["code"] == "not_found"


def test_snake_case_members_are_read_as_google_reads_them(client, openai_deployed, free_key):
    from tests.gateway.conftest import chat_completion

    key, secret = free_key
    openai_deployed.json("/chat/completions", chat_completion("Hi"))
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
            "system_instruction": {"parts": [{"text": "Be brief."}]},
            "generation_config": {"max_output_tokens": 3, "stop_sequences": ["zzz"], "top_k": 3,
                                  "response_mime_type": "application/json"}}
    answer = post(client, "/v1beta/models/gpt-chat:generateContent", body, secret)
    assert answer.status_code == 200, answer.content
    assert answer["X-Gateway-Ignored"] == "generationConfig.topK"
    sent = openai_deployed.posts()[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (sent["max_tokens"], sent["stop"], sent["response_format"]) == (3, ["zzz"], {"type": "json_object"})


@pytest.mark.parametrize(("path", "body", "status", "word"), [
    ("/v1beta/models/no-such-model:generateContent", {"contents": HELLO}, 404, "NOT_FOUND"),
    ("/v1beta/models/local-image:generateContent", {"contents": HELLO}, 400, "INVALID_ARGUMENT"),
    ("/v1beta/models/local-chat:generateContent", "{not json", 400, "INVALID_ARGUMENT"),
    ("/v1beta/models/local-chat:generateContent", {"contents": []}, 400, "INVALID_ARGUMENT"),
    ("/v1beta/models/local-chat:generateContent", {"contents": [{"role": "robot", "parts": []}]}, 400,
     "INVALID_ARGUMENT"),
    ("/v1beta/models/local-chat:generateContent", {"contents": HELLO, "generationConfig": {"temperature": 9}}, 400,
     "INVALID_ARGUMENT"),
    ("/v1beta/models/local-chat:fooBar", {"contents": HELLO}, 404, "NOT_FOUND"),
    ("/v1beta/models/local-embedding:embedContent", {"content": {"parts": [{"inlineData": {}}]}}, 400,
     "INVALID_ARGUMENT"),
])
def test_bad_requests_are_refused_in_googles_shape_and_cost_nothing(client, seeded, local_key, path, body, status,
                                                                     word):
    key, secret = local_key
    answer = post(client, path, body, secret)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (status, word) and error["message"]
    assert set(error) == {"code", "message", "status"}
    assert credits_of(key) == 100 and not LedgerEntry.objects.filter(kind="charge").exists()


def test_keys_refusals_keep_section_4s_statuses_in_googles_shape(client, seeded, make_key, broke_key):
    path, body = "/v1beta/models/local-chat:generateContent", {"contents": HELLO}
    missing = client.post(path, json.dumps(body), content_type="application/json")
    assert (missing.status_code, missing.json()["error"]["status"]) == (401, "UNAUTHENTICATED")
    wrong = post(client, path, body, "sk-" + "x" * 40)
    assert (wrong.status_code, wrong.json()["error"]["status"]) == (401, "UNAUTHENTICATED")
    _, broke = make_key(tier="partner", credits=0, max_credits=100)
    poor = post(client, path, body, broke)
    assert (poor.status_code, poor.json()["error"]["status"]) == (402, "RESOURCE_EXHAUSTED")
    _, premium = make_key(tier="free", credits=100, max_credits=100)
    seeded_tiers = post(client, "/v1beta/models/local-image:generateContent", body, premium)
    assert seeded_tiers.status_code in (400, 403)
    get = client.get(path, HTTP_X_GOOG_API_KEY=premium)
    assert (get.status_code, get.json()["error"]["status"]) == (405, "INVALID_ARGUMENT")


def test_the_key_as_a_query_parameter_works_and_is_written_nowhere(client, seeded, local_key, caplog, settings):
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    metrics.reset()
    key, secret = local_key
    with caplog.at_level(logging.DEBUG):
        answer = client.post(f"/v1beta/models/local-chat:generateContent?key={secret}", json.dumps({"contents": HELLO}),
                             content_type="application/json")
        refused = client.post(f"/v1beta/models/no-such-model:generateContent?key={secret}",
                              json.dumps({"contents": HELLO}), content_type="application/json")
    assert answer.status_code == 200 and refused.status_code == 404
    charged(key, "gemini")
    scrape = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}").content.decode()
    rows = json.dumps([list(UsageEvent.objects.values()), list(LedgerEntry.objects.values()),
                       list(ApiKey.objects.values())], default=str)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "gemini" in logged  # the summary lines were written
    for text in (logged, scrape, rows, answer.content.decode(), refused.content.decode()):
        assert secret not in text and secret[3:] not in text


def test_the_key_as_a_query_parameter_is_read_only_by_googles_api(client, seeded, local_key):
    _, secret = local_key
    answer = client.post(f"/v1/chat/completions?key={secret}", json.dumps(
        {"model": "local-chat", "messages": [{"role": "user", "content": "Hi"}]}), content_type="application/json")
    assert answer.status_code == 401


def test_an_idempotency_key_retry_is_answered_with_the_first_answer_and_charged_once(client, seeded, local_key):
    key, secret = local_key
    for path in ("generateContent", "streamGenerateContent?alt=sse"):
        contents = []
        for _ in range(2):  # each read to its end before the retry: a retry of one in flight is a 409
            answer = post(client, f"/v1beta/models/local-chat:{path}", {"contents": HELLO}, secret,
                          HTTP_IDEMPOTENCY_KEY=f"retry-{path[:6]}")
            assert answer.status_code == 200
            contents.append(b"".join(answer.streaming_content) if answer.streaming else answer.content)
        assert contents[0] == contents[1]
    assert credits_of(key) == 98 and mismatches() == []
    assert LedgerEntry.objects.filter(kind="charge", operation="gemini").count() == 2


def test_an_idempotency_key_sent_again_with_another_stream_form_is_another_request(client, seeded, local_key):
    """``alt=sse`` changes what the answer looks like (events, not one JSON array): a retry that changes it
    under the same Idempotency-Key is a mismatch, not a replay of the other shape. The query's own ``key``
    (the caller's secret) is no part of it."""
    key, secret = local_key
    path = "/v1beta/models/local-chat:streamGenerateContent"
    first = post(client, f"{path}?alt=sse", {"contents": HELLO}, secret, HTTP_IDEMPOTENCY_KEY="one-form")
    assert first.status_code == 200 and b"".join(first.streaming_content).startswith(b"data: ")
    other = post(client, path, {"contents": HELLO}, secret, HTTP_IDEMPOTENCY_KEY="one-form")
    assert other.status_code == 422 and other.json()["error"]["status"] == "INVALID_ARGUMENT"
    same = client.post(f"{path}?key={secret}&alt=sse", data=json.dumps({"contents": HELLO}),
                       content_type="application/json", HTTP_IDEMPOTENCY_KEY="one-form")
    assert same.status_code == 200 and same["Idempotent-Replayed"] == "true"
    assert credits_of(key) == 99 and mismatches() == []
    # alt=json is the default said aloud: the same request as none.
    array = post(client, path, {"contents": HELLO}, secret, HTTP_IDEMPOTENCY_KEY="array")
    assert json.loads(b"".join(array.streaming_content))
    said = post(client, f"{path}?alt=json", {"contents": HELLO}, secret, HTTP_IDEMPOTENCY_KEY="array")
    assert array.status_code == said.status_code == 200 and said["Idempotent-Replayed"] == "true"
    assert credits_of(key) == 98 and mismatches() == []


def test_a_gemini_upstream_refusing_its_secret_or_down_leaves_it_and_its_url_nowhere(
        client, gemini, monkeypatch, free_key, caplog, settings):
    """Passed through to a gemini deployment whose upstream answers 401 quoting its key and address, with a
    second deployment whose address refuses connections: the client gets Google's error shape, and neither
    the key nor either upstream's URL reaches an answer, the log, /metrics or a row."""
    from tests.gateway.conftest import assert_told_nowhere, closed_port_url
    from tests.gateway.gemini_fake import Reply, error_body

    settings.METRICS_TOKEN = "metrics-token-0123456789"
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    refusal = Reply(401, error_body(401, "UNAUTHENTICATED", f"API key {GEMINI_KEY} is not valid at {gemini.base_url}"))
    gemini.script("generateContent", refusal)
    gemini.script("streamGenerateContent", refusal)
    down = closed_port_url()
    serve("gem-chat", [(add_gemini("google", gemini), "gemini-2.5-flash", 1),
                       (add_gemini("google-down", None), "gemini-2.5-flash", 2)])
    key, secret = free_key
    caplog.set_level("INFO")
    answers = []
    for path in ("generateContent", "streamGenerateContent?alt=sse"):
        answer = post(client, f"/v1beta/models/gem-chat:{path}", {"contents": HELLO}, secret)
        assert answer.status_code >= 400 and "error" in answer.json()
        answers.append(answer.content.decode() + json.dumps(dict(answer.items())))
    assert gemini.calls  # the key was sent, and refused
    assert_told_nowhere(client, [*answers, caplog.text], GEMINI_KEY, gemini.base_url, gemini.root, down,
                        down.removesuffix("/v1"))
    assert credits_of(key) == 100 and mismatches() == []


# ---------------------------------------------------------------- translation towards other types

@pytest.fixture
def openai_deployed(upstream, monkeypatch, db, free_key):
    from tests.gateway.conftest import UPSTREAM_KEY_ENV, UPSTREAM_SECRET, add_provider

    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    serve("gpt-chat", [(add_provider("oa", upstream.base_url), "gpt-x", 1)])
    return upstream


def test_a_request_reaches_an_openai_deployment_translated_and_its_answer_comes_back_in_googles_shape(
        client, openai_deployed, free_key):
    from tests.gateway.conftest import chat_completion

    key, secret = free_key
    answer = chat_completion("Done.", prompt_tokens=12, completion_tokens=3)
    answer["choices"][0]["message"]["tool_calls"] = [{"id": "call_9", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    answer["choices"][0]["finish_reason"] = "tool_calls"
    openai_deployed.json("/chat/completions", answer)
    body = {
        "systemInstruction": {"parts": [{"text": "Be kind."}]},
        "contents": [{"role": "user", "parts": [{"text": "Weather?"}]},
                     {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                                                  "thoughtSignature": SIGNATURE}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
                                                                      "response": {"output": "Sunny"}}}]}],
        "tools": [{"functionDeclarations": [WEATHER]}, {"googleSearch": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "generationConfig": {"temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 50,
                             "stopSequences": ["END"], "candidateCount": 1,
                             "responseMimeType": "application/json",
                             "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING",
                                                                                       "nullable": True}},
                                                "propertyOrdering": ["a"]},
                             "thinkingConfig": {"thinkingLevel": "LOW", "includeThoughts": True}},
    }
    reply = post(client, "/v1beta/models/gpt-chat:generateContent", body, secret)
    assert reply.status_code == 200, reply.content
    sent = openai_deployed.posts()[0].body
    assert sent["messages"] == [
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_contents_1_parts_0", "type": "function",
                                                              "function": {"name": "get_weather",
                                                                           "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_contents_1_parts_0", "content": '{"output": "Sunny"}'}]
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city", "parameters": WEATHER["parametersJsonSchema"]}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["stop"]) == (0.2, 0.9, 50, ["END"])
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": {
        "type": "object", "properties": {"a": {"type": ["string", "null"]}}}}}
    assert sent.get("reasoning_effort") in ("low", None)  # an upstream that takes none leaves it out, named
    ignored = reply["X-Gateway-Ignored"].split(", ")
    assert {"tools:googleSearch", "safetySettings", "generationConfig.topK",
            "generationConfig.thinkingConfig.includeThoughts"} <= set(ignored)
    got = reply.json()
    [candidate] = got["candidates"]
    assert candidate["content"] == {"role": "model", "parts": [
        {"text": "Done."}, {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "call_9"}}]}
    assert candidate["finishReason"] == "STOP"
    assert got["usageMetadata"] == {"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15}
    assert got["modelVersion"] == "gpt-chat"
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens) == (12, 3)


def test_a_streamed_tool_call_is_sent_whole_when_its_choice_finishes(client, openai_deployed, free_key):
    from tests.gateway.conftest import chunk, usage_chunk

    key, secret = free_key
    call = chunk()
    call["choices"][0]["delta"] = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                   "function": {"name": "get_weather", "arguments": '{"ci'}}]}
    more = chunk()
    more["choices"][0]["delta"] = {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Rome"}'}}]}
    openai_deployed.sse("/chat/completions", [chunk("Let me look."), call, more, chunk(finish_reason="tool_calls"),
                                              usage_chunk(9, 4), "[DONE]"])
    answer = post(client, "/v1beta/models/gpt-chat:streamGenerateContent?alt=sse",
                  {"contents": HELLO, "tools": [{"functionDeclarations": [WEATHER]}]}, secret)
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/event-stream")
    items = streamed(b"".join(answer.streaming_content))
    assert items[0]["candidates"][0]["content"]["parts"] == [{"text": "Let me look."}]
    last = items[-1]
    assert last["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "call_1"}}]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"] == {"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13}
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens) == (9, 4)


def test_what_only_googles_api_takes_is_refused_by_another_type_before_any_credit_is_kept(
        client, openai_deployed, free_key):
    key, secret = free_key
    answer = post(client, "/v1beta/models/gpt-chat:generateContent",
                  {"contents": HELLO, "cachedContent": "cachedContents/abc"}, secret)
    assert answer.status_code == 400 and answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "cachedContent" in answer.json()["error"]["message"]
    assert openai_deployed.posts() == []
    assert credits_of(key) == 100 and mismatches() == []


# ---------------------------------------------------------------- passed through to gemini deployments

def test_a_gemini_deployment_gets_the_request_as_sent_and_its_answer_comes_back_as_google_sent_it(
        client, google_upstream, free_key):
    key, secret = free_key
    sent_back = response([text_part("Thinking done", thought=True), call_part("get_weather", {"city": "Paris"},
                                                                             signature=SIGNATURE)],
                         meta=usage(20, 6, cached=8, thoughts=4))
    google_upstream.answer(sent_back)
    body = {"contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Rome"}},
                                                      "thoughtSignature": SIGNATURE}]},
                         {"role": "user", "parts": [{"functionResponse": {"name": "get_weather",
                                                                          "response": {"output": "Rainy"}}}]}],
            "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {
                "type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]}],
            "generationConfig": {"topK": 3, "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 512}},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]}
    answer = post(client, "/v1beta/models/gem-chat:generateContent", body, secret)
    assert answer.status_code == 200, answer.content
    assert "X-Gateway-Ignored" not in answer
    [call] = google_upstream.posts("generateContent")
    assert call.problems == [] and call.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert call.body == body  # thoughtSignature and all, byte for byte
    assert answer.json() == {**sent_back, "modelVersion": "gem-chat"}
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens, event.cached_tokens) == (20, 10, 8)


def test_a_gemini_deployments_stream_is_relayed_event_by_event(client, google_upstream, free_key):
    key, secret = free_key
    events = [response([text_part("Hel")], finish=None), response([text_part("lo")], finish=None),
              response([call_part("get_weather", {"city": "Oslo"}, signature=SIGNATURE)], meta=usage(7, 5))]
    google_upstream.stream(*events)
    answer = post(client, "/v1beta/models/gem-chat:streamGenerateContent?alt=sse", {"contents": HELLO}, secret)
    assert answer.status_code == 200
    assert streamed(b"".join(answer.streaming_content)) == [{**event, "modelVersion": "gem-chat"} for event in events]
    [call] = google_upstream.posts("streamGenerateContent")
    assert call.query == {"alt": ["sse"]} and call.body == {"contents": HELLO}
    event = charged(key, "gemini")
    assert (event.input_tokens, event.output_tokens) == (7, 5)
    array = post(client, "/v1beta/models/gem-chat:streamGenerateContent", {"contents": HELLO}, secret)
    assert json.loads(b"".join(array.streaming_content)) == [{**e, "modelVersion": "gem-chat"} for e in events]


def test_embeddings_reach_a_gemini_deployment_as_sent(client, google_upstream, free_key):
    key, secret = free_key
    body = {"requests": [{"model": "models/gem-embed", "content": {"parts": [{"text": "a"}]},
                          "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 3},
                         {"model": "models/gem-embed", "content": {"parts": [{"text": "b"}]},
                          "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 3}]}
    answer = post(client, "/v1beta/models/gem-embed:batchEmbedContents", body, secret)
    assert answer.status_code == 200, answer.content
    assert [len(item["values"]) for item in answer.json()["embeddings"]] == [3, 3]
    assert (answer["X-Credits-Charged"], answer["X-Remaining-Credits"]) == ("1", "99")
    [call] = google_upstream.posts("batchEmbedContents")
    assert call.problems == []
    assert call.body == {"requests": [{**item, "model": "models/text-embedding-004"} for item in body["requests"]]}
    charged(key, "embedding")


def test_an_upstream_refusal_is_answered_in_googles_shape(client, google_upstream, free_key):
    from tests.gateway.gemini_fake import error_body

    key, secret = free_key
    google_upstream.fail(400, error_body(400, "INVALID_ARGUMENT", "Request contains an invalid argument."))
    answer = post(client, "/v1beta/models/gem-chat:generateContent", {"contents": HELLO}, secret)
    assert answer.status_code == 400
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert GEMINI_KEY not in answer.content.decode()
    assert credits_of(key) == 100 and mismatches() == []


# ---------------------------------------------------------------- Gemini CLI's own requests

RECORDED = json.loads((Path(__file__).parent / "recorded" / "gemini_cli_0_61_0.json").read_text())["requests"]


def test_gemini_clis_recorded_requests_are_served_by_a_translated_model(client, seeded, local_key):
    """What Gemini CLI 0.61.0 sends (parametersJsonSchema, responseJsonSchema with upper-case types,
    thinkingLevel, its own function call ids beside a thoughtSignature), served by local-chat."""
    key, secret = local_key
    classify, call_turn, result_turn = RECORDED
    assert classify["path"].endswith(":generateContent")
    assert call_turn["path"].endswith(":streamGenerateContent?alt=sse")
    routed = post(client, "/v1beta/models/local-chat:generateContent", classify["body"], secret)
    assert routed.status_code == 200, routed.content
    decided = json.loads(routed.json()["candidates"][0]["content"]["parts"][0]["text"])  # the schema's JSON
    assert type(decided["complexity_score"]) is int and isinstance(decided["complexity_reasoning"], str)
    asked = dict(call_turn["body"], contents=[{"role": "user", "parts": [{"text": "use list_directory: ."}]}])
    streamed_call = post(client, "/v1beta/models/local-chat:streamGenerateContent?alt=sse", asked, secret)
    assert streamed_call.status_code == 200
    calls = [part["functionCall"] for item in streamed(b"".join(streamed_call.streaming_content))
             for part in item["candidates"][0]["content"]["parts"] if "functionCall" in part]
    assert [call["name"] for call in calls] == ["list_directory"]
    answered = post(client, "/v1beta/models/local-chat:streamGenerateContent?alt=sse", result_turn["body"], secret)
    text = "".join(part.get("text", "") for item in streamed(b"".join(answered.streaming_content))
                   for part in item["candidates"][0]["content"]["parts"])
    assert "Directory listing" in text
    assert LedgerEntry.objects.filter(kind="charge", status="completed", operation="gemini").count() == 3
    assert mismatches() == []


def test_gemini_clis_recorded_request_reaches_a_gemini_deployment_unchanged(client, google_upstream, free_key):
    key, secret = free_key
    _, call_turn, _ = RECORDED
    answer = post(client, "/v1beta/models/gem-chat:streamGenerateContent?alt=sse", call_turn["body"], secret)
    assert answer.status_code == 200
    assert streamed(b"".join(answer.streaming_content))[-1]["modelVersion"] == "gem-chat"
    [call] = google_upstream.posts("streamGenerateContent")
    assert call.body == call_turn["body"]
    charged(key, "gemini")


# ---------------------------------------------------------------- the query budget

def test_a_successful_generate_content_costs_two_statements_and_one_shared_cache_round_trip(
        client, seeded, local_key, vendor, monkeypatch, settings):
    from utils_app import shared

    _, secret = local_key

    def send():
        return post(client, "/v1beta/models/local-chat:generateContent", {"contents": HELLO}, secret)

    assert send().status_code == 200  # the key is cached
    trips = []

    def counting(function):
        def counted(*args, **kwargs):
            trips.append(args)
            return function(*args, **kwargs)
        return counted

    monkeypatch.setattr(shared, "run", counting(shared.run))
    if settings.SHARED_CACHE:
        backend = shared.shared_cache()
        monkeypatch.setattr(backend, "run_script", counting(backend.run_script))
    else:
        monkeypatch.setattr(shared.memory, "run", counting(shared.memory.run))
    with CaptureQueriesContext(connection) as captured:
        assert send().status_code == 200
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == (2 if vendor == "postgresql" else 5)
    assert len(trips) == 1


# ---------------------------------------------------------------- streams that end badly

def test_an_upstream_that_breaks_off_mid_stream_ends_it_with_an_error_item_in_googles_shape(
        client, openai_deployed, free_key):
    from tests.gateway.conftest import chunk
    from tests.gateway.fake_servers import DROP

    key, secret = free_key
    for path, sse in (("streamGenerateContent?alt=sse", True), ("streamGenerateContent", False)):
        openai_deployed.sse("/chat/completions", [chunk("Hel"), DROP])
        answer = post(client, f"/v1beta/models/gpt-chat:{path}", {"contents": HELLO}, secret)
        assert answer.status_code == 200
        content = b"".join(answer.streaming_content)
        items = streamed(content) if sse else json.loads(content)
        assert items[0]["candidates"][0]["content"]["parts"] == [{"text": "Hel"}]
        assert items[-1]["error"]["code"] == 502 and items[-1]["error"]["status"] == "UNAVAILABLE"
    # The client had output: both are charged (CONTRACT section 5), and the usage rows say how they ended.
    assert credits_of(key) == 98 and mismatches() == []
    assert set(UsageEvent.objects.values_list("status", flat=True)) == {502}


def test_an_upstream_that_fails_before_any_output_is_a_json_error_and_refunded(client, google_upstream, free_key):
    from tests.gateway.gemini_fake import error_body

    key, secret = free_key
    google_upstream.fail(503, error_body(503, "UNAVAILABLE", "The model is overloaded."))
    answer = post(client, "/v1beta/models/gem-chat:streamGenerateContent?alt=sse", {"contents": HELLO}, secret)
    assert answer.status_code == 502 and not answer.streaming
    assert answer.json()["error"]["status"] == "UNAVAILABLE"
    assert credits_of(key) == 100 and mismatches() == []


# ---------------------------------------------------------------- the codec alone

def test_a_gemini_schema_becomes_a_json_schema():
    from gateway.gemini_api.request import json_schema

    assert json_schema({"type": "OBJECT", "propertyOrdering": ["a", "b"], "required": ["a"], "properties": {
        "a": {"type": "STRING", "nullable": True, "enum": ["x", "y"]},
        "b": {"type": "ARRAY", "items": {"type": "INTEGER", "format": "int32"}, "min_items": 1}}}) == {
        "type": "object", "required": ["a"], "properties": {
            "a": {"type": ["string", "null"], "enum": ["x", "y"]},
            "b": {"type": "array", "items": {"type": "integer", "format": "int32"}, "minItems": 1}}}


@pytest.mark.parametrize(("thinking", "effort"), [
    ({"thinkingLevel": "HIGH"}, "high"), ({"thinking_level": "low"}, "low"), ({"thinkingBudget": 0}, "none"),
    ({"thinkingBudget": 1024}, "minimal"), ({"thinkingBudget": 5000}, "medium"), ({"thinkingBudget": 90000}, "high"),
    ({"thinkingBudget": -1}, None)])
def test_thinking_config_becomes_a_reasoning_effort(thinking, effort):
    from gateway.gemini_api.request import chat_request

    decoded = chat_request({"contents": HELLO, "generationConfig": {"thinkingConfig": thinking}}, "m")
    assert decoded.params.get("reasoning_effort") == effort


def test_function_responses_pair_with_their_calls_by_id_or_by_name_and_order():
    from gateway.gemini_api.request import chat_request

    body = {"contents": [
        {"role": "user", "parts": [{"text": "Two cities"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {"c": "A"}}},
                                    {"functionCall": {"name": "w", "args": {"c": "B"}, "id": "mine"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w", "id": "mine", "response": {"r": "b"}}},
                                   {"functionResponse": {"name": "w", "response": {"r": "a"}}},
                                   {"text": "Thanks"}]}]}
    messages = chat_request(body, "m").params["messages"]
    ids = [call["id"] for call in messages[1]["tool_calls"]]
    assert ids == ["call_contents_1_parts_0", "mine"]
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in messages[2:]] == [
        ("tool", "mine", '{"r": "b"}'), ("tool", "call_contents_1_parts_0", '{"r": "a"}'), ("user", None, "Thanks")]
    stray = {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {}}}]}]}
    with pytest.raises(Exception, match="answers no function call"):
        chat_request(stray, "m")


def test_parts_another_type_cannot_take_are_for_gemini_deployments_only():
    from gateway.gemini_api.request import chat_request

    decoded = chat_request({"contents": [{"role": "user", "parts": [
        {"text": "Look"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"fileUri": "https://generativelanguage.googleapis.com/v1beta/files/x", "mimeType": "video/mp4"}},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}}]}]}, "m")
    assert decoded.params["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]
    assert set(decoded.native_only) == {"contents.0.parts.2.fileData", "contents.0.parts.3"}


def test_the_sdk_reads_the_gateways_errors_as_googles(live_server, seeded, make_key):
    _, secret = make_key(tier="free", credits=0, max_credits=100)
    with google_client(live_server.url, secret) as client:
        with pytest.raises(genai_errors.ClientError) as missing:
            client.models.generate_content(model="no-such-model", contents="Hi")
        with pytest.raises(genai_errors.ClientError) as poor:
            client.models.generate_content(model="local-chat", contents="Hi")
    assert (missing.value.code, missing.value.status) == (404, "NOT_FOUND")
    assert (poor.value.code, poor.value.status) == (402, "RESOURCE_EXHAUSTED")
    with google_client(live_server.url, "sk-" + "z" * 40) as stranger, \
            pytest.raises(genai_errors.ClientError) as unknown:
        stranger.models.generate_content(model="local-chat", contents="Hi")
    assert (unknown.value.code, unknown.value.status) == (401, "UNAUTHENTICATED")


def test_a_request_only_a_gemini_deployment_can_read_reaches_it(client, google_upstream, free_key):
    key, secret = free_key
    uploaded = {"fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc", "mimeType": "video/mp4"}
    video = {"contents": [{"role": "user", "parts": [{"fileData": uploaded}]}], "cachedContent": "cachedContents/xyz"}
    answer = post(client, "/v1beta/models/gem-chat:generateContent", video, secret)
    assert answer.status_code == 200, answer.content
    [call] = google_upstream.posts("generateContent")
    assert call.body == video
    charged(key, "gemini")


def test_a_model_id_with_a_colon_is_still_the_catalogs_and_a_wrong_version_or_method_is_googles_404(
        client, seeded, local_key):
    from models_catalog import catalog
    from models_catalog.models import AiModel

    key, secret = local_key
    AiModel.objects.create(model_id="ft:local:org:abc", type="chat", owned_by="test", cost=1, tiers=[key.tier])
    catalog.invalidate()
    entry = client.get("/v1/models/ft:local:org:abc")
    assert entry.status_code == 200 and entry.json()["id"] == "ft:local:org:abc"
    assert client.get("/v1beta/models/ft:local:org:abc", HTTP_X_GOOG_API_KEY=secret).json()["name"] == \
        "models/ft:local:org:abc"
    for path in ("/v2/models/local-chat:generateContent", "/v1beta/models/local-chat:fooBar"):
        answer = post(client, path, {"contents": HELLO}, secret)
        assert (answer.status_code, answer.json()["error"]["status"]) == (404, "NOT_FOUND"), path
    assert client.get("/v1beta/models/local-chat:generateContent", HTTP_X_GOOG_API_KEY=secret).status_code == 405


@pytest.mark.parametrize("method", ["generateContent", "countTokens"])
def test_contents_of_thoughts_only_are_refused_naming_contents(client, seeded, local_key, method):
    """A thought part is not read; a conversation of nothing else is refused in Google's terms, not chat's."""
    key, secret = local_key
    answer = post(client, f"/v1beta/models/local-chat:{method}",
                  {"contents": [{"role": "user", "parts": [{"text": "musing", "thought": True}]}]}, secret)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == \
        "contents: must hold at least one part a model reads (a thought part is not read)."
    assert credits_of(key) == 100
