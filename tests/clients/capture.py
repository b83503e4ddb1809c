"""A capture server for the agent clients: it answers each vendor API in its smallest valid shape and keeps
every request it met (method, path, query names, headers with secrets hidden, JSON body).

The gateway is not involved: the recordings show what a client version sends by itself, so the gateway's
inbound APIs can be built against them and a new client version's changes show up as a diff of the
recorded fixture (tests/clients/test_recorded_requests.py)."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# Header values that are secrets (or carry one): recorded as "<redacted>".
SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie", "proxy-authorization"}
ANSWER = "capture-ok"


class ToolPlan:
    """Makes the capture server call one of the client's own tools once: the first request that offers the
    tool `name` is answered with a call whose first required string parameter holds `text`; every other
    request gets the text answer. So a recording also holds the request that carries the tool's result."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self._lock = threading.Lock()
        self.called = False

    def arguments_for(self, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The call's arguments when this request offers the tool and none was called yet, else None."""
        schema = _find_schema(tools, self.name)
        with self._lock:
            if schema is None or self.called:
                return None
            self.called = True
        arguments: dict[str, Any] = {}
        filled = False
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            kind = (properties.get(name) or {}).get("type")
            if kind == "string" and not filled:
                arguments[name], filled = self.text, True
            elif kind == "array" and not filled:
                arguments[name], filled = self.text.split(), True
            else:
                arguments[name] = {"string": "x", "integer": 1, "number": 1, "boolean": False,
                                   "array": [], "object": {}}.get(str(kind), "x")
        return arguments


def _find_schema(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The JSON schema of the tool `name` among a request's tools, whatever the API's shape of them."""
    for tool in tools:
        for declared in tool.get("functionDeclarations") or tool.get("function_declarations") or [tool]:
            function = declared.get("function") if isinstance(declared.get("function"), dict) else declared
            if function.get("name") == name:
                schema = (function.get("parameters") or function.get("input_schema")
                          or function.get("parametersJsonSchema") or function.get("parameters_json_schema") or {})
                return schema if isinstance(schema, dict) else {}
    return None


class Recorder:
    """The requests one capture server has met, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    def add(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    lines = []
    for name, data in events:
        if name:
            lines.append(f"event: {name}")
        lines.append(f"data: {json.dumps(data)}")
        lines.append("")
    return ("\n".join(lines) + "\n").encode()


def anthropic_answer(body: dict[str, Any], call: tuple[str, dict[str, Any]] | None = None) -> tuple[str, bytes]:
    """Anthropic's Messages API: the message object, or its event stream (with a `tool_use` block for a call)."""
    model = body.get("model", "capture")
    message = {"id": "msg_capture", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 5, "output_tokens": 1}}
    if call is not None:
        block = {"type": "tool_use", "id": "toolu_capture", "name": call[0], "input": {}}
        if not body.get("stream"):
            whole = {**message, "content": [{**block, "input": call[1]}], "stop_reason": "tool_use"}
            return "application/json", json.dumps(whole).encode()
        return "text/event-stream", _sse([
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "input_json_delta", "partial_json": json.dumps(call[1])}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                               "usage": {"output_tokens": 1}}),
            ("message_stop", {"type": "message_stop"}),
        ])
    if not body.get("stream"):
        whole = {**message, "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn"}
        return "application/json", json.dumps(whole).encode()
    return "text/event-stream", _sse([
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": ANSWER}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def responses_answer(body: dict[str, Any], call: tuple[str, dict[str, Any]] | None = None) -> tuple[str, bytes]:
    """OpenAI's Responses API: the response object, or its event stream (a `function_call` item for a call)."""
    item: dict[str, Any] = {"id": "msg_capture", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}
    if call is not None:
        item = {"id": "fc_capture", "type": "function_call", "status": "completed", "call_id": "call_capture",
                "name": call[0], "arguments": json.dumps(call[1])}
    usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 6}
    response = {"id": "resp_capture", "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": body.get("model", "capture"), "output": [item], "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps(response).encode()
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    opening: list[tuple[str | None, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": started}),
        ("response.in_progress", {"type": "response.in_progress", "response": started}),
    ]
    if call is not None:
        events = opening + [
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                            "item": {**item, "status": "in_progress", "arguments": ""}}),
            ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                        "item_id": item["id"], "output_index": 0,
                                                        "delta": item["arguments"]}),
            ("response.function_call_arguments.done", {"type": "response.function_call_arguments.done",
                                                       "item_id": item["id"], "output_index": 0,
                                                       "arguments": item["arguments"]}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed", "response": response}),
        ]
        for number, (_, data) in enumerate(events):
            data["sequence_number"] = number
        return "text/event-stream", _sse(events)
    part = item["content"][0]
    events = opening + [
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                        "item": {**item, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {"type": "response.content_part.added", "item_id": item["id"],
                                         "output_index": 0, "content_index": 0,
                                         "part": {**part, "text": ""}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                        "output_index": 0, "content_index": 0, "delta": ANSWER}),
        ("response.output_text.done", {"type": "response.output_text.done", "item_id": item["id"],
                                       "output_index": 0, "content_index": 0, "text": ANSWER}),
        ("response.content_part.done", {"type": "response.content_part.done", "item_id": item["id"],
                                        "output_index": 0, "content_index": 0, "part": part}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": response}),
    ]
    for number, (_, data) in enumerate(events):
        data["sequence_number"] = number
    return "text/event-stream", _sse(events)


def gemini_answer(path: str, call: tuple[str, dict[str, Any]] | None = None) -> tuple[str, bytes]:
    """Google's Gemini API: generateContent, its SSE stream and countTokens (a `functionCall` part for a call)."""
    if path.endswith(":countTokens"):
        return "application/json", json.dumps({"totalTokens": 5}).encode()
    part: dict[str, Any] = {"text": ANSWER}
    if call is not None:
        part = {"functionCall": {"name": call[0], "args": call[1]}}
    chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
                             "index": 0}],
             "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1, "totalTokenCount": 6},
             "modelVersion": "capture"}
    if path.endswith(":streamGenerateContent"):
        return "text/event-stream", _sse([(None, chunk)])
    return "application/json", json.dumps(chunk).encode()


def chat_answer(body: dict[str, Any], call: tuple[str, dict[str, Any]] | None = None) -> tuple[str, bytes]:
    """OpenAI's chat completions: the completion, or its chunk stream (with `tool_calls` for a call)."""
    model = body.get("model", "capture")
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    if call is not None:
        tool_call = {"index": 0, "id": "call_capture", "type": "function",
                     "function": {"name": call[0], "arguments": json.dumps(call[1])}}
        if not body.get("stream"):
            message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
            whole = {"id": "chatcmpl-capture", "object": "chat.completion", "created": int(time.time()),
                     "model": model, "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                     "usage": usage}
            return "application/json", json.dumps(whole).encode()
        head = {"id": "chatcmpl-capture", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": model}
        return "text/event-stream", _sse([
            (None, {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [tool_call]},
                                         "finish_reason": None}]}),
            (None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            (None, {**head, "choices": [], "usage": usage}),
        ]) + b"data: [DONE]\n\n"
    if not body.get("stream"):
        whole = {"id": "chatcmpl-capture", "object": "chat.completion", "created": int(time.time()), "model": model,
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                              "finish_reason": "stop"}], "usage": usage}
        return "application/json", json.dumps(whole).encode()
    base = {"id": "chatcmpl-capture", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    chunks: list[tuple[str | None, dict[str, Any]]] = [
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER},
                                     "finish_reason": None}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, {**base, "choices": [], "usage": usage}),
    ]
    return "text/event-stream", _sse(chunks) + b"data: [DONE]\n\n"


def models_answer(path: str) -> tuple[str, bytes]:
    if "/v1beta/" in path or path.startswith("/v1beta"):
        return "application/json", json.dumps({"models": [{
            "name": "models/local-chat", "displayName": "local-chat",
            "supportedGenerationMethods": ["generateContent", "countTokens"],
            "inputTokenLimit": 32000, "outputTokenLimit": 8000}]}).encode()
    return "application/json", json.dumps({"object": "list", "data": [
        {"id": "local-chat", "object": "model", "created": 0, "owned_by": "capture"}]}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: "_CaptureServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the recorder keeps what matters
        return

    def _record(self) -> tuple[str, dict[str, Any] | None]:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"<not json>": raw[:200].decode("utf-8", "replace")}
        headers = {name.lower(): ("<redacted>" if name.lower() in SECRET_HEADERS else value)
                   for name, value in self.headers.items()}
        self.server.recorder.add({"method": self.command, "path": split.path,
                                  "query": sorted({name for name, _ in parse_qsl(split.query)}),
                                  "headers": headers, "body": body})
        return split.path, body if isinstance(body, dict) else None

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        path, _ = self._record()
        if self.headers.get("Upgrade", "").lower() == "websocket":
            error = {"error": {"message": "WebSockets are not offered: use HTTP.", "type": "invalid_request_error",
                               "code": "websocket_not_supported"}}
            self._send(426, "application/json", json.dumps(error).encode())
        elif path.rstrip("/").endswith("/models"):
            self._send(200, *models_answer(path))
        else:
            self._send(404, "application/json", json.dumps({"error": {"message": f"nothing at {path}"}}).encode())

    def do_POST(self) -> None:
        path, body = self._record()
        body = body or {}
        call = None
        plan = self.server.plan
        if plan is not None and not path.endswith(("count_tokens", ":countTokens")):
            arguments = plan.arguments_for(body.get("tools") or [])
            call = (plan.name, arguments) if arguments is not None else None
        if path.endswith("/messages/count_tokens"):
            self._send(200, "application/json", json.dumps({"input_tokens": 5}).encode())
        elif path.endswith("/messages"):
            self._send(200, *anthropic_answer(body, call))
        elif path.endswith("/responses"):
            self._send(200, *responses_answer(body, call))
        elif ":" in path.rsplit("/", 1)[-1]:
            self._send(200, *gemini_answer(path, call))
        elif path.endswith("/chat/completions"):
            self._send(200, *chat_answer(body, call))
        else:
            self._send(404, "application/json", json.dumps({"error": {"message": f"nothing at {path}"}}).encode())

    do_PUT = do_POST


class _CaptureServer(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder
    plan: ToolPlan | None


@contextmanager
def capture_server(plan: ToolPlan | None = None) -> Iterator[tuple[str, Recorder]]:
    """A capture server on a free port of 127.0.0.1 (calling a tool once when given a plan): yields (its base
    URL, its recorder)."""
    server = _CaptureServer(("127.0.0.1", 0), _Handler)
    server.recorder = Recorder()
    server.plan = plan
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
