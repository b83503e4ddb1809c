"""A chat completion as a GenerateContentResponse, with the parts the stream shares with it."""
import json
import uuid
from typing import Any

from gateway.gemini_api.members import obj
from gateway.conversation import Usage
from gateway.upstream.gemini_answer import google_finish_reason, usage_metadata
from gateway.upstream.shapes import content_text


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
            "usageMetadata": usage_metadata(Usage(
                input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached,
                reasoning_tokens=Usage.from_chat(completion.get("usage")).reasoning_tokens)),
            "modelVersion": completion.get("model"), "responseId": response_id(completion.get("id"))}
