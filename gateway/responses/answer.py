"""The Responses API's answer shapes: the response object and its output items, and the encrypted
reasoning wrapped with (and read back as) the deployment that made it."""
import re
from typing import Any

from gateway.conversation import ToolCall
from gateway.responses.request import new_id, obj
from gateway.upstream.openai import custom_tool_call_item, function_call_item

# An encrypted reasoning item's content as the gateway hands it out: which deployment made it, then the
# upstream's own text (which only that upstream account can read).
WRAPPED = re.compile(r"gw1\.(?P<deployment>\d{1,18})\.(?P<content>.+)\Z", re.S)


def response_object(body: dict, *, response_id: str, created_at: int, model: str, output: list[dict],
                    status: str = "completed", usage: dict | None = None, reason: str | None = None,
                    error: dict | None = None) -> dict:
    """The response object as OpenAI shapes it, the request's settings echoed."""
    text, reasoning = obj(body.get("text")), obj(body.get("reasoning"))
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "background": False, "error": error,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model, "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, **text},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation") or "disabled",
        "usage": usage, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def message_item(text: str, *, status: str = "completed", item_id: str | None = None) -> dict:
    return {"id": item_id or new_id("msg"), "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(call: ToolCall, customs: set[str], *, item_id: str | None = None) -> dict:
    """A tool call as a function_call item, or a custom_tool_call for a custom tool (its ``input``), as
    gateway.upstream.openai maps them; a new item id unless ``item_id`` is given."""
    if call.name in customs:
        return custom_tool_call_item(call, item_id=item_id or new_id("ctc"))
    return function_call_item(call, item_id=item_id or new_id("fc"))


def wrap(content: Any, deployment: int | None) -> Any:
    """An upstream's encrypted reasoning as the gateway hands it out: naming the deployment that made it."""
    if not isinstance(content, str) or deployment is None or WRAPPED.match(content):
        return content
    return f"gw1.{deployment}.{content}"


def origin(content: Any) -> int | None:
    match = WRAPPED.match(content) if isinstance(content, str) else None
    return int(match["deployment"]) if match else None
