"""A fake Anthropic Messages API on 127.0.0.1, held to what the real one takes and sends.

It serves ``POST /v1/messages`` (a message object, or with ``"stream": true`` the event stream) over a
real socket (an HTTP/1.1 server in a thread, like conftest's FakeUpstream), wants the key in
``x-api-key`` (or, as the SDK of this release sends it, a bearer token) and a dated
``anthropic-version``, and answers errors with Anthropic's body.

Requests are checked as the real API checks them: against the anthropic SDK's own request types
(pydantic reads its TypedDicts), plus rules the types do not encode and the API enforces (no
unknown top-level member, only user and assistant turns, no empty text or turn, every tool_use
answered by a tool_result at the start of the next user turn, ids of letters, digits, _ and -).
A request that breaks one gets Anthropic's 400 invalid_request_error, and the reason is kept in
``problems``. test_anthropic_fake.py proves the official SDK parses every answer built by the
helpers below, and that the SDK's own requests pass these checks.
"""
import json
import re
from dataclasses import dataclass, field

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import TypeAdapter, ValidationError

from tests.gateway.fake_servers import DROP, FakeHandler, FakeServer, Gate

ANTHROPIC_KEY = "sk-ant-api03-FAKE-anthropic-key-0123456789abcdef"
ANTHROPIC_KEY_ENV = "GATEWAY_UPSTREAM_ANTHROPIC_KEY"
REQUEST_FIELDS = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "top_k",
                  "tools", "tool_choice", "stream", "metadata", "thinking", "service_tier", "container",
                  "mcp_servers", "context_management"}
VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_REQUEST = TypeAdapter(MessageCreateParamsNonStreaming)


# ---------------------------------------------------------------- answers (Anthropic's JSON shapes)

def usage(input: int = 11, output: int = 5, *, cache_read: int = 0, cache_creation: int = 0) -> dict:
    return {"input_tokens": input, "output_tokens": output, "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation}


def text_block(text: str) -> dict:
    return {"type": "text", "text": text}


def tool_block(name: str, input: dict, id: str = "toolu_01A09q90qw90lq917835lq9") -> dict:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def message(content: list, *, stop_reason: str = "end_turn", counts: dict | None = None,
            model: str = "claude-test-1", stop_sequence: str | None = None) -> dict:
    return {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": counts or usage()}


def answer(text: str = "Hello from Claude", **kwargs) -> dict:
    return message([text_block(text)], **kwargs)


def error_body(kind: str, text: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}


def start_event(counts: dict | None = None) -> dict:
    opening = {**(counts or usage()), "output_tokens": 1}
    return {"type": "message_start", "message": {**message([], counts=opening), "stop_reason": None}}


def stream_events(*blocks, stop_reason: str = "end_turn", counts: dict | None = None) -> list:
    """A streamed answer: each block is text (a str, or a list of str pieces) or a tool call
    ``(name, [json pieces], id)``; Gates and DROP may stand between blocks."""
    counts = counts or usage()
    events: list = [start_event(counts), {"type": "ping"}]
    index = 0
    for block in blocks:
        if isinstance(block, Gate) or block == DROP:
            events.append(block)
            continue
        if isinstance(block, tuple):
            name, pieces, call_id = block
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}})
            events += [{"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}} for piece in pieces]
        else:
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "text", "text": ""}})
            events += [{"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                       for piece in ([block] if isinstance(block, str) else block)]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                   "usage": {"output_tokens": counts["output_tokens"]}})
    events.append({"type": "message_stop"})
    return events


def stream_error(kind: str = "overloaded_error", text: str = "Overloaded") -> dict:
    return {"type": "error", "error": {"type": kind, "message": text}}


# ---------------------------------------------------------------- request checks

def check_request(body, problems: list) -> None:
    if not isinstance(body, dict):
        problems.append("the body is not a JSON object")
        return
    unknown = set(body) - REQUEST_FIELDS
    if unknown:
        problems.append(f"{sorted(unknown)[0]}: Extra inputs are not permitted")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            problems.append(f"{name}: Field required")
    try:
        _REQUEST.validate_python({key: value for key, value in body.items() if key != "stream"})
    except ValidationError as exc:
        error = exc.errors()[0]
        problems.append(f"{'.'.join(map(str, error['loc']))}: {error['msg']}")
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    if not messages:
        problems.append("messages: at least one message is required")
    pending: set = set()
    for index, turn in enumerate(messages):
        if not isinstance(turn, dict):
            continue
        role, content = turn.get("role"), turn.get("content")
        if role not in ("user", "assistant"):
            problems.append(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if not blocks:
            problems.append(f"messages.{index}: all messages must have non-empty content")
        results = [block.get("tool_use_id") for block in blocks if isinstance(block, dict)
                   and block.get("type") == "tool_result"]
        if pending:
            if role != "user" or set(results) != pending:
                problems.append(f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                                f"immediately after: {sorted(pending - set(results))}")
            leading = [block.get("type") for block in blocks[:len(results)] if isinstance(block, dict)]
            if leading != ["tool_result"] * len(results):
                problems.append(f"messages.{index}: tool_result blocks must come first in the user turn")
        elif results:
            problems.append(f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks: {results}")
        pending = set()
        for number, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            at = f"messages.{index}.content.{number}"
            if block.get("type") == "text" and not block.get("text") and not (
                    role == "assistant" and index == len(messages) - 1):
                problems.append(f"{at}: text content blocks must be non-empty")
            if block.get("type") == "tool_use":
                if role != "assistant":
                    problems.append(f"{at}: tool_use blocks are only allowed in assistant turns")
                if not TOOL_ID.match(str(block.get("id"))):
                    problems.append(f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
                pending.add(block.get("id"))
    for index, tool in enumerate(body.get("tools") or ()):
        schema = tool.get("input_schema") if isinstance(tool, dict) else None
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"tools.{index}.input_schema.type: Input should be 'object'")
    if body.get("tool_choice") and not body.get("tools"):
        problems.append("tool_choice may only be specified while providing tools")
    if isinstance(body.get("temperature"), (int, float)) and not 0 <= body["temperature"] <= 1:
        problems.append("temperature: Input should be less than or equal to 1")


# ---------------------------------------------------------------- the server

@dataclass
class Reply:
    status: int = 200
    body: dict | None = None
    events: list | None = None  # a stream: events, Gates, DROP, or raw str data
    headers: dict = field(default_factory=dict)


@dataclass
class Call:
    path: str
    headers: dict
    body: dict | None
    problems: list = field(default_factory=list)


class FakeAnthropic(FakeServer):
    """Scripted answers to ``/v1/messages``, separately for plain and streamed requests (``answer``,
    ``stream``, ``fail``): a list of replies is answered in turn, its last one for every further call;
    an unscripted call gets a plain answer or a short stream."""

    def __init__(self, api_key: str = ANTHROPIC_KEY):
        self.api_key = api_key
        self.calls: list[Call] = []
        self.scripts: dict[str, list[Reply]] = {}
        fake = self

        class Handler(FakeHandler):
            def do_POST(self):
                call = Call(self.path, {name.lower(): value for name, value in self.headers.items()}, self.read_json())
                fake.calls.append(call)
                self._answer(call)

            def _answer(self, call: Call):
                # The API takes the key as x-api-key, and (as this SDK sends it) as a bearer token.
                given = call.headers.get("x-api-key") or call.headers.get("authorization", "").removeprefix("Bearer ")
                if given != fake.api_key:
                    return self._json(401, error_body("authentication_error", "invalid x-api-key"))
                if not VERSION.match(call.headers.get("anthropic-version", "")):
                    return self._json(400, error_body("invalid_request_error",
                                                      "anthropic-version: header is required"))
                if call.path != "/v1/messages":
                    return self._json(404, error_body("not_found_error", f"Not found: {call.path}"))
                check_request(call.body, call.problems)
                if call.problems:
                    return self._json(400, error_body("invalid_request_error", "; ".join(call.problems)))
                streamed = bool(call.body.get("stream"))
                reply = fake.next_reply("stream" if streamed else "message")
                if reply.events is not None:
                    return self._stream(reply)
                self._json(reply.status, reply.body, reply.headers)

            def _json(self, status: int, body: dict, headers: dict | None = None):
                self.send_body(status, body, headers={"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy", **(headers or {})})

            def _stream(self, reply: Reply):
                self.send_events(reply.status, reply.events, lambda event: (
                    f"data: {event}\n\n" if isinstance(event, str)
                    else f"event: {event['type']}\ndata: {json.dumps(event)}\n\n").encode())

        self.serve(Handler)

    @property
    def base_url(self) -> str:
        """What an anthropic provider's base_url is set to: the API's root, without a version."""
        return self.root

    # -- scripting

    def answer(self, body: dict, status: int = 200):
        self.scripts["message"] = [Reply(status, body)]

    def stream(self, *events):
        self.scripts["stream"] = [Reply(events=list(events))]

    def fail(self, status: int, body: dict, headers: dict | None = None):
        for kind in ("message", "stream"):
            self.scripts[kind] = [Reply(status, body, headers=headers or {})]

    def next_reply(self, kind: str) -> Reply:
        replies = self.scripts.get(kind)
        if replies:
            return replies.pop(0) if len(replies) > 1 else replies[0]
        if kind == "message":
            return Reply(body=answer())
        return Reply(events=stream_events(["Hello", " from", " Claude"]))

    # -- what the gateway sent

    def posts(self) -> list[Call]:
        return list(self.calls)

    def problems(self) -> list[str]:
        return [problem for call in self.calls for problem in call.problems]


@pytest.fixture
def claude():
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()


@pytest.fixture
def second_claude():
    fake = FakeAnthropic().start()
    yield fake
    fake.stop()
