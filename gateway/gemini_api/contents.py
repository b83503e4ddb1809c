"""The conversation of a GenerateContentRequest as OpenAI messages: the system instruction, each Content,
its parts (text, inline data, files, function calls and their responses), read as the conversation's turns
(gateway.conversation_request) and written with their ``to_chat``."""
from dataclasses import replace
from typing import Any

from gateway.conversation import ToolCall
from gateway.conversation_request import Message, Part, TextPart, Turn, conversation_to_chat
from gateway.gemini_api.members import GeminiRequest, camel, member, need, need_dict, need_list
from gateway.upstream.gemini_answer import tool_call, tool_result
from gateway.upstream.gemini_messages import file_part, inline_part
from utils_app.errors import InvalidRequest


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    parts = member(need_dict(system, "systemInstruction"), "parts") or []
    texts = []
    for index, part in enumerate(need_list(parts, "systemInstruction.parts")):
        text = member(need_dict(part, f"systemInstruction.parts.{index}"), "text")
        need(isinstance(text, str), f"systemInstruction.parts.{index}.text", "must be a string.")
        texts.append(text)
    return "\n".join(texts)


class CallIds:
    """The ids of the conversation's function calls. Google's API pairs a functionResponse with its call by
    name and position (or by an id a client made up and sent with both); OpenAI's by the call's id. A call
    without an id gets one made from its place in the conversation, so the same request always reads the same."""

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []  # (name, id) of the last model turn's calls not answered yet

    def called(self, call: dict, where: str) -> str:
        given = member(call, "id")
        call_id = given if isinstance(given, str) and given else f"call_{where.replace('.', '_')}"
        self.open.append((call["name"], call_id))
        return call_id

    def answered(self, response: dict, where: str) -> str:
        given = member(response, "id")
        by_id = [position for position, (_, call_id) in enumerate(self.open) if given and call_id == given]
        by_name = [position for position, (name, _) in enumerate(self.open) if name == response["name"]]
        matches = by_id or by_name
        if matches:
            return self.open.pop(matches[0])[1]
        if isinstance(given, str) and given:
            return given
        raise InvalidRequest(f"{where}.functionResponse: answers no function call of the model turn before it "
                             f"(name {response['name']!r}); send the model turn with its functionCall parts first.",
                             param=f"{where}.functionResponse")


def turn_messages(content: Any, where: str, calls: CallIds, found: GeminiRequest) -> list[dict]:
    """One Content as OpenAI messages: a user turn's function responses become tool messages (first, as
    they answer the turn before), a model turn's function calls its tool_calls."""
    content = need_dict(content, where)
    role = member(content, "role") or "user"
    need(role in ("user", "model", "function"), f"{where}.role", "must be 'user' or 'model'.")
    parts = member(content, "parts")
    need(isinstance(parts, list), f"{where}.parts", "must be an array of parts.")
    return conversation_to_chat(_model_turn(parts, where, calls, found) if role == "model"
                                else _user_turn(parts, where, calls, found))


def _user_turn(parts: list, where: str, calls: CallIds, found: GeminiRequest) -> list[Turn]:
    """A user turn: its function responses as ToolResults, then the rest as one user Message (its text
    joined when it is text only)."""
    results: list[Turn] = []
    pieces: list[Part] = []
    for index, part in enumerate(parts):
        at = f"{where}.parts.{index}"
        part = need_dict(part, at)
        if member(part, "thought"):
            continue  # an earlier turn's thought summary: the answer it led to is what the next turn needs
        if isinstance(member(part, "text"), str):
            if member(part, "text"):
                pieces.append(TextPart(member(part, "text")))
        elif member(part, "functionResponse") is not None:
            response = need_dict(member(part, "functionResponse"), f"{at}.functionResponse")
            need(isinstance(response.get("name"), str) and bool(response["name"]), f"{at}.functionResponse.name",
                  "is required.")
            results.append(tool_result(response, calls.answered(response, at)))
        elif member(part, "inlineData") is not None:
            piece = _inline(need_dict(member(part, "inlineData"), f"{at}.inlineData"), f"{at}.inlineData", found)
            if piece:
                pieces.append(piece)
        elif member(part, "fileData") is not None:
            piece = _file(need_dict(member(part, "fileData"), f"{at}.fileData"), f"{at}.fileData", found)
            if piece:
                pieces.append(piece)
        elif _only_signature(part):
            continue
        else:
            _native_part(part, at, found)
    texts = [piece.text for piece in pieces if isinstance(piece, TextPart)]
    if pieces:
        results.append(Message("user", "\n".join(texts) if len(texts) == len(pieces) else pieces))
    return results


def _model_turn(parts: list, where: str, calls: CallIds, found: GeminiRequest) -> list[Turn]:
    """A model turn as one assistant Message: its text joined, its function calls as ToolCalls."""
    calls.open = []  # a new model turn: the calls before it were answered, or never will be
    texts: list[str] = []
    tool_calls: list[ToolCall] = []
    for index, part in enumerate(parts):
        at = f"{where}.parts.{index}"
        part = need_dict(part, at)
        if member(part, "thought"):
            continue
        if isinstance(member(part, "text"), str):
            texts.append(member(part, "text"))
        elif member(part, "functionCall") is not None:
            call = need_dict(member(part, "functionCall"), f"{at}.functionCall")
            need(isinstance(call.get("name"), str) and bool(call["name"]), f"{at}.functionCall.name", "is required.")
            # The answers' reader (args that are not an object refused), but an id left out is made from the
            # call's place, so that the same request reads the same (CallIds).
            read = tool_call(call, lambda _: InvalidRequest(f"{at}.functionCall.args: must be an object.",
                                                            param=f"{at}.functionCall.args"))
            tool_calls.append(replace(read, id=calls.called(call, at)))
        elif _only_signature(part):
            continue
        else:
            _native_part(part, at, found)
    text = "".join(texts)
    if not text and not tool_calls:
        return []  # a turn of thoughts only: nothing an OpenAI-shaped conversation can carry
    return [Message("assistant", text or None, tuple(tool_calls))]


def _only_signature(part: dict) -> bool:
    """A part that carries nothing but a thoughtSignature (Gemini 3 sends one after a turn's text)."""
    return set(part) <= {"thoughtSignature", "thought_signature", "partMetadata", "part_metadata"}


def _native_part(part: dict, where: str, found: GeminiRequest) -> None:
    kinds = sorted(set(part) - {"thoughtSignature", "thought_signature", "thought"})
    kind = camel(kinds[0]) if kinds else "empty"
    found.native_only[where] = f"parts of kind {kind!r} reach the model's gemini deployments only."


def _inline(data: dict, where: str, found: GeminiRequest) -> Part | None:
    mime, payload = member(data, "mimeType"), data.get("data")
    need(isinstance(mime, str) and isinstance(payload, str), where, "needs mimeType and base64 data.")
    piece = inline_part(mime, data["data"])
    if piece is None:
        found.native_only[where] = f"inline data of type {mime!r} reaches the model's gemini deployments only."
    return piece


def _file(data: dict, where: str, found: GeminiRequest) -> Part | None:
    uri = member(data, "fileUri")
    need(isinstance(uri, str) and bool(uri), f"{where}.fileUri", "is required.")
    piece = file_part(uri, member(data, "mimeType"))
    if piece is None:
        found.native_only[where] = "files given by URI reach the model's gemini deployments only (other " \
                                   "deployments take images by URL)."
    return piece
