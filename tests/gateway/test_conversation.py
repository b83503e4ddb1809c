"""The neutral conversation shape (gateway/conversation.py) and each wire's stop reasons and usage mapped to
it and back: every neutral reason out and in again, every wire reason in and out again. Where two names of a
wire say one neutral reason (Anthropic's stop_sequence and end_turn) a round trip gives the one the gateway
answers with, and a test names each such pair, so that a new reason cannot fold into another unseen. Usage
likewise: each wire's usage in and out again, the neutral counts to chat and back, and a test names each
count a wire folds into another or reads as 0. Tool calls likewise: each wire's in and out again (arguments
empty, non-ASCII, not an object, not JSON), each ToolCall to chat and back, and what a wire makes up,
leaves out or sends as an empty object named."""
import json
from dataclasses import replace

import pytest

from gateway.conversation import Choice, PassedThrough, StopReason, ToolCall, Usage, stop_reason_of
from gateway.upstream import anthropic_answer, gemini_answer, openai
from gateway.upstream.shapes import ChunkStream, commits
from utils_app.errors import UpstreamError

# Chat's older single-function call has no name of its own on any other wire: it goes out as a tool call.
FOLDED_NEUTRAL = {StopReason.FUNCTION_CALL: StopReason.TOOL_CALLS}


def after_folding(reason: StopReason) -> StopReason:
    return FOLDED_NEUTRAL.get(reason, reason)


# ---------------------------------------------------------------- Anthropic

@pytest.mark.parametrize("reason", list(StopReason))
def test_every_neutral_reason_goes_to_anthropic_and_comes_back(reason):
    wire = anthropic_answer.stop_reason(reason.value, called=False)
    back = anthropic_answer.finish_reason(wire, called=reason in (StopReason.TOOL_CALLS, StopReason.FUNCTION_CALL))
    assert back == after_folding(reason)


@pytest.mark.parametrize("wire", sorted(anthropic_answer.FINISH_REASONS))
def test_every_anthropic_stop_reason_comes_in_and_goes_back_out(wire):
    called = wire == "tool_use"
    finish = anthropic_answer.finish_reason(wire, called=called)
    assert StopReason(finish) is anthropic_answer.FINISH_REASONS[wire]
    out = anthropic_answer.stop_reason(finish, called=called)
    assert out == wire or anthropic_answer.FINISH_REASONS[out] == anthropic_answer.FINISH_REASONS[wire]


def test_the_anthropic_reasons_that_share_a_neutral_one_go_back_as_the_first_named():
    shared = {wire: anthropic_answer.stop_reason(anthropic_answer.finish_reason(wire, called=False), called=False)
              for wire in anthropic_answer.FINISH_REASONS
              if anthropic_answer.stop_reason(anthropic_answer.finish_reason(wire, called=False), called=False) != wire}
    assert shared == {"stop_sequence": "end_turn", "pause_turn": "end_turn",
                      "model_context_window_exceeded": "max_tokens"}


def test_anthropic_names_every_neutral_reason():
    assert set(anthropic_answer.STOP_REASONS) == set(StopReason)


def test_an_anthropic_answer_that_calls_a_tool_is_tool_use_whatever_its_reason():
    assert anthropic_answer.finish_reason("end_turn", called=True) == "tool_calls"
    assert anthropic_answer.stop_reason("stop", called=True) == "tool_use"


def test_anthropic_reasons_it_never_named_read_as_stop_and_go_out_as_end_turn():
    assert anthropic_answer.finish_reason("a_reason_of_tomorrow", called=False) == "stop"
    assert anthropic_answer.finish_reason(None, called=False) is None
    assert anthropic_answer.stop_reason(stop_reason_of("paused"), called=False) == "end_turn"
    assert anthropic_answer.stop_reason(None, called=False) == "end_turn"


def test_a_choice_of_a_whole_answer_reads_what_it_safely_can():
    """What the inbound APIs write out of a chat.completion: each choice that is an object, its text, its tool
    calls that are objects and its finish; a member of another kind reads as nothing, never as an error."""
    called = ToolCall("call_1", "f", "{}")
    completion = {"choices": [
        {"index": 3, "message": {"content": [{"type": "text", "text": "a"}, {"text": "b"}, "x"],
                                 "tool_calls": [called.to_chat(), "junk"]}, "finish_reason": "tool_calls"},
        "not a choice",
        {"message": "text", "finish_reason": "a_reason_of_tomorrow"},
        {"message": {"content": 5, "tool_calls": {"id": "x"}}, "index": True, "finish_reason": ["stop"]}]}
    assert Choice.all_of(completion) == [Choice(3, "a b", (called,), StopReason.TOOL_CALLS),
                                         Choice(2, "", (), StopReason.STOP), Choice(3, "", (), StopReason.STOP)]
    assert Choice.all_of({"choices": {"0": {}}}) == Choice.all_of({}) == []
    assert [stop_reason_of(value) for value in (None, "", "length", "paused")] == \
        [None, None, StopReason.LENGTH, StopReason.STOP]


# ---------------------------------------------------------------- Gemini

def gemini_wire_reasons():
    return sorted(set(gemini_answer.FINISH_REASONS) | gemini_answer.FILTERED)


@pytest.mark.parametrize("reason", list(StopReason))
def test_every_neutral_reason_goes_to_gemini_and_comes_back(reason):
    wire = gemini_answer.google_finish_reason(reason.value)
    # Gemini has no reason for a tool call: the call itself says it.
    back = gemini_answer.finish_reason(wire, called=reason in (StopReason.TOOL_CALLS, StopReason.FUNCTION_CALL))
    assert back == after_folding(reason)


@pytest.mark.parametrize("wire", gemini_wire_reasons())
def test_every_gemini_finish_reason_comes_in_and_goes_back_out(wire):
    finish = gemini_answer.finish_reason(wire, called=False)
    out = gemini_answer.google_finish_reason(finish)
    # Every reason for withholding output says content_filter, which goes out as SAFETY.
    assert out == ("SAFETY" if wire in gemini_answer.FILTERED else wire)
    assert gemini_answer.finish_reason(out, called=False) == finish


def test_gemini_names_every_neutral_reason():
    assert set(gemini_answer.GOOGLE_REASONS) == set(StopReason)


def test_gemini_reasons_it_never_named_read_as_stop_and_go_out_as_stop():
    assert gemini_answer.finish_reason("FINISH_REASON_UNSPECIFIED", called=False) == "stop"
    assert gemini_answer.finish_reason(None, called=False) is None
    assert gemini_answer.google_finish_reason(None) == "STOP"
    assert gemini_answer.google_finish_reason(stop_reason_of("paused")) == "STOP"


# ---------------------------------------------------------------- the Responses API's incomplete reasons

def responses_finish(status, reason=None, calls=False):
    output = [{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}] if calls else []
    response = {"id": "resp_1", "status": status, "output": output,
                **({"incomplete_details": {"reason": reason}} if reason else {})}
    return openai.responses_completion(response)["choices"][0]["finish_reason"]


@pytest.mark.parametrize("reason", list(StopReason))
def test_every_neutral_reason_goes_to_a_response_and_comes_back(reason):
    incomplete = openai.incomplete_reason(reason.value)
    calls = reason in (StopReason.TOOL_CALLS, StopReason.FUNCTION_CALL)
    back = responses_finish("incomplete" if incomplete else "completed", incomplete, calls=calls)
    assert back == after_folding(reason)


@pytest.mark.parametrize("wire", sorted(openai.FINISHES))
def test_every_incomplete_reason_comes_in_and_goes_back_out(wire):
    assert openai.incomplete_reason(responses_finish("incomplete", wire)) == wire


def test_a_response_incomplete_for_a_reason_never_named_was_cut_short():
    assert responses_finish("incomplete", "a_reason_of_tomorrow") == "length"
    assert openai.incomplete_reason(None) is None and openai.incomplete_reason("stop") is None


# ---------------------------------------------------------------- usage, chat's

NEUTRAL_USAGES = [Usage(input_tokens=18, output_tokens=7, cached_tokens=10, reasoning_tokens=3),
                  Usage(input_tokens=5, output_tokens=2),  # no details: left out, not 0
                  Usage(input_tokens=0, output_tokens=0, cached_tokens=0, reasoning_tokens=0),
                  Usage(output_tokens=4, cached_tokens=1),  # the input not known
                  Usage()]


@pytest.mark.parametrize("usage", NEUTRAL_USAGES)
def test_every_usage_goes_to_chat_and_comes_back(usage):
    assert Usage.from_chat(usage.to_chat()) == usage


def test_chats_usage_has_a_member_for_each_count_known_and_a_total_when_both_are():
    assert list(Usage(input_tokens=18, output_tokens=7, cached_tokens=10, reasoning_tokens=3).to_chat().items()) == [
        ("prompt_tokens", 18), ("completion_tokens", 7), ("total_tokens", 25),
        ("prompt_tokens_details", {"cached_tokens": 10}), ("completion_tokens_details", {"reasoning_tokens": 3})]
    assert Usage(input_tokens=5).to_chat() == {"prompt_tokens": 5}
    assert Usage(cached_tokens=0).to_chat() == {"prompt_tokens_details": {"cached_tokens": 0}}
    assert Usage().to_chat() == {}


def test_chat_has_no_member_for_cache_writes_they_are_part_of_its_prompt_tokens():
    written = Usage(input_tokens=20, output_tokens=2, cached_tokens=5, cache_write_tokens=4)
    assert written.to_chat()["prompt_tokens"] == 20
    assert Usage.from_chat(written.to_chat()) == replace(written, cache_write_tokens=None)


def test_chat_counts_that_cannot_be_used_are_not_known():
    assert Usage.from_chat({"prompt_tokens": -1, "completion_tokens": 2.5, "total_tokens": 9,
                            "prompt_tokens_details": {"cached_tokens": True},
                            "completion_tokens_details": {"reasoning_tokens": "3"}}) == Usage()
    assert Usage.from_chat(None) == Usage() and Usage.from_chat({"prompt_tokens_details": [4]}) == Usage()
    # Members chat's usage carries beside the counts (OpenAI's audio tokens, the credits charged) are no count.
    assert Usage.from_chat({"prompt_tokens": 3, "cost": 12, "prompt_tokens_details": {"audio_tokens": 2}}) == Usage(
        input_tokens=3)


# ---------------------------------------------------------------- usage, Anthropic's

ANTHROPIC_USAGES = [
    {"input_tokens": 3, "output_tokens": 2, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 10},
    {"input_tokens": 12, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}]


@pytest.mark.parametrize("wire", ANTHROPIC_USAGES)
def test_every_anthropic_usage_comes_in_and_goes_back_out(wire):
    out = anthropic_answer.message_usage(anthropic_answer.usage(wire))
    assert list(out.items()) == list(wire.items())


def test_anthropic_input_counts_every_input_token_and_the_cached_and_written_ones_apart():
    assert anthropic_answer.usage(ANTHROPIC_USAGES[0]) == Usage(input_tokens=18, output_tokens=2, cached_tokens=10,
                                                                cache_write_tokens=5)


def test_a_usage_goes_to_anthropic_and_comes_back_but_its_reasoning():
    usage = Usage(input_tokens=18, output_tokens=7, cached_tokens=10, reasoning_tokens=3, cache_write_tokens=5)
    # Anthropic reports no reasoning apart from the output; a count not known goes out as 0 and reads back as 0.
    assert anthropic_answer.usage(anthropic_answer.message_usage(usage)) == replace(usage, reasoning_tokens=None)
    assert anthropic_answer.usage(anthropic_answer.message_usage(Usage())) == Usage(0, 0, 0, None, 0)


def test_anthropic_counts_left_out_read_as_0_and_go_back_out_as_0():
    assert anthropic_answer.message_usage(anthropic_answer.usage({"input_tokens": 4, "output_tokens": 1})) == {
        "input_tokens": 4, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    assert anthropic_answer.usage(None) == Usage()


def test_an_anthropic_count_it_cannot_use_leaves_its_total_not_known():
    counted = anthropic_answer.usage({"input_tokens": 4, "output_tokens": -1, "cache_read_input_tokens": 2,
                                      "cache_creation_input_tokens": "x"})
    assert counted == Usage(cached_tokens=2)


# ---------------------------------------------------------------- usage, Gemini's usageMetadata

GEMINI_USAGES = [
    {"promptTokenCount": 20, "candidatesTokenCount": 4, "totalTokenCount": 27, "cachedContentTokenCount": 12,
     "thoughtsTokenCount": 3},
    {"promptTokenCount": 11, "candidatesTokenCount": 5, "totalTokenCount": 16},
    {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}]


@pytest.mark.parametrize("wire", GEMINI_USAGES)
def test_every_gemini_usage_comes_in_and_goes_back_out(wire):
    out = gemini_answer.usage_metadata(gemini_answer.usage(wire))
    assert list(out.items()) == list(wire.items())


def test_gemini_output_counts_the_thinking_tokens_too():
    assert gemini_answer.usage(GEMINI_USAGES[0]) == Usage(input_tokens=20, output_tokens=7, cached_tokens=12,
                                                          reasoning_tokens=3)


def test_a_usage_goes_to_gemini_and_comes_back_with_what_gemini_leaves_out_as_0():
    usage = Usage(input_tokens=18, output_tokens=7, cached_tokens=10, reasoning_tokens=3)
    assert gemini_answer.usage(gemini_answer.usage_metadata(usage)) == usage
    # Gemini has no cache writes (they are in the prompt's count); a count not known goes out as 0 or left out.
    assert gemini_answer.usage(gemini_answer.usage_metadata(replace(usage, cache_write_tokens=4))) == usage
    assert gemini_answer.usage(gemini_answer.usage_metadata(Usage())) == Usage(0, 0, 0, 0)


def test_the_gemini_counts_that_fold_into_another_or_are_left_out_when_0():
    # What built-in tools fed back goes out as part of the prompt; the total is the gateway's own sum.
    folded = gemini_answer.usage({"promptTokenCount": 10, "toolUsePromptTokenCount": 4, "candidatesTokenCount": 3,
                                  "totalTokenCount": 99, "cachedContentTokenCount": 0, "thoughtsTokenCount": 0})
    assert gemini_answer.usage_metadata(folded) == {"promptTokenCount": 14, "candidatesTokenCount": 3,
                                                    "totalTokenCount": 17}
    # Reasoning is never more than the output.
    assert gemini_answer.usage_metadata(Usage(input_tokens=1, output_tokens=2, reasoning_tokens=5)) == {
        "promptTokenCount": 1, "candidatesTokenCount": 0, "totalTokenCount": 3, "thoughtsTokenCount": 2}


def test_a_gemini_count_it_cannot_use_leaves_its_total_not_known():
    assert gemini_answer.usage({"promptTokenCount": -3, "candidatesTokenCount": "many"}) == Usage(
        cached_tokens=0, reasoning_tokens=0)
    assert gemini_answer.usage(None) == Usage()


# ---------------------------------------------------------------- usage, the Responses API's

RESPONSE_USAGES = [
    {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 4}, "output_tokens": 9,
     "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 39},
    {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens": 0,
     "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}]


@pytest.mark.parametrize("wire", RESPONSE_USAGES)
def test_every_responses_usage_comes_in_and_goes_back_out(wire):
    out = openai.response_usage(openai.response_counts(wire))
    assert json.dumps(out) == json.dumps(wire)  # members and their order


def test_a_usage_goes_to_a_response_and_comes_back_with_what_it_does_not_know_as_0():
    usage = Usage(input_tokens=30, output_tokens=9, cached_tokens=20, reasoning_tokens=5, cache_write_tokens=4)
    assert openai.response_counts(openai.response_usage(usage)) == usage
    assert openai.response_counts(openai.response_usage(Usage())) == Usage(0, 0, 0, 0, 0)
    # Reasoning is never more than the output.
    assert openai.response_usage(Usage(output_tokens=2, reasoning_tokens=5))["output_tokens_details"] == {
        "reasoning_tokens": 2}


def test_a_responses_count_left_out_or_unusable_is_not_known_and_goes_out_as_0():
    counted = openai.response_counts({"input_tokens": 7, "output_tokens": -2, "input_tokens_details": None,
                                      "output_tokens_details": {"reasoning_tokens": "many"}})
    assert counted == Usage(input_tokens=7)
    assert openai.response_usage(counted) == {
        "input_tokens": 7, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}
    assert openai.response_counts(None) == Usage()


# ---------------------------------------------------------------- tool calls

# Arguments empty, non-ASCII, not an object, not JSON at all: chat carries each as the model wrote it.
CALLS = [ToolCall("call_1", "get_weather", '{"city": "Zürich", "days": [1, 2]}'), ToolCall("call_2", "ping", ""),
         ToolCall("call_3", "sum", "[1, 2]"), ToolCall("call_4", "f", '{"a": '), ToolCall("", "f", "{}")]
malformed = UpstreamError  # what an adapter raises for an answer it cannot read


@pytest.mark.parametrize("call", CALLS)
def test_every_tool_call_goes_to_chat_and_comes_back(call):
    assert ToolCall.from_chat(call.to_chat()) == call == ToolCall.from_chat(call.to_chat(index=3))
    assert list(call.to_chat(index=3)) == ["index", "id", "type", "function"]


def test_a_chat_id_or_name_not_a_string_is_not_given_and_arguments_sent_as_an_object_are_its_text():
    assert ToolCall.from_chat({"id": 7, "function": {"name": None, "arguments": {"q": "é"}}}) == \
        ToolCall("", "", '{"q": "é"}')
    assert ToolCall.from_chat("not a call") == ToolCall.from_chat({"function": []}) == ToolCall("", "", "")


def test_arguments_that_are_not_an_object_are_an_empty_object_to_a_wire_that_wants_one():
    assert [call.arguments_object() for call in CALLS] == [{"city": "Zürich", "days": [1, 2]}, {}, {}, {}, {}]


@pytest.mark.parametrize("block", [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "Zürich"}},
                                   {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": {}}])
def test_every_anthropic_tool_use_comes_in_and_goes_back_out(block):
    assert anthropic_answer.tool_use(anthropic_answer.tool_call(block, malformed)) == block


def test_anthropic_makes_up_an_id_not_given_and_sends_arguments_that_are_not_an_object_as_an_empty_input():
    call = anthropic_answer.tool_call({"type": "tool_use", "name": "ping"}, malformed)
    assert call.id.startswith("call_") and call.arguments == "{}"
    assert anthropic_answer.tool_use(ToolCall("", "sum", "[1, 2]")) | {"id": "x"} == \
        {"type": "tool_use", "id": "x", "name": "sum", "input": {}}
    for block in ({"name": 1}, {"name": "f", "input": "[1]"}):
        with pytest.raises(UpstreamError):
            anthropic_answer.tool_call(block, malformed)


@pytest.mark.parametrize("part", [{"functionCall": {"name": "weather", "args": {"city": "Zürich"}, "id": "fc-1"}},
                                  {"functionCall": {"name": "ping", "args": {}, "id": "fc-2"}}])
def test_every_gemini_function_call_comes_in_and_goes_back_out(part):
    assert gemini_answer.function_call_part(gemini_answer.tool_call(part["functionCall"], malformed)) == part


def test_gemini_makes_up_an_id_not_given_coming_in_and_leaves_it_out_going_out():
    call = gemini_answer.tool_call({"name": "ping"}, malformed)
    assert call.id.startswith("call_") and call.arguments == "{}"
    assert gemini_answer.function_call_part(ToolCall("", "sum", "[1, 2]")) == {"functionCall": {"name": "sum",
                                                                                                 "args": {}}}
    for found in ({"name": 1}, {"name": "f", "args": [1]}, "f"):
        with pytest.raises(UpstreamError):
            gemini_answer.tool_call(found, malformed)


@pytest.mark.parametrize("arguments", ['{"city": "Zürich"}', "[1, 2]", "not JSON"])
def test_every_function_call_item_comes_in_and_goes_back_out(arguments):
    item = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "f",
            "arguments": arguments}
    assert openai.function_call_item(openai.response_tool_call(item), item_id="fc_1") == item


def test_a_function_call_item_makes_up_a_call_id_not_given_and_sends_empty_arguments_as_an_empty_object():
    call = openai.response_tool_call({"type": "function_call", "name": "ping"})
    assert call.id.startswith("call_") and call.arguments == ""
    assert openai.function_call_item(call, item_id="fc_1")["arguments"] == "{}"


@pytest.mark.parametrize(("arguments", "sent"), [('{"input": "ls -la"}', "ls -la"), ("plain text", "plain text"),
                                                 ('{"input": 5}', "5"), ("", "null")])
def test_a_custom_tool_call_goes_out_with_the_input_member_of_its_arguments(arguments, sent):
    item = openai.custom_tool_call_item(ToolCall("call_1", "shell", arguments), item_id="ctc_1")
    assert item == {"id": "ctc_1", "type": "custom_tool_call", "status": "completed", "call_id": "call_1",
                    "name": "shell", "input": sent}
    assert openai.response_tool_call(item).arguments == sent  # the input as it is, for the metering


# ---------------------------------------------------------------- what passes through

def test_a_passed_through_answer_is_its_translation_with_the_providers_own_beside_it():
    native = {"type": "message", "content": [{"type": "text", "text": "Hi"}]}
    answer = PassedThrough({"object": "chat.completion", "choices": []}, native)
    answer["model"] = "claude-chat"  # the metering stamps the translation as any other answer
    assert answer == {"object": "chat.completion", "choices": [], "model": "claude-chat"}
    assert answer.native is native and "model" not in native
    # Only the translation is the mapping: the provider's answer never leaks into what is serialised of it.
    assert json.loads(json.dumps(answer)) == dict(answer)


def test_only_an_event_its_adapter_marks_as_output_commits_a_stream_that_shows_none():
    thinking = {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "Hm"}}
    assert commits(PassedThrough({"choices": []}, thinking, carries_output=True))
    assert not commits(PassedThrough({"choices": []}, thinking))
    assert not commits({"choices": [], "native": thinking})
    assert commits(PassedThrough({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}, {}))


def test_a_stream_passed_through_holds_its_events_up_to_the_first_that_carries_output():
    events = [PassedThrough({"choices": []}, {"type": "message_start"}),
              PassedThrough({"choices": []}, {"type": "content_block_delta"}, carries_output=True),
              PassedThrough({"choices": []}, {"type": "message_stop"})]
    closed = []
    stream = ChunkStream(iter(events), lambda: closed.append(True))
    relayed = list(stream)
    assert all(isinstance(chunk, PassedThrough) for chunk in relayed) and not closed
    assert [chunk.native["type"] for chunk in relayed] == ["message_start", "content_block_delta", "message_stop"]
