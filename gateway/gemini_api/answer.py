"""A chat completion as a GenerateContentResponse, with the response id the stream shares with it."""
import uuid
from typing import Any

from gateway.conversation import Choice, Usage
from gateway.upstream.gemini_answer import function_call_part, google_finish_reason, usage_metadata


def response_id(completion_id: Any) -> str:
    if isinstance(completion_id, str) and completion_id:
        return completion_id.removeprefix("chatcmpl-")
    return uuid.uuid4().hex[:24]


def generate_response(completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
    """A chat.completion as a GenerateContentResponse: a candidate per choice, its text and function calls as
    parts, with the metered counts."""
    candidates = []
    for choice in Choice.all_of(completion):
        parts: list[dict] = [{"text": choice.text}] if choice.text else []
        parts += [function_call_part(call) for call in choice.tool_calls]
        candidates.append({"content": {"role": "model", "parts": parts},
                           "finishReason": google_finish_reason(choice.finish), "index": choice.index})
    return {"candidates": candidates,
            "usageMetadata": usage_metadata(Usage(
                input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached,
                reasoning_tokens=Usage.from_chat(completion.get("usage")).reasoning_tokens)),
            "modelVersion": completion.get("model"), "responseId": response_id(completion.get("id"))}
