"""Anthropic's Messages API: OpenAI-shaped chat translated to ``POST {base_url}/v1/messages``, and the
answer (a message object, or its event stream) translated back.

``base_url`` is the API's root without a version (default https://api.anthropic.com); the
deployment's upstream name is the model (``claude-sonnet-4-5``). The secret travels in the
``x-api-key`` header only, with ``anthropic-version``. Anthropic requires ``max_tokens``: a
request without one gets the provider's ``max_tokens_default``.

What translates and what is refused is listed in docs/providers.md. Tool call ids go both
ways unchanged (Anthropic's ``toolu_…`` ids reach the client, the client's ids come back as
``tool_use_id``), except that characters Anthropic refuses in an id are replaced, the same way
in the call and in its result, so they still pair.
"""
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.conversation import PassedThrough, StopReason
from gateway.json_schemas import SchemaWalk
from gateway.upstream import register
from gateway.upstream.base import HttpAdapter
from gateway.upstream.honour import REFUSALS, SERVER_FEATURES, name_left_out, refuse_audio_output, thinking_budget
from gateway.upstream.shapes import (
    EVENT_NAME,
    Malformed,
    ChunkStream,
    content_text,
    data_url,
    function_call,
    tokens_reported,
    tool_call_id,
)
from gateway.upstream.refusals import Refusal
from gateway.upstream.sse import EventStream
from gateway.upstream.transport import json_object
from models_catalog.provider_types import DEFAULT_MAX_TOKENS
from utils_app.errors import GatewayError, InvalidRequest, UnsupportedParameter, UpstreamError

API_VERSION = "2023-06-01"
MESSAGES_PATH = "/v1/messages"
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
# The status each of Anthropic's error types comes with: an error event in a stream carries only its type.
ERROR_STATUSES = {"invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
                  "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
                  "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529}
# Anthropic's error types that refuse the secret itself, whatever the status they come with. A 400
# invalid_request_error never does, whatever its words: its message quotes what the client sent (an unknown
# member, a header's value), so "credit balance is too low" in it may be the client's own text.
SECRET_REFUSED = {"authentication_error", "billing_error"}
TOOL_ID_REFUSED = re.compile(r"[^A-Za-z0-9_-]")


# ---------------------------------------------------------------- errors

def anthropic_refusal(status: int, content: bytes | str) -> Refusal:
    """Anthropic's error body, ``{"type": "error", "error": {"type", "message"}}``. Only its type decides what
    it means for the deployment: an authentication or billing error refuses the secret (it is disabled)."""
    error = (json_object(content) or {}).get("error")
    if not isinstance(error, dict):
        error = {"message": error} if isinstance(error, str) else {}
    message = error["message"] if isinstance(error.get("message"), str) else ""
    kind = error["type"] if isinstance(error.get("type"), str) else None
    return Refusal(message=message, code=kind, out_of_credit=kind in SECRET_REFUSED)


# ---------------------------------------------------------------- the adapter

@register("anthropic")
class AnthropicAdapter(HttpAdapter):
    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"x-api-key": secret}

    def read_error(self, status: int, content: bytes) -> Refusal:
        return anthropic_refusal(status, content)

    type_headers = {"anthropic-version": API_VERSION}

    def request(self, payload: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        default = getattr(self.provider, "max_tokens_default", None) or DEFAULT_MAX_TOKENS
        request = messages_request(payload, model=self.upstream_model, max_tokens_default=default,
                                   ignored=self.ignored)
        if stream:
            request["stream"] = True
        return request

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(MESSAGES_PATH, self.request(payload, stream=False))
        return completion(body, model=self.upstream_model, malformed=self.transport.malformed)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        events = self.transport.stream(MESSAGES_PATH, self.request(payload, stream=True))
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        return ChunkStream(self._chunks(events, usage=usage), events.close)

    # -- Anthropic's own requests, passed through (/v1/messages: gateway.messages)

    passes_through = True

    def messages(self, body: dict[str, Any], *, headers: dict[str, Any] | None = None) -> PassedThrough:
        """A Messages request as the client sent it, under the deployment's model name (``headers``: the
        client's own that go with it, anthropic-beta). The answer is its chat translation, for the
        metering, passed through with Anthropic's message itself beside it."""
        self.transport.headers.update(headers or {})
        message = self.transport.post_json(MESSAGES_PATH, {**body, "model": self.upstream_model, "stream": False})
        return PassedThrough(completion(message, model=self.upstream_model, malformed=self.transport.malformed),
                             message)

    def messages_stream(self, body: dict[str, Any], *, headers: dict[str, Any] | None = None) -> ChunkStream:
        """The stream of a Messages request sent as it came: every event of Anthropic's passed through
        beside the chunk that translates it (empty for the events that say nothing to the metering)."""
        self.transport.headers.update(headers or {})
        events = self.transport.stream(MESSAGES_PATH, {**body, "model": self.upstream_model, "stream": True})
        return ChunkStream(self._chunks(events, usage=True, passed_through=True), events.close)

    def _chunks(self, events: EventStream, *, usage: bool, passed_through: bool = False) -> Iterator[dict[str, Any]]:
        stream = StreamTranslation(model=self.upstream_model)
        for data in events:
            event = json_object(data)
            if event is None:
                raise self.transport.malformed("stream event")
            if event.get("type") == "error":
                raise self._stream_error(event, data)
            chunk = stream.translate(event, malformed=self.transport.malformed)
            if passed_through:
                if not (isinstance(event.get("type"), str) and EVENT_NAME.fullmatch(event["type"])):
                    raise self.transport.malformed("stream event")  # its type would name the client's event
                # A content block's delta is output, thinking included (the client sees it, and Anthropic
                # bills it as output), though a thinking delta translates to no content.
                chunk = PassedThrough(chunk or {}, event, carries_output=event["type"] == CONTENT_DELTA)
            if chunk is not None:
                yield chunk
            if stream.done:
                events.finished()
                break
        if not stream.done:
            raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")
        if usage:
            yield stream.usage_chunk()

    def _stream_error(self, event: dict[str, Any], data: str) -> GatewayError:
        """An error Anthropic sends as an event once the stream is under way (``overloaded_error``, say):
        read as the error answer of its type's status would be."""
        error = event.get("error")
        kind = error.get("type", "") if isinstance(error, dict) else ""
        status = ERROR_STATUSES.get(kind, 502)
        return self.transport.refused(status, {}, anthropic_refusal(status, data))


# ---------------------------------------------------------------- the request

def messages_request(payload: dict[str, Any], *, model: str, max_tokens_default: int,
                     ignored: list[str] | None = None) -> dict[str, Any]:
    """A Messages API request for an OpenAI-shaped chat request. A parameter whose absence would change the
    answer's shape raises; one Anthropic has no use for is left out and named in ``ignored`` (honour)."""
    refuse_unsupported(payload)
    name_left_out(payload, ignored, LEFT_OUT)
    system, messages = conversation(payload["messages"])
    request: dict[str, Any] = {"model": model, "messages": messages,
                     "max_tokens": payload.get("max_completion_tokens") or payload.get("max_tokens")
                     or max_tokens_default}
    if system:
        request["system"] = system
    for name in ("temperature", "top_p"):
        if payload.get(name) is not None:
            request[name] = payload[name]
    schema = answer_schema(payload.get("response_format"))
    if schema is not None:  # Anthropic's structured outputs
        request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    budget = thinking_budget(payload.get("reasoning_effort"))
    if budget is not None:
        if can_think(payload, request["max_tokens"]):
            # Anthropic's budget is part of max_tokens and must stay below it.
            request["thinking"] = {"type": "enabled", "budget_tokens": min(budget, request["max_tokens"] - 1)}
        elif ignored is not None:
            ignored.append("reasoning_effort")
    stop = payload.get("stop")
    if stop:
        request["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    tools = payload.get("tools")
    if tools:
        walk = SchemaWalk()  # the request's schemas, all of them within its limits
        request["tools"] = [tool_definition(tool, index, walk) for index, tool in enumerate(tools)]
        choice = tool_choice(payload.get("tool_choice"), parallel=payload.get("parallel_tool_calls"))
        if choice:
            request["tool_choice"] = choice
    if payload.get("user"):
        request["metadata"] = {"user_id": payload["user"]}
    return request


# What Anthropic's Messages API has no use for and an answer of the same shape does without: OpenAI's own
# server features, and the sampling knobs Anthropic does not have.
LEFT_OUT = (*SERVER_FEATURES, "logit_bias", "seed", "presence_penalty", "frequency_penalty")
# The smallest thinking budget Anthropic takes.
MIN_THINKING_BUDGET = 1024


def can_think(payload: dict[str, Any], max_tokens: int) -> bool:
    """Whether Anthropic takes extended thinking with the rest of the request: room for the smallest budget
    below max_tokens, no sampling changed (thinking takes no temperature but 1 and no top_p below 0.95),
    no tool forced, and not in the middle of a tool call's round trip, where Anthropic wants the earlier
    turn's thinking block back, which an OpenAI-shaped conversation does not carry."""
    if max_tokens <= MIN_THINKING_BUDGET:
        return False
    if payload.get("temperature") not in (None, 1) or (payload.get("top_p") or 1) < 0.95:
        return False
    if payload.get("tool_choice") not in (None, "auto", "none"):
        return False
    for message in reversed(payload["messages"]):
        if message["role"] != "tool":
            return not (message["role"] == "assistant" and (message.get("tool_calls") or message.get("function_call")))
    return True


def answer_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema of a ``json_schema`` response format: what Anthropic's structured outputs
    (``output_config.format``) take; None for any other format."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def refuse_unsupported(payload: dict[str, Any]) -> None:
    """What the Messages API has no way to do and the client would miss in the answer it parses (several
    choices, log probabilities, a JSON answer, audio). Asking for nothing of it (n of 1, logprobs false, a
    text response format) is honoured by doing nothing, so it is not refused."""
    if (payload.get("n") or 1) > 1:
        raise _unsupported("n", "Anthropic answers with one choice per request")
    if payload.get("logprobs") or payload.get("top_logprobs"):
        raise _unsupported("logprobs" if payload.get("logprobs") else "top_logprobs",
                           "Anthropic does not return log probabilities")
    refuse_audio_output(payload)
    response_format = payload.get("response_format")
    if response_format and response_format.get("type") != "text" and answer_schema(response_format) is None:
        raise _unsupported("response_format", "Anthropic's Messages API has no JSON mode; give a json_schema "
                                              "format, describe the JSON wanted in the prompt, or use a tool")
    if payload.get("temperature") is not None and payload["temperature"] > 1:
        raise _unsupported("temperature", "Anthropic takes a temperature from 0 to 1")


REFUSALS["anthropic"] = refuse_unsupported


def _unsupported(param: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"The parameter '{param}' is not supported for this model: {why}.", param=param)


def tool_definition(tool: dict[str, Any], index: int, walk: SchemaWalk | None = None) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise UnsupportedParameter(f"tools.{index}: tools of type {tool.get('type')!r} are not supported for this "
                                   f"model; only function tools are.", param="tools")
    function = tool["function"]
    schema = function.get("parameters")
    if schema is not None:
        # Anthropic resolves the references itself: the schema is checked, and counted as if inlined.
        (walk or SchemaWalk()).check(schema, f"tools.{index}.function.parameters")
    # Anthropic requires an object schema; a function without parameters takes an empty object.
    schema = {"type": "object", **(schema or {"properties": {}})}
    found = {"name": function["name"], "input_schema": schema}
    if isinstance(function.get("description"), str) and function["description"]:
        found["description"] = function["description"]
    return found


def tool_choice(choice: Any, *, parallel: bool | None) -> dict[str, Any] | None:
    """OpenAI's tool_choice (and parallel_tool_calls: false) as Anthropic's tool_choice."""
    found: dict[str, Any] | None
    if choice is None:
        found = {"type": "auto"} if parallel is False else None
    elif isinstance(choice, str):
        found = {"type": {"auto": "auto", "none": "none", "required": "any"}[choice]}
    else:
        function = choice.get("function") if choice.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise UnsupportedParameter("tool_choice must be 'auto', 'none', 'required' or "
                                       "{\"type\": \"function\", \"function\": {\"name\": …}} for this model.",
                                       param="tool_choice")
        found = {"type": "tool", "name": function["name"]}
    if found and parallel is False and found["type"] != "none":
        found["disable_parallel_tool_use"] = True
    return found


def tool_id(value: Any) -> str:
    """A client's tool call id as Anthropic takes one (letters, digits, _ and -)."""
    return TOOL_ID_REFUSED.sub("_", value) if isinstance(value, str) and value else tool_call_id()


# -- messages

def conversation(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages). System and developer messages become the system prompt, wherever they
    stand (one in mid-conversation is folded into it: the form every release of Anthropic's API takes; a
    Messages client's own system turns reach an anthropic deployment as they came, gateway.messages);
    assistant tool calls become tool_use blocks and tool messages tool_result blocks, the results in a row
    joined into one user turn; turns of one role in a row are merged (Anthropic's turns alternate)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role, where = message["role"], f"messages.{index}"
        if role in ("system", "developer"):
            system.extend(_text_blocks(message.get("content"), where))
        elif role == "tool":
            if not isinstance(message.get("tool_call_id"), str) or not message["tool_call_id"]:
                raise InvalidRequest(f"{where}.tool_call_id is required.", param=f"{where}.tool_call_id")
            result = {"type": "tool_result", "tool_use_id": tool_id(message["tool_call_id"])}
            text = content_text(message.get("content"))
            if text:
                result["content"] = text
            _add(turns, "user", [result])
        elif role == "assistant":
            blocks = _text_blocks(message.get("content"), where)
            calls = list(message.get("tool_calls") or ())
            if message.get("function_call"):  # the older single-call form
                calls.append({"function": message["function_call"]})
            for position, call in enumerate(calls):
                name, args = function_call(call, f"{where}.tool_calls.{position}")
                blocks.append({"type": "tool_use", "id": tool_id(call.get("id")), "name": name, "input": args})
            _add(turns, "assistant", blocks)
        else:
            _add(turns, "user", _user_blocks(message.get("content"), where))
    if not turns:
        raise InvalidRequest("messages needs at least one user or assistant message besides the system prompt.",
                             param="messages")
    return system, turns


def _add(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return  # an empty turn (an assistant message with empty content): Anthropic refuses one
    if turns and turns[-1]["role"] == role:
        previous = turns[-1]["content"]
        if blocks[0]["type"] == "tool_result":
            # Tool results lead their user turn, as Anthropic requires: after the results already there.
            at = sum(1 for block in previous if block["type"] == "tool_result")
            previous[at:at] = blocks
        else:
            previous.extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


def _text_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for index, part in enumerate(content):
        kind = part.get("type")
        if kind not in ("text", "refusal"):
            raise _part_unsupported(part, f"{where}.content.{index}")
        text = part.get("text") if kind == "text" else part.get("refusal")
        if isinstance(text, str) and text:
            blocks.append({"type": "text", "text": text})
    return blocks


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return _text_blocks(content, where)
    blocks = []
    for index, part in enumerate(content):
        at = f"{where}.content.{index}"
        kind = part.get("type")
        if kind == "text":
            if part["text"]:
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest(f"{at}.image_url needs a url.", param=f"{at}.image_url")
            blocks.append({"type": "image", "source": _source(url, f"{at}.image_url.url")})
        elif kind == "file" and isinstance(part.get("file"), dict) and isinstance(part["file"].get("file_data"), str):
            media_type, data = data_url(part["file"]["file_data"], f"{at}.file.file_data")
            if media_type != "application/pdf":
                raise UnsupportedParameter(f"{at}: files of type {media_type} are not supported for this model; "
                                           f"PDF files are.", param="messages")
            blocks.append({"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}})
        else:
            raise _part_unsupported(part, at)
    return blocks


def _source(url: str, where: str) -> dict[str, Any]:
    """An image as Anthropic's source: a data URL's bytes inline, an https URL for Anthropic to fetch."""
    if url.startswith("https://"):
        return {"type": "url", "url": url}
    if url.startswith("http://"):
        raise InvalidRequest(f"{where}: this model takes images by https URL or as a base64 data URL.", param=where)
    media_type, data = data_url(url, where)
    return {"type": "base64", "media_type": media_type, "data": data}


def _part_unsupported(part: dict[str, Any], where: str) -> UnsupportedParameter:
    what = "file parts by file_id" if part.get("type") == "file" else f"content parts of type {part.get('type')!r}"
    return UnsupportedParameter(f"{where}: {what} are not supported for this model.", param="messages")


# ---------------------------------------------------------------- the answer

def finish_reason(reason: Any, called: bool) -> str | None:
    """Anthropic's stop reason as a chat answer's finish reason (``stop_reason`` is its reverse)."""
    if called:
        return StopReason.TOOL_CALLS.value  # an answer that calls a function, whatever Anthropic's reason
    if not reason:
        return None
    return FINISH_REASONS.get(reason, StopReason.STOP).value


def stop_reason(finish: Any, called: bool) -> str:
    """A chat answer's finish reason as Anthropic's stop reason (``finish_reason`` is its reverse)."""
    return STOP_REASONS[StopReason.TOOL_CALLS] if called else STOP_REASONS.get(finish, "end_turn")


def usage(counts: Any) -> dict[str, Any] | None:
    """Anthropic's usage as OpenAI's: prompt_tokens counts every input token, the ones read from the
    cache and the ones written to it included (Anthropic's input_tokens counts only the rest)."""
    if not isinstance(counts, dict):
        return None
    # A count sent but unusable (negative, fractional, text) leaves its total out, and the gateway's estimate
    # is metered instead (docs/hardening.md); the metering clamps what is left (gateway.services).
    cached, fresh, written, output = (tokens_reported(counts, name) for name in (
        "cache_read_input_tokens", "input_tokens", "cache_creation_input_tokens", "output_tokens"))
    counted: dict[str, Any] = {}
    if cached is not None and fresh is not None and written is not None:
        counted["prompt_tokens"] = fresh + cached + written
    if output is not None:
        counted["completion_tokens"] = output
    if len(counted) == 2:
        counted["total_tokens"] = counted["prompt_tokens"] + counted["completion_tokens"]
    if cached is not None:
        counted["prompt_tokens_details"] = {"cached_tokens": cached}
    return counted


def _blocks(body: dict[str, Any], malformed: Malformed) -> list[dict[str, Any]]:
    content = body.get("content")
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise malformed("response")
    return content


def _tool_call(block: dict[str, Any], malformed: Malformed) -> dict[str, Any]:
    if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
        raise malformed("tool call")
    return {"id": block["id"] if isinstance(block.get("id"), str) and block["id"] else tool_call_id(),
            "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}}


def _completion_id(message_id: Any) -> str:
    return f"chatcmpl-{message_id}" if isinstance(message_id, str) and message_id else \
        f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion(body: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    texts, calls = [], []
    for block in _blocks(body, malformed):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block, malformed))
        # thinking blocks and server tools' blocks are not part of OpenAI's answer
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    answer = {"id": _completion_id(body.get("id")), "object": "chat.completion", "created": int(time.time()),
              "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                           "finish_reason": finish_reason(body.get("stop_reason") or "end_turn",
                                                                          bool(calls))}]}
    counted = usage(body.get("usage"))
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

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        if not self.opened:
            delta = {"role": "assistant", **delta}
            self.opened = True
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

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
            return self.chunk({})  # the role: held back until the first content (the commit point)
        if kind == "content_block_start":
            block, index = event.get("content_block"), event.get("index")
            if not isinstance(block, dict) or type(index) is not int:
                raise malformed("stream event")
            if block.get("type") == "tool_use":
                self.blocks[index] = _Block("tool_use", self.calls)
                self.calls += 1
                call = _tool_call({**block, "input": {}}, malformed)
                call["function"]["arguments"] = ""
                return self.chunk({"tool_calls": [{"index": self.blocks[index].call, **call}]})
            self.blocks[index] = _Block(str(block.get("type")))
            if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
                return self.chunk({"content": block["text"]})
            return None
        if kind == CONTENT_DELTA:
            delta, block = event.get("delta"), self.blocks.get(event.get("index"))
            if not isinstance(delta, dict) or block is None:
                raise malformed("stream event")
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
                return self.chunk({"content": delta["text"]})
            if delta.get("type") == "input_json_delta" and block.call is not None and delta.get("partial_json"):
                return self.chunk({"tool_calls": [{"index": block.call,
                                                   "function": {"arguments": delta["partial_json"]}}]})
            return None  # thinking, signatures, citations: not part of OpenAI's answer
        if kind == "message_delta":
            self.count(event.get("usage"))
            delta = event.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            return self.chunk({}, finish_reason(delta.get("stop_reason") or "end_turn", self.calls > 0))
        if kind == "message_stop":
            self.done = True
        return None  # ping, content_block_stop, and event types added after this was written

    def usage_chunk(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage(self.counts)}
