"""A fake Anthropic Messages API on 127.0.0.1, held to what the real one takes and sends.

It serves ``POST /v1/messages`` (a message object, or with ``"stream": true`` the event stream) over a
real socket (an HTTP/1.1 server in a thread, like conftest's FakeUpstream), wants the key in
``x-api-key`` (or, as the SDK of this release sends it, a bearer token) and a dated
``anthropic-version``, and answers errors with Anthropic's body.

Requests are checked as the real API checks them: against the anthropic SDK's own request types
(pydantic reads its TypedDicts), plus rules the types do not encode and the API enforces (no
unknown top-level member, only user, assistant and system turns, no empty text or turn, every tool_use
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

from tests.gateway.fake_servers import DROP, FakeHandler, FakeServer, Gate, quoted_back

ANTHROPIC_KEY = "sk-ant-api03-FAKE-anthropic-key-0123456789abcdef"
ANTHROPIC_KEY_ENV = "GATEWAY_UPSTREAM_ANTHROPIC_KEY"
# The members the API takes: those the SDK's request type names (output_config, inference_geo…), the sampling
# members this release's types no longer list, and those its beta features add.
REQUEST_FIELDS = {*MessageCreateParamsNonStreaming.__annotations__, "temperature", "top_p", "top_k", "stream",
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


# The type of a hostile event: a name, a blank line, then a whole event of the upstream's making. Written
# as it is on the client's "event:" line it would be two events, the second a message_stop.
FORGED_TYPE = 'ping\n\nevent: message_stop\ndata: {"type": "message_stop"}'


def forged_event() -> dict:
    return {"type": FORGED_TYPE}


def echoed(body, headers: dict) -> str:
    """The message of Anthropic's 400 to a request it refuses, which quotes what the client sent: each
    unknown member by name (top level and in ``metadata``), each ``anthropic-beta`` value, else the text of
    the first message. A request can make it say anything, "billing" or "credit balance is too low" too."""
    body = body if isinstance(body, dict) else {}
    problems = [f"{name}: Extra inputs are not permitted" for name in sorted(set(body) - REQUEST_FIELDS)]
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    problems += [f"metadata.{name}: Extra inputs are not permitted" for name in sorted(set(metadata) - {"user_id"})]
    problems += [f"Unexpected value(s) `{value.strip()}` for the `anthropic-beta` header"
                 for value in headers.get("anthropic-beta", "").split(",") if value.strip()]
    if not problems:
        turns = body.get("messages") if isinstance(body.get("messages"), list) else []
        first = turns[0].get("content") if turns and isinstance(turns[0], dict) else ""
        text = first if isinstance(first, str) else " ".join(
            block.get("text", "") for block in first or () if isinstance(block, dict))
        problems.append(f"messages.0.content: {text!r} is not valid here")
    return "; ".join(problems)


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
        if role not in ("user", "assistant", "system"):  # a system message among the turns: the SDK's own type
            problems.append(f"messages.{index}.role: Input should be 'user', 'assistant' or 'system'")
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
        self.quoting: tuple[str, int, str] | None = None  # quote_back's form, status and error type
        self.echoing = False  # echo_request(): every call refused with a 400 that quotes it (``echoed``)
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
                if fake.echoing:
                    return self._json(400, error_body("invalid_request_error", echoed(call.body, call.headers)))
                if fake.quoting:
                    form, status, kind = fake.quoting
                    return self._json(status, error_body(kind, quoted_back(given, call.headers.get("host", ""))[form]))
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
                # The event's name on one line whatever its type holds (forged_event): the fake's own wire
                # stays well-formed, and its data line carries the type as it is.
                self.send_events(reply.status, reply.events, lambda event: (
                    f"data: {event}\n\n" if isinstance(event, str)
                    else f"event: {json.dumps(event['type'])[1:-1]}\ndata: {json.dumps(event)}\n\n").encode())

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

    def quote_back(self, form: str, *, status: int = 400, kind: str = "invalid_request_error"):
        """Answer every call with an error whose message quotes back the key the call carried and the host
        it was sent to, in one of fake_servers.quoted_back's forms, as a careless or hostile upstream does."""
        self.quoting = (form, status, kind)

    def echo_request(self):
        """Refuse every call with Anthropic's 400 invalid_request_error quoting the request (``echoed``), as
        the real API refuses an unknown member or beta: the words of the message are the client's."""
        self.echoing = True

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
