"""The Gemini adapter's translation, without a network: OpenAI-shaped requests to Gemini's and Gemini's
answers back. Every request built here also passes the fake upstream's checks (gemini_fake.check_generate,
the SDK's types plus the real API's own rules), so a shape Gemini would refuse fails here first."""
import base64
import json
import struct

import pytest

from gateway.conversation import Usage
from gateway.upstream.gemini import gemini_refusal
from gateway.upstream.gemini_answer import StreamTranslation, completion, embedding_list, finish_reason, usage
from gateway.upstream.gemini_messages import conversation
from gateway.upstream.gemini_request import gemini_schema, generate_request
from tests.gateway.gemini_fake import (
    answer,
    blocked,
    call_part,
    candidate,
    check_generate,
    error_body,
    key_invalid,
    rate_limited,
    response,
    text_part,
)
from utils_app.errors import InvalidRequest, UnsupportedParameter, UpstreamError, UpstreamRejected

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"],
                                                                          "enum": ["c", "f"]}},
    "required": ["city"], "additionalProperties": False}, "strict": True}}


def no_fetch(url, where):
    raise AssertionError(f"no image should be fetched ({url})")


def build(**payload) -> dict:
    payload.setdefault("messages", [{"role": "user", "content": "Hi"}])
    request = generate_request(payload, no_fetch)
    problems = []
    check_generate(request, problems)
    assert problems == [], problems
    return request


def malformed(what):
    return UpstreamError(f"malformed {what}")


# ---------------------------------------------------------------- requests

def test_system_and_developer_messages_become_the_system_instruction_and_assistant_is_the_model_role():
    request = build(messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
    ])
    assert request["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]}
    assert request["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]},
                                   {"role": "model", "parts": [{"text": "Hello!"}]},
                                   {"role": "user", "parts": [{"text": "How are you?"}]}]


def test_turns_of_one_role_in_a_row_are_merged_and_empty_ones_left_out():
    request = build(messages=[{"role": "user", "content": "One"}, {"role": "user", "content": "Two"},
                              {"role": "assistant", "content": ""}, {"role": "user", "content": "Three"}])
    assert request["contents"] == [{"role": "user", "parts": [{"text": "One"}, {"text": "Two"}, {"text": "Three"}]}]


def test_parameters_map_onto_the_generation_config():
    request = build(temperature=0.4, top_p=0.8, max_completion_tokens=77, max_tokens=5, stop="END", seed=3, n=2,
                    presence_penalty=0.5, frequency_penalty=-0.5, logprobs=True, top_logprobs=2)
    assert request["generationConfig"] == {
        "temperature": 0.4, "topP": 0.8, "seed": 3, "presencePenalty": 0.5, "frequencyPenalty": -0.5,
        "maxOutputTokens": 77, "stopSequences": ["END"], "candidateCount": 2, "responseLogprobs": True, "logprobs": 2}
    assert build(max_tokens=9, stop=["a", "b"])["generationConfig"] == {"maxOutputTokens": 9,
                                                                       "stopSequences": ["a", "b"]}
    assert "generationConfig" not in build(n=1, logprobs=False, user="someone", stream=False)


@pytest.mark.parametrize("payload, param", [
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"response_format": {"type": "grammar"}}, "response_format"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}]}, "messages"),
])
def test_what_gemini_cannot_honour_is_refused_naming_the_parameter(payload, param):
    payload.setdefault("messages", [{"role": "user", "content": "Hi"}])
    with pytest.raises(UnsupportedParameter) as refused:
        generate_request(payload, no_fetch)
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "unsupported_parameter", param)


def test_what_gemini_has_no_use_for_is_left_out_and_named():
    """CONTRACT section 8: token biases, parallel_tool_calls false and OpenAI's server features leave the answer
    a correct one of the same shape; they are left out and named, no longer refused."""
    ignored: list[str] = []
    sent = generate_request({"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER],
                             "logit_bias": {"50256": -100}, "parallel_tool_calls": False, "store": True,
                             "prompt_cache_key": "k", "service_tier": "flex"}, no_fetch, ignored)
    assert "generationConfig" not in sent
    assert sorted(ignored) == ["logit_bias", "parallel_tool_calls", "prompt_cache_key", "service_tier", "store"]


def test_asking_gemini_for_nothing_it_lacks_is_not_refused():
    build(logit_bias={}, parallel_tool_calls=True, logprobs=False, tools=[WEATHER])


def test_response_formats_map_onto_a_mime_type_and_a_schema():
    assert build(response_format={"type": "text"}).get("generationConfig") is None
    assert build(response_format={"type": "json_object"})["generationConfig"] == {
        "responseMimeType": "application/json"}
    config = build(response_format={"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "number"}},
        "required": ["answer"], "additionalProperties": False}}})["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseSchema": {
        "type": "OBJECT", "properties": {"answer": {"type": "STRING"}, "score": {"type": "NUMBER"}},
        "required": ["answer"], "propertyOrdering": ["answer", "score"]}}


def test_tools_become_function_declarations_and_tool_choice_a_calling_mode():
    request = build(tools=[WEATHER, {"type": "function", "function": {"name": "now"}}], tool_choice="required")
    assert request["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "description": "Weather in a city", "parameters": {
            "type": "OBJECT", "properties": {"city": {"type": "STRING"},
                                             "unit": {"nullable": True, "type": "STRING", "enum": ["c", "f"]}},
            "required": ["city"], "propertyOrdering": ["city", "unit"]}},
        {"name": "now"}]}]  # no parameters at all: Gemini refuses an object without properties
    assert request["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    for choice, config in [("auto", {"mode": "AUTO"}), ("none", {"mode": "NONE"}),
                           ({"type": "function", "function": {"name": "get_weather"}},
                            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]})]:
        assert build(tools=[WEATHER], tool_choice=choice)["toolConfig"] == {"functionCallingConfig": config}


def test_json_schemas_are_converted_to_geminis_subset():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number", "format": "double"},
                                                            "y": {"type": "number"}}, "required": ["x", "y"]},
                  "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
        "properties": {
            "where": {"$ref": "#/$defs/Point", "description": "A point"},
            "kind": {"const": "circle"},
            "size": {"type": "integer", "enum": [1, 2, 3]},
            "label": {"anyOf": [{"type": "string", "format": "uri"}, {"type": "null"}]},
            "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "many": {"type": ["string", "integer"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                               {"properties": {"b": {"type": "boolean"}}}]},
            "tree": {"$ref": "#/$defs/Node"},
        },
        "required": ["where", "missing"],
    }
    converted = gemini_schema(schema)
    properties = converted["properties"]
    assert properties["where"] == {"type": "OBJECT", "description": "A point", "properties": {
        "x": {"type": "NUMBER", "format": "double"}, "y": {"type": "NUMBER"}}, "required": ["x", "y"],
        "propertyOrdering": ["x", "y"]}
    assert properties["kind"] == {"type": "STRING", "enum": ["circle"]}
    assert properties["size"] == {"type": "INTEGER", "description": "One of: 1, 2, 3."}
    assert properties["label"] == {"nullable": True, "type": "STRING"}  # "uri" is not a format Gemini takes
    assert properties["either"] == {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}
    assert properties["many"] == {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}
    assert properties["tags"] == {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1}
    assert properties["extra"] == {"type": "OBJECT"}
    assert properties["both"]["properties"] == {"a": {"type": "STRING"}, "b": {"type": "BOOLEAN"}}
    assert properties["both"]["required"] == ["a"]
    assert converted["required"] == ["where"]
    depth, node = 0, properties["tree"]
    while "properties" in node:  # a recursive schema is cut off, not followed for ever
        node, depth = node["properties"]["child"], depth + 1
    assert node == {"type": "OBJECT"} and 5 < depth < 40
    problems = []
    check_generate({"contents": [{"role": "user", "parts": [{"text": "x"}]}],
                    "generationConfig": {"responseMimeType": "application/json", "responseSchema": converted}},
                   problems)
    assert problems == []


def test_tool_calls_and_results_round_trip_with_their_ids_in_the_order_of_the_calls():
    signature = base64.b64encode(b"sig").decode()
    request = build(tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
             "extra_content": {"google": {"thought_signature": signature}}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        # The results come back in the other order; Gemini pairs them by position.
        {"role": "tool", "tool_call_id": "call_b", "content": "Rain"},
        {"role": "tool", "tool_call_id": "call_a", "content": '{"sky": "clear", "celsius": 21}'},
        {"role": "user", "content": "Thanks"},
    ])
    assert request["contents"][1] == {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": signature},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]}
    assert request["contents"][2] == {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"sky": "clear", "celsius": 21}}},
        {"functionResponse": {"name": "get_weather", "response": {"output": "Rain"}}},
        {"text": "Thanks"}]}


@pytest.mark.parametrize("extra", [{"google": "c2ln"}, {"google": ["c2ln"]}, {"google": {"thought_signature": 7}},
                                   "c2ln", None])
def test_a_thought_signature_in_another_shape_than_geminis_is_not_sent_back(extra):
    """A client may send anything under extra_content: only Gemini's own shape carries a signature back."""
    request = build(messages=[
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"},
             "extra_content": extra}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "Rain"}])
    assert request["contents"][1] == {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}}}]}


def test_a_tool_result_whose_call_is_not_in_the_conversation_is_a_clear_400():
    with pytest.raises(InvalidRequest) as refused:
        generate_request({"messages": [{"role": "user", "content": "Hi"},
                                       {"role": "tool", "tool_call_id": "call_gone", "content": "x"}]}, no_fetch)
    assert refused.value.param == "messages.1.tool_call_id"


def test_tool_call_arguments_that_are_not_a_json_object_are_a_clear_400():
    with pytest.raises(InvalidRequest) as refused:
        generate_request({"messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]}, no_fetch)
    assert refused.value.param == "messages.0.tool_calls.0.function.arguments"


def test_images_audio_and_files_travel_inline():
    fetched = []

    def fetch(url, where):
        fetched.append((url, where))
        return {"inlineData": {"mimeType": "image/jpeg", "data": PNG}}

    payload = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://images.example/cat.jpg"}},
        {"type": "input_audio", "input_audio": {"data": PNG, "format": "wav"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PNG}", "filename": "a.pdf"}},
    ]}]}
    request = generate_request(payload, fetch)
    assert request["contents"][0]["parts"] == [
        {"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"inlineData": {"mimeType": "image/jpeg", "data": PNG}}, {"inlineData": {"mimeType": "audio/wav", "data": PNG}},
        {"inlineData": {"mimeType": "application/pdf", "data": PNG}}]
    assert fetched == [("https://images.example/cat.jpg", "messages.0.content.2.image_url.url")]
    with pytest.raises(InvalidRequest) as refused:
        generate_request({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png,notbase64"}}]}]}, no_fetch)
    assert refused.value.param == "messages.0.content.0.image_url.url"


def test_the_conversation_keeps_no_ids_gemini_would_refuse():
    _, contents = conversation([{"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}], no_fetch)
    assert "call_1" not in json.dumps(contents)


# ---------------------------------------------------------------- answers

def test_an_answer_becomes_a_chat_completion_with_usage_cached_and_thinking_tokens():
    body = answer("Bonjour", meta={"promptTokenCount": 40, "cachedContentTokenCount": 32, "candidatesTokenCount": 6,
                                   "thoughtsTokenCount": 10, "totalTokenCount": 56})
    result = completion(body, model="gemini-x", malformed=malformed)
    assert result["object"] == "chat.completion" and result["id"] == "chatcmpl-resp-fake-1"
    assert result["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Bonjour"},
                                  "logprobs": None, "finish_reason": "stop"}]
    assert result["usage"] == {"prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56,
                               "prompt_tokens_details": {"cached_tokens": 32},
                               "completion_tokens_details": {"reasoning_tokens": 10}}


@pytest.mark.parametrize("reason, expected", [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
    ("BLOCKLIST", "content_filter"), ("PROHIBITED_CONTENT", "content_filter"), ("SPII", "content_filter"),
    ("OTHER", "stop"), ("MALFORMED_FUNCTION_CALL", "stop"),
])
def test_finish_reasons_map_to_openais(reason, expected):
    assert finish_reason(reason, False) == expected
    assert finish_reason(reason, True) == "tool_calls"


def test_a_function_call_is_a_tool_call_with_an_id_whatever_geminis_reason():
    body = response([text_part("Looking."), call_part("get_weather", {"city": "Paris"}, signature="c2ln"),
                     call_part("get_weather", {"city": "Oslo"}, id="fc-7")], meta=None)
    message = completion(body, model="m", malformed=malformed)["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    first, second = message["message"]["tool_calls"]
    assert first["id"].startswith("call_") and len(first["id"]) > 10 and second["id"] == "fc-7"
    assert first["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert first["extra_content"] == {"google": {"thought_signature": "c2ln"}} and "extra_content" not in second
    assert message["message"]["content"] == "Looking."


def test_a_candidate_filtered_for_safety_has_no_content_and_content_filter():
    choice = completion(response(None, finish="SAFETY"), model="m", malformed=malformed)["choices"][0]
    assert choice["message"]["content"] is None and choice["finish_reason"] == "content_filter"


def test_a_blocked_prompt_is_the_requests_fault_as_azure_answers_it():
    with pytest.raises(UpstreamRejected) as rejected:
        completion(blocked("PROHIBITED_CONTENT"), model="m", malformed=malformed)
    assert (rejected.value.status, rejected.value.code, rejected.value.param) == (400, "content_filter", "messages")
    assert "PROHIBITED_CONTENT" in rejected.value.message


def test_thought_summaries_are_not_part_of_the_answer():
    body = response([text_part("I should greet.", thought=True), text_part("Hi!")])
    assert completion(body, model="m", malformed=malformed)["choices"][0]["message"]["content"] == "Hi!"


def test_logprobs_map_to_openais_shape():
    body = response(candidates=[candidate([text_part("Yes")], logprobsResult={
        "chosenCandidates": [{"token": "Yes", "logProbability": -0.25}],
        "topCandidates": [{"candidates": [{"token": "Yes", "logProbability": -0.25},
                                          {"token": "No", "logProbability": -1.5}]}]})])
    assert completion(body, model="m", malformed=malformed)["choices"][0]["logprobs"] == {"content": [
        {"token": "Yes", "logprob": -0.25, "bytes": [89, 101, 115], "top_logprobs": [
            {"token": "Yes", "logprob": -0.25, "bytes": [89, 101, 115]},
            {"token": "No", "logprob": -1.5, "bytes": [78, 111]}]}], "refusal": None}


@pytest.mark.parametrize("body", [{"candidates": "x"}, {"candidates": []}, {"candidates": [{"content": {"parts": 3}}]},
                                  response([{"functionCall": {"args": {}}}])])
def test_a_malformed_answer_is_an_upstream_failure(body):
    with pytest.raises(UpstreamError):
        completion(body, model="m", malformed=malformed)


def test_usage_counts_every_input_and_output_token():
    assert usage({"promptTokenCount": 10, "toolUsePromptTokenCount": 4, "candidatesTokenCount": 3}).to_chat() == {
        "prompt_tokens": 14, "completion_tokens": 3, "total_tokens": 17, "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}}
    assert usage(None) == Usage() and usage(None).to_chat() == {}
    # Counts sent but unusable are left out, so the gateway meters its own estimates (docs/hardening.md).
    assert usage({"promptTokenCount": -3, "candidatesTokenCount": "many"}).to_chat() == {
        "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}


def test_a_stream_translates_event_by_event_with_tool_call_indices_and_one_role():
    stream = StreamTranslation(model="m", candidates=1)
    chunks, done = [], []
    for event in (response([text_part("")], finish=None),
                  response([text_part("Let me check")], finish=None),
                  response([call_part("a", {"x": 1})], finish=None),
                  response([call_part("b", {}), call_part("c", {"y": [1]})], finish=None),
                  response([], finish="STOP", meta={"promptTokenCount": 5, "candidatesTokenCount": 2})):
        chunks.append(stream.translate(event, malformed=malformed))
        done.append(stream.done)
    assert chunks[0] is None and done == [False, False, False, False, True]
    assert chunks[1]["choices"][0]["delta"] == {"role": "assistant", "content": "Let me check"}
    assert [c["index"] for c in chunks[2]["choices"][0]["delta"]["tool_calls"]] == [0]
    assert [(c["index"], c["function"]["name"]) for c in chunks[3]["choices"][0]["delta"]["tool_calls"]] == [
        (1, "b"), (2, "c")]
    assert chunks[4]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    assert len({chunk["id"] for chunk in chunks[1:]}) == 1
    assert stream.usage_chunk()["usage"]["total_tokens"] == 7 and stream.usage_chunk()["choices"] == []


# ---------------------------------------------------------------- errors

def test_googles_error_bodies_say_what_they_mean_for_the_deployment():
    status, body = key_invalid()
    refused = gemini_refusal(status, json.dumps(body).encode())
    assert refused.out_of_credit and refused.message.startswith("API key not valid")
    status, body = rate_limited("17.5s")
    limited = gemini_refusal(status, json.dumps(body).encode())
    assert not limited.out_of_credit and limited.retry_delay == 17.5 and limited.code is None
    for credit in (error_body(403, "PERMISSION_DENIED", "Billing is disabled.", [
                       {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "BILLING_DISABLED",
                        "domain": "googleapis.com"}]),
                   error_body(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")):
        assert gemini_refusal(credit["error"]["code"], json.dumps(credit)).out_of_credit
    # Words of a message never decide (it may quote the request); FAILED_PRECONDITION moves the request on.
    spent = gemini_refusal(429, json.dumps(error_body(429, "RESOURCE_EXHAUSTED", "Your prepayment credits are "
                                                      "depleted. Please go to AI Studio to manage your billing.")))
    assert not spent.out_of_credit and not spent.declined
    country = gemini_refusal(400, json.dumps(error_body(400, "FAILED_PRECONDITION", "Gemini API free tier is not "
                                                        "available in your country. Please enable billing.")))
    assert country.declined and not country.out_of_credit
    bad = gemini_refusal(400, json.dumps(error_body(400, "INVALID_ARGUMENT", "Invalid value at 'x'")))
    assert (bad.out_of_credit, bad.code, bad.message) == (False, "invalid_argument", "Invalid value at 'x'")
    assert gemini_refusal(502, b"<html>Bad gateway</html>").message == ""


# ---------------------------------------------------------------- embeddings

def test_embeddings_become_openais_list_normalised_when_cut_short_and_base64_when_asked():
    body = {"embeddings": [{"values": [3.0, 4.0]}, {"values": [0.0, 2.0]}], "usageMetadata": {"promptTokenCount": 6}}
    plain = embedding_list(body, model="e", normalise=False, base64_encoded=False, malformed=malformed)
    assert plain["data"] == [{"object": "embedding", "index": 0, "embedding": [3.0, 4.0]},
                             {"object": "embedding", "index": 1, "embedding": [0.0, 2.0]}]
    assert plain["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    cut = embedding_list(body, model="e", normalise=True, base64_encoded=True, malformed=malformed)
    assert struct.unpack("<2f", base64.b64decode(cut["data"][0]["embedding"])) == pytest.approx((0.6, 0.8))
    assert "usage" not in embedding_list({"embeddings": []}, model="e", normalise=False, base64_encoded=False,
                                         malformed=malformed)
    with pytest.raises(UpstreamError):
        embedding_list({"embeddings": [{"values": ["x"]}]}, model="e", normalise=False, base64_encoded=False,
                       malformed=malformed)


# ---------------------------------------------------------------- several candidates, model names

def test_several_candidates_are_several_choices_in_a_completion_and_in_a_stream():
    body = response(candidates=[candidate([text_part("One")]), candidate([text_part("Two")], finish="MAX_TOKENS",
                                                                         index=1)])
    choices = completion(body, model="m", malformed=malformed)["choices"]
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in choices] == [
        (0, "One", "stop"), (1, "Two", "length")]
    stream = StreamTranslation(model="m", candidates=2)
    first = stream.translate(response(candidates=[candidate([text_part("A")], finish=None),
                                                  candidate([text_part("B")], finish="STOP", index=1)]),
                             malformed=malformed)
    assert [(c["index"], c["delta"], c["finish_reason"]) for c in first["choices"]] == [
        (0, {"role": "assistant", "content": "A"}, None), (1, {"role": "assistant", "content": "B"}, "stop")]
    assert not stream.done
    stream.translate(response(candidates=[candidate([text_part("!")])]), malformed=malformed)
    assert stream.done


@pytest.mark.parametrize("upstream_model, path", [
    ("gemini-2.5-flash", "/models/gemini-2.5-flash:generateContent"),
    ("models/gemini-2.0-flash-001", "/models/gemini-2.0-flash-001:generateContent"),
    ("tunedModels/my-model-7", "/tunedModels/my-model-7:generateContent"),
])
def test_the_upstream_model_names_the_resource_called(upstream_model, path):
    from gateway.upstream import adapter_for
    from models_catalog.models import AiModel, Deployment, Provider

    provider = Provider(name="google", type="gemini", base_url="", api_key_env="GATEWAY_UPSTREAM_GEMINI_KEY")
    deployment = Deployment(model=AiModel(model_id="x", type="chat"), provider=provider,
                            secret_env="GATEWAY_UPSTREAM_GEMINI_KEY", upstream_model=upstream_model)
    assert adapter_for(deployment).path("generateContent") == path


def test_a_provider_without_a_base_url_calls_googles_and_sends_the_key_in_its_header_only(monkeypatch):
    from gateway.upstream import adapter_for
    from models_catalog.models import AiModel, Deployment, Provider

    monkeypatch.setenv("GATEWAY_UPSTREAM_GEMINI_KEY", "AIza-the-key-0123456789")
    provider = Provider(name="google", type="gemini", base_url="", api_key_env="GATEWAY_UPSTREAM_GEMINI_KEY")
    deployment = Deployment(model=AiModel(model_id="x", type="chat"), provider=provider,
                            secret_env="GATEWAY_UPSTREAM_GEMINI_KEY", upstream_model="gemini-2.5-flash")
    transport = adapter_for(deployment).transport
    assert transport.base_url == "https://generativelanguage.googleapis.com/v1beta"
    assert transport.headers == {"x-goog-api-key": "AIza-the-key-0123456789"}
