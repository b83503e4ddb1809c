"""A chat completion as Anthropic's message object, and the id and usage the event stream shares with it."""
import uuid
from typing import Any

from gateway.conversation import Choice, PassedThrough, Usage
from gateway.upstream.anthropic_answer import message_usage, stop_reason, tool_use


def message_id(completion_id) -> str:
    if isinstance(completion_id, str) and completion_id:
        return "msg_" + completion_id.removeprefix("chatcmpl-").removeprefix("msg_")
    return f"msg_{uuid.uuid4().hex[:24]}"


def charged_usage(usage: Usage, cost: int | None) -> dict:
    """The metered usage as Anthropic's (gateway.upstream.anthropic_answer), with the credits charged
    (CONTRACT section 12) when the metering set them."""
    shown = message_usage(usage)
    return shown if cost is None else {**shown, "cost": cost}


def message_object(completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
    """A chat.completion as Anthropic's message object (its first choice: a Messages request asks for one),
    with the metered token counts; a message passed through as Anthropic sent it, under the gateway's
    model id."""
    charged = (completion.get("usage") or {}).get("cost")
    if isinstance(completion, PassedThrough):
        native = completion.native
        counts = native["usage"] if isinstance(native.get("usage"), dict) else {}
        return {**native, "model": completion.get("model"),
                **({"usage": {**counts, "cost": charged}} if type(charged) is int else {})}
    choice = (Choice.all_of(completion) or [Choice()])[0]
    content: list[dict[str, Any]] = [{"type": "text", "text": choice.text}] if choice.text else []
    content += [tool_use(call) for call in choice.tool_calls]
    usage = message_usage(Usage(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached))
    if type(charged) is int:
        usage["cost"] = charged
    return {"id": message_id(completion.get("id")), "type": "message", "role": "assistant",
            "model": completion.get("model"), "content": content,
            "stop_reason": stop_reason(choice.finish, bool(choice.tool_calls)), "stop_sequence": None,
            "usage": usage}
