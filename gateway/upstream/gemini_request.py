"""An OpenAI-shaped chat request as Gemini's GenerateContentRequest (gateway.upstream.gemini sends it): the
generation settings, thinking, the response format, the tools and tool choice, and JSON Schemas as Gemini's
Schema objects. What Gemini cannot do is refused or named as left out (gateway.upstream.base); the messages
are gemini_messages'."""
import json
from collections.abc import Callable
from typing import Any

from gateway.conversation_request import Effort, Tool, ToolChoice, ToolMode, budget_effort, thinking_budget
from gateway.json_schemas import MAX_DEPTH, Schema, SchemaWalk
from gateway.upstream.gemini_messages import conversation
from gateway.upstream.base import REFUSALS, SERVER_FEATURES, name_left_out, refuse_audio_output, unsupported
from gateway.upstream.shapes import function_choice, function_tool
from utils_app.errors import InvalidRequest

# JSON Schema types and the formats Gemini's schema (an OpenAPI 3.0 subset) takes for each.
SCHEMA_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
                "array": "ARRAY", "object": "OBJECT"}
SCHEMA_FORMATS = {"STRING": {"enum", "date-time"}, "INTEGER": {"int32", "int64"}, "NUMBER": {"float", "double"}}
SCHEMA_KEPT = ("description", "minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength", "pattern",
               "minProperties", "maxProperties")


def generate_request(payload: dict[str, Any], fetch_image: Callable[[str, str], dict[str, Any]],
                     ignored: list[str] | None = None) -> dict[str, Any]:
    """A GenerateContentRequest for an OpenAI-shaped chat request. A parameter whose absence would change the
    answer's shape raises; one Gemini has no use for is left out and named in ``ignored`` (gateway.upstream.base)."""
    refuse_unsupported(payload)
    name_left_out(payload, ignored, LEFT_OUT)
    if payload.get("parallel_tool_calls") is False and ignored is not None:
        ignored.append("parallel_tool_calls")  # Gemini cannot be kept from calling several functions at once
    walk = SchemaWalk()  # the request's schemas, all of them within its limits
    tools = payload.get("tools")
    declarations = [declaration(function_tool(tool, index), index, walk)
                    for index, tool in enumerate(tools)] if tools else []
    config = generation_config(payload, walk)
    # The schemas first: a request they refuse is refused before any of its images is fetched.
    system, contents = conversation(payload["messages"], fetch_image)
    request: dict[str, Any] = {"contents": contents}
    if system:
        request["systemInstruction"] = {"parts": system}
    if declarations:
        request["tools"] = [{"functionDeclarations": declarations}]
    if payload.get("tool_choice") is not None:
        request["toolConfig"] = {"functionCallingConfig": calling_config(function_choice(payload["tool_choice"]))}
    if config:
        request["generationConfig"] = config
    return request


# What Gemini has no use for and an answer of the same shape does without: OpenAI's own server features,
# and token biases (Gemini has none). An empty logit_bias asks for nothing, so is not named.
LEFT_OUT = (*SERVER_FEATURES, "logit_bias")


def refuse_unsupported(payload: dict[str, Any]) -> None:
    """What Gemini has no way to do and the client would miss in the answer it parses (audio output)."""
    refuse_audio_output(payload)
    if payload.get("top_logprobs") and not payload.get("logprobs"):
        raise InvalidRequest("top_logprobs needs logprobs: true.", param="top_logprobs")


REFUSALS["gemini"] = refuse_unsupported


def generation_config(payload: dict[str, Any], walk: SchemaWalk | None = None) -> dict[str, Any]:
    config = {}
    for ours, theirs in (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed"),
                         ("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty")):
        if payload.get(ours) is not None:
            config[theirs] = payload[ours]
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if limit:
        config["maxOutputTokens"] = limit
    stop = payload.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    if (payload.get("n") or 1) > 1:
        config["candidateCount"] = payload["n"]
    if payload.get("logprobs"):
        config["responseLogprobs"] = True
        if payload.get("top_logprobs"):
            config["logprobs"] = payload["top_logprobs"]
    response_format = payload.get("response_format")
    if response_format:
        config.update(response_config(response_format, walk))
    if payload.get("reasoning_effort") is not None:
        config["thinkingConfig"] = thinking_config(payload["reasoning_effort"])
    return config


# Gemini's thinking levels as the conversation's efforts.
THINKING_LEVELS: dict[str, Effort] = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}


def read_thinking_config(level: Any, budget: Any) -> Effort | None:
    """A thinkingConfig's thinkingLevel and thinkingBudget (gateway.gemini_api.request reads the rest) as an
    Effort (``thinking_config`` is its reverse): a level Gemini has (in any case) wins; else a budget of 0
    is "none", and a positive one the effort it stands for (budget_effort). None when neither names one: a
    budget of -1 asks the model to decide, the deployment's own default."""
    if isinstance(level, str) and level.upper() in THINKING_LEVELS:
        return THINKING_LEVELS[level.upper()]
    if type(budget) is not int or budget < 0:
        return None
    return "none" if budget == 0 else budget_effort(budget)


def thinking_config(effort: Effort) -> dict[str, Any]:
    """An effort as Gemini's thinkingConfig (``read_thinking_config`` is its reverse): its budget in tokens
    (thinking_budget; thinkingBudget, which Gemini 3 models also take), 0 for "none"."""
    return {"thinkingBudget": thinking_budget(effort) or 0}


def response_config(response_format: dict[str, Any], walk: SchemaWalk | None = None) -> dict[str, Any]:
    kind = response_format.get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is not None and not isinstance(schema, dict):
            raise InvalidRequest("response_format.json_schema.schema must be a JSON schema object.",
                                 param="response_format")
        converted = gemini_schema(schema, walk, "response_format.json_schema.schema") if schema else {}
        if converted.get("type") == "OBJECT" and not converted.get("properties"):
            converted = {}  # Gemini refuses an object schema without properties; JSON is still asked for
        return {"responseMimeType": "application/json", **({"responseSchema": converted} if converted else {})}
    raise unsupported("response_format", f"Gemini has no response format {kind!r}")


# -- tools

def read_declaration(function: dict[str, Any], parameters: dict[str, Any]) -> Tool:
    """A functionDeclaration of a GenerateContentRequest, checked already (gateway.gemini_api.request), as a
    Tool (``declaration`` is its reverse), with ``parameters``, its schema as the JSON Schema the decoder
    made of it. Gemini has no strict."""
    description = function.get("description")
    return Tool(name=function["name"], parameters=parameters,
                description=description if isinstance(description, str) else None)


def declaration(tool: Tool, index: int, walk: SchemaWalk | None = None) -> dict[str, Any]:
    """A Tool as Gemini's functionDeclaration (``read_declaration`` is its reverse): its parameters as
    Gemini's Schema, left out when they have no properties (Gemini refuses an object without); an empty
    description and strict are left out."""
    found: dict[str, Any] = {"name": tool.name}
    if tool.description:
        found["description"] = tool.description
    parameters = tool.parameters
    schema = gemini_schema(parameters, walk, f"tools.{index}.function.parameters") if parameters else {}
    if schema.get("properties"):
        found["parameters"] = schema
    return found


# Gemini's functionCallingConfig modes and the modes they are (VALIDATED and MODE_UNSPECIFIED are AUTO's).
CALLING_MODES: dict[str, ToolMode] = {"AUTO": "auto", "ANY": "required", "NONE": "none"}
CALLING_TYPES = {mode: kind for kind, mode in CALLING_MODES.items()}


def read_calling_config(mode: str, allowed: list[str]) -> ToolChoice:
    """A functionCallingConfig's mode and allowedFunctionNames, checked already (gateway.gemini_api.request),
    as a ToolChoice (``calling_config`` is its reverse): ANY naming one function forces it; other allowed
    names are not carried (the decoder names them left out)."""
    if mode == "ANY" and len(allowed) == 1:
        return ToolChoice(mode="required", forced=allowed[0])
    return ToolChoice(mode=CALLING_MODES.get(mode, "auto"))


def calling_config(choice: ToolChoice) -> dict[str, Any]:
    """A ToolChoice as Gemini's functionCallingConfig (``read_calling_config`` is its reverse): auto, none,
    required, or one named function (``function_choice`` refuses allowed_tools)."""
    if choice.forced is not None:
        return {"mode": "ANY", "allowedFunctionNames": [choice.forced]}
    return {"mode": CALLING_TYPES[choice.mode]}


# -- JSON Schemas

def gemini_schema(schema: dict[str, Any], walk: SchemaWalk | None = None, where: str = "schema") -> dict[str, Any]:
    """A JSON Schema as Gemini's Schema object, an OpenAPI 3.0 subset: upper-case types, ``nullable``
    instead of a "null" type, ``$ref`` inlined, ``anyOf`` for ``oneOf`` and several types, and what
    Gemini refuses (additionalProperties, $schema, const on a non-string…) left out.

    ``walk`` is the request's (gateway.json_schemas): a malformed schema is a 400 naming the member
    (``where`` is the schema's place in the request), and every object made here counts against the
    request's limits, so however the references fan out the inlining stops at them with a 400."""
    walk = walk or SchemaWalk()
    return _gemini_schema(schema, walk.schema(schema, where), 0)


def _gemini_schema(schema: Any, document: Schema, depth: int) -> dict[str, Any]:
    document.produced(schema)
    if not isinstance(schema, dict):
        return {}
    if depth > MAX_DEPTH:  # a recursive schema is cut off rather than inlined for ever
        return {"type": "OBJECT"}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = document.resolve(ref)
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return _gemini_schema({**(target if isinstance(target, dict) else {}), **rest}, document, depth + 1)
    if isinstance(schema.get("allOf"), list):
        # Gemini has no allOf: the parts are merged into one schema (their properties and requirements joined).
        out: dict[str, Any] = _gemini_schema({key: value for key, value in schema.items() if key != "allOf"},
                                             document, depth + 1)
        for part in schema["allOf"]:
            part = _gemini_schema(part, document, depth + 1)
            properties = {**part.pop("properties", {}), **out.pop("properties", {})}
            required = list(dict.fromkeys([*part.pop("required", []), *out.pop("required", [])]))
            part.pop("propertyOrdering", None)
            out.pop("propertyOrdering", None)
            out = {**part, **out}
            if properties:
                out.update(properties=properties, type="OBJECT")
                if len(properties) > 1:
                    out["propertyOrdering"] = list(properties)
            if required:
                out["required"] = required
        return out

    out = {}
    choices = schema.get("anyOf") if isinstance(schema.get("anyOf"), list) else schema.get("oneOf")
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if isinstance(kinds, str) else []
    if "null" in kinds or isinstance(choices, list) and {"type": "null"} in choices:
        out["nullable"] = True
    kinds = [kind for kind in kinds if kind != "null"]
    if isinstance(choices, list):
        options = [_gemini_schema(option, document, depth + 1) for option in choices if option != {"type": "null"}]
        if len(options) == 1:
            out.update(options[0])
        elif options:
            out["anyOf"] = options
    if len(kinds) > 1:
        out["anyOf"] = [_gemini_schema({**schema, "type": kind}, document, depth + 1) for kind in kinds]
        return out
    if kinds:
        out["type"] = SCHEMA_TYPES.get(kinds[0], "STRING")
    for key in SCHEMA_KEPT:
        if key in schema:
            out[key] = schema[key]
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and values:
        if all(isinstance(value, str) for value in values):
            out["enum"] = values
            out.setdefault("type", "STRING")
        else:
            # Gemini's enums are strings only: the allowed values are kept as words the model reads.
            allowed = ", ".join(json.dumps(value) for value in values)
            out["description"] = f"{out.get('description', '')} One of: {allowed}.".strip()
    if schema.get("format") in SCHEMA_FORMATS.get(out.get("type", ""), ()):
        out["format"] = schema["format"]
    if isinstance(schema.get("properties"), dict):
        properties = {name: _gemini_schema(value, document, depth + 1) for name, value in schema["properties"].items()}
        if properties:
            out["properties"] = properties
            out.setdefault("type", "OBJECT")
            required = [name for name in schema.get("required") or () if name in properties]
            if required:
                out["required"] = required
            if len(properties) > 1:
                out["propertyOrdering"] = list(properties)
    items = schema.get("items")
    if isinstance(items, list):
        items = items[0] if items else None  # tuple validation: Gemini has one item schema
    if isinstance(items, dict):
        out["items"] = _gemini_schema(items, document, depth + 1)
        out.setdefault("type", "ARRAY")
    return out
