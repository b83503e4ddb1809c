"""A chat completion as a GenerateContentResponse, with the parts and usage the stream shares with it."""
import json
import uuid
from typing import Any

from gateway.gemini_api.members import obj
from gateway.upstream.gemini_answer import google_finish_reason
from gateway.upstream.shapes import content_text


def usage_metadata(*, input_tokens: int, output_tokens: int, cached: int, reasoning: int) -> dict:
    """The metered counts as Google's usageMetadata: thinking tokens apart from the answer's, as Google
    counts them (and both billed as output, as the ledger keeps them)."""
    reasoning = min(max(reasoning, 0), output_tokens)
    meta = {"promptTokenCount": input_tokens, "candidatesTokenCount": output_tokens - reasoning,
            "totalTokenCount": input_tokens + output_tokens}
    if cached:
        meta["cachedContentTokenCount"] = cached
    if reasoning:
        meta["thoughtsTokenCount"] = reasoning
    return meta


def reasoning_tokens(usage: Any) -> int:
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if type(value) is int and value > 0 else 0


def _arguments(arguments: Any) -> dict:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def call_part(call_id: Any, name: Any, arguments: Any) -> dict:
    call: dict = {"name": name if isinstance(name, str) else "", "args": _arguments(arguments)}
    if isinstance(call_id, str) and call_id:
        call["id"] = call_id
    return {"functionCall": call}


def response_id(completion_id: Any) -> str:
    if isinstance(completion_id, str) and completion_id:
        return completion_id.removeprefix("chatcmpl-")
    return uuid.uuid4().hex[:24]


def generate_response(completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
    """A chat.completion as a GenerateContentResponse: a candidate per choice, its text and function calls as
    parts, with the metered counts."""
    candidates = []
    for position, choice in enumerate(completion.get("choices") or ()):
        if not isinstance(choice, dict):
            continue
        message = obj(choice.get("message"))
        parts: list[dict] = []
        text = content_text(message.get("content"))
        if text:
            parts.append({"text": text})
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                function = obj(call.get("function"))
                parts.append(call_part(call.get("id"), function.get("name"), function.get("arguments")))
        index = choice.get("index")
        candidates.append({"content": {"role": "model", "parts": parts},
                           "finishReason": google_finish_reason(choice.get("finish_reason")),
                           "index": index if type(index) is int else position})
    return {"candidates": candidates,
            "usageMetadata": usage_metadata(input_tokens=input_tokens, output_tokens=output_tokens, cached=cached,
                                            reasoning=reasoning_tokens(completion.get("usage"))),
            "modelVersion": completion.get("model"), "responseId": response_id(completion.get("id"))}
