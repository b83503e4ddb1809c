"""Chat chunks as streamGenerateContent answers them: SSE events with ``?alt=sse``, else one JSON array."""
import json
from dataclasses import replace
from typing import Any

from gateway.conversation import PassedThrough, ToolCall, Usage
from gateway.gemini_api.answer import response_id
from gateway.gemini_api.errors import error_body
from gateway.gemini_api.members import index_or, obj
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
        self.id = self.id or response_id(chunk.get("id"))
        self.model = chunk.get("model")
        out = b""
        candidates = []
        for position, choice in enumerate(chunk.get("choices") or ()):
            if not isinstance(choice, dict):
                continue
            index = index_or(choice.get("index"), position)
            delta = obj(choice.get("delta"))
            parts = [{"text": delta["content"]}] if isinstance(delta.get("content"), str) and delta["content"] else []
            for call in delta.get("tool_calls") or ():
                self._add_call(index, call)
            if choice.get("finish_reason"):
                parts += [function_call_part(call) for _, call in sorted(self.calls.pop(index, {}).items())]
                self.final.append({"content": {"role": "model", "parts": parts},
                                   "finishReason": google_finish_reason(choice["finish_reason"]),
                                   "index": index})
            elif parts:
                candidates.append({"content": {"role": "model", "parts": parts}, "index": index})
        if candidates:
            out += self._frame(self._response(candidates))
        if isinstance(chunk.get("usage"), dict):
            out += self._last(chunk["usage"])
        return out

    def _add_call(self, index: int, call: Any) -> None:
        if not isinstance(call, dict):
            return
        position = index_or(call.get("index"), 0)
        piece = obj(call.get("function")).get("arguments")
        calls, delta = self.calls.setdefault(index, {}), ToolCall.from_chat(call)
        held = calls.get(position, ToolCall(id="", name="", arguments=""))
        # A delta's id and name, when it has them, are the call's; its arguments (text only) add to them.
        calls[position] = replace(held, id=delta.id or held.id, name=delta.name or held.name,
                                  arguments=held.arguments + (piece if isinstance(piece, str) else ""))

    def _response(self, candidates: list[dict], usage: dict | None = None) -> dict:
        item: dict = {"candidates": candidates}
        if usage is not None:
            item["usageMetadata"] = usage_metadata(Usage.from_chat(usage))
        item.update(modelVersion=self.model, responseId=self.id)
        return item

    def _last(self, usage: dict | None) -> bytes:
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

