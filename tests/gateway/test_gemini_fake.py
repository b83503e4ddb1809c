"""The fake Gemini upstream (gemini_fake.py) held against Google's official client, google-genai.

Every answer, stream and error the gateway's tests script is parsed here by the SDK, pointed at
the fake: if the real client would reject a shape, so does this file. Each answer is also checked
against the SDK's response types with unknown fields forbidden (the SDK itself drops fields it does
not know, which would hide a misspelt one). And the SDK's own requests must pass the fake's checks:
the fake may be no stricter than Google's client is with the real API.
"""
import pytest
import requests
from google import genai
from google.genai import errors, types

from tests.gateway.fake_servers import DROP
from tests.gateway.gemini_fake import (
    GEMINI_KEY,
    FakeGemini,
    Reply,
    answer,
    blocked,
    call_part,
    candidate,
    embedding,
    error_body,
    key_invalid,
    rate_limited,
    response,
    text_events,
    text_part,
    usage,
)

SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1tb2RlbA=="


@pytest.fixture
def fake():
    server = FakeGemini().start()
    yield server
    server.stop()


@pytest.fixture
def sdk(fake):
    return genai.Client(api_key=GEMINI_KEY,
                        http_options=types.HttpOptions(base_url=fake.root, api_version="v1beta", timeout=10_000))


def strictly(body: dict) -> types.GenerateContentResponse:
    """The body read by the SDK's type with unknown fields refused (the SDK's client drops them silently)."""
    return types.GenerateContentResponse.model_validate(body)


# Every kind of answer the gateway's tests use.
ANSWERS = {
    "text": answer("Hello there", meta=usage(20, 4, cached=12, thoughts=3)),
    "calls": response([text_part("Let me look."), call_part("get_weather", {"city": "Paris"}, signature=SIGNATURE),
                       call_part("get_time", {"zone": "CET"})], meta=usage()),
    "call with id": response([call_part("get_weather", {"city": "Oslo"}, id="fc-123")], meta=usage()),
    "length": response([text_part("Cut")], finish="MAX_TOKENS", meta=usage()),
    "safety": response(None, finish="SAFETY", meta=usage(8, 0)),
    "two candidates": response(candidates=[candidate([text_part("One")]), candidate([text_part("Two")], index=1)],
                               meta=usage()),
    "blocked": blocked(),
    "logprobs": response(candidates=[candidate([text_part("Yes")], logprobsResult={
        "chosenCandidates": [{"token": "Yes", "logProbability": -0.1, "tokenId": 7}],
        "topCandidates": [{"candidates": [{"token": "Yes", "logProbability": -0.1, "tokenId": 7},
                                          {"token": "No", "logProbability": -2.5, "tokenId": 9}]}]},
        avgLogprobs=-0.1)], meta=usage()),
}


@pytest.mark.parametrize("name", ANSWERS)
def test_the_sdk_parses_every_answer_the_fake_sends(fake, sdk, name):
    body = ANSWERS[name]
    strictly(body)
    fake.answer(body)
    parsed = sdk.models.generate_content(model="gemini-test", contents="Hi")
    if name == "blocked":
        assert parsed.prompt_feedback.block_reason == types.BlockedReason.SAFETY and not parsed.candidates
        return
    assert parsed.response_id == "resp-fake-1"
    first = parsed.candidates[0]
    if name == "text":
        assert parsed.text == "Hello there"
        meta = parsed.usage_metadata
        assert (meta.prompt_token_count, meta.candidates_token_count, meta.cached_content_token_count,
                meta.thoughts_token_count) == (20, 4, 12, 3)
    elif name == "calls":
        assert [(call.name, call.args) for call in parsed.function_calls] == [("get_weather", {"city": "Paris"}),
                                                                              ("get_time", {"zone": "CET"})]
        assert first.content.parts[1].thought_signature  # bytes, decoded from the base64 sent
    elif name == "call with id":
        assert parsed.function_calls[0].id == "fc-123"
    elif name == "length":
        assert first.finish_reason == types.FinishReason.MAX_TOKENS
    elif name == "safety":
        assert first.finish_reason == types.FinishReason.SAFETY and first.content is None
    elif name == "two candidates":
        assert [c.content.parts[0].text for c in parsed.candidates] == ["One", "Two"]
    elif name == "logprobs":
        chosen = first.logprobs_result.chosen_candidates[0]
        assert (chosen.token, chosen.log_probability) == ("Yes", -0.1)
        assert [c.token for c in first.logprobs_result.top_candidates[0].candidates] == ["Yes", "No"]


def test_the_sdk_reads_the_fakes_stream_event_by_event(fake, sdk):
    events = [response([text_part("Checking")], finish=None),
              response([call_part("get_weather", {"city": "Rome"}, signature=SIGNATURE)], finish=None),
              response([text_part("")], finish="STOP", meta=usage(30, 9, cached=16))]
    for event in events:
        strictly(event)
    fake.stream(*events)
    chunks = list(sdk.models.generate_content_stream(model="gemini-test", contents="Weather?"))
    assert len(chunks) == 3
    assert chunks[0].text == "Checking"
    assert chunks[1].function_calls[0].name == "get_weather" and chunks[1].function_calls[0].args == {"city": "Rome"}
    assert chunks[2].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[2].usage_metadata.cached_content_token_count == 16
    assert fake.calls[-1].query == {"alt": ["sse"]}


def test_the_sdk_reads_the_fakes_plain_text_stream(fake, sdk):
    events = text_events("Hel", "lo")
    for event in events:
        strictly(event)
    fake.stream(*events)
    assert "".join(chunk.text for chunk in sdk.models.generate_content_stream(model="m", contents="Hi")) == "Hello"


def test_an_error_event_in_the_fakes_stream_is_an_error_to_the_sdk(fake, sdk):
    fake.stream(response([text_part("Half")], finish=None),
                error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later."))
    with pytest.raises(errors.ServerError) as raised:
        list(sdk.models.generate_content_stream(model="m", contents="Hi"))
    assert (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")


def test_a_stream_the_fake_drops_breaks_off_for_the_sdk_too(fake, sdk):
    fake.stream(response([text_part("Half")], finish=None), DROP)
    chunks = []
    with pytest.raises(Exception):
        for chunk in sdk.models.generate_content_stream(model="m", contents="Hi"):
            chunks.append(chunk)
    assert [chunk.text for chunk in chunks] == ["Half"]


@pytest.mark.parametrize("status, body, kind, state", [
    (*key_invalid(), errors.ClientError, "INVALID_ARGUMENT"),
    (*rate_limited(), errors.ClientError, "RESOURCE_EXHAUSTED"),
    (403, error_body(403, "PERMISSION_DENIED", "Your API key was reported as leaked."), errors.ClientError,
     "PERMISSION_DENIED"),
    (503, error_body(503, "UNAVAILABLE", "The model is overloaded."), errors.ServerError, "UNAVAILABLE"),
    (500, error_body(500, "INTERNAL", "An internal error has occurred."), errors.ServerError, "INTERNAL"),
])
def test_the_sdk_reads_the_fakes_errors(fake, sdk, status, body, kind, state):
    fake.answer(body, status=status)
    with pytest.raises(kind) as raised:
        sdk.models.generate_content(model="m", contents="Hi")
    assert (raised.value.code, raised.value.status) == (status, state)
    assert raised.value.message == body["error"]["message"]


def test_a_wrong_key_and_no_key_are_refused_as_google_refuses_them(fake):
    wrong = genai.Client(api_key="AIza-wrong-key-000000000000",
                         http_options=types.HttpOptions(base_url=fake.root, api_version="v1beta"))
    with pytest.raises(errors.ClientError) as raised:
        wrong.models.generate_content(model="m", contents="Hi")
    assert raised.value.code == 400 and raised.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    nameless = requests.post(f"{fake.base_url}/models/m:generateContent", json={"contents": []}, timeout=10)
    assert nameless.status_code == 403 and nameless.json()["error"]["status"] == "PERMISSION_DENIED"


def test_the_sdk_reads_the_fakes_embeddings(fake, sdk):
    fake.script("batchEmbedContents", Reply(body={"embeddings": [embedding([0.1, 0.2]), embedding([0.3, 0.4])]}))
    result = sdk.models.embed_content(model="text-embedding-004", contents=["alpha", "beta"],
                                      config=types.EmbedContentConfig(output_dimensionality=2))
    assert [item.values for item in result.embeddings] == [[0.1, 0.2], [0.3, 0.4]]
    sent = fake.calls[-1]
    assert sent.path == "/v1beta/models/text-embedding-004:batchEmbedContents"
    assert [request["outputDimensionality"] for request in sent.body["requests"]] == [2, 2]
    assert sent.problems == []


def test_the_sdks_own_requests_pass_the_fakes_checks(fake, sdk):
    """Every kind of request the gateway sends, as Google's client builds it: the fake takes them all."""
    weather = types.FunctionDeclaration(name="get_weather", description="Weather in a city", parameters={
        "type": "object", "properties": {"city": {"type": "string", "description": "City"},
                                         "unit": {"type": "string", "enum": ["c", "f"], "nullable": True},
                                         "days": {"type": "array", "items": {"type": "integer"}}},
        "required": ["city"]})
    contents = [
        types.Content(role="user", parts=[types.Part.from_text(text="Weather in Paris?"),
                                          types.Part.from_bytes(data=b"\x89PNG\r\n\x1a\n", mime_type="image/png")]),
        types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": "Paris"})]),
        types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather",
                                                                           response={"output": "Sunny"})]),
    ]
    config = types.GenerateContentConfig(
        system_instruction="Be brief.", temperature=0.3, top_p=0.9, max_output_tokens=50, stop_sequences=["END"],
        seed=7, candidate_count=2, presence_penalty=0.5, frequency_penalty=0.1, response_mime_type="application/json",
        response_schema={"type": "object", "properties": {"answer": {"type": "string"}}},
        tools=[types.Tool(function_declarations=[weather])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(
            mode="ANY", allowed_function_names=["get_weather"])))
    sdk.models.generate_content(model="gemini-test", contents=contents, config=config)
    list(sdk.models.generate_content_stream(model="gemini-test", contents=contents, config=config))
    assert fake.problems() == []
    assert [call.headers["x-goog-api-key"] for call in fake.calls] == [GEMINI_KEY, GEMINI_KEY]


def test_the_fake_refuses_what_the_real_api_refuses(fake):
    """The checks bite: ids on function parts, additionalProperties, an empty text, a missing response."""
    body = {"contents": [
        {"role": "user", "parts": [{"text": ""}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}, "id": "call_1"}}]},
        {"role": "user", "parts": [{"text": "no result"}]}],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": {
            "type": "OBJECT", "properties": {"a": {"type": "STRING"}}, "additionalProperties": False}}]}],
        "generationConfig": {"maxTokens": 5}}
    reply = requests.post(f"{fake.base_url}/models/m:generateContent", json=body,
                          headers={"x-goog-api-key": GEMINI_KEY}, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["status"] == "INVALID_ARGUMENT"
    problems = " | ".join(fake.problems())
    for expected in ("empty text", 'Unknown name "id"', "additionalProperties", "number of function response parts",
                     "generationConfig"):
        assert expected in problems, problems
