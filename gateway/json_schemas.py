"""The JSON schemas a chat request carries (each tool's parameters, a response format's schema), checked
and walked within bounds, one way for every converter.

A schema is the client's, and cheap to send: two kilobytes of ``$ref`` fan-out (six references per
level, eight levels deep) inline to millions of objects. So every place that reads one goes through
a ``SchemaWalk``, one per request:

- ``SchemaWalk.schema()`` checks a schema as written, every object once (at most MAX_SCHEMA_NODES of
  them for the request): a malformed one is a 400 naming the
  member as a dotted path (``required`` not an array of strings, ``properties``, ``$defs`` or
  ``definitions`` not an object of schemas, ``items`` neither a schema nor an array of them, a
  ``$ref`` that is not a string pointing at a schema within the schema, ``type`` neither a string nor
  an array of strings, ``enum`` not an array, ``format`` not a string);
- ``Schema.produced()`` counts each schema object a converter makes (or visits), every ``$ref`` inlined, and
  what its own members weigh as JSON; past MAX_SCHEMA_NODES objects or MAX_SCHEMA_BYTES bytes for the
  whole request the request is a 400, so neither the work nor what is built can grow past them;
- ``SchemaWalk.check()`` is for a schema passed on as written (the upstream resolves its references):
  the checks, and its size counted as if every ``$ref`` were inlined.

References are followed at most MAX_DEPTH levels deep (nesting and ``$ref`` alike): a recursive
schema is cut off there rather than inlined for ever. The checks run while the request is validated,
before anything is charged (gateway.chat_serializers, gateway.messages); the converters walk through the
same class, so what they build is bounded too.
"""
import json
from urllib.parse import unquote

from django.conf import settings

from utils_app.errors import InvalidRequest

MAX_DEPTH = 16
# Members whose value is an object of schemas, an array of schemas, or one schema (true and false are schemas).
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
SCHEMA_ONE = ("additionalProperties", "not")
# The members that hold other schemas: what an object weighs is its other members' JSON.
NESTED = frozenset(SCHEMA_MAPS + SCHEMA_LISTS + SCHEMA_ONE + ("items",))
# Where definitions live: not part of the schema's shape, reached through $ref only.
DEFINITIONS = ("$defs", "definitions")
# An object weighs at least this much: braces, and the member that holds it.
MIN_WEIGHT = 8
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _malformed(where: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{where} {what}.", param=where)


def _is_schema(value) -> bool:
    return isinstance(value, (dict, bool))


def _nested(node: dict, where: str) -> list[tuple[object, str, bool]]:
    """The schemas directly inside ``node``, each with where it is and whether it is part of the
    node's shape (a definition is not: it is reached through ``$ref`` only); a member of the wrong
    shape raises."""
    found: list[tuple[object, str, bool]] = []
    for key in SCHEMA_MAPS:
        if key in node:
            value = node[key]
            if not isinstance(value, dict):
                raise _malformed(f"{where}.{key}", "must be an object whose members are schemas")
            shaped = key not in DEFINITIONS
            found.extend((child, f"{where}.{key}.{name}", shaped) for name, child in value.items())
    for key in SCHEMA_LISTS:
        if key in node:
            value = node[key]
            if not isinstance(value, list):
                raise _malformed(f"{where}.{key}", "must be an array of schemas")
            found.extend((child, f"{where}.{key}.{index}", True) for index, child in enumerate(value))
    if "items" in node:
        items = node["items"]
        if isinstance(items, list):  # tuple validation (before draft 2020-12)
            found.extend((child, f"{where}.items.{index}", True) for index, child in enumerate(items))
        else:
            found.append((items, f"{where}.items", True))
    found.extend((node[key], f"{where}.{key}", True) for key in SCHEMA_ONE if key in node)
    for child, at, _ in found:
        if not _is_schema(child):
            raise _malformed(at, "must be a schema (a JSON object)")
    return found


def _check_members(node: dict, where: str) -> None:
    """The members a converter reads besides the nested schemas."""
    required = node.get("required")
    if "required" in node and not (isinstance(required, list) and all(isinstance(name, str) for name in required)):
        raise _malformed(f"{where}.required", "must be an array of property names (strings)")
    kinds = node.get("type")
    if "type" in node and not (isinstance(kinds, str) or isinstance(kinds, list) and kinds
                               and all(isinstance(kind, str) for kind in kinds)):
        raise _malformed(f"{where}.type", "must be a type name or an array of type names")
    if "enum" in node and not isinstance(node["enum"], list):
        raise _malformed(f"{where}.enum", "must be an array")
    if "format" in node and not isinstance(node["format"], str):
        raise _malformed(f"{where}.format", "must be a string")
    if "$ref" in node and not isinstance(node["$ref"], str):
        raise _malformed(f"{where}.$ref", "must be a string")


def _children(node: dict) -> list:
    """The schemas inside an already checked ``node`` that are part of its shape (definitions are not)."""
    found = []
    for key in SCHEMA_MAPS:
        if key in node and key not in DEFINITIONS:
            found.extend(node[key].values())
    for key in SCHEMA_LISTS:
        if key in node:
            found.extend(node[key])
    items = node.get("items")
    if items is not None:
        found.extend(items if isinstance(items, list) else [items])
    found.extend(node[key] for key in SCHEMA_ONE if key in node)
    return found


class Schema:
    """One schema of the request, checked: its root (what ``#`` names in a ``$ref``) and where it is."""

    def __init__(self, walk: "SchemaWalk", root: dict, where: str):
        self.walk = walk
        self.root = root
        self.where = where
        self.weights: dict[int, int] = {}  # id of an object of the schema as written -> its weight
        self.refs = False  # whether it has a $ref anywhere
        self.plain = (0, 0)  # (objects, bytes) of its shape as written, definitions left out

    def resolve(self, ref: str, where: str | None = None):
        """The schema a ``$ref`` points at: ``#`` (the root) or a JSON pointer within the schema
        (``#/$defs/Point``); anything else is a 400 naming ``where``."""
        where = where or self.where
        if not ref.startswith("#"):
            raise _malformed(where, "must point at a schema within this schema (#, #/$defs/NAME or "
                                    "#/definitions/NAME); other documents are not fetched")
        pointer = unquote(ref[1:])
        target = self.root
        if pointer:
            if not pointer.startswith("/"):
                raise _malformed(where, "must be # or a JSON pointer such as #/$defs/NAME")
            for token in pointer[1:].split("/"):
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(target, dict) and token in target:
                    target = target[token]
                elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                    target = target[int(token)]
                else:
                    raise _malformed(where, f"points at nothing in this schema ({ref!r})")
        if not _is_schema(target):
            raise _malformed(where, f"does not point at a schema ({ref!r})")
        return target

    def weight(self, node) -> int:
        """What an object adds to the schemas' JSON by itself: its members other than nested schemas."""
        if not isinstance(node, dict):
            return MIN_WEIGHT
        known = self.weights.get(id(node))
        if known is not None:
            return known
        size = 2
        for key, value in node.items():  # about its JSON's length, strings measured rather than encoded
            if key in NESTED:
                continue
            size += len(key) + 4
            if type(value) is str:
                size += len(value)
            elif value is None or type(value) in (bool, int, float):
                size += 8
            else:
                try:
                    size += len(_JSON.encode(value))
                except (ValueError, TypeError, RecursionError):
                    raise _malformed(self.where, "holds a value nested too deeply") from None
        return max(size, MIN_WEIGHT)

    def produced(self, node) -> None:
        """Count one schema object made or visited (``node``, or what it was made from)."""
        self.walk.count(self.weight(node), self.where)


class SchemaWalk:
    """The JSON schemas of one request: checked, and counted against the request's limits."""

    def __init__(self, *, nodes: int | None = None, size: int | None = None):
        self.max_nodes = settings.MAX_SCHEMA_NODES if nodes is None else nodes
        self.max_bytes = settings.MAX_SCHEMA_BYTES if size is None else size
        self.nodes = 0
        self.bytes = 0
        self.written = 0  # objects as written, checked once each

    def count(self, weight: int, where: str) -> None:
        self.nodes += 1
        self.bytes += weight
        if self.nodes > self.max_nodes or self.bytes > self.max_bytes:
            limit = (f"{self.max_nodes} schema objects (MAX_SCHEMA_NODES)" if self.nodes > self.max_nodes
                     else f"{self.max_bytes} bytes (MAX_SCHEMA_BYTES)")
            raise InvalidRequest(f"{where}: this request's JSON schemas are too large: with every $ref inlined "
                                 f"they come to more than {limit}, the most one request may have. Send smaller "
                                 f"schemas, or fewer references.", param=where)

    def schema(self, root, where: str) -> Schema:
        """``root`` checked as written, each object once; a 400 naming the member when it is malformed.

        It also counts what the schema comes to as written (``Schema.plain``): for a schema without
        a ``$ref`` that is its size inlined, and ``check`` needs no second walk."""
        if not isinstance(root, dict):
            raise _malformed(where, "must be a JSON schema object")
        schema = Schema(self, root, where)
        nodes = size = 0
        # (object, where, its depth in the schema's shape or None for a definition's own objects)
        stack: list[tuple[object, str, int | None]] = [(root, where, 0)]
        while stack:  # by hand: a schema nested a thousand deep must not reach Python's recursion limit
            node, at, depth = stack.pop()
            self.written += 1
            if self.written > self.max_nodes:
                raise InvalidRequest(f"{where}: this request's JSON schemas are too large: they hold more than "
                                     f"{self.max_nodes} schema objects (MAX_SCHEMA_NODES), the most one request "
                                     f"may have.", param=where)
            if not isinstance(node, dict):
                if depth is not None:
                    nodes, size = nodes + 1, size + MIN_WEIGHT
                continue
            _check_members(node, at)
            nested = _nested(node, at)
            if "$ref" in node:
                schema.resolve(node["$ref"], f"{at}.$ref")
                schema.refs = True
            weight = schema.weights[id(node)] = schema.weight(node)
            if depth is not None:
                nodes, size = nodes + 1, size + weight
            inside = depth + 1 if depth is not None and depth <= MAX_DEPTH else None
            stack.extend((child, child_at, inside if shaped else None) for child, child_at, shaped in reversed(nested))
        schema.plain = (nodes, size)
        return schema

    def check(self, root, where: str) -> Schema:
        """A schema passed on as written: checked, and counted as if each ``$ref`` were inlined."""
        schema = self.schema(root, where)
        if not schema.refs:
            nodes, size = schema.plain
            self.nodes += nodes - 1
            self.count(size, where)
            return schema
        stack = [(root, 0)]
        while stack:
            node, depth = stack.pop()
            schema.produced(node)
            if depth > MAX_DEPTH or not isinstance(node, dict):
                continue
            if "$ref" in node:
                stack.append((schema.resolve(node["$ref"]), depth + 1))
            stack.extend((child, depth + 1) for child in _children(node))
        return schema


def check_chat_schemas(params: dict) -> None:
    """Check every JSON schema of an OpenAI-shaped chat request (tools' parameters and the response
    format's schema) within one walk: a 400 naming the member when one is malformed or they are too large."""
    walk = SchemaWalk()
    for index, tool in enumerate(params.get("tools") or ()):
        function = tool.get("function") if tool.get("type") == "function" else None
        schema = function.get("parameters") if isinstance(function, dict) else None
        if schema is not None:
            walk.check(schema, f"tools.{index}.function.parameters")
    response_format = params.get("response_format")
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(spec, dict) and spec.get("schema") is not None:
        walk.check(spec["schema"], "response_format.json_schema.schema")
