"""A request's side of the gateway's conversation shape (gateway.conversation has an answer's): its
messages and their content parts (text, a refusal, an image, audio, a file), a tool's result, the tools a
request declares and its tool choice, each read from and written to chat's with from_chat and to_chat.

Each wire maps to and from these beside its reverse: Anthropic's content blocks and tool results in
gateway.upstream.anthropic_messages, its tools and tool_choice in gateway.upstream.anthropic_request, Gemini's parts in gateway.upstream.gemini_messages and
its functionResponse parts in gateway.upstream.gemini_answer, its functionDeclarations and
functionCallingConfig in gateway.upstream.gemini_request, the Responses API's input parts, tools and
tool_choice in gateway.responses.chat_request.

Reasoning is one knob, an Effort, and the one table of what each is worth in thinking tokens, read both
ways (thinking_budget, budget_effort). Each wire's thinking maps to and from it beside its reverse:
Anthropic's thinking block and output_config.effort in gateway.upstream.anthropic_request, Gemini's
thinkingConfig in gateway.upstream.gemini_request.
"""
from dataclasses import dataclass
from typing import Any, Literal, Self

from gateway.conversation import ToolCall, content_text


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

    def to_chat(self) -> dict[str, Any]:
        """Chat's function tool: the name, the parameters (when given), the description, strict."""
        function: dict[str, Any] = {"name": self.name}
        if self.parameters is not None:
            function["parameters"] = self.parameters
        if self.description is not None:
            function["description"] = self.description
        if self.strict is not None:
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


@dataclass(frozen=True, slots=True)
class OtherPart:
    """A chat content part none of the above: of a type no other wire has, or without what its type needs (an
    image without a URL). Carried as it came, for an adapter to refuse naming it (``raw`` is its object)."""

    raw: dict[str, Any]

    def to_chat(self) -> dict[str, Any]:
        return self.raw


Part = TextPart | RefusalPart | ImagePart | AudioPart | FilePart
# A message's content: a string, or its parts (an OtherPart among them only as read from chat).
Content = str | list[Part] | list[Part | OtherPart]


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


def content_to_chat(content: Content | None) -> str | list[dict[str, Any]] | None:
    """Chat's message content: a string as it is, parts as chat's parts (each read back by ``part_from_chat``)."""
    return content if content is None or isinstance(content, str) else [part.to_chat() for part in content]


def content_from_chat(content: Any) -> str | list[Part | OtherPart] | None:
    """A chat message's content (``content_to_chat`` is its reverse): a string as it is, each part of an array
    as its Part (``part_from_chat``) or, when it is none, an OtherPart; anything else as None (no content)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return [part_from_chat(found) or OtherPart(found if isinstance(found, dict) else {}) for found in content]


# Who speaks a message (a tool's result is a ToolResult).
Role = Literal["system", "developer", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "developer", "user", "assistant")


@dataclass(frozen=True, slots=True)
class Message:
    """A message of a conversation other than a tool's result: who speaks (``role``), what it says
    (``content``: a string, its parts, or None, as an assistant message that only calls tools may have), and
    an assistant's tool calls. Chat's message members no other wire has (a participant's name, an earlier
    answer's audio) are not carried."""

    role: Role
    content: Content | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def from_chat(cls, message: dict[str, Any]) -> Self:
        """Chat's message of a role in ROLES, checked already by chat's validation (``to_chat`` is its
        reverse): its content (``content_from_chat``), an assistant's tool_calls, and the older single
        function_call after them as a call without an id. A role of another kind reads as user, tool_calls
        that are not an array as none."""
        role, entries = message.get("role"), message.get("tool_calls")
        calls = [ToolCall.from_chat(entry) for entry in entries] if isinstance(entries, list) else []
        if message.get("function_call"):
            calls.append(ToolCall.from_chat({"function": message["function_call"]}))
        return cls(role=role if role in ROLES else "user", content=content_from_chat(message.get("content")),
                   tool_calls=tuple(calls))

    def to_chat(self) -> dict[str, Any]:
        """Chat's message: role, content, and tool_calls when there are any."""
        found: dict[str, Any] = {"role": self.role, "content": content_to_chat(self.content)}
        if self.tool_calls:
            found["tool_calls"] = [call.to_chat() for call in self.tool_calls]
        return found


# One entry of a conversation: a message, or the result of a tool an earlier message called.
Turn = Message | ToolResult


def conversation_from_chat(messages: list[dict[str, Any]]) -> list[Turn]:
    """Chat's messages, checked already, as the conversation's turns (``conversation_to_chat`` is its
    reverse): a tool message as a ToolResult, any other as a Message."""
    return [ToolResult.from_chat(message) if message.get("role") == "tool" else Message.from_chat(message)
            for message in messages]


def conversation_to_chat(turns: list[Turn]) -> list[dict[str, Any]]:
    """Chat's messages for the conversation's turns."""
    return [turn.to_chat() for turn in turns]


# How hard a model is asked to think before it answers: OpenAI's reasoning efforts, weakest first (the openai
# SDK's ReasoningEffort; chat's reasoning_effort takes these). "none" asks for no thinking at all.
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
# The thinking budget in tokens each effort stands for, where an upstream counts thinking in tokens (Anthropic,
# Gemini): OpenAI's efforts are steps, those upstreams count tokens.
THINKING_BUDGETS: dict[Effort, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384,
                                       "xhigh": 24576, "max": 24576}
# The strongest effort a budget reads back as: above it are OpenAI's newest steps, which fewer models take.
STRONGEST_READ: Effort = "high"


def thinking_budget(effort: Effort | None) -> int | None:
    """The thinking budget an effort stands for (``budget_effort`` is its reverse); None for no thinking
    ("none", or no effort sent) and for what is no effort."""
    return THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None


def budget_effort(budget: int) -> Effort:
    """The effort a thinking budget of at least 1 token stands for (``thinking_budget`` is its reverse): the
    weakest whose budget holds it, and STRONGEST_READ for any budget past the ones below it."""
    return next((effort for effort, most in THINKING_BUDGETS.items() if budget <= most or effort == STRONGEST_READ),
                STRONGEST_READ)
