"""A Responses request translated into a chat request, for the deployments that do not speak the Responses
API, and the gateway's own count of its input (POST /v1/responses/input_tokens). The Responses API's tools
and tool choice are read into Tool and ToolChoice here (nothing writes them back to that wire)."""
from dataclasses import replace
from typing import Any, cast

from gateway.chat_serializers import ChatCompletionRequest
from gateway.conversation_request import (
    FilePart,
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    Tool,
    ToolChoice,
    ToolMode,
    ToolResult,
    Turn,
    conversation_to_chat,
)
from gateway.responses.request import check_request, need
from gateway.responses.store import conversation, previous
from gateway.upstream.openai import input_tool_call
from keys.models import ApiKey
from models_catalog.served import resolve_model

# The members of a request the codec reads; any other is passed through to native deployments and
# dropped (and named in X-Gateway-Ignored) towards translated ones.
MEMBERS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
           "max_output_tokens", "temperature", "top_p", "stream", "store", "previous_response_id", "include",
           "metadata", "truncation", "user", "safety_identifier", "prompt_cache_key", "service_tier",
           "stream_options", "background", "conversation"}
# Members a chat upstream has no equivalent of, whose absence leaves a correct answer: dropped and named.
DROPPED = ("safety_identifier", "prompt_cache_key", "service_tier", "truncation")
# Chat roles a message item may have; "developer" and "system" stay in place.
ROLES = ("user", "assistant", "system", "developer")
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string", "description": "The tool's input."}},
                "required": ["input"], "additionalProperties": False}


def chat_params(body: dict, items: list[dict], ignored: list[str]) -> tuple[dict, set[str]]:
    """The chat request for a Responses request over ``items`` (validated afterwards as every chat request
    is), and the names of its custom tools; what has no chat equivalent is named in ``ignored``."""
    turns: list[Turn] = [Message("system", body["instructions"])] if body.get("instructions") else []
    for index, item in enumerate(items):
        _chat_item(item, f"input.{index}", turns, ignored)
    need(bool(turns), "input", "must hold at least one item a model reads (a message, a function call or its "
                               "output), or the request instructions.")
    params: dict[str, Any] = {"model": body["model"], "messages": conversation_to_chat(turns)}
    tools, customs = chat_tools(body.get("tools") or [], ignored)
    if tools:
        params["tools"] = tools
    if body.get("tool_choice") is not None:
        choice = _tool_choice(body["tool_choice"], ignored)
        if choice is not None and choice.allowed is not None:  # allowed_tools: only the tools it names, its mode
            params["tools"] = [tool for tool in tools if tool["function"]["name"] in choice.allowed]
            choice = replace(choice, allowed=None)
        if choice is not None and params.get("tools"):
            params["tool_choice"] = choice.to_chat()
    if body.get("parallel_tool_calls") is not None and params.get("tools"):
        params["parallel_tool_calls"] = body["parallel_tool_calls"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            params[name] = body[name]
    if body.get("max_output_tokens") is not None:
        params["max_completion_tokens"] = body["max_output_tokens"]
    if body.get("user"):
        params["user"] = body["user"][:256]
    text = body.get("text") or {}
    text_format = text.get("format") or {}
    if text_format.get("type") == "json_object":
        params["response_format"] = {"type": "json_object"}
    elif text_format.get("type") == "json_schema":
        schema = {"name": text_format["name"], "schema": text_format["schema"]}
        if isinstance(text_format.get("strict"), bool):
            schema["strict"] = text_format["strict"]
        params["response_format"] = {"type": "json_schema", "json_schema": schema}
    if text.get("verbosity") is not None:
        ignored.append("text.verbosity")
    reasoning = body.get("reasoning") or {}
    if reasoning.get("summary") is not None:
        ignored.append("reasoning.summary")  # a chat upstream writes no summaries
    for name in DROPPED:
        if body.get(name) is not None and not (name == "truncation" and body[name] == "disabled"):
            ignored.append(name)
    ignored.extend(sorted(set(body) - MEMBERS))
    if body.get("stream"):
        # The usage chunk is always asked for: response.completed carries the usage.
        params.update(stream=True, stream_options={"include_usage": True})
    return params, customs


def _chat_item(item: dict, where: str, turns: list[Turn], ignored: list[str]) -> None:
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        need(role in ROLES, f"{where}.role", f"must be one of {', '.join(ROLES)}.")
        content = _content(item.get("content"), f"{where}.content", role == "assistant", ignored)
        turns.append(Message(cast(Role, role), content if role == "user" else _text(content)))  # need checked it
    elif kind in ("function_call", "custom_tool_call"):
        need(isinstance(item.get("name"), str) and bool(item["name"]), f"{where}.name", "is required.")
        need(isinstance(item.get("call_id"), str) and bool(item["call_id"]), f"{where}.call_id", "is required.")
        if kind == "function_call":
            need(isinstance(item.get("arguments"), str), f"{where}.arguments", "must be a string of JSON.")
        else:
            need(isinstance(item.get("input"), str), f"{where}.input", "must be a string.")
        call = input_tool_call(item)
        last = turns[-1] if turns else None
        if isinstance(last, Message) and last.role == "assistant":  # its calls, after any text it wrote
            turns[-1] = replace(last, content=last.content or None, tool_calls=(*last.tool_calls, call))
        else:
            turns.append(Message("assistant", tool_calls=(call,)))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        need(isinstance(item.get("call_id"), str) and bool(item["call_id"]), f"{where}.call_id", "is required.")
        output: Any = item.get("output")
        if isinstance(output, list):
            output = _text(_content(output, f"{where}.output", True, ignored))
        need(isinstance(output, str), f"{where}.output", "must be a string or an array of content parts.")
        turns.append(ToolResult(call_id=item["call_id"], content=output))
    elif kind == "reasoning":
        return  # an earlier turn's reasoning: the answer it led to is what the next turn needs
    else:
        ignored.append(f"input:{kind}")


def _content(content: Any, where: str, text_only: bool, ignored: list[str]) -> str | list[Part]:
    """A message's content as the neutral one: a string, or parts (``input_part``). A part chat cannot carry
    (an uploaded file by its id, a part of a newer type) is left out and named: a deployment that speaks the
    Responses API gets it as it came."""
    if isinstance(content, str):
        return content
    need(isinstance(content, list), where, "must be a string or an array of content parts.")
    parts: list[Part] = []
    for index, part in enumerate(content):
        at = f"{where}.{index}"
        need(isinstance(part, dict) and isinstance(part.get("type"), str), at, "must be a content part with a type.")
        read = input_part(part, at, text_only)
        if read is None:
            ignored.append(at)
        else:
            parts.append(read)
    return parts


def _text(content: str | list[Part]) -> str:
    """The text of a content: a string, or its text parts joined by spaces (what a system, developer or
    assistant message, and a tool's output, carry to chat)."""
    if isinstance(content, str):
        return content
    return " ".join(part.text for part in content if isinstance(part, TextPart))


def input_part(part: dict, where: str, text_only: bool) -> Part | None:
    """A Responses content part as the neutral one: any text (a refusal's and a summary's too) as text, an
    image by its URL (an unknown detail left out), a file by its data (named file.pdf when it has no name);
    None for what chat cannot carry (an image or a file by an uploaded file's id, a part of another type),
    and for an image or a file where only text may be (``text_only``: a tool's output)."""
    kind = part["type"]
    if kind in ("input_text", "output_text", "text", "refusal", "summary_text"):
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        need(isinstance(text, str), f"{where}.text", "must be a string.")
        return TextPart(cast(str, text))  # need refused any other
    if text_only:
        return None
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        detail = part.get("detail")
        return ImagePart(part["image_url"], detail if detail in ("low", "high", "auto") else None)
    if kind == "input_file" and isinstance(part.get("file_data"), str):
        return FilePart(data=part["file_data"], filename=str(part.get("filename") or "file.pdf"))
    return None


def chat_tools(tools: list, ignored: list[str]) -> tuple[list[dict], set[str]]:
    """Function and custom tools as chat's (``read_tool``); any other type dropped and named
    ``tools:<type>``. Also the names of the custom tools, whose calls come back as custom_tool_call."""
    found, customs = [], set()
    for index, tool in enumerate(tools):
        kind = tool["type"]
        if kind not in ("function", "custom"):
            ignored.append(f"tools:{kind}")
            continue
        need(isinstance(tool.get("name"), str) and bool(tool["name"]), f"tools.{index}.name", "is required.")
        if kind == "function":
            need(tool.get("parameters") is None or isinstance(tool["parameters"], dict), f"tools.{index}.parameters",
                  "must be a JSON schema object.")
        else:
            customs.add(tool["name"])
        found.append(read_tool(tool).to_chat())
    return found, customs


def read_tool(tool: dict) -> Tool:
    """A function or custom tool of a Responses request, checked already, as a Tool. A function without
    parameters takes an empty object; an empty description is none. A custom tool is a function of one
    string parameter ``input``, its grammar, if any, told to the model in the description."""
    description: str = tool["description"] if isinstance(tool.get("description"), str) else ""
    if tool["type"] == "function":
        strict = tool.get("strict")
        return Tool(name=tool["name"], parameters=tool.get("parameters") or {"type": "object", "properties": {}},
                    description=description or None, strict=strict if isinstance(strict, bool) else None)
    grammar: dict = tool["format"] if isinstance(tool.get("format"), dict) else {}
    if grammar.get("type") == "grammar" and isinstance(grammar.get("definition"), str):
        description += (f"\n\nThe input must follow this {grammar.get('syntax') or 'lark'} grammar:\n"
                        f"{grammar['definition']}")
    return Tool(name=tool["name"], parameters=CUSTOM_INPUT, description=description or None)


def _tool_choice(choice: Any, ignored: list[str]) -> ToolChoice | None:
    if isinstance(choice, str):
        need(choice in ("auto", "none", "required"), "tool_choice", "must be 'auto', 'none' or 'required'.")
    elif choice.get("type") in ("function", "custom"):
        need(isinstance(choice.get("name"), str) and bool(choice["name"]), "tool_choice.name", "is required.")
    elif choice.get("type") == "allowed_tools":
        need(choice.get("mode") in ("auto", "required") and isinstance(choice.get("tools"), list),
              "tool_choice", "allowed_tools needs mode 'auto' or 'required' and a list of tools.")
    else:
        need(isinstance(choice.get("type"), str), "tool_choice.type", "is required.")
        ignored.append("tool_choice")  # a built-in tool forced: the upstream has none of them
    return read_tool_choice(choice)


def read_tool_choice(choice: Any) -> ToolChoice | None:
    """The Responses API's tool_choice, checked already, as a ToolChoice: a custom tool forced is its
    function forced; allowed_tools the names of its tools. None for a built-in tool forced, which a chat
    upstream has none of."""
    if isinstance(choice, str):
        return ToolChoice(mode=cast(ToolMode, choice))  # checked: auto, none or required
    if choice["type"] in ("function", "custom"):
        return ToolChoice(mode="required", forced=choice["name"])
    if choice["type"] == "allowed_tools":
        return ToolChoice(mode=choice["mode"], allowed=tuple(
            tool["name"] for tool in choice["tools"] if isinstance(tool, dict) and isinstance(tool.get("name"), str)))
    return None


def input_tokens(*, key: ApiKey, body: dict) -> int:
    """POST /v1/responses/input_tokens: the gateway's own count of what the request would send."""
    from gateway.services import estimate_chat_tokens

    check_request(body, counting=True)
    items = conversation(previous(key, body.get("previous_response_id")), body)
    params, _ = chat_params({**body, "stream": False}, items, [])
    params, _ = ChatCompletionRequest.with_data(params).validated()
    resolve_model(key=key, operation="chat", model_id=params["model"])
    return estimate_chat_tokens(params)
