"""Anthropic's answer, a message object or its event stream, as an OpenAI-shaped chat answer; and its stop
reasons, usage and tool_use blocks as the neutral ones beside their reverse (gateway.messages answers with
these, and reads a request's earlier tool_use blocks with ``tool_call``; gateway.upstream.anthropic_messages
writes them with ``tool_use``)."""
import json
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from gateway.conversation import Delta, StopReason, StreamPiece, ToolCall, ToolCallDelta, Usage
from gateway.conversation_request import Message
from gateway.upstream.shapes import Malformed, tokens_reported, tool_call_id

# Anthropic's stop reasons as the neutral ones, and the neutral ones as Anthropic's (gateway.messages answers
# with these): a round trip keeps every reason but the ones two names share (stop_sequence and end_turn say
# stop; function_call, chat's older tool call, comes back as tool_calls).
FINISH_REASONS = {"end_turn": StopReason.STOP, "stop_sequence": StopReason.STOP, "pause_turn": StopReason.STOP,
                  "max_tokens": StopReason.LENGTH, "model_context_window_exceeded": StopReason.LENGTH,
                  "tool_use": StopReason.TOOL_CALLS, "refusal": StopReason.CONTENT_FILTER}
STOP_REASONS = {StopReason.STOP: "end_turn", StopReason.LENGTH: "max_tokens", StopReason.TOOL_CALLS: "tool_use",
                StopReason.FUNCTION_CALL: "tool_use", StopReason.CONTENT_FILTER: "refusal"}
# The stream event that carries a content block's output (text, a tool's input, thinking).
CONTENT_DELTA = "content_block_delta"


def finish_reason(reason: Any, called: bool) -> str | None:
    """Anthropic's stop reason as a chat answer's finish reason (``stop_reason`` is its reverse)."""
    if called:
        return StopReason.TOOL_CALLS.value  # an answer that calls a function, whatever Anthropic's reason
    if not reason:
        return None
    # A reason that is not a string is read as one Anthropic added after this was written: a stop.
    return FINISH_REASONS.get(reason, StopReason.STOP).value if isinstance(reason, str) else StopReason.STOP.value


def stop_reason(finish: StopReason | None, called: bool) -> str:
    """A chat answer's finish reason as Anthropic's stop reason (``finish_reason`` is its reverse); none
    said is a turn's end."""
    return STOP_REASONS[StopReason.TOOL_CALLS if called else finish or StopReason.STOP]


def usage(counts: Any) -> Usage:
    """Anthropic's usage as the neutral counts (``message_usage`` is its reverse): the input counts every
    input token, the ones read from the cache and the ones written to it included (Anthropic's
    input_tokens counts only the rest). A count left out reads as 0; Anthropic reports no reasoning apart."""
    if not isinstance(counts, dict):
        return Usage()
    # A count sent but unusable (negative, fractional, text) leaves its total unknown, and the gateway's
    # estimate is metered instead (docs/hardening.md); the metering clamps what is left (gateway.prices).
    cached, fresh, written, output = (tokens_reported(counts, name) for name in (
        "cache_read_input_tokens", "input_tokens", "cache_creation_input_tokens", "output_tokens"))
    whole = fresh + cached + written if cached is not None and fresh is not None and written is not None else None
    return Usage(input_tokens=whole, output_tokens=output, cached_tokens=cached, cache_write_tokens=written)


def message_usage(counted: Usage) -> dict[str, Any]:
    """The neutral counts as Anthropic's usage (``usage`` is its reverse): every member, a count not known
    as 0; input_tokens are the ones neither read from the cache nor written to it."""
    cached, written = counted.cached_tokens or 0, counted.cache_write_tokens or 0
    return {"input_tokens": max((counted.input_tokens or 0) - cached - written, 0),
            "output_tokens": counted.output_tokens or 0,
            "cache_creation_input_tokens": written, "cache_read_input_tokens": cached}


def _blocks(body: dict[str, Any], malformed: Malformed) -> list[dict[str, Any]]:
    content = body.get("content")
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise malformed("response")
    return content


def tool_call(block: dict[str, Any], malformed: Malformed) -> ToolCall:
    """A tool_use block as the neutral tool call (``tool_use`` is its reverse): an id left out or empty is
    made up (a chat tool call always has one), an input left out reads as {}; a name that is not a string
    or an input that is not an object is a malformed answer."""
    if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
        raise malformed("tool call")
    return ToolCall(id=block["id"] if isinstance(block.get("id"), str) and block["id"] else tool_call_id(),
                    name=block["name"], arguments=json.dumps(block.get("input") or {}, ensure_ascii=False))


def tool_use(call: ToolCall, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """The neutral tool call as a tool_use block (``tool_call`` is its reverse): an id not given is made up,
    the input is the arguments' object ({} when they are empty, do not parse or are not an object), or
    ``arguments`` when the caller has parsed them already."""
    return {"type": "tool_use", "id": call.id or tool_call_id(), "name": call.name,
            "input": call.arguments_object() if arguments is None else arguments}


def _completion_id(message_id: Any) -> str:
    return f"chatcmpl-{message_id}" if isinstance(message_id, str) and message_id else \
        f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion(body: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    texts, calls = [], []
    for block in _blocks(body, malformed):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(tool_call(block, malformed))
        # thinking blocks and server tools' blocks are not part of OpenAI's answer
    message = Message("assistant", "".join(texts) if texts else None, tuple(calls))
    answer = {"id": _completion_id(body.get("id")), "object": "chat.completion", "created": int(time.time()),
              "model": model, "choices": [{"index": 0, "message": message.to_chat(), "logprobs": None,
                                           "finish_reason": finish_reason(body.get("stop_reason") or "end_turn",
                                                                          bool(calls))}]}
    counted = usage(body.get("usage")).to_chat()
    if counted:
        answer["usage"] = counted
    return answer


@dataclass
class _Block:
    kind: str
    call: int | None = None  # a tool_use block's index among the answer's tool calls


class StreamTranslation:
    """Anthropic's stream events as chat.completion.chunk objects, one chunk per event that says something,
    as it arrives: text deltas as content, a tool_use block's start as a tool call (id and name) and its
    input_json_delta pieces as that call's arguments, message_delta as the finish reason."""

    def __init__(self, *, model: str):
        self.model = model
        self.id = _completion_id(None)
        self.created = int(time.time())
        self.counts: dict[str, Any] = {}
        self.blocks: dict[Any, _Block] = {}  # by the index the upstream gives a block
        self.calls = 0
        self.opened = False
        self.done = False

    def chunk(self, delta: Delta) -> dict[str, Any]:
        if not self.opened:
            delta = replace(delta, role="assistant")
            self.opened = True
        return StreamPiece((delta,), id=self.id, model=self.model, created=self.created).to_chunk()

    def count(self, counts: Any) -> None:
        if isinstance(counts, dict):
            self.counts.update({name: value for name, value in counts.items() if value is not None})

    def translate(self, event: dict[str, Any], *, malformed: Malformed) -> dict[str, Any] | None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise malformed("stream event")
            self.id = _completion_id(message.get("id"))
            self.count(message.get("usage"))
            return self.chunk(Delta())  # the role: held back until the first content (the commit point)
        if kind == "content_block_start":
            block, index = event.get("content_block"), event.get("index")
            if not isinstance(block, dict) or type(index) is not int:
                raise malformed("stream event")
            if block.get("type") == "tool_use":
                position, self.calls = self.calls, self.calls + 1
                self.blocks[index] = _Block("tool_use", position)
                # The block opens with its input empty; the input follows in input_json_delta pieces.
                call = tool_call({**block, "input": {}}, malformed)
                return self.chunk(Delta(tool_calls=(ToolCallDelta(position, call.id, call.name),)))
            self.blocks[index] = _Block(str(block.get("type")))
            if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
                return self.chunk(Delta(text=block["text"]))
            return None
        if kind == CONTENT_DELTA:
            index = event.get("index")
            delta, block = event.get("delta"), self.blocks.get(index) if type(index) is int else None
            if not isinstance(delta, dict) or block is None:
                raise malformed("stream event")
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
                return self.chunk(Delta(text=delta["text"]))
            piece = delta.get("partial_json")
            if delta.get("type") == "input_json_delta" and block.call is not None and isinstance(piece, str) and piece:
                return self.chunk(Delta(tool_calls=(ToolCallDelta(block.call, arguments=piece),)))
            return None  # thinking, signatures, citations: not part of OpenAI's answer
        if kind == "message_delta":
            self.count(event.get("usage"))
            delta = event.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            finish = finish_reason(delta.get("stop_reason") or "end_turn", self.calls > 0)
            return self.chunk(Delta(finish=StopReason(finish or StopReason.STOP)))
        if kind == "message_stop":
            self.done = True
        return None  # ping, content_block_stop, and event types added after this was written

    def usage_chunk(self) -> dict[str, Any]:
        return StreamPiece(usage=usage(self.counts), id=self.id, model=self.model,
                           created=self.created).to_chunk()
