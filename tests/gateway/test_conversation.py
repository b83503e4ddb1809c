"""The neutral conversation shape (gateway/conversation.py) and each wire's stop reasons mapped to it and
back: every neutral reason out and in again, every wire reason in and out again. Where two names of a wire
say one neutral reason (Anthropic's stop_sequence and end_turn) a round trip gives the one the gateway
answers with, and a test names each such pair, so that a new reason cannot fold into another unseen."""
import json

import pytest

from gateway.conversation import PassedThrough, StopReason
from gateway.upstream import anthropic_answer, gemini_answer, openai
from gateway.upstream.shapes import ChunkStream, commits

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
    assert anthropic_answer.stop_reason("paused", called=False) == "end_turn"
    assert anthropic_answer.stop_reason(None, called=False) == "end_turn"


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
    assert gemini_answer.google_finish_reason("paused") == "STOP"


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
