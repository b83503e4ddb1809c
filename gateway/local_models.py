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
"""
from __future__ import annotations

import array
import hashlib
import io
import json
import math
import re
import struct
import sys
import urllib.parse
import wave
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from gateway.tokens import count_tokens_in_place
from utils_app import event_loop

# A word (letters, digits, underscore) or one punctuation mark: the embeddings' words.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def _digest(*parts: str | int | float) -> bytes:
    """A stable 32-byte digest of the inputs (Python's hash() is salted per process)."""
    joined = "\x1f".join(str(part) for part in parts)
    return hashlib.sha256(joined.encode("utf-8", "surrogatepass")).digest()


# ---------------------------------------------------------------- chat

_QUOTE_CHARS = 200


def _message_text(content) -> str:
    """The text of a chat message's content: a string, a list of content parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return " ".join(texts)
    return ""


def chat_reply(messages: list[dict]) -> str:
    """The reply of `local-chat`: it names itself, measures and quotes the last user message.

    Deterministic: the same messages always give the same reply. The fingerprint covers the
    whole conversation, so two conversations that end alike still get different replies.
    """
    characters = sum(len(_message_text(m.get("content"))) for m in messages or () if isinstance(m, dict))
    return event_loop.run(_chat_reply, characters // 4, messages)


def _chat_reply(messages: list[dict]) -> str:
    last_user = None
    for message in reversed(messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            last_user = _message_text(message.get("content"))
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


def _fingerprint(messages: list[dict]) -> str:
    """A short stable digest of the whole conversation."""
    return _digest(*(
        f"{m.get('role')}:{_message_text(m.get('content'))}" for m in (messages or []) if isinstance(m, dict)
    )).hex()[:12]


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
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, as a model sends a function's arguments


@dataclass(frozen=True)
class ChatAnswer:
    """What `local-chat` answers: a text (plain, or a JSON document), or one call of a client's tool."""

    text: str = ""
    tool_call: ToolCall | None = None


def chat_answer(messages: list[dict], *, tools: Sequence[tuple[str, dict | bool]] = (), call: str = "auto",
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
    messages = [m for m in messages or () if isinstance(m, dict)]
    tools = [(name, parameters) for name, parameters in tools if isinstance(name, str) and name]
    characters = sum(len(_message_text(m.get("content"))) for m in messages)
    return event_loop.run(_chat_answer, characters // 4, messages, tools, call, schema, strict)


def _chat_answer(messages: list[dict], tools: list[tuple[str, dict | bool]], call: str, schema,
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
    document = _SchemaValues(schema, strict=strict).value(schema, text=reply)
    return ChatAnswer(text=json.dumps(document, ensure_ascii=False))


def _last_user_text(messages: list[dict]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _message_text(message.get("content"))
    return ""


def _tool_named(text: str, names: list[str]) -> tuple[str, str] | None:
    """(tool, text) of the last ``use <tool>: <text>`` line of ``text`` that names one of ``names``."""
    found = None
    for match in _USE_TOOL_RE.finditer(text):
        if match.group(1) in names:
            found = (match.group(1), match.group(2).strip())
    return found


def _tool_results(messages: list[dict]) -> list[dict]:
    """The tool results of the current turn: tool messages after the last assistant message."""
    results = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        if message.get("role") == "tool":
            results.append(message)
    return results[::-1]


def _tool_result_reply(messages: list[dict], results: list[dict]) -> str:
    names = {}  # tool call id -> the function's name, from the assistant's calls
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(call.get("id"), str):
                names[call["id"]] = function.get("name")
    quotes = []
    for result in results:
        name = names.get(result.get("tool_call_id"))
        quote = " ".join(_message_text(result.get("content")).split())
        if len(quote) > _QUOTE_CHARS:
            quote = quote[:_QUOTE_CHARS].rstrip() + "…"
        quotes.append(f"The tool {name if isinstance(name, str) and name else 'you ran'} returned: \"{quote}\"")
    return ("This is local-chat, a deterministic test model running inside the gateway (not an AI). "
            f"{' '.join(quotes)} Fingerprint {_fingerprint(messages)}.")


def _tool_call(messages: list[dict], name: str, parameters, text: str) -> ToolCall:
    arguments = json.dumps(tool_arguments(parameters, text), ensure_ascii=False)
    return ToolCall(id="call_" + _digest("tool call", _fingerprint(messages), name, arguments).hex()[:24],
                    name=name, arguments=arguments)


def tool_arguments(parameters, text: str) -> dict:
    """Arguments a function's parameters schema accepts, ``text`` in its first required text parameter."""
    value = _SchemaValues(parameters).value(parameters, text=text)
    return value if isinstance(value, dict) else {}


# What the value maker follows, at most. A hostile schema (a $ref to itself, allOf fanning out, a
# million minItems) gets a value past these bounds that its schema may refuse, never unbounded work.
_SCHEMA_DEPTH = 24  # nested schemas and $ref hops on one path
_SCHEMA_STEPS = 2_000  # schemas read for one document
_SCHEMA_ITEMS = 64  # minItems and minProperties honoured up to this
_SCHEMA_CHARS = 4_096  # minLength honoured up to this
_SCHEMA_PADDING = 65_536  # characters added for minLength in one document
_SCHEMA_WORDS = 4_096  # words of a text put in an array of strings
_STRING_FORMATS = {"date-time": "2000-01-01T00:00:00Z", "date": "2000-01-01", "time": "00:00:00Z",
                   "duration": "P1D", "email": "local-chat@example.com", "idn-email": "local-chat@example.com",
                   "hostname": "local-chat.example.com", "idn-hostname": "local-chat.example.com",
                   "ipv4": "127.0.0.1", "ipv6": "::1", "uri": "https://example.com/local-chat",
                   "iri": "https://example.com/local-chat", "uri-reference": "/local-chat",
                   "iri-reference": "/local-chat", "url": "https://example.com/local-chat",
                   "uuid": "00000000-0000-4000-8000-000000000000", "json-pointer": "/local-chat",
                   "relative-json-pointer": "0", "regex": "local-chat", "uri-template": "/local-chat"}
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_OBJECT_WORDS = ("properties", "required", "additionalProperties", "minProperties", "patternProperties")
_ARRAY_WORDS = ("items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems")
_STRING_WORDS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_WORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _number(value: object) -> TypeGuard[float]:  # a finite int or float, not a bool
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value, cap: int) -> int:
    return min(value, cap) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class _SchemaValues:
    """A JSON value a JSON schema accepts, made up deterministically: ``const`` or the first of ``enum``;
    ``allOf`` merged; of ``anyOf`` / ``oneOf`` the first branch that is not null (deep in a document, the
    first null or plain one, so recursive schemas end); ``$ref`` into ``$defs`` / ``definitions`` (any
    local JSON pointer); the first type of ``type`` that is not null; strings "local-chat" (or a sample of
    their ``format``) within minLength and maxLength; numbers 0 moved into minimum, maximum and their
    exclusive forms and onto multipleOf; arrays of minItems items (distinct ones for uniqueItems);
    objects with their required properties (every property when ``strict``) and up to minProperties.
    ``pattern`` and ``not`` are not followed."""

    def __init__(self, root, *, strict: bool = False):
        self.root = root
        self.strict = strict
        self.steps = _SCHEMA_STEPS
        self.padding = _SCHEMA_PADDING

    def value(self, schema, depth: int = 0, text: str | None = None, variant: int = 0):
        schema = self._resolve(schema)
        self.steps -= 1
        stop = depth >= _SCHEMA_DEPTH or self.steps <= 0
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][variant % len(schema["enum"])]
        if not stop:
            if isinstance(schema.get("allOf"), list):
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                return self.value(self._merged([rest, *schema["allOf"]]), depth + 1, text, variant)
            for word in ("anyOf", "oneOf"):
                if isinstance(schema.get(word), list) and schema[word]:
                    rest = {k: v for k, v in schema.items() if k != word}
                    branch = self._branch(schema[word], prefer_plain=depth >= _SCHEMA_DEPTH // 2)
                    return self.value(self._merged([rest, branch]), depth + 1, text, variant)
        kind = self._kind(schema, prefer_null=stop or depth >= _SCHEMA_DEPTH // 2)
        if kind == "string":
            return self._string(schema, text, variant)
        if kind in ("integer", "number"):
            return self._number(schema, kind == "integer", variant)
        if kind == "boolean":
            return variant % 2 == 0
        if kind == "array":
            return [] if stop else self._array(schema, depth, text, variant)
        if kind == "object":
            return {} if stop else self._object(schema, depth, text, variant)
        return None

    def _resolve(self, schema) -> dict:
        """The schema with its ``$ref`` followed, the members beside the ``$ref`` kept."""
        for _ in range(_SCHEMA_DEPTH):
            if not isinstance(schema, dict):
                return {}
            reference = schema.get("$ref")
            if not isinstance(reference, str):
                return schema
            self.steps -= 1
            beside = {k: v for k, v in schema.items() if k != "$ref"}
            target = self._pointer(reference)
            target = target if isinstance(target, dict) else {}  # true, or no schema: anything goes
            schema = {**target, **beside} if beside else target
        return {k: v for k, v in schema.items() if k != "$ref"} if isinstance(schema, dict) else {}

    def _pointer(self, reference: str):
        """The schema a local reference (``#``, ``#/$defs/Name``, any JSON pointer) points at; {} if none."""
        if reference != "#" and not reference.startswith("#/"):
            return {}  # another document, or an $anchor: not followed
        found = self.root
        for part in reference[2:].split("/") if reference != "#" else ():
            part = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(found, dict) and part in found:
                found = found[part]
            elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
                found = found[int(part)]
            else:
                return {}
        return found

    def _merged(self, schemas: list) -> dict:
        """One schema asking what all of ``schemas`` ask (as near as a merge gets: ``allOf`` nested in a branch
        and a second ``anyOf`` are kept as an ``allOf`` to merge next)."""
        merged: dict = {}
        for schema in schemas:
            schema = self._resolve(schema)
            self.steps -= 1
            if self.steps <= 0:
                break
            for word, value in schema.items():
                if word == "properties" and isinstance(value, dict):
                    properties = dict(merged.get("properties") or {})
                    for name, sub in value.items():
                        properties[name] = {"allOf": [properties[name], sub]} if name in properties else sub
                    merged["properties"] = properties
                elif word == "required" and isinstance(value, list):
                    merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
                elif word == "type" and "type" in merged:
                    merged["type"] = _common_types(merged["type"], value)
                elif word in _LOWER_BOUNDS and _number(value) and _number(merged.get(word)):
                    merged[word] = max(merged[word], value)
                elif word in _UPPER_BOUNDS and _number(value) and _number(merged.get(word)):
                    merged[word] = min(merged[word], value)
                elif word in ("allOf", "anyOf", "oneOf") and word in merged and isinstance(value, list):
                    merged["allOf"] = [*merged.get("allOf", []), *(value if word == "allOf" else [{word: value}])]
                else:
                    merged.setdefault(word, value)
        return merged

    def _branch(self, branches: list, *, prefer_plain: bool):
        resolved = [self._resolve(branch) for branch in branches[:_SCHEMA_ITEMS]]
        if prefer_plain:
            for branch in resolved:
                if self._kind(branch, prefer_null=True) not in ("array", "object"):
                    return branch
        for branch in resolved:
            if self._kind(branch, prefer_null=False) is not None:
                return branch
        return resolved[0]

    @staticmethod
    def _kind(schema: dict, *, prefer_null: bool) -> str | None:
        """The JSON type to make for a schema (None: null), from ``type`` or else from its other members."""
        types = schema.get("type")
        types = [types] if isinstance(types, str) else [t for t in types if isinstance(t, str)] \
            if isinstance(types, list) else []
        if "const" in schema:
            return None if schema["const"] is None else "value"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return None if schema["enum"][0] is None else "value"
        if types:
            if prefer_null and "null" in types:
                return None
            return next((t for t in types if t != "null"), None)
        for kind, words in (("object", _OBJECT_WORDS), ("array", _ARRAY_WORDS), ("string", _STRING_WORDS),
                            ("number", _NUMBER_WORDS)):
            if any(word in schema for word in words):
                return kind
        return None

    def _string(self, schema: dict, text: str | None, variant: int) -> str:
        if text is None:
            text = _STRING_FORMATS.get(schema.get("format", "")) or (
                "local-chat" if variant == 0 else f"local-chat {variant + 1}")
        shortest = _count(schema.get("minLength"), _SCHEMA_CHARS)
        if len(text) < shortest:
            padding = min(shortest - len(text), max(self.padding, 0))
            self.padding -= padding
            text += "." * padding
        longest = schema.get("maxLength")
        if isinstance(longest, int) and not isinstance(longest, bool) and longest >= 0:
            text = text[:longest]
        return text

    @staticmethod
    def _number(schema: dict, integer: bool, variant: int):
        low, high = schema.get("minimum"), schema.get("maximum")
        low, high = (low if _number(low) else None), (high if _number(high) else None)
        low_open = high_open = False
        above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if _number(above) and (low is None or above >= low):
            low, low_open = above, True
        elif above is True:  # draft 4: a flag on minimum
            low_open = low is not None
        if _number(below) and (high is None or below <= high):
            high, high_open = below, True
        elif below is True:
            high_open = high is not None
        if integer:  # whole bounds, both closed
            if low is not None:
                low = math.floor(low) + 1 if low_open else math.ceil(low)
            if high is not None:
                high = math.ceil(high) - 1 if high_open else math.floor(high)
            low_open = high_open = False
        value: float = 0
        if low is not None and (value < low or (low_open and value <= low)):
            value = low if not low_open else low + 1 if high is None or low + 1 < high else low / 2 + high / 2
        if high is not None and (value > high or (high_open and value >= high)):
            value = high if not high_open else high - 1 if low is None else low / 2 + high / 2
        # Bounds too close for the steps above (floats run out of digits); an open bound is never None.
        if low_open and low is not None and value <= low:
            value = math.nextafter(low, math.inf)
        if high_open and high is not None and value >= high:
            value = math.nextafter(high, -math.inf)
        if variant and (high is None or value + variant < high or (not high_open and value + variant == high)):
            value += variant  # distinct items of a uniqueItems array
        step = schema.get("multipleOf")
        if _number(step) and step > 0 and value % step:
            value = -(-value // step) * step  # the next multiple up
            if high is not None and value > high:
                value -= step
        return int(value) if integer and _number(value) and value == int(value) else value

    def _array(self, schema: dict, depth: int, text: str | None, variant: int) -> list:
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if not isinstance(prefix, list):
            prefix = items if isinstance(items, list) else []
        rest = schema.get("additionalItems", {}) if isinstance(items, list) else items if items is not None else {}
        shortest = _count(schema.get("minItems"), _SCHEMA_ITEMS)
        longest = schema.get("maxItems")
        longest = longest if isinstance(longest, int) and not isinstance(longest, bool) and longest >= 0 else None
        words = text.split()[:_SCHEMA_WORDS] if text is not None and self._takes_text(schema) else []
        if longest is not None:
            words = words[:longest]
        if "contains" in schema:
            shortest = max(shortest, 1)
        unique = schema.get("uniqueItems") is True
        values = []
        for index in range(max(shortest, len(words))):
            item = prefix[index] if index < len(prefix) else rest
            if index == 0 and "contains" in schema:
                item = self._merged([item, schema["contains"]])
            word = words[index] if index < len(words) else None
            values.append(self.value(item, depth + 1, word, index if unique else variant))
        return values

    def _object(self, schema: dict, depth: int, text: str | None, variant: int) -> dict:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            properties = {}
        required = [name for name in schema.get("required") or () if isinstance(name, str)] \
            if isinstance(schema.get("required"), list) else []
        names = list(dict.fromkeys([*required, *(properties if self.strict else ())]))
        for name in properties:
            if len(names) >= _count(schema.get("minProperties"), _SCHEMA_ITEMS):
                break
            if name not in names:
                names.append(name)
        extra = schema.get("additionalProperties", {})
        while len(names) < _count(schema.get("minProperties"), _SCHEMA_ITEMS) and extra is not False:
            names.append(f"local_chat_{len(names)}")
        slot = None
        if text is not None:
            slot = next((name for name in required if self._takes_text(properties.get(name, extra))), None)
        return {name: self.value(properties[name] if name in properties else extra, depth + 1,
                                 text if name == slot else None, variant) for name in names}

    def _takes_text(self, schema, depth: int = 0) -> bool:
        """Whether a parameter takes free text: a string (no enum or const), or an array of such strings."""
        schema = self._resolve(schema)
        self.steps -= 1
        if depth >= _SCHEMA_DEPTH // 2 or self.steps <= 0:
            return False
        for word in ("anyOf", "oneOf"):
            if isinstance(schema.get(word), list) and schema[word]:
                return self._takes_text(self._branch(schema[word], prefer_plain=False), depth + 1)
        if isinstance(schema.get("allOf"), list):
            return self._takes_text(self._merged(schema["allOf"]), depth + 1)
        kind = self._kind(schema, prefer_null=False)
        if kind == "array":
            items = self._resolve(schema.get("items"))
            return self._kind(items, prefer_null=False) == "string"  # an enum or const item is a "value"
        return kind == "string"


def _common_types(first, second):
    """The types both ``type`` members allow (an integer is a number); the first's when none is."""
    one = {first} if isinstance(first, str) else set(first) if isinstance(first, list) else set()
    two = {second} if isinstance(second, str) else set(second) if isinstance(second, list) else set()
    common = (one & two) | ({"integer"} if ("integer" in one and "number" in two)
                            or ("number" in one and "integer" in two) else set())
    return sorted(common) if common else first


# ---------------------------------------------------------------- image

MAX_IMAGE_SIDE = 4096
# Rows are shaded in at most this many distinct bands; rows inside a band are identical,
# which keeps a 4096x4096 picture to a few hundred translated rows and compresses well.
_IMAGE_BANDS = 256


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _palette(seed_bytes: bytes, offset: int) -> tuple[int, int, int]:
    return seed_bytes[offset], seed_bytes[offset + 1], seed_bytes[offset + 2]


def render_png(width: int, height: int, prompt: str, seed: int = 0) -> bytes:
    """A real PNG (8-bit RGB, no interlace) of width x height, drawn from the prompt and seed.

    The picture is a horizontal blend between two colours with soft vertical stripes, darkened
    from top to bottom. Only one row is computed pixel by pixel; the other rows are that row
    passed through a per-band brightness table (bytes.translate runs in C), so even
    4096x4096 takes well under a second, most of it in zlib.
    """
    if not isinstance(width, int) or not isinstance(height, int):
        raise ValueError("width and height must be integers")
    if not (1 <= width <= MAX_IMAGE_SIDE and 1 <= height <= MAX_IMAGE_SIDE):
        raise ValueError(f"width and height must be between 1 and {MAX_IMAGE_SIDE}")
    return event_loop.run(_render_png, width * height // 64, width, height, prompt, seed)


def _render_png(width: int, height: int, prompt: str, seed: int) -> bytes:
    colours = _digest("image", prompt, seed)
    left, right = _palette(colours, 0), _palette(colours, 3)
    stripes = 1 + colours[6] % 12  # number of stripes across the picture
    stripe_depth = 0.15 + (colours[7] / 255) * 0.35
    phase = colours[8] / 255 * 2 * math.pi

    row = bytearray(width * 3)
    span = max(width - 1, 1)
    for x in range(width):
        t = x / span
        light = 1.0 - stripe_depth * (0.5 + 0.5 * math.sin(phase + 2 * math.pi * stripes * t))
        for channel in range(3):
            value = (left[channel] * (1 - t) + right[channel] * t) * light
            row[x * 3 + channel] = int(value)
    base_row = bytes(row)

    compressor = zlib.compressobj(6)
    parts = []
    bands = min(height, _IMAGE_BANDS)
    for band in range(bands):
        first = band * height // bands
        last = (band + 1) * height // bands
        # Top rows keep full brightness; the bottom ones fall to 45 %.
        factor = 1.0 - 0.55 * (band / max(bands - 1, 1))
        table = bytes(int(v * factor) for v in range(256))
        scanline = b"\x00" + base_row.translate(table)  # filter type 0: the bytes as they are
        parts.append(compressor.compress(scanline * (last - first)))
    parts.append(compressor.flush())

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        _png_chunk(b"IHDR", header),
        _png_chunk(b"IDAT", b"".join(parts)),
        _png_chunk(b"IEND", b""),
    ))


# ---------------------------------------------------------------- speech

# About the pace of read-aloud speech (roughly 15 characters a second) at speed 1.0.
_SECONDS_PER_CHAR = 0.065
_AMPLITUDE = 0.3 * 32767
_FADE_SECONDS = 0.005
MIN_SPEED, MAX_SPEED = 0.25, 4.0


def _check_speech_args(speed: float, sample_rate: int) -> None:
    if not isinstance(speed, (int, float)) or not (MIN_SPEED <= speed <= MAX_SPEED):
        raise ValueError(f"speed must be between {MIN_SPEED} and {MAX_SPEED}")
    if not isinstance(sample_rate, int) or not (8000 <= sample_rate <= 96000):
        raise ValueError("sample_rate must be an integer between 8000 and 96000")


def _samples(text: str, voice: str, speed: float, sample_rate: int) -> array.array:
    """16-bit samples: one tone per character, silence for whitespace.

    The voice picks the base pitch and how much of the second harmonic is mixed in; the
    character picks the step above the base pitch. Each distinct character's tone is computed
    once and reused, so a 4096-character input costs a few dozen sine tables, not millions
    of sin() calls.
    """
    _check_speech_args(speed, sample_rate)
    voice_bytes = _digest("voice", voice)
    base_pitch = 110 + voice_bytes[0] / 255 * 150  # 110-260 Hz
    overtone = 0.15 + voice_bytes[1] / 255 * 0.35
    segment = max(1, round(sample_rate * _SECONDS_PER_CHAR / speed))
    fade = min(segment // 2, max(1, round(sample_rate * _FADE_SECONDS)))
    envelope = [min(1.0, i / fade, (segment - 1 - i) / fade) for i in range(segment)]
    silence = array.array("h", bytes(2 * segment))

    tones: dict[str, array.array] = {}
    out = array.array("h")
    for char in text or " ":  # an empty text still gives one segment of silence
        if char.isspace():
            out.extend(silence)
            continue
        tone = tones.get(char)
        if tone is None:
            # Pentatonic-ish steps keep neighbouring characters from sounding alike.
            step = (ord(char) * 7) % 24
            frequency = base_pitch * 2 ** (step / 12)
            w = 2 * math.pi * frequency / sample_rate
            tone = array.array("h", (
                int(_AMPLITUDE * envelope[i] * (math.sin(w * i) + overtone * math.sin(2 * w * i)) / (1 + overtone))
                for i in range(segment)
            ))
            tones[char] = tone
        out.extend(tone)
    if sys.byteorder != "little":  # WAV and the PCM format are little-endian
        out.byteswap()
    return out


def synthesize_pcm(text: str, *, voice: str, speed: float = 1.0, sample_rate: int = 24000) -> bytes:
    """Raw signed 16-bit little-endian mono samples (OpenAI's `pcm` format is 24 kHz)."""
    _check_speech_args(speed, sample_rate)
    return event_loop.run(_pcm, _speech_cost(text, speed, sample_rate), text, voice, speed, sample_rate)


def synthesize_wav(text: str, *, voice: str, speed: float = 1.0, sample_rate: int = 24000) -> bytes:
    """A RIFF WAV file, 16-bit mono; about 65 ms per character at speed 1.0, shorter when faster."""
    _check_speech_args(speed, sample_rate)
    return event_loop.run(_wav, _speech_cost(text, speed, sample_rate), text, voice, speed, sample_rate)


def _speech_cost(text: str, speed: float, sample_rate: int) -> int:
    return int(max(len(text), 1) * sample_rate * _SECONDS_PER_CHAR / speed) // 40  # about 25 ns a sample


def _pcm(text: str, voice: str, speed: float, sample_rate: int) -> bytes:
    return _samples(text, voice, speed, sample_rate).tobytes()


def _wav(text: str, voice: str, speed: float, sample_rate: int) -> bytes:
    pcm = _pcm(text, voice, speed, sample_rate)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return buffer.getvalue()


# ---------------------------------------------------------------- embeddings

EMBEDDING_DIMENSIONS = 256
MAX_EMBEDDING_DIMENSIONS = 4096
# Whole words say the most, word pairs add order, character trigrams let "running" and "runner"
# share features. The weights are relative; the vector is normalised at the end.
_WORD_WEIGHT, _PAIR_WEIGHT, _TRIGRAM_WEIGHT = 1.0, 0.5, 0.3


def _features(text: str) -> Iterator[tuple[str, float]]:
    words = [w.lower() for w in _TOKEN_RE.findall(text)]
    for word in words:
        yield "w:" + word, _WORD_WEIGHT
        padded = f"<{word}>"
        for i in range(len(padded) - 2):
            yield "c:" + padded[i:i + 3], _TRIGRAM_WEIGHT
    for first, second in zip(words, words[1:]):
        yield f"p:{first} {second}", _PAIR_WEIGHT


def embed(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A fixed-size, L2-normalised vector of `text` by signed feature hashing.

    Each feature is hashed to a slot and a sign; the signs make unrelated features cancel on
    average instead of piling up, so the dot product approximates shared features. A text
    without any word or punctuation (empty or whitespace) has no features and gets the zero
    vector: there is no direction to give it, and a made-up unit vector would look similar to
    something.
    """
    if not isinstance(dimensions, int) or not (1 <= dimensions <= MAX_EMBEDDING_DIMENSIONS):
        raise ValueError(f"dimensions must be an integer between 1 and {MAX_EMBEDDING_DIMENSIONS}")
    return event_loop.run(_embed, len(text or "") + dimensions // 8, text, dimensions)


def _embed(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for feature, weight in _features(text or ""):
        hashed = int.from_bytes(hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        slot = (hashed >> 1) % dimensions
        vector[slot] += weight if hashed & 1 else -weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        return vector
    return [v / norm for v in vector]
