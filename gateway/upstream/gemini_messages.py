"""OpenAI-shaped chat messages as Gemini's system instruction and contents (text, images, audio and files
as parts, tool calls and their results as function calls and responses, each written by
gateway.upstream.gemini_answer beside its reverse, a function call with its thought signature)."""
from collections.abc import Callable
from typing import Any

from gateway.conversation import ToolResult
from gateway.upstream.gemini_answer import function_response_part, request_function_call_part
from gateway.upstream.shapes import assistant_tool_calls, data_url
from utils_app.errors import InvalidRequest, UnsupportedParameter

AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mp3"}


# -- the request's messages

def conversation(messages: list[dict[str, Any]],
                 fetch_image: Callable[[str, str], dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """(systemInstruction parts, contents). System and developer messages become the system instruction,
    wherever they stand; assistant turns are the "model" role; the results of one assistant turn's tool
    calls go back as functionResponse parts of one user turn, in the order of the calls (Gemini pairs
    them by position and name); turns of one role in a row are merged (Gemini wants them to alternate)."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    calls: dict[str, tuple[str, int]] = {}  # tool call id -> (function name, position in its assistant turn)
    results: list[tuple[int, dict[str, Any]]] = []  # the functionResponse parts of the tool messages in a row

    def flush_results() -> None:
        _add(contents, "user", [part for _, part in sorted(results, key=lambda result: result[0])])
        results.clear()

    for index, message in enumerate(messages):
        role, where = message["role"], f"messages.{index}"
        if role in ("system", "developer"):
            system.extend(_text_parts(message.get("content"), where))
        elif role == "tool":
            result = ToolResult.from_chat(message)
            call = calls.get(result.call_id)
            if call is None:
                raise InvalidRequest(f"{where}.tool_call_id matches no tool call of an earlier assistant message; "
                                     f"send the assistant message with its tool_calls before the results.",
                                     param=f"{where}.tool_call_id")
            name, position = call
            results.append((position, function_response_part(name, result)))
        elif role == "assistant":
            flush_results()
            parts = _text_parts(message.get("content"), where)
            for position, (tool_call, entry) in enumerate(assistant_tool_calls(message, where)):
                if tool_call.id:
                    calls[tool_call.id] = (tool_call.name, position)
                parts.append(request_function_call_part(tool_call, entry))
            _add(contents, "model", parts)
        else:
            flush_results()
            _add(contents, "user", _user_parts(message.get("content"), where, fetch_image))
    flush_results()
    return system, contents


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return  # an empty turn (an assistant message with empty content): Gemini refuses one
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _text_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts = []
    for index, part in enumerate(content):
        if part.get("type") in ("text", "refusal"):
            text = part.get("text") if part.get("type") == "text" else part.get("refusal")
            if isinstance(text, str) and text:
                parts.append({"text": text})
        else:
            raise _part_unsupported(part, f"{where}.content.{index}")
    return parts


def _user_parts(content: Any, where: str, fetch_image: Callable[[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return _text_parts(content, where)
    parts = []
    for index, part in enumerate(content):
        at = f"{where}.content.{index}"
        kind = part.get("type")
        if kind == "text":
            if part["text"]:
                parts.append({"text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest(f"{at}.image_url needs a url.", param=f"{at}.image_url")
            parts.append(_inline(url, f"{at}.image_url.url") if url.startswith("data:")
                         else fetch_image(url, f"{at}.image_url.url"))
        elif kind == "input_audio":
            audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
            mime = AUDIO_FORMATS.get(audio.get("format", ""))
            if mime is None or not isinstance(audio.get("data"), str):
                raise InvalidRequest(f"{at}.input_audio needs base64 data and a format of wav or mp3.",
                                     param=f"{at}.input_audio")
            parts.append({"inlineData": {"mimeType": mime, "data": audio["data"]}})
        elif kind == "file" and isinstance(part.get("file"), dict) and isinstance(part["file"].get("file_data"), str):
            parts.append(_inline(part["file"]["file_data"], f"{at}.file.file_data"))
        else:
            raise _part_unsupported(part, at)
    return parts


def _part_unsupported(part: dict[str, Any], where: str) -> UnsupportedParameter:
    what = "file parts by file_id" if part.get("type") == "file" else f"content parts of type {part.get('type')!r}"
    return UnsupportedParameter(f"{where}: {what} are not supported for this model.", param="messages")


def _inline(url: str, where: str) -> dict[str, Any]:
    mime, data = data_url(url, where)
    return {"inlineData": {"mimeType": mime, "data": data}}
