"""What every adapter hands back, whatever its protocol: OpenAI-shaped answers and these few types,
and the small readings of OpenAI-shaped requests that the translating adapters share."""
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gateway.conversation import PassedThrough, ToolCall, content_text
from gateway.conversation_request import Message, OtherPart, Part, Tool, ToolChoice
from utils_app.errors import InvalidRequest, UnsupportedParameter, UpstreamError

DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(?P<data>.*)\Z", re.S)

# A transport's malformed(what): the error an unreadable answer raises. An inbound codec that reads a
# client's earlier tool call with an answer's reader passes its own, a 400 naming the member.
Malformed = Callable[[str], Exception]


def tokens_reported(counts: dict[str, Any], name: str) -> int | None:
    """A token count of an upstream's usage as reported: 0 when left out, None when sent but unusable
    (negative, fractional, text, a boolean), which makes the metering use its own estimate instead.
    Only the metering clamps a count (gateway.prices), once, for the ledger and the answer alike."""
    value = counts.get(name)
    if value is None:
        return 0
    return value if type(value) is int and value >= 0 else None


@dataclass(frozen=True)
class Image:
    content: bytes
    content_type: str
    revised_prompt: str | None = None


@dataclass(frozen=True)
class Audio:
    content: bytes
    content_type: str
    format: str  # the file format of ``content``, used as the stored file's extension


class ChunkStream:
    """Chat chunks (OpenAI's chat.completion.chunk objects), received up to the stream's commit point
    before the gateway answers.

    The commit point is the first chunk that carries content, a tool call or a finish
    reason. Until then (an opening chunk with only the role, say) nothing has reached the
    client, so an upstream that fails early (refused, down, silent, or breaking off right
    after its first chunk) still gets an ordinary JSON error, a refund and the next
    deployment, instead of a broken 200 stream. After it the client has output, and the
    stream is charged however it ends (CONTRACT section 5).
    """

    def __init__(self, chunks: Iterator[dict[str, Any]], close: Callable[[], None]):
        self._chunks = chunks
        self._close = close
        self._held: list[dict[str, Any]] = []
        try:
            for chunk in chunks:
                self._held.append(chunk)
                if commits(chunk):
                    return
        except BaseException:
            close()
            raise
        close()
        raise UpstreamError("The upstream ended the stream without sending any content.")

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._held
        self._held = []
        yield from self._chunks

    def close(self) -> None:
        self._close()


# The type of a passed-through event, which names it on its ``event:`` line: a plain name, or the event is
# refused (a line break in it would end the line, and what follows would be an event of the upstream's making).
EVENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,99}")


def commits(chunk: dict[str, Any]) -> bool:
    """Whether a chat chunk carries output: content, a tool call, a refusal or a finish reason; for a
    stream passed through as the provider sent it, also an event its adapter marks as output though its
    translation shows none (thinking: the client sees it, and the provider bills it as output)."""
    if isinstance(chunk, PassedThrough) and chunk.carries_output:
        return True
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls") or delta.get("refusal")
                                        or delta.get("function_call")):
            return True
    return False


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All the text of a conversation, for token estimates."""
    return "\n".join(content_text(message.get("content")) for message in messages)


def data_url(url: str, where: str) -> tuple[str, str]:
    """(media type, base64 data) of a base64 data URL a client sent; anything else is a 400 naming ``where``."""
    match = DATA_URL.match(url)
    if not match:
        raise InvalidRequest(f"{where} must be an http(s) URL or a base64 data URL (data:TYPE;base64,…).",
                             param=where)
    return match["type"], match["data"]


def checked_user_part(part: Part | OtherPart, where: str) -> Part | OtherPart:
    """A part of a user message as the translating adapters take it: an image without a URL (an OtherPart of
    type image_url) is a 400 naming it; any other part as it is, for the adapter to map or refuse."""
    if isinstance(part, OtherPart) and part.raw.get("type") == "image_url":
        raise InvalidRequest(f"{where}.image_url needs a url.", param=f"{where}.image_url")
    return part


def part_unsupported(part: dict[str, Any], where: str) -> UnsupportedParameter:
    """The error for a chat content part an adapter's wire has no place for (a file by its id, say)."""
    what = "file parts by file_id" if part.get("type") == "file" else f"content parts of type {part.get('type')!r}"
    return UnsupportedParameter(f"{where}: {what} are not supported for this model.", param="messages")


def tool_call_id() -> str:
    """An id for a tool call the upstream sent without one (a tool call always has an id)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def function_tool(tool: Any, index: int) -> Tool:
    """A request's tool for an upstream that takes function tools only (Anthropic, Gemini); any other type
    is refused, naming it."""
    found = Tool.from_chat(tool)
    if found is None:
        raise UnsupportedParameter(f"tools.{index}: tools of type {tool.get('type')!r} are not supported for this "
                                   f"model; only function tools are.", param="tools")
    return found


def function_choice(choice: Any) -> ToolChoice:
    """A request's tool_choice for an upstream that can force one function but not narrow the tools
    (Anthropic, Gemini); a custom tool forced, or allowed_tools, is refused."""
    found = ToolChoice.from_chat(choice)
    if found is None or found.allowed is not None:
        raise UnsupportedParameter("tool_choice must be 'auto', 'none', 'required' or "
                                   "{\"type\": \"function\", \"function\": {\"name\": …}} for this model.",
                                   param="tool_choice")
    return found


def call_arguments(message: Message, where: str) -> list[tuple[ToolCall, dict[str, Any]]]:
    """An assistant message's earlier tool calls, for an adapter that sends their arguments as an object: each
    with that object, parsed here once (empty arguments read as {}). A call without a name, or arguments
    that are not a JSON object, are refused, naming the call by its position."""
    calls = []
    for position, call in enumerate(message.tool_calls):
        where_call = f"{where}.tool_calls.{position}"
        if not call.name:
            raise InvalidRequest(f"{where_call}.function needs a name.", param=f"{where_call}.function")
        try:
            args = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise InvalidRequest(f"{where_call}.function.arguments must be a JSON object, as the model sent it.",
                                 param=f"{where_call}.function.arguments")
        calls.append((call, args))
    return calls
