"""An OpenAI-shaped chat request as a request to Anthropic's Messages API (gateway.upstream.anthropic
sends it): its tools and tool choice, thinking, structured outputs, and what Anthropic cannot do refused
or named as left out (gateway.upstream.base); the conversation itself is written by
gateway.upstream.anthropic_messages."""
from typing import Any

from gateway.conversation_request import (
    Effort,
    Message,
    Tool,
    ToolChoice,
    ToolMode,
    Turn,
    conversation_from_chat,
    thinking_budget,
)
from gateway.json_schemas import SchemaWalk
from gateway.upstream.anthropic_messages import conversation
from gateway.upstream.base import REFUSALS, SERVER_FEATURES, name_left_out, refuse_audio_output, unsupported
from gateway.upstream.shapes import function_choice, function_tool


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
