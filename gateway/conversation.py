"""The gateway's own shape of a conversation, typed: what every inbound API and every upstream adapter
shares, whatever its wire.

The neutral shape is the chat completion's (OpenAI's chat.completion and its chunks), so its stop reasons
are OpenAI's finish reasons, its usage is chat's and its tool calls are chat's. Each wire maps to and from
these beside its reverse: Anthropic's stop reasons, usage and tool_use blocks in
gateway.upstream.anthropic_answer, Gemini's finish reasons, usageMetadata and functionCall parts in
gateway.upstream.gemini_answer, the Responses API's incomplete reasons, usage and function_call items in
gateway.upstream.openai. A request's earlier tool calls are ToolCall values too, and their results ToolResult
values; the tools it declares are Tool values, and its tool choice a ToolChoice (each wire's in its request
module); a message's content parts (text, a refusal, an image, audio, a file) are TextPart, RefusalPart,
ImagePart, AudioPart and FilePart values, each wire's content mapped to and from them beside its reverse
(Anthropic's blocks in gateway.upstream.anthropic_request, Gemini's parts in
gateway.upstream.gemini_messages). What is typed so far and what still travels as a dict is in
docs/architecture.md ("One conversation shape").
"""
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Self


class StopReason(StrEnum):
    """Why a choice ended. A member is its own wire name in a chat answer (a ``str``), so a mapping keyed by
    the members is read with the plain string a chunk carries."""

    STOP = "stop"  # the model finished its turn, or met a stop sequence
    LENGTH = "length"  # the output cap, or the context window, cut it short
    TOOL_CALLS = "tool_calls"  # it ends calling one or more tools
    CONTENT_FILTER = "content_filter"  # the provider withheld output, or the model refused
    FUNCTION_CALL = "function_call"  # chat's older single-function call, still read from clients and upstreams


def token_count(value: Any) -> int | None:
    """A token count as reported, when it can be used: a non-negative integer (never a boolean); else None."""
    return value if type(value) is int and value >= 0 else None


@dataclass(frozen=True, slots=True)
class Usage:
    """The token counts of one answer. A count is None when it is not known: the wire left it out, or sent
    it unusable (negative, fractional, text, a boolean), which makes the metering use its own estimate
    instead (docs/hardening.md). Which counts a wire leaves out, and which it reads as 0, is that wire's
    mapping's to say. Only the metering clamps a count (gateway.prices).

    ``input_tokens`` counts every input token, the ones read from a cache and written to one included;
    ``output_tokens`` every output token, reasoning included (chat's prompt_tokens and completion_tokens).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None  # of the input, read from a cache
    reasoning_tokens: int | None = None  # of the output, spent thinking
    # Of the input, written to a cache: Anthropic's cache_creation_input_tokens, the Responses API's
    # cache_write_tokens. Chat's usage has no member for it: it is part of prompt_tokens there.
    cache_write_tokens: int | None = None

    @classmethod
    def from_chat(cls, usage: Any) -> Self:
        """Chat's usage object (``to_chat`` is its reverse): each count as reported, when usable."""
        if not isinstance(usage, dict):
            return cls()
        prompt, completion = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
        return cls(input_tokens=token_count(usage.get("prompt_tokens")),
                   output_tokens=token_count(usage.get("completion_tokens")),
                   cached_tokens=token_count(prompt.get("cached_tokens")) if isinstance(prompt, dict) else None,
                   reasoning_tokens=(token_count(completion.get("reasoning_tokens"))
                                     if isinstance(completion, dict) else None))

    def to_chat(self) -> dict[str, Any]:
        """Chat's usage object: a member for each count known, total_tokens when both totals are (a usage
        that knows none is empty); cache writes are in prompt_tokens, as chat counts them."""
        counted: dict[str, Any] = {}
        if self.input_tokens is not None:
            counted["prompt_tokens"] = self.input_tokens
        if self.output_tokens is not None:
            counted["completion_tokens"] = self.output_tokens
        if self.input_tokens is not None and self.output_tokens is not None:
            counted["total_tokens"] = self.input_tokens + self.output_tokens
        if self.cached_tokens is not None:
            counted["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        if self.reasoning_tokens is not None:
            counted["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return counted


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function the model asks the client to call, as an answer carries it (and a request, in its earlier
    assistant turns). ``arguments`` is the JSON text chat carries, as the model wrote it: it may be empty, or
    not parse, or parse to something other than an object, and it goes out to chat unchanged; a wire that
    wants an object reads ``arguments_object``. An ``id`` of "" is one the answer (or the request) did not
    give: each wire's mapping says whether it makes one up or leaves it out."""

    id: str
    name: str
    arguments: str

    @classmethod
    def from_chat(cls, entry: Any) -> Self:
        """Chat's tool_calls entry (``to_chat`` is its reverse). An id or a name that is not a string reads
        as "" (not given); arguments sent as a JSON value instead of its text (some OpenAI-compatible
        servers send an object) read as that value's JSON text, and none (or an empty value) as ""."""
        found: dict[str, Any] = entry if isinstance(entry, dict) else {}
        function = found.get("function")
        if not isinstance(function, dict):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False) if arguments else ""
        return cls(id=found["id"] if isinstance(found.get("id"), str) else "",
                   name=function["name"] if isinstance(function.get("name"), str) else "", arguments=arguments)

    def to_chat(self, index: int | None = None) -> dict[str, Any]:
        """Chat's tool_calls entry; with ``index`` a streamed delta's, which names the call it adds to."""
        entry: dict[str, Any] = {} if index is None else {"index": index}
        entry.update(id=self.id, type="function", function={"name": self.name, "arguments": self.arguments})
        return entry

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the JSON object they are; {} when they are empty, do not parse, or are not an
        object (a wire that carries an object has nothing else to send)."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def content_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text parts of an array, joined by spaces."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned, as a request carries it back: the id of the call it answers, and its content
    as text (chat's tool message). A ``call_id`` of "" is one the message did not give: each wire's
    mapping says whether that is refused."""

    call_id: str
    content: str

    @classmethod
    def from_chat(cls, message: Any) -> Self:
        """Chat's tool message (``to_chat`` is its reverse): a tool_call_id that is not a string reads as ""
        (not given); the content is its text (``content_text``)."""
        found: dict[str, Any] = message if isinstance(message, dict) else {}
        call_id = found.get("tool_call_id")
        return cls(call_id=call_id if isinstance(call_id, str) else "", content=content_text(found.get("content")))

    def to_chat(self) -> dict[str, Any]:
        """Chat's tool message."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


@dataclass(frozen=True, slots=True)
class Tool:
    """A function a request declares for the model to call (chat's function tool). ``parameters`` is its
    JSON schema as given, None when the tool gave none; ``description`` and ``strict`` are None when not
    given (a description of "" is one given empty). Each wire's mapping says what it fills in or leaves out."""

    name: str
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None

    @classmethod
    def from_chat(cls, tool: Any) -> Self | None:
        """Chat's function tool (``to_chat`` is its reverse), checked already (a function with a name); None
        for a tool of any other type (a custom tool, a provider's own), which each adapter refuses or skips.
        Parameters that are not an object, and a description or strict of another type, read as not given."""
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict):
            return None
        parameters, description, strict = (function.get(name) for name in ("parameters", "description", "strict"))
        return cls(name=function["name"], parameters=parameters if isinstance(parameters, dict) else None,
                   description=description if isinstance(description, str) else None,
                   strict=strict if isinstance(strict, bool) else None)

    def to_chat(self, *, strict_first: bool = False) -> dict[str, Any]:
        """Chat's function tool: the name, the parameters (when given), the description, strict. With
        ``strict_first`` strict comes before the description, the order the Responses decoder writes."""
        function: dict[str, Any] = {"name": self.name}
        if self.parameters is not None:
            function["parameters"] = self.parameters
        if self.strict is not None and strict_first:
            function["strict"] = self.strict
        if self.description is not None:
            function["description"] = self.description
        if self.strict is not None and not strict_first:
            function["strict"] = self.strict
        return {"type": "function", "function": function}


# Whether the model may call a tool (auto), must not (none) or must (required).
ToolMode = Literal["auto", "none", "required"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Which of a request's tools the model may or must call: ``mode`` auto (it decides), none (it answers in
    text) or required (it calls one); ``allowed``, the names of the only tools it may call (chat's
    allowed_tools; None: every tool); ``forced``, the one function it must call (mode required)."""

    mode: ToolMode = "auto"
    allowed: tuple[str, ...] | None = None
    forced: str | None = None

    @classmethod
    def from_chat(cls, choice: Any) -> Self | None:
        """Chat's tool_choice (``to_chat`` is its reverse): a word, one function named, or allowed_tools (the
        names of its function tools; another type's entries are not carried). None for what is not typed:
        a custom tool forced, or a choice or an allowed function without a name."""
        if choice in ("auto", "none", "required"):
            return cls(mode=choice)
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind == "function" and isinstance(choice.get("function"), dict) \
                and isinstance(choice["function"].get("name"), str):
            return cls(mode="required", forced=choice["function"]["name"])
        allowed = choice.get("allowed_tools") if kind == "allowed_tools" else None
        if isinstance(allowed, dict) and allowed.get("mode") in ("auto", "required") \
                and isinstance(allowed.get("tools"), list):
            names = [tool["function"].get("name") for tool in allowed["tools"]
                     if isinstance(tool, dict) and isinstance(tool.get("function"), dict)]
            if all(isinstance(name, str) for name in names):
                return cls(mode=allowed["mode"], allowed=tuple(names))
        return None

    def to_chat(self) -> str | dict[str, Any]:
        """Chat's tool_choice."""
        if self.forced is not None:
            return {"type": "function", "function": {"name": self.forced}}
        if self.allowed is not None:
            return {"type": "allowed_tools", "allowed_tools": {"mode": self.mode, "tools": [
                {"type": "function", "function": {"name": name}} for name in self.allowed]}}
        return self.mode


@dataclass(frozen=True, slots=True)
class TextPart:
    """Text in a message's content (chat's text part)."""

    text: str

    def to_chat(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class RefusalPart:
    """A refusal the model wrote, as an earlier assistant turn carries it back (chat's refusal part)."""

    refusal: str

    def to_chat(self) -> dict[str, Any]:
        return {"type": "refusal", "refusal": self.refusal}


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image by its URL: an http(s) URL, or a data URL holding its bytes in base64 (chat's image_url
    part). ``detail`` is chat's ("low", "high", "auto"), None when not given."""

    url: str
    detail: str | None = None

    def to_chat(self) -> dict[str, Any]:
        image: dict[str, Any] = {"url": self.url}
        if self.detail is not None:
            image["detail"] = self.detail
        return {"type": "image_url", "image_url": image}


@dataclass(frozen=True, slots=True)
class AudioPart:
    """Audio: its bytes in base64 and chat's name of their format ("wav", "mp3"; chat's input_audio part)."""

    data: str
    format: str

    def to_chat(self) -> dict[str, Any]:
        return {"type": "input_audio", "input_audio": {"data": self.data, "format": self.format}}


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file (chat's file part): its bytes as a base64 data URL (``data``) and its name, or the id of a file
    uploaded to the provider; a member None is one not given. A wire that carries no file by id refuses one."""

    data: str | None = None
    filename: str | None = None
    file_id: str | None = None

    def to_chat(self) -> dict[str, Any]:
        found = {"filename": self.filename, "file_data": self.data, "file_id": self.file_id}
        return {"type": "file", "file": {name: value for name, value in found.items() if value is not None}}


Part = TextPart | RefusalPart | ImagePart | AudioPart | FilePart
# A message's content: a string, or its parts.
Content = str | list[Part]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def part_from_chat(part: Any) -> Part | None:
    """Chat's content part (each part's ``to_chat`` is its reverse); None for a part of another type, or
    without what its type needs: an image without a string URL (given as image_url's url, or as image_url
    itself), audio without string data and format, a file with neither data nor an id. A text or a refusal
    that is not a string reads as "" (nothing), a member of a file or an image's detail that is not a
    string as not given."""
    found: dict[str, Any] = part if isinstance(part, dict) else {}
    kind = found.get("type")
    if kind == "text":
        return TextPart(_text(found.get("text")))
    if kind == "refusal":
        return RefusalPart(_text(found.get("refusal")))
    if kind == "image_url":
        image = found.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = _string(image.get("detail")) if isinstance(image, dict) else None
        return ImagePart(url, detail) if isinstance(url, str) else None
    if kind == "input_audio":
        audio = found.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str) \
                or not isinstance(audio.get("format"), str):
            return None
        return AudioPart(audio["data"], audio["format"])
    if kind == "file" and isinstance(found.get("file"), dict):
        file = found["file"]
        read = FilePart(_string(file.get("file_data")), _string(file.get("filename")), _string(file.get("file_id")))
        return read if read.data is not None or read.file_id is not None else None
    return None


def content_from_chat(content: Any) -> Content | None:
    """Chat's message content (``content_to_chat`` is its reverse): a string as it is, an array as its
    parts, a part that cannot be read (``part_from_chat``) left out; None for none. An adapter that
    refuses such a part reads the parts one by one, to name it."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return [part for part in map(part_from_chat, content) if part is not None]


def content_to_chat(content: Content | None) -> str | list[dict[str, Any]] | None:
    """Chat's message content: a string as it is, parts as chat's parts."""
    return content if content is None or isinstance(content, str) else [part.to_chat() for part in content]


class PassedThrough(dict[str, Any]):
    """What an adapter hands back for a request it sent as the client wrote it (a Messages request to an
    anthropic deployment, a Responses request to a deployment that speaks it, a Gemini request to a gemini
    one): ``native``, the provider's own answer or stream event, which the client gets as it came, kept
    beside its neutral translation, which is the mapping itself.

    It is a chat answer or chunk so that the metering reads and stamps it as it does any other (its usage,
    the model's name) without knowing it was passed through; the codec that sent the request tests
    ``isinstance(..., PassedThrough)`` and answers with ``native``. ``carries_output`` marks an event that
    is output though its translation shows none (a thinking delta): it commits a stream
    (gateway.upstream.shapes.ChunkStream) as content does.
    """

    __slots__ = ("native", "carries_output")

    def __init__(self, translation: Mapping[str, Any], native: dict[str, Any], *,
                 carries_output: bool = False) -> None:
        super().__init__(translation)
        self.native = native
        self.carries_output = carries_output

    def __repr__(self) -> str:
        return f"PassedThrough({dict(self)!r}, native={self.native!r})"
