"""A streamed answer's pieces in the neutral shape (gateway/conversation.py): chat's chunks read into
StreamPiece values and written back, each wire's stream read into them by its adapter and written back out to
the same wire by its codec, the chunks each codec reads, and what each wire leaves out named."""
import json

import pytest

from gateway.conversation import Delta, StopReason, StreamPiece, ToolCallDelta, Usage
from gateway.gemini_api.stream import GeminiEvents
from gateway.messages.stream import AnthropicEvents
from gateway.responses.stream import ResponsesEvents
from gateway.upstream import anthropic_answer, gemini_answer
from gateway.upstream.openai import response_event_chunk
from utils_app.errors import UpstreamError

SIGNED = {"google": {"thought_signature": "c2ln"}}
PIECES = [
    StreamPiece((Delta(role="assistant"),), id="chatcmpl-1", model="m", created=7),
    StreamPiece((Delta(text="Hé"),), id="chatcmpl-1", model="m", created=7),
    StreamPiece((Delta(text=""),)),  # content sent empty is content
    StreamPiece((Delta(tool_calls=(ToolCallDelta(0, "call_1", "weather"),)),)),
    StreamPiece((Delta(tool_calls=(ToolCallDelta(0, arguments='{"city":'),
                                   ToolCallDelta(1, arguments='"Oslo"}'))),)),
    StreamPiece((Delta(1, "assistant", "x", (ToolCallDelta(2, "c", "f", "{}", SIGNED),), StopReason.TOOL_CALLS,
                       {"content": [], "refusal": None}), Delta(0, finish=StopReason.LENGTH))),
    *(StreamPiece((Delta(finish=reason),)) for reason in StopReason),
    StreamPiece(usage=Usage(12, 5, 3, 2), cost=40),
    StreamPiece(usage=Usage()),  # a usage object that knows no count
    StreamPiece(),
    StreamPiece((Delta(text="a"),), usage=Usage(1, 1)),
]


def malformed(what):
    return UpstreamError(f"malformed {what}")


# ---------------------------------------------------------------- chat's chunks

@pytest.mark.parametrize("piece", PIECES)
def test_every_piece_goes_to_a_chat_chunk_and_comes_back(piece):
    assert StreamPiece.from_chunk(piece.to_chunk()) == piece
    assert StreamPiece.from_chunk(json.loads(json.dumps(piece.to_chunk()))) == piece


def test_a_chunk_writes_its_members_in_chat_s_order():
    chunk = StreamPiece((Delta(0, "assistant", "t", (ToolCallDelta(0, "c", "f", "{}", SIGNED),)),),
                        usage=Usage(1, 2), cost=3, id="i", model="m", created=1).to_chunk()
    assert list(chunk) == ["id", "object", "created", "model", "choices", "usage"]
    assert chunk["object"] == "chat.completion.chunk"
    assert list(chunk["choices"][0]) == ["index", "delta", "logprobs", "finish_reason"]
    assert list(chunk["choices"][0]["delta"]) == ["role", "content", "tool_calls"]
    assert chunk["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"},
         "extra_content": SIGNED}]
    assert chunk["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "cost": 3}
    # A later piece of a call (no id) is its index and arguments only.
    assert ToolCallDelta(1, arguments="x").to_chat() == {"index": 1, "function": {"arguments": "x"}}


def test_the_brief_chunk_leaves_out_the_envelope_logprobs_and_a_finish_not_yet_given():
    assert StreamPiece((Delta(text="a"),), id="i", model="m").to_chunk(brief=True) == {
        "choices": [{"index": 0, "delta": {"content": "a"}}]}
    assert StreamPiece((Delta(finish=StopReason.STOP),), Usage(1, 1)).to_chunk(brief=True) == {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    assert StreamPiece().to_chunk(brief=True) == {"choices": []}


@pytest.mark.parametrize(("chunk", "piece"), [
    ("not a chunk", StreamPiece()),
    ({"choices": 5, "id": 3, "model": [], "created": "now"}, StreamPiece()),
    ({"choices": ["x", None, {"delta": "no"}]}, StreamPiece((Delta(2),))),  # its place is its index
    ({"choices": [{"index": True, "delta": {"role": "user", "content": 5, "tool_calls": 7}}]}, StreamPiece((Delta(),))),
    ({"choices": [{"delta": {"tool_calls": [None, {"function": "f"}, {"index": "1", "id": 9, "function": {
        "name": 4, "arguments": {"a": 1}}}]}}]}, StreamPiece((Delta(tool_calls=(ToolCallDelta(), ToolCallDelta())),))),
    ({"choices": [{"finish_reason": "weird"}, {"finish_reason": ["x"]}, {"finish_reason": ""}]},
     StreamPiece((Delta(0, finish=StopReason.STOP), Delta(1, finish=StopReason.STOP), Delta(2)))),
    ({"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2.5, "cost": "9"}},
     StreamPiece(usage=Usage())),
    ({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": True, "cost": True}},
     StreamPiece(usage=Usage(4))),
    ({"usage": "lots"}, StreamPiece()),
])
def test_a_malformed_chunk_reads_as_what_it_safely_can(chunk, piece):
    assert StreamPiece.from_chunk(chunk) == piece


# ---------------------------------------------------------------- Anthropic's stream

def sse(events):
    return [(kind.removeprefix("event: "), json.loads(data)) for kind, data in
            (frame.split("\ndata: ") for frame in b"".join(events).decode().split("\n\n") if frame)]


ANTHROPIC = [
    {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 9}}},
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hé"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f",
                                                                  "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"a":'}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}},
    {"type": "message_stop"},
]


def anthropic_chunks(events):
    stream = anthropic_answer.StreamTranslation(model="claude")
    chunks = [chunk for event in events if (chunk := stream.translate(event, malformed=malformed))]
    return chunks + [stream.usage_chunk()]


def test_anthropic_s_stream_reads_into_pieces():
    pieces = [StreamPiece.from_chunk(chunk) for chunk in anthropic_chunks(ANTHROPIC)]
    assert [piece.choices for piece in pieces[:-1]] == [
        (Delta(role="assistant"),), (Delta(text="Hé"),),
        (Delta(tool_calls=(ToolCallDelta(0, "toolu_1", "f"),)),),
        (Delta(tool_calls=(ToolCallDelta(0, arguments='{"a":'),)),),
        (Delta(tool_calls=(ToolCallDelta(0, arguments="1}"),)),),
        (Delta(finish=StopReason.TOOL_CALLS),)]
    assert {piece.id for piece in pieces} == {"chatcmpl-msg_1"}
    # Chat's usage has no cache writes (they are part of its prompt count): the chunk leaves them out.
    assert pieces[-1] == StreamPiece(usage=Usage(9, 4, 0), id="chatcmpl-msg_1", model="claude",
                                     created=pieces[0].created)


def test_anthropic_s_stream_goes_out_again_as_it_came_but_thinking():
    chunks = anthropic_chunks(ANTHROPIC)
    for chunk in chunks:
        chunk["model"] = "claude"  # as the relay names it
    codec = AnthropicEvents(lambda: 0)
    events = sse([codec.chunk(chunk) for chunk in chunks] + [codec.end()])
    sent = [(kind, data) for kind, data in ((event["type"], event) for event in ANTHROPIC)
            if kind != "ping" and data.get("index") != 0]
    kinds = [kind for kind, _ in events]
    assert kinds == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    assert [data["delta"] for kind, data in events if kind == "content_block_delta"] == [
        data["delta"] for kind, data in sent if kind == "content_block_delta"]
    assert events[5][1]["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    assert events[2][1]["index"] == 0  # the thinking block is left out: the text is the first block
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert events[-2][1]["usage"] == {"input_tokens": 9, "output_tokens": 4, "cache_creation_input_tokens": 0,
                                      "cache_read_input_tokens": 0}
    assert events[0][1]["message"]["id"] == "msg_1"


@pytest.mark.parametrize(("reason", "back"), [("end_turn", "end_turn"), ("max_tokens", "max_tokens"),
                                              ("refusal", "refusal"), ("stop_sequence", "end_turn"),
                                              ("pause_turn", "end_turn")])
def test_anthropic_s_stop_reason_goes_out_again_and_the_folded_ones_are_named(reason, back):
    events = [ANTHROPIC[0], {"type": "message_delta", "delta": {"stop_reason": reason}}]
    codec = AnthropicEvents()
    out = sse([codec.chunk(chunk) for chunk in anthropic_chunks(events)] + [codec.end()])
    assert out[-2][1]["delta"]["stop_reason"] == back


def test_the_metered_usage_chunk_goes_to_anthropic_with_its_cost():
    codec = AnthropicEvents()
    codec.chunk(StreamPiece((Delta(role="assistant"),), model="m").to_chunk())
    codec.chunk(StreamPiece(usage=Usage(10, 3, 4), cost=77).to_chunk())
    assert sse([codec.end()])[0][1]["usage"] == {"input_tokens": 6, "output_tokens": 3,
                                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4,
                                                 "cost": 77}


# ---------------------------------------------------------------- Gemini's stream

GEMINI = [
    {"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": [
        {"text": "plan", "thought": True}, {"text": "Hé"}]}, "index": 0}]},
    {"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"id": "c1", "name": "f", "args": {"a": 1}}, "thoughtSignature": "c2ln"}]},
        "finishReason": "STOP", "index": 0}],
     "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 1,
                       "totalTokenCount": 8}},
]


def gemini_chunks(events):
    stream = gemini_answer.StreamTranslation(model="gemini", candidates=1)
    chunks = [chunk for event in events if (chunk := stream.translate(event, malformed=malformed))]
    return chunks + [stream.usage_chunk()]


def test_gemini_s_stream_reads_into_pieces():
    pieces = [StreamPiece.from_chunk(chunk) for chunk in gemini_chunks(GEMINI)]
    assert [piece.choices for piece in pieces[:-1]] == [
        (Delta(0, "assistant", "Hé"),),
        (Delta(0, tool_calls=(ToolCallDelta(0, "c1", "f", '{"a": 1}', SIGNED),), finish=StopReason.TOOL_CALLS),)]
    assert pieces[-1].usage == Usage(5, 3, 0, 1)  # a cached count left out reads as 0


def test_gemini_s_stream_goes_out_again_without_thoughts_or_signatures():
    codec = GeminiEvents(sse=False)
    chunks = gemini_chunks(GEMINI)
    for chunk in chunks:
        chunk["model"] = "gemini"
    out = json.loads(b"".join([codec.chunk(chunk) for chunk in chunks] + [codec.end()]))
    assert [item["candidates"] for item in out] == [
        [{"content": {"role": "model", "parts": [{"text": "Hé"}]}, "index": 0}],
        [{"content": {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}, "id": "c1"}}]},
          "finishReason": "STOP", "index": 0}]]
    # Thinking counted apart again, as Google counts it.
    assert out[-1]["usageMetadata"] == {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 8,
                                        "thoughtsTokenCount": 1}
    assert {item["responseId"] for item in out} == {"r1"}


def test_chat_s_tool_call_pieces_go_to_gemini_as_one_call_with_the_usage():
    codec = GeminiEvents(sse=True)
    chunks = [StreamPiece((Delta(tool_calls=(ToolCallDelta(0, "c1", "f", '{"a":'),)),)),
              StreamPiece((Delta(tool_calls=(ToolCallDelta(0, arguments="1}"),)),)),
              StreamPiece((Delta(finish=StopReason.TOOL_CALLS),)), StreamPiece(usage=Usage(3, 1), cost=2)]
    out = b"".join(codec.chunk(piece.to_chunk()) for piece in chunks) + codec.end()
    assert out.count(b"data: ") == 1  # the finished call waits for the usage
    item = json.loads(out.removeprefix(b"data: "))
    assert item["candidates"] == [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "f", "args": {"a": 1}, "id": "c1"}}]}, "finishReason": "STOP", "index": 0}]
    # Google's usageMetadata has no member for the credits charged: the cost is left out.
    assert item["usageMetadata"] == {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}


def test_a_gemini_stream_has_a_usage_chunk_only_once_usage_metadata_came():
    stream = gemini_answer.StreamTranslation(model="g", candidates=1)
    stream.translate(GEMINI[0], malformed=malformed)
    assert stream.usage is None  # the adapter sends no usage chunk (gateway.upstream.gemini)
    stream.translate(GEMINI[1], malformed=malformed)
    assert StreamPiece.from_chunk(stream.usage_chunk()).usage == stream.usage == Usage(5, 3, 0, 1)


def test_a_withheld_gemini_answer_goes_out_as_safety():
    event = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "RECITATION", "index": 0}]}
    codec = GeminiEvents(sse=False)
    out = json.loads(b"".join([codec.chunk(chunk) for chunk in gemini_chunks([event])] + [codec.end()]))
    assert out[-1]["candidates"][0]["finishReason"] == "SAFETY"  # content_filter: Gemini's reasons fold into one


# ---------------------------------------------------------------- the Responses API's stream

class Dialect:
    body, response_id, created_at, model, customs, final = {"model": "m"}, "resp_1", 1, "m", {"grammar"}, None

    def kept(self):
        return None


RESPONSES = [
    {"type": "response.output_text.delta", "delta": "Hé"},
    {"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "call_id": "c1",
                                                                       "name": "f", "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
    {"type": "response.completed", "response": {"status": "completed", "output": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}],
        "usage": {"input_tokens": 4, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}}}},
]


def test_the_responses_stream_reads_into_pieces_for_the_metering():
    pieces = [StreamPiece.from_chunk(response_event_chunk(event)) for event in RESPONSES]
    assert pieces == [StreamPiece((Delta(text="Hé"),)),
                      StreamPiece((Delta(tool_calls=(ToolCallDelta(1, "c1", "f"),)),)),
                      StreamPiece(),  # the arguments are left out: the finished response carries them
                      StreamPiece((Delta(finish=StopReason.TOOL_CALLS),), Usage(4, 2, 1))]
    assert [response_event_chunk(event) for event in RESPONSES] == [piece.to_chunk(brief=True) for piece in pieces]


def test_chat_chunks_go_out_as_the_responses_stream():
    codec = ResponsesEvents(Dialect())
    chunks = [StreamPiece((Delta(role="assistant", text="Hé"),)),
              StreamPiece((Delta(tool_calls=(ToolCallDelta(0, "c1", "f"),)),)),
              StreamPiece((Delta(tool_calls=(ToolCallDelta(0, arguments='{"a":1}'),)),)),
              StreamPiece((Delta(tool_calls=(ToolCallDelta(1, "c2", "grammar", '{"input":"x"}'),)),)),
              StreamPiece((Delta(finish=StopReason.LENGTH),)), StreamPiece(usage=Usage(4, 2), cost=5)]
    events = sse([codec.chunk(piece.to_chunk()) for piece in chunks] + [codec.end()])
    assert [data for kind, data in events if kind == "response.output_text.delta"][0]["delta"] == "Hé"
    assert [data["delta"] for kind, data in events if kind == "response.function_call_arguments.delta"] == ['{"a":1}']
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["type"] for item in final["output"]] == ["message", "function_call", "custom_tool_call"]
    assert final["output"][1]["arguments"] == '{"a":1}' and final["output"][2]["input"] == "x"
    assert final["usage"]["cost"] == 5 and final["usage"]["total_tokens"] == 6
