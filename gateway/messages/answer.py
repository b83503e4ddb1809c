"""A chat completion as Anthropic's message object, and the id and usage the event stream shares with it."""
import json
import uuid
from typing import Any

from gateway.conversation import PassedThrough
from gateway.upstream.anthropic_answer import stop_reason
from gateway.upstream.shapes import content_text, tool_call_id


def message_id(completion_id) -> str:
    if isinstance(completion_id, str) and completion_id:
        return "msg_" + completion_id.removeprefix("chatcmpl-").removeprefix("msg_")
    return f"msg_{uuid.uuid4().hex[:24]}"


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
