"""An OpenAI-shaped chat request as a request to Anthropic's Messages API (gateway.upstream.anthropic
sends it): the conversation, its tools and tool choice, thinking, structured outputs, and what Anthropic
cannot do refused or named as left out (gateway.upstream.base)."""
import re
from dataclasses import replace
from typing import Any

from gateway.conversation_request import (
    Content,
    Effort,
    FilePart,
    ImagePart,
    Message,
    Part,
    RefusalPart,
    TextPart,
    Tool,
    ToolChoice,
    ToolMode,
    ToolResult,
    Turn,
    conversation_from_chat,
    thinking_budget,
)
from gateway.json_schemas import SchemaWalk
from gateway.upstream.anthropic_answer import tool_use
from gateway.upstream.base import REFUSALS, SERVER_FEATURES, name_left_out, refuse_audio_output, unsupported
from gateway.upstream.shapes import (
    call_arguments,
    checked_user_part,
    data_url,
    function_choice,
    function_tool,
    part_unsupported,
    tool_call_id,
)
from utils_app.errors import InvalidRequest, UnsupportedParameter

TOOL_ID_REFUSED = re.compile(r"[^A-Za-z0-9_-]")


def messages_request(payload: dict[str, Any], *, model: str, max_tokens_default: int,
                     ignored: list[str] | None = None) -> dict[str, Any]:
    """A Messages API request for an OpenAI-shaped chat request. A parameter whose absence would change the
    answer's shape raises; one Anthropic has no use for is left out and named in ``ignored`` (gateway.upstream.base)."""
    refuse_unsupported(payload)
    name_left_out(payload, ignored, LEFT_OUT)
    turns = conversation_from_chat(payload["messages"])
    system, messages = conversation(turns)
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
    thinking = thinking_block(payload.get("reasoning_effort"), request["max_tokens"])
    if thinking is not None:
        if can_think(payload, turns, request["max_tokens"]):
            request["thinking"] = thinking
        elif ignored is not None:
            ignored.append("reasoning_effort")
    stop = payload.get("stop")
    if stop:
        request["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    tools = payload.get("tools")
    if tools:
        walk = SchemaWalk()  # the request's schemas, all of them within its limits
        request["tools"] = [tool_definition(function_tool(tool, index), index, walk)
                            for index, tool in enumerate(tools)]
        chosen = payload.get("tool_choice")
        choice = tool_choice(None if chosen is None else function_choice(chosen),
                             parallel=payload.get("parallel_tool_calls"))
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


def can_think(payload: dict[str, Any], turns: list[Turn], max_tokens: int) -> bool:
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
    for turn in reversed(turns):
        if isinstance(turn, Message):
            return not (turn.role == "assistant" and turn.tool_calls)
    return True


# Anthropic's efforts (output_config.effort) as the conversation's; above "high" Anthropic's steps go to
# OpenAI's most widely taken one.
EFFORT_STEPS: dict[str, Effort] = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
# An enabled thinking block's budget_tokens as an effort: up to 4096 low, up to 16384 medium, past that high.
BUDGET_STEPS: tuple[tuple[int, Effort], ...] = ((4096, "low"), (16384, "medium"))


def read_effort(effort: Any, thinking: dict[str, Any] | None) -> Effort | None:
    """output_config.effort as an Effort; None (the decoder names it left out) for one Anthropic does not
    have, and for any when thinking is disabled, which asks for none."""
    if thinking is not None and thinking["type"] == "disabled":
        return None
    return EFFORT_STEPS.get(effort) if isinstance(effort, str) else None


def read_thinking(thinking: dict[str, Any] | None, effort: Any = None) -> Effort | None:
    """A Messages request's thinking and output_config.effort, checked already (gateway.messages.request),
    as an Effort (``thinking_block`` is its reverse); None for no thinking (disabled, or neither sent).
    Anthropic's effort (``read_effort``) wins; else an enabled block's budget reads as a step, adaptive
    thinking as OpenAI's default effort, medium. The steps are BUDGET_STEPS, not the conversation's table
    read back (budget_effort): Messages clients write budgets on Anthropic's wider scale and have been
    answered with these steps since the API was first translated, so a budget must keep its effort; a budget
    ``thinking_block`` writes may read back as another (minimal's 1024 as low, high's 16384 as medium)."""
    wanted = read_effort(effort, thinking)
    if wanted is not None or thinking is None or thinking["type"] == "disabled":
        return wanted
    if thinking["type"] == "enabled":
        budget = thinking["budget_tokens"]
        return next((step for most, step in BUDGET_STEPS if budget <= most), "high")
    return "medium"


def thinking_block(effort: Effort | None, max_tokens: int) -> dict[str, Any] | None:
    """An effort as Anthropic's thinking block (``read_thinking`` is its reverse): enabled, with the effort's
    budget (thinking_budget) kept below max_tokens, which Anthropic counts it in; None for no thinking."""
    budget = thinking_budget(effort)
    return None if budget is None else {"type": "enabled", "budget_tokens": min(budget, max_tokens - 1)}


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
        raise unsupported("n", "Anthropic answers with one choice per request")
    if payload.get("logprobs") or payload.get("top_logprobs"):
        raise unsupported("logprobs" if payload.get("logprobs") else "top_logprobs",
                           "Anthropic does not return log probabilities")
    refuse_audio_output(payload)
    response_format = payload.get("response_format")
    if response_format and response_format.get("type") != "text" and answer_schema(response_format) is None:
        raise unsupported("response_format", "Anthropic's Messages API has no JSON mode; give a json_schema "
                                              "format, describe the JSON wanted in the prompt, or use a tool")
    if payload.get("temperature") is not None and payload["temperature"] > 1:
        raise unsupported("temperature", "Anthropic takes a temperature from 0 to 1")


REFUSALS["anthropic"] = refuse_unsupported


def read_tool(tool: dict[str, Any]) -> Tool:
    """A client tool of a Messages request, checked already (gateway.messages.request), as a Tool
    (``tool_definition`` is its reverse): its input_schema as the parameters."""
    description, strict = tool.get("description"), tool.get("strict")
    return Tool(name=tool["name"], parameters=tool["input_schema"],
                description=description if isinstance(description, str) else None,
                strict=strict if isinstance(strict, bool) else None)


def tool_definition(tool: Tool, index: int, walk: SchemaWalk | None = None) -> dict[str, Any]:
    """A Tool as Anthropic's client tool (``read_tool`` is its reverse). Anthropic takes neither strict
    nor an empty description: both are left out."""
    schema = tool.parameters
    if schema is not None:
        # Anthropic resolves the references itself: the schema is checked, and counted as if inlined.
        (walk or SchemaWalk()).check(schema, f"tools.{index}.function.parameters")
    # Anthropic requires an object schema; a function without parameters takes an empty object.
    schema = {"type": "object", **(schema or {"properties": {}})}
    found = {"name": tool.name, "input_schema": schema}
    if tool.description:
        found["description"] = tool.description
    return found


# Anthropic's tool_choice types and the modes they are, and the reverse (a forced tool is type "tool").
CHOICE_MODES: dict[str, ToolMode] = {"auto": "auto", "any": "required", "none": "none"}
CHOICE_TYPES = {mode: kind for kind, mode in CHOICE_MODES.items()}


def read_tool_choice(choice: dict[str, Any]) -> ToolChoice:
    """Anthropic's tool_choice, checked already (gateway.messages.request), as a ToolChoice (``tool_choice``
    is its reverse); its disable_parallel_tool_use is the decoder's to read."""
    if choice["type"] == "tool":
        return ToolChoice(mode="required", forced=choice["name"])
    return ToolChoice(mode=CHOICE_MODES[choice["type"]])


def tool_choice(choice: ToolChoice | None, *, parallel: bool | None) -> dict[str, Any] | None:
    """A ToolChoice (and parallel_tool_calls: false) as Anthropic's tool_choice (``read_tool_choice`` is its
    reverse). Anthropic cannot narrow the tools (``function_choice`` refuses allowed_tools)."""
    found: dict[str, Any] | None
    if choice is None:
        found = {"type": "auto"} if parallel is False else None
    elif choice.forced is not None:
        found = {"type": "tool", "name": choice.forced}
    else:
        found = {"type": CHOICE_TYPES[choice.mode]}
    if found and parallel is False and found["type"] != "none":
        found["disable_parallel_tool_use"] = True
    return found


def tool_id(value: Any) -> str:
    """A client's tool call id as Anthropic takes one (letters, digits, _ and -)."""
    return TOOL_ID_REFUSED.sub("_", value) if isinstance(value, str) and value else tool_call_id()


def tool_result(result: ToolResult) -> dict[str, Any]:
    """A tool's result as a tool_result block, its call's id made one Anthropic takes (``tool_id``, as the
    tool_use block it answers is given the same); empty content is left out, as Anthropic takes it."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(result.call_id)}
    if result.content:
        block["content"] = result.content
    return block


# -- messages

def conversation(turns: list[Turn]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) for the conversation's turns (read from chat's once, conversation_from_chat).
    System and developer messages become the system prompt, wherever they stand (one in mid-conversation is
    folded into it: the form every release of Anthropic's API takes; a Messages client's own system turns
    reach an anthropic deployment as they came, gateway.messages); an assistant's tool calls become tool_use
    blocks and tool results tool_result blocks, the results in a row joined into one user turn; turns of one
    role in a row are merged (Anthropic's turns alternate)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for index, turn in enumerate(turns):
        where = f"messages.{index}"
        if isinstance(turn, ToolResult):
            if not turn.call_id:
                raise InvalidRequest(f"{where}.tool_call_id is required.", param=f"{where}.tool_call_id")
            _add(messages, "user", [tool_result(turn)])
        elif turn.role in ("system", "developer"):
            system.extend(_blocks(turn.content, where))
        elif turn.role == "assistant":
            blocks = _blocks(turn.content, where)
            # The answers' tool_use blocks, each id made one Anthropic takes, as its result's is (tool_id).
            blocks.extend(tool_use(replace(call, id=tool_id(call.id)), arguments)
                          for call, arguments in call_arguments(turn, where))
            _add(messages, "assistant", blocks)
        else:
            _add(messages, "user", _blocks(turn.content, where, user=True))
    if not messages:
        raise InvalidRequest("messages needs at least one user or assistant message besides the system prompt.",
                             param="messages")
    return system, messages


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


# -- content: Anthropic's blocks and the conversation's parts, each way

def block_part(block: dict[str, Any]) -> Part | None:
    """An Anthropic content block as a content part (``content_block`` is its reverse), once its decoder
    (gateway.messages.content) has checked it: text; an image, its base64 source as a data URL, its url
    source as the URL; a document of plain text as its text, a base64 PDF as a file named document.pdf.
    None for a block no other wire carries (an image by a file id, a document of another source)."""
    kind = block.get("type")
    source: dict[str, Any] = block["source"] if isinstance(block.get("source"), dict) else {}
    if kind == "text":
        return TextPart(block["text"])
    if kind == "image" and source.get("type") == "base64":
        return ImagePart(f"data:{source['media_type']};base64,{source['data']}")
    if kind == "image" and source.get("type") == "url":
        return ImagePart(source["url"]) if source["url"] else None  # an empty URL is no image
    if kind == "document" and source.get("type") == "text":
        return TextPart(source["data"])
    if kind == "document" and source.get("type") == "base64" and source.get("media_type") == "application/pdf":
        return FilePart(f"data:application/pdf;base64,{source['data']}", "document.pdf")
    return None


def content_block(part: Part, where: str) -> dict[str, Any] | None:
    """A content part as an Anthropic block (``block_part`` is its reverse), ``where`` naming the part: text
    (a refusal too; None when empty), an image (``_source``), a PDF file as a base64 document. A file of
    another type is refused, and so are a file by its id and audio, which Anthropic does not take."""
    if isinstance(part, (TextPart, RefusalPart)):
        text = part.text if isinstance(part, TextPart) else part.refusal
        return {"type": "text", "text": text} if text else None
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _source(part.url, f"{where}.image_url.url")}
    if isinstance(part, FilePart) and part.data is not None:
        media_type, data = data_url(part.data, f"{where}.file.file_data")
        if media_type != "application/pdf":
            raise UnsupportedParameter(f"{where}: files of type {media_type} are not supported for this model; "
                                       f"PDF files are.", param="messages")
        return {"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}}
    raise part_unsupported(part.to_chat(), where)


def _blocks(content: Content | None, where: str, *, user: bool = False) -> list[dict[str, Any]]:
    """A message's content as Anthropic's blocks: text (an earlier answer's refusal as text), and in a user's
    turn images and PDF files too. An empty text is left out; any other part is refused, naming it."""
    if not isinstance(content, list):
        return [{"type": "text", "text": content}] if content else []
    takes = (TextPart, ImagePart, FilePart) if user else (TextPart, RefusalPart)
    blocks = []
    for index, found in enumerate(content):
        at = f"{where}.content.{index}"
        part = checked_user_part(found, at) if user else found
        if not isinstance(part, takes):
            raise part_unsupported(part.to_chat(), at)
        block = content_block(part, at)
        if block is not None:
            blocks.append(block)
    return blocks


def _source(url: str, where: str) -> dict[str, Any]:
    """An image as Anthropic's source: a data URL's bytes inline, an https URL for Anthropic to fetch."""
    if url.startswith("https://"):
        return {"type": "url", "url": url}
    if url.startswith("http://"):
        raise InvalidRequest(f"{where}: this model takes images by https URL or as a base64 data URL.", param=where)
    media_type, data = data_url(url, where)
    return {"type": "base64", "media_type": media_type, "data": data}
