"""The gateway's own shape of a conversation, typed: what every inbound API and every upstream adapter
shares, whatever its wire. This module holds an answer's side: its stop reasons, usage, tool calls, the
pieces of a streamed answer, and a provider's own answer passed through; gateway.conversation_request
holds a request's side (content parts, tool results, tools, tool choice).

The neutral shape is the chat completion's (OpenAI's chat.completion and its chunks), so its stop reasons
are OpenAI's finish reasons, its usage is chat's and its tool calls are chat's. Each wire maps to and from
these beside its reverse: Anthropic's stop reasons, usage and tool_use blocks in
gateway.upstream.anthropic_answer, Gemini's finish reasons, usageMetadata and functionCall parts in
gateway.upstream.gemini_answer, the Responses API's incomplete reasons, usage and function_call items in
gateway.upstream.openai. A request's earlier tool calls are ToolCall values too. A streamed answer's
chunks are written by the adapters and read by the codecs as StreamPiece values, a whole answer's
choices as Choice values. What is typed so far and
what still travels as a dict is in docs/architecture.md ("One conversation shape").
"""
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def content_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text parts of an array, joined by spaces."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content
                        if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def stop_reason_of(finish: Any) -> StopReason | None:
    """Chat's finish_reason as a StopReason: None when not given, stop for one chat does not name."""
    if not finish:
        return None
    return StopReason(finish) if finish in StopReason.__members__.values() else StopReason.STOP


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
    give: each wire's mapping says whether it makes one up or leaves it out. ``extra_content`` is what a
    provider sent beside the call (Gemini's thought signature, under its own key), carried back with it in
    a later request's assistant turn; None when there is none."""

    id: str
    name: str
    arguments: str
    extra_content: dict[str, Any] | None = field(default=None, hash=False)

    @classmethod
    def from_chat(cls, entry: Any) -> Self:
        """Chat's tool_calls entry (``to_chat`` is its reverse). An id or a name that is not a string reads
        as "" (not given); arguments sent as a JSON value instead of its text (some OpenAI-compatible
        servers send an object) read as that value's JSON text, and none (or an empty value) as "";
        extra_content that is not an object as none."""
        found: dict[str, Any] = entry if isinstance(entry, dict) else {}
        function = found.get("function")
        if not isinstance(function, dict):
            function = {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False) if arguments else ""
        extra = found.get("extra_content")
        return cls(id=found["id"] if isinstance(found.get("id"), str) else "",
                   name=function["name"] if isinstance(function.get("name"), str) else "", arguments=arguments,
                   extra_content=extra if isinstance(extra, dict) else None)

    def to_chat(self, index: int | None = None) -> dict[str, Any]:
        """Chat's tool_calls entry (its extra_content last, when there is one); with ``index`` a streamed
        delta's, which names the call it adds to."""
        entry: dict[str, Any] = {} if index is None else {"index": index}
        entry.update(id=self.id, type="function", function={"name": self.name, "arguments": self.arguments})
        if self.extra_content is not None:
            entry["extra_content"] = self.extra_content
        return entry

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the JSON object they are; {} when they are empty, do not parse, or are not an
        object (a wire that carries an object has nothing else to send)."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of the streamed tool call ``index`` (a delta's tool_calls entry): the first gives its ``id`` and
    ``name`` (all arguments too, from a wire that sends calls whole), a later one the next ``arguments`` text;
    ``extra_content`` is a provider's beside it (Gemini's thought signature). Not a string reads as ""."""

    index: int = 0
    id: str = ""
    name: str = ""
    arguments: str = ""
    extra_content: dict[str, Any] | None = None

    @classmethod
    def from_chat(cls, entry: dict[str, Any]) -> Self:
        function, call = entry.get("function"), ToolCall.from_chat(entry)
        pieces = function.get("arguments") if isinstance(function, dict) else None
        return cls(entry["index"] if type(entry.get("index")) is int else 0, call.id, call.name,
                   pieces if isinstance(pieces, str) else "", call.extra_content)

    def to_chat(self) -> dict[str, Any]:
        """An opening piece (one with an id) as ``ToolCall.to_chat`` writes it, a later one as its arguments."""
        if not self.id:
            return {"index": self.index, "function": {"arguments": self.arguments}}
        return ToolCall(self.id, self.name, self.arguments, self.extra_content).to_chat(self.index)


@dataclass(frozen=True, slots=True)
class Delta:
    """A choice's piece of a streamed answer (a chunk's choices entry): ``role`` on its first, ``text`` (None:
    no content), tool call pieces, the ``finish`` reason on its last (one chat does not name: stop), logprobs."""

    index: int = 0
    role: Literal["assistant"] | None = None
    text: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish: StopReason | None = None
    logprobs: dict[str, Any] | None = None

    @classmethod
    def from_chat(cls, choice: dict[str, Any], position: int) -> Self:
        found, finish, logprobs = choice.get("delta"), choice.get("finish_reason"), choice.get("logprobs")
        delta: dict[str, Any] = found if isinstance(found, dict) else {}
        calls, text = delta.get("tool_calls"), delta.get("content")
        return cls(choice["index"] if type(choice.get("index")) is int else position,
                   "assistant" if delta.get("role") == "assistant" else None, text if isinstance(text, str) else None,
                   tuple(ToolCallDelta.from_chat(call) for call in calls if isinstance(call, dict))
                   if isinstance(calls, list) else (),
                   stop_reason_of(finish), logprobs if isinstance(logprobs, dict) else None)

    def to_chat(self, *, brief: bool = False) -> dict[str, Any]:
        delta: dict[str, Any] = {} if self.role is None else {"role": self.role}
        delta.update({} if self.text is None else {"content": self.text})
        delta.update({"tool_calls": [call.to_chat() for call in self.tool_calls]} if self.tool_calls else {})
        finish = {} if brief and self.finish is None else {"finish_reason": self.finish and self.finish.value}
        return {"index": self.index, "delta": delta, **({} if brief else {"logprobs": self.logprobs}), **finish}


@dataclass(frozen=True, slots=True)
class StreamPiece:
    """A chunk of a streamed answer (chat.completion.chunk): its choices' pieces, ``usage``, the ``cost`` the
    metering adds. ``from_chunk`` reads what it safely can (no list or object: none); ``to_chunk`` writes it."""

    choices: tuple[Delta, ...] = ()
    usage: Usage | None = None
    cost: int | None = None
    id: str = ""  # the answer's, "" when not given
    model: str | None = None
    created: int | None = None

    @classmethod
    def from_chunk(cls, chunk: Any) -> Self:
        found: dict[str, Any] = chunk if isinstance(chunk, dict) else {}
        listed, usage, chunk_id, model, created = (found.get(name) for name in (
            "choices", "usage", "id", "model", "created"))
        cost = usage.get("cost") if isinstance(usage, dict) else None
        return cls(tuple(Delta.from_chat(choice, position) for position, choice in
                         enumerate(listed if isinstance(listed, list) else ()) if isinstance(choice, dict)),
                   Usage.from_chat(usage) if isinstance(usage, dict) else None, cost if type(cost) is int else None,
                   chunk_id if isinstance(chunk_id, str) else "", model if isinstance(model, str) else None,
                   created if type(created) is int else None)

    def to_chunk(self, *, brief: bool = False) -> dict[str, Any]:
        """Chat's chunk; ``brief``, the Responses adapter's: no id, object, created, model, logprobs, nor a
        finish reason before there is one."""
        chunk: dict[str, Any] = {} if brief else {"id": self.id, "object": "chat.completion.chunk",
                                                  "created": self.created, "model": self.model}
        chunk["choices"] = [choice.to_chat(brief=brief) for choice in self.choices]
        if self.usage is not None:
            chunk["usage"] = self.usage.to_chat() | ({} if self.cost is None else {"cost": self.cost})
        return chunk


@dataclass(frozen=True, slots=True)
class Choice:
    """A choice of a whole answer (a chat.completion's choices entry) as an inbound API writes it out: its
    text, its tool calls and why it ended (None: not said). Read as StreamPiece reads a chunk, taking what it
    safely can, whatever the adapter handed back."""

    index: int = 0
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish: StopReason | None = None

    @classmethod
    def from_chat(cls, choice: dict[str, Any], position: int) -> Self:
        found, index = choice.get("message"), choice.get("index")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        calls = message.get("tool_calls")
        return cls(index if type(index) is int else position, content_text(message.get("content")),
                   tuple(ToolCall.from_chat(call) for call in calls if isinstance(call, dict))
                   if isinstance(calls, list) else (), stop_reason_of(choice.get("finish_reason")))

    @classmethod
    def all_of(cls, completion: Mapping[str, Any]) -> list[Self]:
        """The choices of a chat.completion that are objects, in their order."""
        listed = completion.get("choices")
        return [cls.from_chat(choice, position) for position, choice in
                enumerate(listed if isinstance(listed, list) else ()) if isinstance(choice, dict)]


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
