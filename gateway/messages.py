"""Anthropic's Messages API, inbound: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (CONTRACT
section 8), for clients built on Anthropic's SDK (Claude Code and the like).

A request is translated into the OpenAI-shaped chat request the rest of the gateway speaks and runs
through the very same metering pipeline as /v1/chat/completions (gateway.services.chat_completion):
the same limits, charge, ledger and usage rows, Idempotency-Key and deployments. What comes back is
translated into Anthropic's shapes here: the message object, the event stream, and errors as
``{"type": "error", "error": {"type", "message"}}``. An ``anthropic`` deployment is the exception
(AnthropicDialect): it gets the request passed through as the client sent it, and its answer or
events reach the client as they came; the translation then only feeds the metering.

What translates, what is left out and named (X-Gateway-Ignored) and what is refused is listed in
docs/providers.md.
"""
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from gateway.json_schemas import SchemaWalk
from gateway.services import ChatDialect, OpenAIEvents, ReplyTokens
from gateway.tokens import count_tokens
from gateway.upstream import honour
from gateway.upstream.shapes import EVENT_NAME, PASSED_THROUGH, content_text, prompt_text, tool_call_id
from models_catalog.served import ServedModel
from utils_app.errors import (
    GatewayError,
    InvalidRequest,
    UnsupportedParameter,
    UpstreamError,
    shaped_exception_handler,
)

# Anthropic's error type for each status the gateway answers with (section 4's statuses are kept).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
# Members of a request translated into the chat request every deployment type takes. Any other member is
# Anthropic's own: passed through to anthropic deployments as it came, left out and named for the others
# (CONTRACT section 8). count_tokens counts the conversation, the system prompt and the tools, and accepts
# every other member without counting it.
TRANSLATED = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "tools",
              "tool_choice", "stream", "metadata", "thinking", "output_config", "output_format"}
# Anthropic's efforts (output_config.effort) as OpenAI's reasoning_effort; above "high" Anthropic's steps go to
# OpenAI's most widely taken one.
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")
# What X-Gateway-Ignored may say of one request: names of at most NAME_MAX characters of letters, digits and
# _ . : - (any other becomes _), at most NAMES_MAX of them, then MORE.
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
NAME_MAX = 100
NAMES_MAX = 64
MORE = "more"
# The longest metadata.user_id passed on as OpenAI's user (gateway.serializers.ChatCompletionRequest's bound).
USER_MAX = 256


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


# The views' DRF exception handler: every error of section 4, in Anthropic's shape and with its status.
exception_handler = shaped_exception_handler(error_body)


# ---------------------------------------------------------------- the request

def _need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def _unsupported(param: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"{param}: {why}", param=param)


@dataclass
class Translation:
    """What reading a Messages request into chat parameters left out, by the names X-Gateway-Ignored gives
    them (``dropped``), and the client's member that OpenAI's reasoning_effort stands for, so that an
    upstream which cannot think either is named by the client's word for it."""

    dropped: list[str] = field(default_factory=list)
    reasoning_from: str | None = None
    tools_left_out: set[str] = field(default_factory=set)  # the names of the tools left out
    # A block only Anthropic's API can read and nothing can stand in for (an image by file id): refused by
    # every other type, so the request goes to an anthropic deployment of the pool, or is this 400.
    refusal: UnsupportedParameter | None = None

    def refuse(self, param: str, why: str) -> None:
        self.refusal = self.refusal or _unsupported(param, why)

    def drop(self, name: str) -> None:
        # A name comes from the client's body (a member, a tool's type or name) and goes into a header and a
        # log line: only a bounded word of safe characters, and a bounded number of names.
        name = NOT_IN_A_NAME.sub("_", name[:NAME_MAX])
        if name in self.dropped:
            return
        if len(self.dropped) < NAMES_MAX:
            self.dropped.append(name)
        elif self.dropped[-1] != MORE:
            self.dropped.append(MORE)

    def extras(self, block: dict, known: tuple[str, ...], where: str) -> None:
        """Name a block's members that nothing reads: a cache mark as ``cache_control`` (there is one on
        most of Claude Code's blocks), any other by its dotted path."""
        for member in block:
            if member not in known:
                self.drop("cache_control" if member == "cache_control" else f"{where}.{member}")


def chat_params(body: dict, *, counting: bool = False) -> dict:
    """The OpenAI-shaped chat request for an Anthropic Messages request (validated again, as every chat
    request is, by gateway.serializers.ChatCompletionRequest)."""
    return translate(body, counting=counting)[0]


def translate(body: dict, *, counting: bool = False) -> tuple[dict, Translation]:
    """(the chat request, what it left out) for an Anthropic Messages request. What maps is translated (a
    system message in place, thinking and effort as reasoning_effort, metadata.user_id as user, a structured
    output format as response_format); what only Anthropic's API honours is left out and named; a body that
    is not a Messages request at all is a 400 naming the member."""
    notes = Translation()
    for name in ("model", "messages") if counting else ("model", "messages", "max_tokens"):
        if body.get(name) is None:
            raise InvalidRequest(f"{name}: Field required.", code="missing_field", param=name)
    _need(isinstance(body["model"], str), "model", "must be a string.")
    _need(isinstance(body["messages"], list) and bool(body["messages"]), "messages",
          "must be a non-empty array of messages.")
    params: dict = {"model": body["model"], "messages": []}
    if body.get("system") is not None:
        params["messages"].append({"role": "system", "content": _system(body["system"], "system", notes)})
    for index, message in enumerate(body["messages"]):
        params["messages"].extend(_messages(message, f"messages.{index}", notes))
    _count_image_urls(body["messages"])
    if body.get("tools"):
        _need(isinstance(body["tools"], list), "tools", "must be an array.")
        walk = SchemaWalk()  # every tool's schema, within the request's limits
        tools = [_tool(tool, f"tools.{index}", walk, notes) for index, tool in enumerate(body["tools"])]
        if any(tools):
            params["tools"] = [tool for tool in tools if tool]
    if body.get("tool_choice") is not None:
        names = {tool["function"]["name"] for tool in params.get("tools", ())}
        params.update(_tool_choice(body["tool_choice"], names, notes))
    if counting:
        return params, notes  # the other members are not part of the input: nothing to count or name
    max_tokens = body["max_tokens"]
    _need(type(max_tokens) is int and max_tokens >= 1, "max_tokens", "must be an integer of at least 1.")
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
    response_format = _output_format(body.get("output_config"), "output_config", notes)
    if body.get("output_format") is not None:  # the structured outputs beta's own member, before output_config
        response_format = _output_format({"format": body["output_format"]}, "", notes)
    if response_format is not None:
        params["response_format"] = response_format
    effort = _reasoning_effort(body, notes)
    if effort is not None:
        params["reasoning_effort"] = effort
    # OpenAI's reasoning models take the cap as max_completion_tokens (reasoning included) and refuse max_tokens.
    params["max_completion_tokens" if effort is not None else "max_tokens"] = max_tokens
    _metadata(body.get("metadata"), params, notes)
    for name in sorted(set(body) - TRANSLATED):
        if body[name] is not None:  # null asks for nothing
            notes.drop(name)  # top_k, context_management, service_tier, container, mcp_servers, …
    return params, notes


def _reasoning_effort(body: dict, notes: Translation) -> str | None:
    """Extended thinking and output_config.effort as OpenAI's reasoning_effort (each adapter maps it to its
    upstream's knob, gateway.upstream.honour). An explicit budget is read as a step of effort; adaptive
    thinking takes the request's effort, OpenAI's default (medium) without one; disabled asks for none."""
    thinking, effort = body.get("thinking"), None
    if thinking is not None:
        _need(isinstance(thinking, dict) and thinking.get("type") in THINKING_TYPES, "thinking.type",
              "must be 'enabled', 'adaptive', 'between_tools' or 'disabled'.")
        if thinking["type"] == "enabled":
            budget = thinking.get("budget_tokens")
            _need(type(budget) is int and budget >= 1, "thinking.budget_tokens", "must be an integer of at least 1.")
            effort = "low" if budget <= 4096 else "medium" if budget <= 16384 else "high"
        elif thinking["type"] != "disabled":
            effort = "medium"
        notes.extras(thinking, ("type", "budget_tokens"), "thinking")  # display: a beta-only member
    wanted = body["output_config"].get("effort") if isinstance(body.get("output_config"), dict) else None
    if wanted is not None:
        if wanted in EFFORTS and not (isinstance(thinking, dict) and thinking["type"] == "disabled"):
            effort = EFFORTS[wanted]
        else:
            notes.drop("output_config.effort")
    if effort is not None:
        notes.reasoning_from = "thinking" if thinking is not None else "output_config.effort"
    return effort


def _metadata(metadata, params: dict, notes: Translation) -> None:
    """Anthropic's metadata.user_id is OpenAI's user; what else metadata holds has no equivalent."""
    if metadata is None:
        return
    _need(isinstance(metadata, dict), "metadata", "must be an object.")
    for name, value in metadata.items():
        if name == "user_id" and isinstance(value, str) and 0 < len(value) <= USER_MAX:
            params["user"] = value
        elif name != "user_id" or value is not None:
            notes.drop(f"metadata.{name}")


def _output_format(output_config, where: str, notes: Translation) -> dict | None:
    """Anthropic's structured-output format (``output_config.format``, what the SDK's ``messages.parse``
    sends) as OpenAI's response_format; None when there is none. Its effort is read with thinking; any other
    member of output_config is left out and named."""
    if output_config is None:
        return None
    _need(isinstance(output_config, dict), where or "output_format", "must be an object.")
    if where:
        notes.extras(output_config, ("format", "effort"), where)
    if output_config.get("format") is None:
        return None
    place = f"{where}.format" if where else "output_format"
    answer_format = output_config["format"]
    _need(isinstance(answer_format, dict) and answer_format.get("type") == "json_schema", place,
          "must be an object of type 'json_schema' with a schema.")
    _need(isinstance(answer_format.get("schema"), dict), f"{place}.schema", "must be a JSON schema object.")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": answer_format["schema"], "strict": True}}


def _system(system, where: str, notes: Translation) -> str | list:
    """The system prompt (or a system message's content): a string, or its text blocks as text parts."""
    if isinstance(system, str):
        return system
    _need(isinstance(system, list), where, "must be a string or an array of text blocks.")
    parts = []
    for index, block in enumerate(system):
        at = f"{where}.{index}"
        _need(isinstance(block, dict) and isinstance(block.get("type"), str), at, "must be a content block.")
        if block["type"] != "text":
            notes.drop(at)  # a system prompt is text; Anthropic takes nothing else there either
            continue
        _need(isinstance(block.get("text"), str), f"{at}.text", "must be a string.")
        notes.extras(block, ("type", "text", "citations"), at)
        parts.append({"type": "text", "text": block["text"]})
    return parts


def _messages(message, where: str, notes: Translation) -> list[dict]:
    """One Anthropic message as OpenAI messages: a system message in place (Claude Code's reminders in
    mid-conversation), a user turn's tool results as tool messages (first, as they stand first in the turn),
    an assistant turn's tool_use blocks as its tool_calls."""
    _need(isinstance(message, dict), where, "must be an object with role and content.")
    role, content = message.get("role"), message.get("content")
    _need(role in ("user", "assistant", "system"), f"{where}.role", "must be 'user', 'assistant' or 'system'.")
    if role == "system":
        _need(content is not None, f"{where}.content", "is required.")
        text = _system(content, f"{where}.content", notes)
        return [{"role": "system", "content": text}] if text else []
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    _need(isinstance(content, list) and bool(content), f"{where}.content",
          "must be a string or a non-empty array of content blocks.")
    blocks = []
    for index, block in enumerate(content):
        _need(isinstance(block, dict) and isinstance(block.get("type"), str), f"{where}.content.{index}",
              "must be a content block with a type.")
        blocks.append((block, f"{where}.content.{index}"))
    return _user(blocks, notes) if role == "user" else _assistant(blocks, notes)


def _user(blocks: list, notes: Translation) -> list[dict]:
    results, parts = [], []
    for block, where in blocks:
        kind = block["type"]
        if kind == "tool_result":
            _need(isinstance(block.get("tool_use_id"), str) and bool(block["tool_use_id"]), f"{where}.tool_use_id",
                  "is required.")
            notes.extras(block, ("type", "tool_use_id", "content", "is_error"), where)
            text, images = _result(block.get("content"), f"{where}.content", notes)
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
            parts.extend(images)  # a tool message is text: the images it returned follow as the user's
        elif kind in ("text", "image", "document", "search_result"):
            parts.extend(_part(block, where, notes))
        else:
            notes.drop(where)  # an Anthropic-only block (a container upload, say): the turn goes on without it
    return results + ([{"role": "user", "content": parts}] if parts else [])


def _part(block: dict, where: str, notes: Translation) -> list[dict]:
    """A text, image, document or search result block as OpenAI content parts."""
    kind = block["type"]
    if kind == "text":
        _need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
        notes.extras(block, ("type", "text", "citations"), where)
        return [{"type": "text", "text": block["text"]}]
    if kind == "image":
        notes.extras(block, ("type", "source"), where)
        url = _source_url(block.get("source"), where, notes)
        return [{"type": "image_url", "image_url": {"url": url}}] if url else []
    if kind == "search_result":
        notes.extras(block, ("type", "source", "title", "content", "citations"), where)
        texts, _ = _result(block.get("content"), f"{where}.content", notes)
        heading = " ".join(str(block[name]) for name in ("title", "source") if isinstance(block.get(name), str))
        return [{"type": "text", "text": f"{heading}\n{texts}" if heading else texts}]
    notes.extras(block, ("type", "source", "title", "context", "citations"), where)
    source: dict = block["source"] if isinstance(block.get("source"), dict) else {}
    if source.get("type") == "text":  # a plain-text document is its text
        _need(isinstance(source.get("data"), str), f"{where}.source.data", "must be a string.")
        return [{"type": "text", "text": source["data"]}]
    if source.get("type") == "content":
        text, _ = _result(source.get("content"), f"{where}.source.content", notes)
        return [{"type": "text", "text": text}]
    if source.get("type") != "base64" or source.get("media_type") != "application/pdf":
        notes.refuse(where, "documents reach this model as text, content or base64 PDF sources only.")
        return []
    _need(isinstance(source.get("data"), str), f"{where}.source.data", "must be a base64 string.")
    return [{"type": "file", "file": {"filename": "document.pdf",
                                      "file_data": f"data:application/pdf;base64,{source['data']}"}}]


def _result(content, where: str, notes: Translation) -> tuple[str, list[dict]]:
    """A tool result's (or a search result's) content: (its text, the image parts it holds)."""
    if content is None or isinstance(content, str):
        return content or "", []
    _need(isinstance(content, list), where, "must be a string or an array of content blocks.")
    texts: list[str] = []
    images: list[dict] = []
    for index, block in enumerate(content):
        at = f"{where}.{index}"
        _need(isinstance(block, dict) and isinstance(block.get("type"), str), at, "must be a content block.")
        if block["type"] in ("text", "document", "search_result"):
            texts.extend(part["text"] for part in _part(block, at, notes) if part["type"] == "text")
        elif block["type"] == "image":
            images.extend(_part(block, at, notes))
        else:
            notes.drop(at)  # a tool reference of Anthropic's tool search, say
    return "\n".join(texts), images


def _source_url(source, where: str, notes: Translation) -> str | None:
    """An image source as the URL OpenAI's image part takes: a data URL for base64, the URL itself for a url;
    None for a source only Anthropic reads (a file id), refused for the other types."""
    _need(isinstance(source, dict), f"{where}.source", "must be an object.")
    if source.get("type") == "base64":
        _need(isinstance(source.get("media_type"), str) and isinstance(source.get("data"), str),
              f"{where}.source", "a base64 source needs media_type and data.")
        return f"data:{source['media_type']};base64,{source['data']}"
    if source.get("type") == "url":
        _need(isinstance(source.get("url"), str), f"{where}.source.url", "must be a string.")
        return source["url"]
    notes.refuse(f"{where}.source", "images reach this model as base64 or url sources only.")
    return None


def _assistant(blocks: list, notes: Translation) -> list[dict]:
    texts, calls = [], []
    for block, where in blocks:
        kind = block["type"]
        if kind == "text":
            _need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
            notes.extras(block, ("type", "text", "citations"), where)
            texts.append(block["text"])
        elif kind == "tool_use":
            _need(isinstance(block.get("name"), str) and bool(block["name"]), f"{where}.name", "is required.")
            _need(isinstance(block.get("input", {}), dict), f"{where}.input", "must be an object.")
            notes.extras(block, ("type", "id", "name", "input", "caller"), where)
            calls.append({"id": block["id"] if isinstance(block.get("id"), str) and block["id"] else tool_call_id(),
                          "type": "function", "function": {"name": block["name"], "arguments": json.dumps(
                              block.get("input") or {}, ensure_ascii=False)}})
        else:
            # An earlier turn's reasoning (with its signature) or a server tool's work: Anthropic's alone. The
            # answer it led to is what the next turn needs.
            notes.drop(where)
    message: dict = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _tool(tool, where: str, walk: SchemaWalk, notes: Translation) -> dict | None:
    """A client tool as an OpenAI function; None for a tool left out: one of Anthropic's own types (its server
    tools, or its versioned client tools whose schema only Anthropic knows), named ``tools:<type>``, and one
    marked defer_loading (the tool search's placeholder, not a tool to call), named ``tools:<name>``."""
    _need(isinstance(tool, dict), where, "must be an object.")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        _need(isinstance(kind, str), f"{where}.type", "must be a string.")
        notes.drop(f"tools:{kind}")
        if isinstance(tool.get("name"), str):
            notes.tools_left_out.add(tool["name"])
        return None
    _need(isinstance(tool.get("name"), str) and bool(tool["name"]), f"{where}.name", "is required.")
    if tool.get("defer_loading") is True:
        notes.drop(f"tools:{tool['name']}")
        notes.tools_left_out.add(tool["name"])
        return None
    _need(isinstance(tool.get("input_schema"), dict), f"{where}.input_schema", "must be a JSON schema object.")
    walk.check(tool["input_schema"], f"{where}.input_schema")  # malformed or too large: a 400 naming the member
    notes.extras(tool, ("type", "name", "description", "input_schema", "strict", "defer_loading"), where)
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _count_image_urls(messages: list) -> None:
    """At most MAX_CHAT_IMAGE_URLS images given by URL in one request (gateway.serializers.count_image_urls),
    refused here naming the client's own block."""
    found = 0
    for index, message in enumerate(messages):
        for position, block in enumerate(message["content"] if isinstance(message["content"], list) else ()):
            source = block.get("source") if block.get("type") == "image" else None
            if isinstance(source, dict) and source.get("type") == "url":
                found += 1
                if found > settings.MAX_CHAT_IMAGE_URLS:
                    where = f"messages.{index}.content.{position}"
                    raise InvalidRequest(f"{where}: a request may give at most {settings.MAX_CHAT_IMAGE_URLS} "
                                         f"images by URL (MAX_CHAT_IMAGE_URLS); send the others as base64 "
                                         f"sources, or in another request.", param=where)


def _tool_choice(choice, names: set[str], notes: Translation) -> dict:
    """Anthropic's tool_choice as OpenAI's. One that needs a tool the translation left out (every tool, or the
    named one) is left out and named: the model then answers in text, as it may anyway. One naming a tool the
    request never had goes on, for the upstream to refuse as Anthropic would."""
    _need(isinstance(choice, dict), "tool_choice", "must be an object with a type.")
    kind = choice.get("type")
    if kind == "tool":
        _need(isinstance(choice.get("name"), str) and bool(choice["name"]), "tool_choice.name", "is required.")
        found: dict = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        _need(kind in ("auto", "any", "none"), "tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'.")
        found = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}[kind]}
    if kind in ("auto", "none") and not names:
        return {}  # nothing to choose from: asks for nothing
    if (not names and notes.tools_left_out) or (kind == "tool" and choice["name"] in notes.tools_left_out):
        notes.drop("tool_choice")
        return {}
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
    shown = {"input_tokens": max(count(usage.get("prompt_tokens")) - cached, 0),
             "output_tokens": count(usage.get("completion_tokens")),
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
    if type(usage.get("cost")) is int:  # the credits charged (CONTRACT section 12), as the metering set it
        shown["cost"] = usage["cost"]
    return shown


def _tool_input(arguments) -> dict:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def refuse_before_charge(model: ServedModel, params: dict, translation: Translation) -> None:
    """Refuse, before any credit is taken, a request no deployment of the model's pool can serve: an anthropic
    deployment takes the request as it came; the others take the translation (gateway.upstream.honour)."""
    if translation.refusal is not None and not any(d.provider.type == "anthropic" for d in model.pool):
        raise translation.refusal
    honour.refuse_before_charge(model, params, passed_through=("anthropic",))


class AnthropicDialect(ChatDialect):
    """A Messages request (``body``, as the client sent it): passed through as it is to an anthropic
    deployment, translated for any other (``params``, with what the translation left out in
    ``translation``); the answer in Anthropic's shapes either way."""

    def __init__(self, body: dict | None = None, *, beta: str = "", params: dict | None = None,
                 translation: Translation | None = None):
        self.body = body or {}
        self.params = params or {}
        self.translation = translation or Translation()
        # The client's anthropic-beta header goes with the request it concerns, to anthropic deployments.
        self.headers = {"anthropic-beta": beta} if beta else {}

    def complete(self, client, payload: dict) -> dict:
        if getattr(client, "passes_through", False):
            return client.messages(self.body, headers=self.headers)
        self.name_left_out(client)
        try:
            return client.chat(payload)
        finally:
            self.rename(client)

    def stream(self, client, payload: dict):
        if getattr(client, "passes_through", False):
            return client.messages_stream(self.body, headers=self.headers)
        self.name_left_out(client)
        try:
            return client.chat_stream(payload)
        finally:
            self.rename(client)

    def name_left_out(self, client) -> None:
        """A deployment of another type gets the translation: what only Anthropic's API honours was left out
        of it, and the attempt names it (X-Gateway-Ignored), the beta header included. What nothing can stand
        in for is refused: the request moves on to the pool's next deployment."""
        if self.translation.refusal is not None:
            raise self.translation.refusal
        client.ignored[:0] = [*self.translation.dropped, *(["anthropic-beta"] if self.headers else [])]

    def rename(self, client) -> None:
        """What the adapter left out of the translation, by the client's own member: the upstream that cannot
        think was asked through thinking (or output_config.effort), not reasoning_effort."""
        words = {"reasoning_effort": self.translation.reasoning_from or "thinking",
                 "parallel_tool_calls": "tool_choice.disable_parallel_tool_use"}
        client.ignored[:] = [words.get(name, name) for name in client.ignored]

    def input_tokens(self) -> int:
        """The gateway's own count of the request's input (as services.estimate_chat_tokens counts it)."""
        messages, tools = self.params.get("messages") or [], self.params.get("tools")
        return count_tokens(prompt_text(messages)) + (count_tokens(json.dumps(tools)) if tools else 0)

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        """A chat.completion as Anthropic's message object (its first choice: a Messages request asks for one),
        with the metered token counts; a message passed through as Anthropic sent it, under the gateway's
        model id."""
        charged = (completion.get("usage") or {}).get("cost")
        if PASSED_THROUGH in completion:
            message = completion[PASSED_THROUGH]
            usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
            return {**message, "model": completion.get("model"),
                    **({"usage": {**usage, "cost": charged}} if type(charged) is int else {})}
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
                                        "prompt_tokens_details": {"cached_tokens": cached}, "cost": charged})}

    def events(self) -> "AnthropicEvents":
        return AnthropicEvents(input_tokens=self.input_tokens)


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
                "usage": self._start_usage(chunk.get("usage"))}}), _sse("ping", {"type": "ping"})]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = [choice for choice in chunk.get("choices") or () if isinstance(choice, dict)]
        for choice in choices[:1]:
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.reply.add(delta["content"])
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
            self.reply.add(function["arguments"])
            events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]},
                                      self.tools[position]))
        return events

    def _start_usage(self, usage) -> dict:
        """message_start's usage: the input the upstream counted, if its first chunk says, else the gateway's
        own count; one output token, the first, as Anthropic counts it there."""
        counted = message_usage(usage)
        if not (isinstance(usage, dict) and type(usage.get("prompt_tokens")) is int):
            counted["input_tokens"] = self.count_input() if self.count_input else 0
        self.input_tokens = counted["input_tokens"]
        return {**counted, "output_tokens": 1}

    def _final_usage(self) -> dict:
        """message_delta's usage: the metered usage chunk's figures, else the counts made here."""
        if self.usage:
            return message_usage(self.usage)
        return {"input_tokens": self.input_tokens, "output_tokens": self.reply.tokens(),
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

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
