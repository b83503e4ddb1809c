"""Chat chunks as Anthropic's Messages event stream (``message_start`` … ``message_stop``)."""
import json
from collections.abc import Callable

from gateway.conversation import PassedThrough, StopReason, StreamPiece, ToolCall, ToolCallDelta, Usage
from gateway.messages.answer import charged_usage, message_id
from gateway.messages.errors import error_body
from gateway.relay import OpenAIEvents, ReplyTokens
from gateway.upstream.anthropic_answer import message_usage, stop_reason, tool_use
from gateway.upstream.shapes import EVENT_NAME
from utils_app.errors import GatewayError, UpstreamError


def _sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data, separators=(",", ":"),
                                                         ensure_ascii=False).encode() + b"\n\n"


class AnthropicEvents(OpenAIEvents):
    """Chat chunks as Anthropic's event stream, as they arrive: ``message_start`` (and a ``ping``) with the
    first, then a content block per text run and per tool call (``content_block_start``, ``_delta``,
    ``_stop``), and at the end ``message_delta`` with the stop reason and the usage, and ``message_stop``.
    An error once the stream is under way is one ``error`` event, as Anthropic sends it.

    ``message_start`` carries the input-token count (Claude Code prices and compacts its conversation from
    it): the upstream's when its first chunk has usage, else the gateway's own count (``input_tokens``).
    ``message_delta`` carries the final figures: the metered usage chunk, or the counts made here when the
    upstream reported none."""

    def __init__(self, input_tokens: Callable[[], int] | None = None):
        self.count_input = input_tokens
        self.input_tokens = 0  # as message_start said it
        self.reply = ReplyTokens()  # the answer's text and tool arguments, should no usage come
        self.started = False
        self.index = -1  # the content block open now (-1: none yet)
        self.open: str | None = None
        self.tools: dict[int, int] = {}  # OpenAI tool call index -> content block index
        self.finish: StopReason | None = None
        self.usage: Usage | None = None  # the metered usage chunk's
        self.cost: int | None = None
        self.passed_through = False  # the events are Anthropic's own, message_stop included

    def _start_block(self, block: dict) -> list[bytes]:
        events = self._close_block()
        self.index += 1
        self.open = block["type"]
        events.append(_sse("content_block_start", {"type": "content_block_start", "index": self.index,
                                                   "content_block": block}))
        return events

    def _close_block(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [_sse("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def chunk(self, chunk: dict) -> bytes:
        if isinstance(chunk, PassedThrough):  # Anthropic's own event, as it came (the model named as the client named it)
            event = chunk.native
            self.started = self.passed_through = True
            if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
                event = {**event, "message": {**event["message"], "model": chunk.get("model")}}
            kind = event.get("type")
            if not (isinstance(kind, str) and EVENT_NAME.fullmatch(kind)):
                # The adapter refuses such an event; never written as an event: line, whoever passes one on.
                raise UpstreamError("The upstream sent a stream event whose type is not an event name.")
            return _sse(kind, event)
        piece, events = StreamPiece.from_chunk(chunk), []
        if not self.started:
            self.started = True
            events += [_sse("message_start", {"type": "message_start", "message": {
                "id": message_id(piece.id), "type": "message", "role": "assistant", "model": piece.model,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": self._start_usage(piece)}}), _sse("ping", {"type": "ping"})]
        if piece.usage is not None:
            self.usage, self.cost = piece.usage, piece.cost
        for delta in piece.choices[:1]:
            if delta.text:
                self.reply.add(delta.text)
                if self.open != "text":
                    events += self._start_block({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta.text}, self.index))
            for call in delta.tool_calls:
                events += self._tool_call(call)
            if delta.finish is not None:
                self.finish = delta.finish
        return b"".join(events)

    def _tool_call(self, call: ToolCallDelta) -> list[bytes]:
        events = []
        if call.index not in self.tools:
            # The block opens with its input empty; the arguments follow as input_json_delta pieces.
            events += self._start_block(tool_use(ToolCall(call.id, call.name, "")))
            self.tools[call.index] = self.index
        if call.arguments:
            self.reply.add(call.arguments)
            events.append(self._delta({"type": "input_json_delta", "partial_json": call.arguments},
                                      self.tools[call.index]))
        return events

    def _start_usage(self, piece: StreamPiece) -> dict:
        """message_start's usage: the input the upstream counted, if its first chunk says, else the gateway's
        own count; one output token, the first, as Anthropic counts it there."""
        counted = charged_usage(piece.usage or Usage(), piece.cost)
        if piece.usage is None or piece.usage.input_tokens is None:
            counted["input_tokens"] = self.count_input() if self.count_input else 0
        self.input_tokens = counted["input_tokens"]
        return {**counted, "output_tokens": 1}

    def _final_usage(self) -> dict:
        """message_delta's usage: the metered usage chunk's figures, else the counts made here."""
        if self.usage is not None:
            return charged_usage(self.usage, self.cost)
        return message_usage(Usage(input_tokens=self.input_tokens, output_tokens=self.reply.tokens(), cached_tokens=0))

    @staticmethod
    def _delta(delta: dict, index: int) -> bytes:
        return _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})

    def error(self, error: GatewayError) -> bytes:
        return _sse("error", error_body(error))

    def end(self) -> bytes:
        if self.passed_through:
            return b""
        events = self._close_block()
        events.append(_sse("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": stop_reason(self.finish, bool(self.tools)), "stop_sequence": None},
            "usage": self._final_usage()}))
        events.append(_sse("message_stop", {"type": "message_stop"}))
        return b"".join(events)
