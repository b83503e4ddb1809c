"""Chat chunks as streamGenerateContent answers them: SSE events with ``?alt=sse``, else one JSON array."""
import json
from typing import Any

from gateway.conversation import PassedThrough, StreamPiece, ToolCall, ToolCallDelta, Usage
from gateway.gemini_api.answer import response_id
from gateway.gemini_api.errors import error_body
from gateway.relay import OpenAIEvents
from gateway.upstream.gemini_answer import function_call_part, google_finish_reason, usage_metadata
from utils_app.errors import GatewayError


def _json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class GeminiEvents(OpenAIEvents):
    """Chat chunks as streamGenerateContent answers them: with ``?alt=sse`` each GenerateContentResponse as an
    SSE ``data:`` event, without it one JSON array whose items arrive as they are made.

    Text goes out as it arrives. A function call goes out whole (Google's functionCall carries its args as one
    object), in the event of its choice's finish reason; that last event waits for the usage chunk, which
    follows it, so that it carries usageMetadata as Google's last event does. An error once the stream is
    under way is one more item, ``{"error": {...}}``, as Google sends it."""

    def __init__(self, *, sse: bool):
        self.sse = sse
        self.opened = False  # something was written (the array's "[" included)
        self.passed_through = False  # the events are Google's own, usageMetadata included
        self.calls: dict[int, dict[int, ToolCall]] = {}  # choice -> tool call index -> the call so far
        self.final: list[dict] = []  # the candidates that finished, held for the usage
        self.id = ""
        self.model: Any = None

    def _frame(self, item: dict) -> bytes:
        if self.sse:
            self.opened = True
            return b"data: " + _json(item) + b"\r\n\r\n"
        head = b",\r\n" if self.opened else b"["
        self.opened = True
        return head + _json(item)

    def chunk(self, chunk: dict) -> bytes:
        if isinstance(chunk, PassedThrough):
            self.passed_through = True
            event = chunk.native
            if "modelVersion" in event:
                event = {**event, "modelVersion": chunk.get("model")}
            return self._frame(event)
        if self.passed_through:
            return b""  # the metering's own chunk beside Google's events
        piece = StreamPiece.from_chunk(chunk)
        self.id = self.id or response_id(piece.id)
        self.model = piece.model
        out = b""
        candidates = []
        for delta in piece.choices:
            parts = [{"text": delta.text}] if delta.text else []
            for call in delta.tool_calls:
                self._add_call(delta.index, call)
            if delta.finish is not None:
                parts += [function_call_part(call) for _, call in sorted(self.calls.pop(delta.index, {}).items())]
                self.final.append({"content": {"role": "model", "parts": parts},
                                   "finishReason": google_finish_reason(delta.finish), "index": delta.index})
            elif parts:
                candidates.append({"content": {"role": "model", "parts": parts}, "index": delta.index})
        if candidates:
            out += self._frame(self._response(candidates))
        if piece.usage is not None:
            out += self._last(piece.usage)
        return out

    def _add_call(self, index: int, piece: ToolCallDelta) -> None:
        calls = self.calls.setdefault(index, {})
        held = calls.get(piece.index, ToolCall(id="", name="", arguments=""))
        # A piece's id and name, when it has them, are the call's; its arguments add to them.
        calls[piece.index] = ToolCall(id=piece.id or held.id, name=piece.name or held.name,
                                      arguments=held.arguments + piece.arguments)

    def _response(self, candidates: list[dict], usage: Usage | None = None) -> dict:
        item: dict = {"candidates": candidates}
        if usage is not None:
            item["usageMetadata"] = usage_metadata(usage)
        item.update(modelVersion=self.model, responseId=self.id)
        return item

    def _last(self, usage: Usage | None) -> bytes:
        """The finished candidates, with the usage; a stream that finished no candidate ends with one that
        says STOP, so that a client always reads a finish reason."""
        candidates = self.final or [{"content": {"role": "model", "parts": [
            function_call_part(call) for calls in self.calls.values() for _, call in sorted(calls.items())]},
            "finishReason": "STOP", "index": 0}]
        self.final, self.calls = [], {}
        return self._frame(self._response(candidates, usage))

    def error(self, error: GatewayError) -> bytes:
        event = self._frame(error_body(error))
        return event if self.sse else event + b"]"

    def end(self) -> bytes:
        out = b""
        if not self.passed_through and (self.final or self.calls):
            out += self._last(None)
        if not self.sse:
            out += b"]" if self.opened else b"[]"
        return out

