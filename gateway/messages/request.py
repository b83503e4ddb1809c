"""A Messages request decoded into the OpenAI-shaped chat request the rest of the gateway speaks: the
top-level members (the conversation's turns and blocks are gateway.messages.content's, written as chat's
messages here, once)."""
import re

from django.conf import settings

from gateway.conversation_request import Message, Turn, conversation_to_chat
from gateway.json_schemas import SchemaWalk
from gateway.messages.content import system_prompt, turn_messages
from gateway.messages.translation import Translation, need
from gateway.upstream.anthropic_request import read_effort, read_thinking, read_tool, read_tool_choice
from utils_app.errors import InvalidRequest

# Members of a request translated into the chat request every deployment type takes. Any other member is
# Anthropic's own: passed through to anthropic deployments as it came, left out and named for the others
# (CONTRACT section 8). count_tokens counts the conversation, the system prompt and the tools, and accepts
# every other member without counting it.
TRANSLATED = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "tools",
              "tool_choice", "stream", "metadata", "thinking", "output_config", "output_format"}
THINKING_TYPES = ("enabled", "adaptive", "between_tools", "disabled")
# The longest metadata.user_id passed on as OpenAI's user (gateway.chat_serializers.ChatCompletionRequest's bound).
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


def chat_params(body: dict, *, counting: bool = False) -> dict:
    """The OpenAI-shaped chat request for an Anthropic Messages request (validated again, as every chat
    request is, by gateway.chat_serializers.ChatCompletionRequest)."""
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
    need(isinstance(body["model"], str), "model", "must be a string.")
    need(isinstance(body["messages"], list) and bool(body["messages"]), "messages",
          "must be a non-empty array of messages.")
    turns: list[Turn] = []
    if body.get("system") is not None:
        turns.append(Message("system", system_prompt(body["system"], "system", notes)))
    for index, message in enumerate(body["messages"]):
        turns.extend(turn_messages(message, f"messages.{index}", notes))
    params: dict = {"model": body["model"], "messages": conversation_to_chat(turns)}
    _count_image_urls(body["messages"])
    if body.get("tools"):
        need(isinstance(body["tools"], list), "tools", "must be an array.")
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
    need(type(max_tokens) is int and max_tokens >= 1, "max_tokens", "must be an integer of at least 1.")
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            params[name] = body[name]
    if body.get("stop_sequences"):
        params["stop"] = body["stop_sequences"]
    if body.get("stream") is not None:
        need(isinstance(body["stream"], bool), "stream", "must be a boolean.")
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
    upstream's knob), read by gateway.upstream.anthropic_request.read_thinking once checked here."""
    thinking = body.get("thinking")
    if thinking is not None:
        need(isinstance(thinking, dict) and thinking.get("type") in THINKING_TYPES, "thinking.type",
              "must be 'enabled', 'adaptive', 'between_tools' or 'disabled'.")
        if thinking["type"] == "enabled":
            budget = thinking.get("budget_tokens")
            need(type(budget) is int and budget >= 1, "thinking.budget_tokens", "must be an integer of at least 1.")
        notes.extras(thinking, ("type", "budget_tokens"), "thinking")  # display: a beta-only member
    wanted = body["output_config"].get("effort") if isinstance(body.get("output_config"), dict) else None
    if wanted is not None and read_effort(wanted, thinking) is None:
        notes.drop("output_config.effort")
    effort = read_thinking(thinking, wanted)
    if effort is not None:
        notes.reasoning_from = "thinking" if thinking is not None else "output_config.effort"
    return effort


def _metadata(metadata, params: dict, notes: Translation) -> None:
    """Anthropic's metadata.user_id is OpenAI's user; what else metadata holds has no equivalent."""
    if metadata is None:
        return
    need(isinstance(metadata, dict), "metadata", "must be an object.")
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
    need(isinstance(output_config, dict), where or "output_format", "must be an object.")
    if where:
        notes.extras(output_config, ("format", "effort"), where)
    if output_config.get("format") is None:
        return None
    place = f"{where}.format" if where else "output_format"
    answer_format = output_config["format"]
    need(isinstance(answer_format, dict) and answer_format.get("type") == "json_schema", place,
          "must be an object of type 'json_schema' with a schema.")
    need(isinstance(answer_format.get("schema"), dict), f"{place}.schema", "must be a JSON schema object.")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": answer_format["schema"], "strict": True}}


def _tool(tool, where: str, walk: SchemaWalk, notes: Translation) -> dict | None:
    """A client tool as an OpenAI function; None for a tool left out: one of Anthropic's own types (its server
    tools, or its versioned client tools whose schema only Anthropic knows), named ``tools:<type>``, and one
    marked defer_loading (the tool search's placeholder, not a tool to call), named ``tools:<name>``."""
    need(isinstance(tool, dict), where, "must be an object.")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        need(isinstance(kind, str), f"{where}.type", "must be a string.")
        notes.drop(f"tools:{kind}")
        if isinstance(tool.get("name"), str):
            notes.tools_left_out.add(tool["name"])
        return None
    need(isinstance(tool.get("name"), str) and bool(tool["name"]), f"{where}.name", "is required.")
    if tool.get("defer_loading") is True:
        notes.drop(f"tools:{tool['name']}")
        notes.tools_left_out.add(tool["name"])
        return None
    need(isinstance(tool.get("input_schema"), dict), f"{where}.input_schema", "must be a JSON schema object.")
    walk.check(tool["input_schema"], f"{where}.input_schema")  # malformed or too large: a 400 naming the member
    notes.extras(tool, ("type", "name", "description", "input_schema", "strict", "defer_loading"), where)
    return read_tool(tool).to_chat()


def _count_image_urls(messages: list) -> None:
    """At most MAX_CHAT_IMAGE_URLS images given by URL in one request (gateway.chat_serializers.count_image_urls),
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
    need(isinstance(choice, dict), "tool_choice", "must be an object with a type.")
    kind = choice.get("type")
    if kind == "tool":
        need(isinstance(choice.get("name"), str) and bool(choice["name"]), "tool_choice.name", "is required.")
    else:
        need(kind in ("auto", "any", "none"), "tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'.")
    found: dict = {"tool_choice": read_tool_choice(choice).to_chat()}
    if kind in ("auto", "none") and not names:
        return {}  # nothing to choose from: asks for nothing
    if (not names and notes.tools_left_out) or (kind == "tool" and choice["name"] in notes.tools_left_out):
        notes.drop("tool_choice")
        return {}
    if choice.get("disable_parallel_tool_use") is True:
        found["parallel_tool_calls"] = False
    return found
