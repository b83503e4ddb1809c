"""Chat chunks (or a native deployment's own events, renamed and renumbered) as the Responses event stream."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gateway import metering
from gateway.conversation import PassedThrough, StopReason, StreamPiece, ToolCall, ToolCallDelta, Usage
from gateway.relay import OpenAIEvents
from gateway.responses.answer import call_item, message_item, response_object
from gateway.upstream.openai import incomplete_reason, response_usage
from gateway.upstream.shapes import EVENT_NAME
from utils_app.errors import GatewayError, UpstreamError

if TYPE_CHECKING:  # the dialect makes the events: a name for the type only
    from gateway.responses.dialect import ResponsesDialect


def _sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data, separators=(",", ":"),
                                                         ensure_ascii=False).encode() + b"\n\n"


class ResponsesEvents(OpenAIEvents):
    """Chat chunks as the Responses event stream, as they arrive (or a native deployment's own events, renamed
    and renumbered): ``response.created`` and ``response.in_progress`` first, each output item opened, filled
    and closed, and ``response.completed`` (or ``response.incomplete``) last, holding every item streamed.
    A failure once the stream is under way is an ``error`` event, then ``response.failed``."""

    def __init__(self, dialect: ResponsesDialect):
        self.dialect = dialect
        self.sequence = 0
        self.started = False
        self.passed_through = False
        self.items: list[dict] = []  # every output item, in order (closed ones complete)
        self.open: int | None = None  # the index of the item being streamed
        self.tools: dict[int, int] = {}  # chat tool call index -> output index
        self.arguments: dict[int, str] = {}  # output index -> the tool call's arguments so far
        self.text = ""
        self.finish: StopReason | None = None
        self.usage: Usage | None = None  # the metered counts
        self.cost: int | None = None  # the credits charged

    def _event(self, kind: str, data: dict) -> bytes:
        event = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return _sse(kind, event)

    def _snapshot(self, status: str, **extra: Any) -> dict:
        return response_object(self.dialect.body, response_id=self.dialect.response_id,
                               created_at=self.dialect.created_at, model=self.dialect.model,
                               output=list(self.items), status=status, **extra)

    def chunk(self, chunk: dict) -> bytes:
        piece = StreamPiece.from_chunk(chunk)
        if piece.usage is not None:
            self.usage, self.cost = piece.usage, piece.cost  # the metered counts (and the credits charged)
        if isinstance(chunk, PassedThrough):
            return self._passed(chunk.native)
        events = []
        if not self.started:
            self.started = True
            events += [self._event("response.created", {"response": self._snapshot("in_progress")}),
                       self._event("response.in_progress", {"response": self._snapshot("in_progress")})]
        for delta in piece.choices[:1]:
            if delta.text:
                events += self._text(delta.text)
            for call in delta.tool_calls:
                events += self._tool_call(call)
            if delta.finish is not None:
                self.finish = delta.finish
        return b"".join(events)

    def _text(self, text: str) -> list[bytes]:
        events = []
        if self.open is None or self.items[self.open]["type"] != "message":
            events += self._close()
            item = message_item("", status="in_progress")
            item["content"] = []
            events += self._open(item)
            events.append(self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": self.open, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
            self.text = ""
        self.text += text
        assert self.open is not None
        events.append(self._event("response.output_text.delta", {
            "item_id": self.items[self.open]["id"], "output_index": self.open, "content_index": 0, "delta": text,
            "logprobs": []}))
        return events

    def _tool_call(self, call: ToolCallDelta) -> list[bytes]:
        events = []
        if call.index not in self.tools:
            events += self._close()
            # The item opens with its arguments empty; they follow as they arrive.
            item = call_item(ToolCall(call.id, call.name, ""), self.dialect.customs)
            item.update(status="in_progress", **({"input": ""} if item["type"] == "custom_tool_call" else
                                                  {"arguments": ""}))
            events += self._open(item)
            assert self.open is not None
            self.tools[call.index] = self.open
            self.arguments[self.open] = ""
        index = self.tools[call.index]
        if call.arguments:
            self.arguments[index] += call.arguments
            if self.items[index]["type"] == "function_call" and index == self.open:
                events.append(self._event("response.function_call_arguments.delta", {
                    "item_id": self.items[index]["id"], "output_index": index, "delta": call.arguments}))
        return events

    def _open(self, item: dict) -> list[bytes]:
        self.items.append(item)
        self.open = len(self.items) - 1
        return [self._event("response.output_item.added", {"output_index": self.open, "item": item})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        index, item = self.open, self.items[self.open]
        self.open = None
        events = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
            events += [self._event("response.output_text.done", {"item_id": item["id"], "output_index": index,
                                                                 "content_index": 0, "text": self.text,
                                                                 "logprobs": []}),
                       self._event("response.content_part.done", {"item_id": item["id"], "output_index": index,
                                                                  "content_index": 0, "part": part})]
            done = {**item, "status": "completed", "content": [part]}
        else:
            done = call_item(ToolCall(id=item["call_id"], name=item["name"], arguments=self.arguments.get(index, "")),
                             self.dialect.customs, item_id=item["id"])
            if done["type"] == "custom_tool_call":
                events += [self._event("response.custom_tool_call_input.delta", {
                               "item_id": item["id"], "output_index": index, "delta": done["input"]}),
                           self._event("response.custom_tool_call_input.done", {
                               "item_id": item["id"], "output_index": index, "input": done["input"]})]
            else:
                events.append(self._event("response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": index, "name": done["name"],
                    "arguments": done["arguments"]}))
        self.items[index] = done
        events.append(self._event("response.output_item.done", {"output_index": index, "item": done}))
        return events

    def _passed(self, event: dict) -> bytes:
        """A native deployment's own event, as the client gets it: under the gateway's id and model name,
        encrypted reasoning wrapped, numbered in the gateway's sequence."""
        self.started = self.passed_through = True
        event = dict(event)
        kind = event["type"]
        if not EVENT_NAME.fullmatch(kind):
            raise UpstreamError("The upstream sent a stream event whose type is not an event name.")
        if isinstance(event.get("response"), dict):
            event["response"] = self.dialect.client_response(event["response"])
        if isinstance(event.get("item"), dict):
            event["item"] = self.dialect.client_item(event["item"])
            if kind == "response.output_item.done":
                self.items.append(event["item"])
        if kind in ("response.completed", "response.incomplete"):
            response = event["response"]
            if not response.get("output") and self.items:
                response["output"] = list(self.items)  # never an empty output after items were streamed
            if self.cost is not None and isinstance(response.get("usage"), dict):
                response["usage"] = {**response["usage"], "cost": self.cost}
            self.dialect.final = response
        event.pop("sequence_number", None)
        return self._event(kind, event)

    def error(self, error: GatewayError) -> bytes:
        body = error.body()["error"]
        events = self._close() if not self.passed_through else []
        events.append(self._event("error", {"code": body.get("code"), "message": body.get("message"),
                                            "param": body.get("param")}))
        failed = self._snapshot("failed", usage=self._usage(),
                                error={"code": "server_error" if error.status >= 500 else str(body.get("code")),
                                       "message": body.get("message")})
        self.dialect.final = failed
        events.append(self._event("response.failed", {"response": failed}))
        return b"".join(events)

    def _usage(self) -> dict | None:
        if self.usage is None:
            return None
        usage = response_usage(self.usage)
        return usage if self.cost is None else {**usage, "cost": self.cost}

    def end(self) -> bytes:
        if self.passed_through:
            return b""
        events = self._close()
        reason = incomplete_reason(self.finish)
        final = self._snapshot("incomplete" if reason else "completed", usage=self._usage(), reason=reason)
        self.dialect.final = final
        events.append(self._event("response.incomplete" if reason else "response.completed", {"response": final}))
        return b"".join(events)

    def kept(self) -> metering.Also | None:
        return self.dialect.kept()
