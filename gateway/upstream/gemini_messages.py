"""OpenAI-shaped chat messages, read as the conversation's turns, as Gemini's system instruction and
contents (text, images, audio and files as parts, tool calls and their results as function calls and
responses, each written by gateway.upstream.gemini_answer beside its reverse, a function call with its
thought signature)."""
from collections.abc import Callable
from typing import Any

from gateway.conversation_request import (
    AudioPart,
    Content,
    FilePart,
    ImagePart,
    OtherPart,
    Part,
    RefusalPart,
    TextPart,
    ToolResult,
    conversation_from_chat,
)
from gateway.upstream.gemini_answer import function_response_part, request_function_call_part
from gateway.upstream.shapes import call_arguments, checked_user_part, data_url, part_unsupported
from utils_app.errors import InvalidRequest

# Chat's audio formats as Gemini's MIME types, and the types Gemini reads as each (audio/x-wav and audio/mpeg
# go back as audio/wav and audio/mp3).
AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mp3"}
AUDIO_TYPES = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}
# fetch_image(url, where): an image given by an http(s) URL as an inlineData part, ``where`` naming it.
FetchImage = Callable[[str, str], dict[str, Any]]


# -- the request's messages

def conversation(messages: list[dict[str, Any]],
                 fetch_image: FetchImage) -> tuple[list[Any], list[Any]]:
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

    for index, turn in enumerate(conversation_from_chat(messages)):
        where = f"messages.{index}"
        if isinstance(turn, ToolResult):
            call = calls.get(turn.call_id)
            if call is None:
                raise InvalidRequest(f"{where}.tool_call_id matches no tool call of an earlier assistant message; "
                                     f"send the assistant message with its tool_calls before the results.",
                                     param=f"{where}.tool_call_id")
            name, position = call
            results.append((position, function_response_part(name, turn)))
        elif turn.role in ("system", "developer"):
            system.extend(_parts(turn.content, where))
        elif turn.role == "assistant":
            flush_results()
            parts = _parts(turn.content, where)
            for position, (tool_call, arguments) in enumerate(call_arguments(turn, where)):
                if tool_call.id:
                    calls[tool_call.id] = (tool_call.name, position)
                parts.append(request_function_call_part(tool_call, arguments))
            _add(contents, "model", parts)
        else:
            flush_results()
            _add(contents, "user", _parts(turn.content, where, fetch_image))
    flush_results()
    return system, contents


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return  # an empty turn (an assistant message with empty content): Gemini refuses one
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


# -- content: Gemini's parts and the conversation's, each way

def inline_part(mime: str, data: str) -> Part | None:
    """Gemini's inlineData as a content part (``gemini_part`` is its reverse): an image as a data URL, a
    PDF as a file named document.pdf, wav or mp3 audio as audio; None for data of another type, which only
    Gemini reads."""
    if mime.startswith("image/"):
        return ImagePart(f"data:{mime};base64,{data}")
    if mime == "application/pdf":
        return FilePart(f"data:{mime};base64,{data}", "document.pdf")
    audio = AUDIO_TYPES.get(mime)
    return AudioPart(data, audio) if audio else None


def file_part(uri: str, mime: Any) -> Part | None:
    """Gemini's fileData as a content part: an image by an http(s) URL off Google's servers, as that URL;
    None for any other file (uploaded to Google or in Cloud Storage, or not an image), which only Gemini
    reads."""
    is_image = isinstance(mime, str) and mime.startswith("image/")
    on_google = uri.startswith("https://generativelanguage.googleapis.com/") or uri.startswith("gs://")
    return ImagePart(uri) if is_image and uri.startswith(("http://", "https://")) and not on_google else None


def gemini_part(part: Part, where: str, fetch_image: FetchImage | None = None) -> dict[str, Any] | None:
    """A content part as a Gemini part (``inline_part`` and ``file_part`` are its reverse), ``where`` naming
    it: text (a refusal too; None when empty), an image inline (a data URL's bytes, or one by URL fetched by
    ``fetch_image``; without it a data URL only), wav or mp3 audio and a file's data URL inline. Audio of
    another format is a 400, a file by its id is refused."""
    if isinstance(part, (TextPart, RefusalPart)):
        text = part.text if isinstance(part, TextPart) else part.refusal
        return {"text": text} if text else None
    if isinstance(part, ImagePart):
        url = part.url
        if url.startswith("data:") or fetch_image is None:
            return _inline(url, f"{where}.image_url.url")
        return fetch_image(url, f"{where}.image_url.url")
    if isinstance(part, AudioPart) and part.format in AUDIO_FORMATS:
        return {"inlineData": {"mimeType": AUDIO_FORMATS[part.format], "data": part.data}}
    if isinstance(part, AudioPart):
        raise _audio_refused(where)
    if part.data is not None:
        return _inline(part.data, f"{where}.file.file_data")
    raise part_unsupported(part.to_chat(), where)


def _parts(content: Content | None, where: str, fetch_image: FetchImage | None = None) -> list[dict[str, Any]]:
    """A message's content as Gemini's parts: text (an earlier answer's refusal as text), and in a user's
    turn (given ``fetch_image``) images, audio and files too. An empty text is left out; any other part is
    refused, naming it (audio that cannot be read as a 400)."""
    if not isinstance(content, list):
        return [{"text": content}] if content else []
    takes = (TextPart, ImagePart, AudioPart, FilePart) if fetch_image else (TextPart, RefusalPart)
    parts = []
    for index, found in enumerate(content):
        at = f"{where}.content.{index}"
        part = checked_user_part(found, at) if fetch_image else found
        if isinstance(part, OtherPart) and fetch_image and part.raw.get("type") == "input_audio":
            raise _audio_refused(at)
        if not isinstance(part, takes):
            raise part_unsupported(part.to_chat(), at)
        written = gemini_part(part, at, fetch_image)
        if written is not None:
            parts.append(written)
    return parts


def _audio_refused(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}.input_audio needs base64 data and a format of wav or mp3.",
                          param=f"{where}.input_audio")


def _inline(url: str, where: str) -> dict[str, Any]:
    mime, data = data_url(url, where)
    return {"inlineData": {"mimeType": mime, "data": data}}
