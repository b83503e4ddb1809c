"""The anthropic adapter's translations (gateway/upstream/anthropic_request.py and anthropic_answer.py) and
the /v1/messages dialect (gateway/messages/) as pure functions: the edges the served tests do not reach."""
import json

import pytest

from gateway.messages.dialect import AnthropicDialect
from gateway.messages.request import chat_params
from gateway.messages.stream import AnthropicEvents
from gateway.upstream.anthropic import anthropic_refusal
from gateway.upstream.anthropic_answer import StreamTranslation, completion, usage
from gateway.upstream.anthropic_request import messages_request
from utils_app.errors import InvalidRequest, UnsupportedParameter, UpstreamError


def malformed(what):
    return UpstreamError(f"malformed {what}")


def request(**payload):
    payload.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return messages_request(payload, model="claude-x", max_tokens_default=99)


def test_max_tokens_prefers_max_completion_tokens_then_max_tokens_then_the_default():
    assert request()["max_tokens"] == 99
    assert request(max_tokens=5)["max_tokens"] == 5
    assert request(max_tokens=5, max_completion_tokens=7)["max_tokens"] == 7


def test_asking_for_nothing_unsupported_is_accepted():
    assert "n" not in request(n=1, logprobs=False, logit_bias={}, response_format={"type": "text"}, seed=None)


@pytest.mark.parametrize("payload, param", [({"top_logprobs": 2}, "top_logprobs"), ({"temperature": 1.2}, "temperature"),
                                            ({"response_format": {"type": "json_schema"}}, "response_format"),
                                            ({"tools": [{"type": "code_interpreter"}]}, "tools")])
def test_what_anthropic_cannot_honour_is_refused_by_name(payload, param):
    with pytest.raises(UnsupportedParameter) as refused:
        request(**payload)
    assert refused.value.param == param


def test_an_http_image_url_is_a_400_naming_the_part_and_a_bad_data_url_too():
    for url in ("http://example.com/a.png", "data:nonsense"):
        with pytest.raises(InvalidRequest) as refused:
            request(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])
        assert refused.value.param == "messages.0.content.0.image_url.url"


def test_a_conversation_of_only_system_messages_is_a_400():
    with pytest.raises(InvalidRequest):
        request(messages=[{"role": "system", "content": "Rules"}])


def test_a_pdf_file_part_becomes_a_document_block_and_other_files_are_refused():
    sent = request(messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}]}])
    assert sent["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]
    with pytest.raises(UnsupportedParameter):
        request(messages=[{"role": "user", "content": [{"type": "file", "file": {"file_data": "data:text/csv;base64,YQ=="}}]}])


def test_tool_choice_none_and_a_tool_without_parameters():
    sent = request(tools=[{"type": "function", "function": {"name": "now"}}], tool_choice="none",
                   parallel_tool_calls=False)
    assert sent["tools"] == [{"name": "now", "input_schema": {"type": "object", "properties": {}}}]
    assert sent["tool_choice"] == {"type": "none"}


def test_usage_counts_every_input_token_and_the_cached_ones_apart():
    assert usage({"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 10,
                  "cache_creation_input_tokens": 5}).to_chat() == {
        "prompt_tokens": 18, "completion_tokens": 2, "total_tokens": 20, "prompt_tokens_details": {"cached_tokens": 10}}


def test_a_tool_use_block_without_an_id_gets_one_and_a_malformed_answer_is_an_upstream_error():
    answer = completion({"content": [{"type": "tool_use", "name": "f", "input": {}}], "stop_reason": "tool_use"},
                        model="m", malformed=malformed)
    assert answer["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")
    with pytest.raises(UpstreamError):
        completion({"content": "not a list"}, model="m", malformed=malformed)


def test_a_stream_without_message_start_content_is_not_committed_until_content_arrives():
    stream = StreamTranslation(model="m")
    opening = stream.translate({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 4}}},
                               malformed=malformed)
    assert opening["choices"][0]["delta"] == {"role": "assistant"}
    assert stream.translate({"type": "ping"}, malformed=malformed) is None
    assert stream.translate({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
                            malformed=malformed) is None
    assert stream.translate({"type": "content_block_delta", "index": 0,
                             "delta": {"type": "thinking_delta", "thinking": "hmm"}}, malformed=malformed) is None
    with pytest.raises(UpstreamError):
        stream.translate({"type": "content_block_delta", "index": 5, "delta": {}}, malformed=malformed)


def test_only_an_authentication_or_billing_error_type_disables_never_the_words_of_a_message():
    # A 400's message may quote the request: "credit balance is too low" in it can be the client's own text.
    assert not anthropic_refusal(400, json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": "Your credit balance is too low"}})).out_of_credit
    assert anthropic_refusal(402, b'{"error": {"type": "billing_error", "message": "x"}}').out_of_credit
    assert anthropic_refusal(401, b'{"error": {"type": "authentication_error", "message": "x"}}').out_of_credit
    assert not anthropic_refusal(400, b'{"error": {"type": "invalid_request_error", "message": "bad"}}').out_of_credit
    assert anthropic_refusal(500, b"<html>").message == ""


# ---------------------------------------------------------------- /v1/messages

def test_tool_results_become_tool_messages_before_the_turns_text_and_is_error_is_kept():
    params = chat_params({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "And?"},
                                     {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                      "content": [{"type": "text", "text": "boom"}]}]}]})
    assert params["messages"] == [{"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},
                                  {"role": "user", "content": [{"type": "text", "text": "And?"}]}]


def test_images_and_documents_become_openai_parts():
    params = chat_params({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]}]})
    assert params["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}},
        {"type": "file", "file": {"filename": "document.pdf", "file_data": "data:application/pdf;base64,JVBE"}}]


@pytest.mark.parametrize("body", [
    {"messages": [], "max_tokens": 5, "model": "m", "thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "model": "m", "thinking": {"type": "always"}},
])
def test_what_the_gateway_cannot_serve_is_refused(body):
    with pytest.raises(InvalidRequest):
        chat_params(body)


def test_the_answer_and_the_events_of_a_tool_call():
    completion_body = {"id": "chatcmpl-abc", "model": "m", "choices": [{"index": 0, "finish_reason": "length",
                                                                       "message": {"content": "cut"}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {
                           "cached_tokens": 4}}}
    answer = AnthropicDialect().answer(completion_body, input_tokens=10, output_tokens=2, cached=4)
    assert (answer["id"], answer["stop_reason"], answer["usage"]) == (
        "msg_abc", "max_tokens", {"input_tokens": 6, "output_tokens": 2, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 4})
    events = AnthropicEvents()
    raw = events.chunk({"id": "c", "model": "m", "choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": '{"a"'}}]}}]})
    raw += events.chunk({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                                      "finish_reason": "tool_calls"}]})
    raw += events.end()
    kinds = [line.split(": ", 1)[1] for line in raw.decode().splitlines() if line.startswith("event: ")]
    assert kinds == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
    assert '"stop_reason":"tool_use"' in raw.decode()
