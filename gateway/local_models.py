"""The `local` provider's models: in-process, deterministic, no network, standard library only.

They let the gateway do its whole job on a machine without upstream credentials and give the
load tests an upstream that costs nothing. They are not an AI: every output is a pure function
of its inputs (same prompt, same bytes), derived from the prompt so a caller can see that the
request arrived intact.

- chat: a short reply that describes and quotes the last user message, streamed word by word; a
  call of one of the client's tools when asked for one, an answer quoting a tool's result, and JSON
  that a schema accepts (docs/local-models.md says exactly when);
- image: a real PNG (RGB, 8 bits) of the asked size, a gradient with stripes coloured by the prompt;
- speech: a real 16-bit mono WAV (or the same samples as raw PCM), one tone per character;
- embedding: signed feature hashing of words, word pairs and character trigrams, L2-normalised.

Some of this is seconds of CPU (a 4096x4096 picture, 4096 characters of slow speech). Under a
gevent worker that work would stall every other request of the process, so there it runs in a
small pool of native threads (utils_app.event_loop). The token estimate the local chat model
reports is the gateway's own (gateway.tokens).

This module holds the chat model; the JSON values its schemas ask for are made in
gateway.local_schema, and the image, speech and embedding models live in gateway.local_media.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gateway.conversation import ToolCall
from gateway.conversation_request import Message, OtherPart, TextPart, ToolResult, Turn
from gateway.local_schema import SchemaValues
from gateway.tokens import count_tokens_in_place
from utils_app import event_loop


def digest(*parts: str | int | float) -> bytes:
    """A stable 32-byte digest of the inputs (Python's hash() is salted per process)."""
    joined = "\x1f".join(str(part) for part in parts)
    return hashlib.sha256(joined.encode("utf-8", "surrogatepass")).digest()


# ---------------------------------------------------------------- chat

_QUOTE_CHARS = 200


def _text(turn: Turn) -> str:
    """The text of a turn: its content as a string, or the text of its parts (a text part's, and that of a
    part of another type that carries a string ``text``) joined by spaces; "" when it has none."""
    content = turn.content
    if not isinstance(content, list):
        return content or ""
    texts = (part.text if isinstance(part, TextPart) else part.raw.get("text") if isinstance(part, OtherPart) else None
             for part in content)
    return " ".join(text for text in texts if isinstance(text, str))


def _role(turn: Turn) -> str:
    return turn.role if isinstance(turn, Message) else "tool"


def chat_reply(messages: Sequence[Turn]) -> str:
    """The reply of `local-chat`: it names itself, measures and quotes the last user message.

    Deterministic: the same messages always give the same reply. The fingerprint covers the
    whole conversation, so two conversations that end alike still get different replies.
    """
    characters = sum(len(_text(turn)) for turn in messages)
    return event_loop.run(_chat_reply, characters // 4, messages)


def _chat_reply(messages: Sequence[Turn]) -> str:
    last_user = None
    for turn in reversed(messages):
        if _role(turn) == "user":
            last_user = _text(turn)
            break
    fingerprint = _fingerprint(messages)
    if last_user is None or not last_user.strip():
        return (
            "This is local-chat, a deterministic test model running inside the gateway (not an AI). "
            f"The conversation had no user text to answer. Fingerprint {fingerprint}."
        )
    words = len(last_user.split())
    quote = " ".join(last_user.split())
    if len(quote) > _QUOTE_CHARS:
        quote = quote[:_QUOTE_CHARS].rstrip() + "…"
    return (
        "This is local-chat, a deterministic test model running inside the gateway (not an AI). "
        f"Your message has {_how_many(words, 'word')}, {_how_many(len(last_user), 'character')} "
        f"and about {_how_many(count_tokens_in_place(last_user), 'token')}. You wrote: \"{quote}\" "
        f"Fingerprint {fingerprint}."
    )


def _fingerprint(messages: Sequence[Turn]) -> str:
    """A short stable digest of the whole conversation: each turn's role and text."""
    return digest(*(f"{_role(turn)}:{_text(turn)}" for turn in messages)).hex()[:12]


def _how_many(count: int, noun: str) -> str:
    """"1 token", "2 tokens": the count with its noun, singular for one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# Leading whitespace alone, then each word with the whitespace that follows it.
_PIECE_RE = re.compile(r"\s+|\S+\s*")


def chat_pieces(text: str) -> Iterator[str]:
    """Word-sized pieces of `text` for streaming; "".join(chat_pieces(t)) == t."""
    for match in _PIECE_RE.finditer(text):
        yield match.group()


# ---------------------------------------------------------------- chat: tools and JSON

# "use <tool>: <text>" anywhere in the last user message; the text runs to the end of that line.
_USE_TOOL_RE = re.compile(r"(?<![\w-])(?i:use)[ \t]+([\w.-]+)[ \t]*:[ \t]*([^\r\n]*)")
# A response_format of json_object is answered as if it asked for this schema: an object that names
# the model and carries the reply.
JSON_OBJECT_SCHEMA = {"type": "object", "properties": {"model": {"const": "local-chat"}, "reply": {"type": "string"}},
                      "required": ["model", "reply"], "additionalProperties": False}


@dataclass(frozen=True)
class ChatAnswer:
    """What `local-chat` answers: a text (plain, or a JSON document), or one call of a client's tool."""

    text: str = ""
    tool_call: ToolCall | None = None


def chat_answer(messages: Sequence[Turn], *, tools: Sequence[tuple[str, dict | bool]] = (), call: str = "auto",
                schema: dict | bool | None = None, strict: bool = False) -> ChatAnswer:
    """The answer of `local-chat` to a conversation, given the client's function tools as (name, JSON schema
    of the arguments), whether it must call one of them (``call``: "none", "auto" or "required"; a forced
    tool is "required" with that tool alone) and the JSON schema its text must follow (None for prose).

    - "required": it calls the tool named by a ``use <tool>: <text>`` line of the last user message, else
      the first tool, with the text of that line (else the whole last user message) as the text argument;
    - "auto": after a tool result it answers quoting the result; otherwise it calls a tool only when the
      last user message has a ``use <tool>: <text>`` line naming one of the tools;
    - otherwise it answers with text: the reply of chat_reply(), or the one quoting the tool results, as a
      document ``schema`` accepts when there is one.
    The text argument fills the first required parameter (in the order of ``required``) that takes a
    string (or an array of strings: the text's words); every other required parameter gets a value its
    schema accepts (``tool_arguments``). Deterministic: the same request, the same answer and call id.
    """
    tools = [(name, parameters) for name, parameters in tools if isinstance(name, str) and name]
    characters = sum(len(_text(turn)) for turn in messages)
    return event_loop.run(_chat_answer, characters // 4, messages, tools, call, schema, strict)


def _chat_answer(messages: Sequence[Turn], tools: list[tuple[str, dict | bool]], call: str, schema,
                 strict: bool) -> ChatAnswer:
    results = _tool_results(messages)
    if call in ("auto", "required") and tools:
        last_user = _last_user_text(messages)
        named = _tool_named(last_user, [name for name, _ in tools])
        if call == "required" or (named is not None and not results):
            name, text = named if named is not None else (tools[0][0], last_user)
            return ChatAnswer(tool_call=_tool_call(messages, name, dict(tools)[name], text))
    reply = _tool_result_reply(messages, results) if results else _chat_reply(messages)
    if schema is None:
        return ChatAnswer(text=reply)
    document = SchemaValues(schema, strict=strict).value(schema, text=reply)
    return ChatAnswer(text=json.dumps(document, ensure_ascii=False))


def _last_user_text(messages: Sequence[Turn]) -> str:
    for turn in reversed(messages):
        if _role(turn) == "user":
            return _text(turn)
    return ""


def _tool_named(text: str, names: list[str]) -> tuple[str, str] | None:
    """(tool, text) of the last ``use <tool>: <text>`` line of ``text`` that names one of ``names``."""
    found = None
    for match in _USE_TOOL_RE.finditer(text):
        if match.group(1) in names:
            found = (match.group(1), match.group(2).strip())
    return found


def _tool_results(messages: Sequence[Turn]) -> list[ToolResult]:
    """The tool results of the current turn: those after the last assistant message."""
    results = []
    for turn in reversed(messages):
        if isinstance(turn, Message) and turn.role == "assistant":
            break
        if isinstance(turn, ToolResult):
            results.append(turn)
    return results[::-1]


def _tool_result_reply(messages: Sequence[Turn], results: list[ToolResult]) -> str:
    # tool call id -> the function's name, from the assistant's calls (a later call of an id wins)
    names = {call.id: call.name for turn in messages if isinstance(turn, Message) and turn.role == "assistant"
             for call in turn.tool_calls}
    quotes = []
    for result in results:
        name = names.get(result.call_id)
        quote = " ".join(result.content.split())
        if len(quote) > _QUOTE_CHARS:
            quote = quote[:_QUOTE_CHARS].rstrip() + "…"
        quotes.append(f"The tool {name or 'you ran'} returned: \"{quote}\"")
    return ("This is local-chat, a deterministic test model running inside the gateway (not an AI). "
            f"{' '.join(quotes)} Fingerprint {_fingerprint(messages)}.")


def _tool_call(messages: Sequence[Turn], name: str, parameters, text: str) -> ToolCall:
    arguments = json.dumps(tool_arguments(parameters, text), ensure_ascii=False)
    return ToolCall(id="call_" + digest("tool call", _fingerprint(messages), name, arguments).hex()[:24],
                    name=name, arguments=arguments)


def tool_arguments(parameters, text: str) -> dict:
    """Arguments a function's parameters schema accepts, ``text`` in its first required text parameter."""
    value = SchemaValues(parameters).value(parameters, text=text)
    return value if isinstance(value, dict) else {}
