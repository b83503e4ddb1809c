"""Anthropic's Messages API, inbound: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (CONTRACT
section 8), for clients built on Anthropic's SDK (Claude Code and the like).

A request is translated into the OpenAI-shaped chat request the rest of the gateway speaks and runs
through the very same metering pipeline as /v1/chat/completions (gateway.services.chat_completion):
the same limits, charge, ledger and usage rows, Idempotency-Key and deployments. What comes back is
translated into Anthropic's shapes here: the message object, the event stream, and errors as
``{"type": "error", "error": {"type", "message"}}``. An ``anthropic`` deployment is the exception
(AnthropicDialect): it gets the request passed through as the client sent it, and its answer or
events reach the client as they came; the translation then only feeds the metering.

What translates and what is refused is listed in docs/providers.md.
"""
import json
import re
import uuid
from typing import Any

from django.conf import settings
from rest_framework.response import Response

from gateway.json_schemas import SchemaWalk
from gateway.services import ChatDialect, OpenAIEvents
from gateway.upstream.shapes import EVENT_NAME, PASSED_THROUGH, content_text, tool_call_id
from utils_app.errors import GatewayError, InvalidRequest, UnsupportedParameter, UpstreamError, as_gateway_error

# Anthropic's error type for each status the gateway answers with (section 4's statuses are kept).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
# Members of a request read here; any other is refused by name, never silently dropped.
REQUEST_MEMBERS = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "top_k",
                   "tools", "tool_choice", "stream", "metadata", "thinking", "service_tier"}
COUNT_MEMBERS = {"model", "messages", "system", "tools", "tool_choice", "thinking"}


# The anthropic-beta header a client may send (comma-separated feature names), passed on as it is.
BETA = re.compile(r"[A-Za-z0-9._-]{1,100}(?:\s*,\s*[A-Za-z0-9._-]{1,100}){0,31}")


def beta_header(value: str) -> str:
    """The client's anthropic-beta header if it is a list of feature names, else a 400 naming it."""
    value = value.strip()
    if value and not BETA.fullmatch(value):
        raise InvalidRequest("anthropic-beta: must be a comma-separated list of beta feature names.",
                             param="anthropic-beta")
    return value


# ---------------------------------------------------------------- errors

def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(error: GatewayError) -> dict:
    error.body()  # the request's summary line learns its reason there
    return {"type": "error", "error": {"type": error_type(error.status), "message": error.message}}


def exception_handler(exc, context):
    """The views' DRF exception handler: every error of section 4, in Anthropic's shape and with its status."""
    error = as_gateway_error(exc)
    response = Response(error_body(error), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


# ---------------------------------------------------------------- the request

def _need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def _unsupported(param: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"{param}: {why}", param=param)


def chat_params(body: dict, *, counting: bool = False) -> dict:
    """The OpenAI-shaped chat request for an Anthropic Messages request (validated again, as every chat
    request is, by gateway.serializers.ChatCompletionRequest)."""
    # A member this gateway does not know is passed through to an anthropic deployment (Anthropic's API
    # grows new ones: AnthropicDialect) and refused by name by any other; count_tokens knows its own.
    unknown = sorted(set(body) - COUNT_MEMBERS) if counting else []
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: Extra inputs are not permitted.", code="unknown_parameter",
                             param=unknown[0])
    for name in ("model", "messages") if counting else ("model", "messages", "max_tokens"):
        if body.get(name) is None:
            raise InvalidRequest(f"{name}: Field required.", code="missing_field", param=name)
    _need(isinstance(body["model"], str), "model", "must be a string.")
    _need(isinstance(body["messages"], list) and bool(body["messages"]), "messages",
          "must be a non-empty array of messages.")
    params: dict = {"model": body["model"], "messages": []}
    if body.get("system") is not None:
        params["messages"].append({"role": "system", "content": _system(body["system"])})
    for index, message in enumerate(body["messages"]):
        params["messages"].extend(_messages(message, f"messages.{index}"))
    _count_image_urls(body["messages"])
    if not counting:
        max_tokens = body["max_tokens"]
        _need(type(max_tokens) is int and max_tokens >= 1, "max_tokens", "must be an integer of at least 1.")
        params["max_tokens"] = max_tokens
        for name in ("temperature", "top_p"):
            if body.get(name) is not None:
                params[name] = body[name]
        if body.get("stop_sequences"):
            params["stop"] = body["stop_sequences"]
        if body.get("stream") is not None:
            _need(isinstance(body["stream"], bool), "stream", "must be a boolean.")
            if body["stream"]:
                # The usage chunk is always asked for: message_delta carries the usage.
                params.update(stream=True, stream_options={"include_usage": True})
        response_format = _output_format(body.get("output_config"))
        if response_format is not None:
            params["response_format"] = response_format
        metadata = body.get("metadata")
        if metadata is not None:
            _need(isinstance(metadata, dict), "metadata", "must be an object.")
            if isinstance(metadata.get("user_id"), str) and metadata["user_id"]:
                params["user"] = metadata["user_id"]
    if body.get("tools"):
        _need(isinstance(body["tools"], list), "tools", "must be an array.")
        walk = SchemaWalk()  # every tool's schema, within the request's limits
        params["tools"] = [_tool(tool, f"tools.{index}", walk) for index, tool in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        params.update(_tool_choice(body["tool_choice"]))
    return params


def anthropic_only(body: dict) -> dict[str, str]:
    """The members of a Messages request only an anthropic deployment can honour (it gets the request as
    it came), each with why another refuses it: such a request skips every other deployment of its pool."""
    found = {name: "this member of Anthropic's API reaches the model's anthropic deployments only."
             for name in sorted(set(body) - REQUEST_MEMBERS)}
    if body.get("top_k") is not None:
        found["top_k"] = "only the model's anthropic deployments take top_k; this one takes temperature and top_p."
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        found["thinking"] = "extended thinking reaches the model's anthropic deployments only."
    output_config = body.get("output_config")
    if isinstance(output_config, dict) and set(output_config) <= {"format"}:
        found.pop("output_config", None)  # a structured-output format alone: translated (_output_format)
    return found


def _output_format(output_config) -> dict | None:
    """Anthropic's structured-output format (``output_config.format``, what the SDK's ``messages.parse``
    sends) as OpenAI's response_format; None when there is none. Anything else of output_config reaches
    anthropic deployments only (anthropic_only)."""
    if not isinstance(output_config, dict) or output_config.get("format") is None:
        return None
    answer_format = output_config["format"]
    _need(isinstance(answer_format, dict) and answer_format.get("type") == "json_schema",
          "output_config.format", "must be an object of type 'json_schema' with a schema.")
    _need(isinstance(answer_format.get("schema"), dict), "output_config.format.schema", "must be a JSON schema object.")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": answer_format["schema"], "strict": True}}


def _system(system) -> str | list:
    if isinstance(system, str):
        return system
    _need(isinstance(system, list), "system", "must be a string or an array of text blocks.")
    parts = []
    for index, block in enumerate(system):
        _need(isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str),
              f"system.{index}", "must be a text block.")
        parts.append({"type": "text", "text": block["text"]})
    return parts


def _messages(message, where: str) -> list[dict]:
    """One Anthropic message as OpenAI messages: a user turn's tool results become tool messages (first, as
    they stand first in the turn), an assistant turn's tool_use blocks its tool_calls."""
    _need(isinstance(message, dict), where, "must be an object with role and content.")
    role, content = message.get("role"), message.get("content")
    _need(role in ("user", "assistant"), f"{where}.role", "must be 'user' or 'assistant'.")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    _need(isinstance(content, list) and bool(content), f"{where}.content",
          "must be a string or a non-empty array of content blocks.")
    blocks = []
    for index, block in enumerate(content):
        _need(isinstance(block, dict) and isinstance(block.get("type"), str), f"{where}.content.{index}",
              "must be a content block with a type.")
        blocks.append((block, f"{where}.content.{index}"))
    return _user(blocks) if role == "user" else _assistant(blocks)


def _user(blocks: list) -> list[dict]:
    results, parts = [], []
    for block, where in blocks:
        kind = block["type"]
        if kind == "tool_result":
            _need(isinstance(block.get("tool_use_id"), str) and bool(block["tool_use_id"]), f"{where}.tool_use_id",
                  "is required.")
            text = _result_text(block.get("content"), f"{where}.content")
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind == "text":
            _need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _source_url(block.get("source"), where)}})
        elif kind == "document":
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            if source.get("type") != "base64" or source.get("media_type") != "application/pdf":
                raise _unsupported(where, "documents are supported as base64 PDF sources only.")
            _need(isinstance(source.get("data"), str), f"{where}.source.data", "must be a base64 string.")
            parts.append({"type": "file", "file": {"filename": "document.pdf",
                                                   "file_data": f"data:application/pdf;base64,{source['data']}"}})
        else:
            raise _unsupported(where, f"content blocks of type {kind!r} are not supported in user turns.")
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _result_text(content, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    _need(isinstance(content, list), where, "must be a string or an array of text blocks.")
    texts = []
    for index, block in enumerate(content):
        if not (isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)):
            raise _unsupported(f"{where}.{index}", "tool results are supported as text only.")
        texts.append(block["text"])
    return "\n".join(texts)


def _source_url(source, where: str) -> str:
    """An image source as the URL OpenAI's image part takes: a data URL for base64, the URL itself for a url."""
    _need(isinstance(source, dict), f"{where}.source", "must be an object.")
    if source.get("type") == "base64":
        _need(isinstance(source.get("media_type"), str) and isinstance(source.get("data"), str),
              f"{where}.source", "a base64 source needs media_type and data.")
        return f"data:{source['media_type']};base64,{source['data']}"
    if source.get("type") == "url":
        _need(isinstance(source.get("url"), str), f"{where}.source.url", "must be a string.")
        return source["url"]
    raise _unsupported(f"{where}.source", "images are supported as base64 or url sources.")


def _assistant(blocks: list) -> list[dict]:
    texts, calls = [], []
    for block, where in blocks:
        kind = block["type"]
        if kind == "text":
            _need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
            texts.append(block["text"])
        elif kind == "tool_use":
            _need(isinstance(block.get("name"), str) and bool(block["name"]), f"{where}.name", "is required.")
            _need(isinstance(block.get("input", {}), dict), f"{where}.input", "must be an object.")
            calls.append({"id": block["id"] if isinstance(block.get("id"), str) and block["id"] else tool_call_id(),
                          "type": "function", "function": {"name": block["name"], "arguments": json.dumps(
                              block.get("input") or {}, ensure_ascii=False)}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # an earlier turn's reasoning: the answer it led to is what the next turn needs
        else:
            raise _unsupported(where, f"content blocks of type {kind!r} are not supported in assistant turns.")
    message: dict = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _tool(tool, where: str, walk: SchemaWalk) -> dict:
    _need(isinstance(tool, dict), where, "must be an object.")
    if tool.get("type") not in (None, "custom"):
        raise _unsupported(where, f"tools of type {tool.get('type')!r} are not supported; only client tools "
                                  f"(name, description, input_schema) are.")
    _need(isinstance(tool.get("name"), str) and bool(tool["name"]), f"{where}.name", "is required.")
    _need(isinstance(tool.get("input_schema"), dict), f"{where}.input_schema", "must be a JSON schema object.")
    walk.check(tool["input_schema"], f"{where}.input_schema")  # malformed or too large: a 400 naming the member
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _count_image_urls(messages: list) -> None:
    """At most MAX_CHAT_IMAGE_URLS images given by URL in one request (gateway.serializers.count_image_urls),
    refused here naming the client's own block."""
    found = 0
    for index, message in enumerate(messages):
        for position, block in enumerate(message["content"] if isinstance(message["content"], list) else ()):
            source = block.get("source") if block["type"] == "image" else None
            if isinstance(source, dict) and source.get("type") == "url":
                found += 1
                if found > settings.MAX_CHAT_IMAGE_URLS:
                    where = f"messages.{index}.content.{position}"
                    raise InvalidRequest(f"{where}: a request may give at most {settings.MAX_CHAT_IMAGE_URLS} "
                                         f"images by URL (MAX_CHAT_IMAGE_URLS); send the others as base64 "
                                         f"sources, or in another request.", param=where)


def _tool_choice(choice) -> dict:
    _need(isinstance(choice, dict), "tool_choice", "must be an object with a type.")
    kind = choice.get("type")
    if kind == "tool":
        _need(isinstance(choice.get("name"), str) and bool(choice["name"]), "tool_choice.name", "is required.")
        found: dict = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        _need(kind in ("auto", "any", "none"), "tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'.")
        found = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}[kind]}
    if choice.get("disable_parallel_tool_use") is True:
        found["parallel_tool_calls"] = False
    return found


# ---------------------------------------------------------------- the answer

def message_id(completion_id) -> str:
    if isinstance(completion_id, str) and completion_id:
        return "msg_" + completion_id.removeprefix("chatcmpl-").removeprefix("msg_")
    return f"msg_{uuid.uuid4().hex[:24]}"


def stop_reason(finish, called: bool) -> str:
    return "tool_use" if called else STOP_REASONS.get(finish, "end_turn")


def message_usage(usage) -> dict:
    """OpenAI's usage as Anthropic's: input_tokens are the ones not read from the cache."""
    usage = usage if isinstance(usage, dict) else {}

    def count(value) -> int:
        return value if type(value) is int and value >= 0 else 0

    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    cached = count(details.get("cached_tokens"))
    return {"input_tokens": max(count(usage.get("prompt_tokens")) - cached, 0),
            "output_tokens": count(usage.get("completion_tokens")),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def _tool_input(arguments) -> dict:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


class AnthropicDialect(ChatDialect):
    """A Messages request (``body``, as the client sent it): passed through as it is to an anthropic
    deployment, translated for any other; the answer in Anthropic's shapes either way."""

    def __init__(self, body: dict | None = None, *, beta: str = ""):
        self.body = body or {}
        self.anthropic_only = anthropic_only(self.body)
        # The client's anthropic-beta header goes with the request it concerns, to anthropic deployments.
        self.headers = {"anthropic-beta": beta} if beta else {}

    def complete(self, client, payload: dict) -> dict:
        if getattr(client, "passes_through", False):
            return client.messages(self.body, headers=self.headers)
        self.refuse_anthropic_only()
        return client.chat(payload)

    def stream(self, client, payload: dict):
        if getattr(client, "passes_through", False):
            return client.messages_stream(self.body, headers=self.headers)
        self.refuse_anthropic_only()
        return client.chat_stream(payload)

    def refuse_anthropic_only(self) -> None:
        """A deployment of another type cannot honour what only Anthropic's API takes: the request moves on
        to the pool's next deployment, and is a 400 naming the parameter when none is left."""
        for name, why in self.anthropic_only.items():
            raise _unsupported(name, why)

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        """A chat.completion as Anthropic's message object (its first choice: a Messages request asks for one),
        with the metered token counts; a message passed through as Anthropic sent it, under the gateway's
        model id."""
        if PASSED_THROUGH in completion:
            return {**completion[PASSED_THROUGH], "model": completion.get("model")}
        choices = completion.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict):
            message = {}
        content: list[dict[str, Any]] = []
        text = content_text(message.get("content"))
        if text:
            content.append({"type": "text", "text": text})
        calls = [call for call in message.get("tool_calls") or () if isinstance(call, dict)]
        for call in calls:
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            content.append({"type": "tool_use", "id": call.get("id") or tool_call_id(),
                            "name": function.get("name") or "", "input": _tool_input(function.get("arguments"))})
        return {"id": message_id(completion.get("id")), "type": "message", "role": "assistant",
                "model": completion.get("model"), "content": content,
                "stop_reason": stop_reason(choice.get("finish_reason"), bool(calls)), "stop_sequence": None,
                "usage": message_usage({"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                                        "prompt_tokens_details": {"cached_tokens": cached}})}

    def events(self) -> "AnthropicEvents":
        return AnthropicEvents()


def _sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data, separators=(",", ":"),
                                                         ensure_ascii=False).encode() + b"\n\n"


class AnthropicEvents(OpenAIEvents):
    """Chat chunks as Anthropic's event stream, as they arrive: ``message_start`` (and a ``ping``) with the
    first, then a content block per text run and per tool call (``content_block_start``, ``_delta``,
    ``_stop``), and at the end ``message_delta`` with the stop reason and the usage, and ``message_stop``.
    An error once the stream is under way is one ``error`` event, as Anthropic sends it."""

    def __init__(self):
        self.started = False
        self.index = -1  # the content block open now (-1: none yet)
        self.open: str | None = None
        self.tools: dict[int, int] = {}  # OpenAI tool call index -> content block index
        self.finish = None
        self.usage: dict = {}
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
        if PASSED_THROUGH in chunk:  # Anthropic's own event, as it came (the model named as the client named it)
            event = chunk[PASSED_THROUGH]
            self.started = self.passed_through = True
            if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
                event = {**event, "message": {**event["message"], "model": chunk.get("model")}}
            kind = event.get("type")
            if not (isinstance(kind, str) and EVENT_NAME.fullmatch(kind)):
                # The adapter refuses such an event; never written as an event: line, whoever passes one on.
                raise UpstreamError("The upstream sent a stream event whose type is not an event name.")
            return _sse(kind, event)
        events = []
        if not self.started:
            self.started = True
            events += [_sse("message_start", {"type": "message_start", "message": {
                "id": message_id(chunk.get("id")), "type": "message", "role": "assistant", "model": chunk.get("model"),
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}), _sse("ping", {"type": "ping"})]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = [choice for choice in chunk.get("choices") or () if isinstance(choice, dict)]
        for choice in choices[:1]:
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                if self.open != "text":
                    events += self._start_block({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": delta["content"]}, self.index))
            for call in delta.get("tool_calls") or ():
                events += self._tool_call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return b"".join(events)

    def _tool_call(self, call) -> list[bytes]:
        if not isinstance(call, dict):
            return []
        position = call.get("index")
        if type(position) is not int:
            position = 0
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        events = []
        if position not in self.tools:
            events += self._start_block({"type": "tool_use", "id": call.get("id") or tool_call_id(),
                                         "name": function.get("name") or "", "input": {}})
            self.tools[position] = self.index
        if isinstance(function.get("arguments"), str) and function["arguments"]:
            events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]},
                                      self.tools[position]))
        return events

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
            "usage": message_usage(self.usage)}))
        events.append(_sse("message_stop", {"type": "message_stop"}))
        return b"".join(events)
