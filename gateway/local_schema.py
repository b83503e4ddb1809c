"""JSON values that a JSON schema accepts, made up deterministically: the local chat model's answers in a
response format and its tools' arguments (gateway.local_models). Bounded, so a hostile schema costs
little work. Standard library only."""
from __future__ import annotations

import math
import urllib.parse
from typing import TypeGuard

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


class SchemaValues:
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
