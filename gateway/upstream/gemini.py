"""Google's Gemini API: OpenAI-shaped chat and embeddings translated to ``generateContent``,
``streamGenerateContent?alt=sse`` and ``batchEmbedContents``, and the answers translated back.

``base_url`` is the API's root with its version (default https://generativelanguage.googleapis.com/v1beta);
the deployment's upstream name is the model (``gemini-2.5-flash``, or a full resource name such as
``tunedModels/x``). The secret travels in the ``x-goog-api-key`` header only: Google also takes it
as ``?key=``, which is how Gemini keys end up in logs and error messages, so no URL built here
ever carries it.

What translates and what is refused is listed in docs/providers.md; the choices that need a
reason have it next to the code. Gemini has no tool call ids (and refuses ``id`` on the parts sent
to it), so ids live on the client's side only: a call gets Google's id when it sends one, else one
made up here, and a ``tool`` message is matched back to its call's name and position through the
assistant message that made the call, which the client sends along with the results.
"""
import base64
import json
import math
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings

from gateway.conversation import PassedThrough, StopReason
from gateway.json_schemas import MAX_DEPTH, Schema, SchemaWalk
from gateway.upstream import register
from gateway.upstream.base import HttpAdapter
from gateway.upstream.honour import REFUSALS, SERVER_FEATURES, name_left_out, refuse_audio_output, thinking_budget
from gateway.upstream.shapes import (
    ChunkStream,
    Malformed,
    content_text,
    data_url,
    function_call,
    tokens_reported,
    tool_call_id,
)
from gateway.upstream.images import note_fetched
from gateway.upstream.refusals import Refusal
from gateway.upstream.sse import EventStream
from gateway.upstream.transport import AnswerTooLarge, HttpTransport, json_object
from utils_app.errors import (
    GatewayError,
    InvalidRequest,
    UnsupportedParameter,
    UpstreamError,
    UpstreamRejected,
)

# Gemini's finish reasons as the neutral stop reasons, and the neutral ones as Gemini's (gateway.gemini_api
# answers with these). Gemini has no reason for a tool call: a turn that calls a function ends with STOP, and
# reads back as tool_calls because it calls one. Any reason not named here reads as stop.
FINISH_REASONS = {"STOP": StopReason.STOP, "MAX_TOKENS": StopReason.LENGTH}
# Gemini's reasons for withholding output: the neutral content_filter (which goes out as SAFETY).
FILTERED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE",
            "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"}
GOOGLE_REASONS = {StopReason.STOP: "STOP", StopReason.LENGTH: "MAX_TOKENS", StopReason.CONTENT_FILTER: "SAFETY",
                  StopReason.TOOL_CALLS: "STOP", StopReason.FUNCTION_CALL: "STOP"}
# Where Gemini 3 models keep the signature they need back with a function call; the key Google's own
# OpenAI-compatible endpoint uses, so clients written for it keep working.
SIGNATURE_KEY = "google"
# JSON Schema types and the formats Gemini's schema (an OpenAPI 3.0 subset) takes for each.
SCHEMA_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
                "array": "ARRAY", "object": "OBJECT"}
SCHEMA_FORMATS = {"STRING": {"enum", "date-time"}, "INTEGER": {"int32", "int64"}, "NUMBER": {"float", "double"}}
SCHEMA_KEPT = ("description", "minimum", "maximum", "minItems", "maxItems", "minLength", "maxLength", "pattern",
               "minProperties", "maxProperties")
AUDIO_FORMATS = {"wav": "audio/wav", "mp3": "audio/mp3"}
# The reasons of Google's ErrorInfo detail that say the key or its project cannot be served at all: its key,
# its billing, the API on its project. Google answers an invalid key with 400 API_KEY_INVALID, not 401. Only
# these machine-readable fields decide: a message may quote the request (docs/routing.md).
SECRET_REFUSED = {"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED", "API_KEY_IP_ADDRESS_BLOCKED",
                  "API_KEY_HTTP_REFERRER_BLOCKED", "BILLING_DISABLED", "CONSUMER_SUSPENDED", "CONSUMER_INVALID",
                  "SERVICE_DISABLED"}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"


# ---------------------------------------------------------------- errors

@dataclass(frozen=True)
class GeminiRefusal(Refusal):
    retry_delay: float | None = None  # RetryInfo's retryDelay: Google's Retry-After, sent in the body


def gemini_refusal(status: int, content: bytes | str) -> GeminiRefusal:
    """Google's error body, ``{"error": {"code", "message", "status", "details": [...]}}``.

    Only machine-readable fields decide what it means for the deployment. An ErrorInfo reason that
    refuses the key or its project (whatever the HTTP status: an invalid key comes as 400), or the
    status UNAUTHENTICATED or PERMISSION_DENIED, disables the secret. FAILED_PRECONDITION (no billing
    in the project's country, but also a file of the request not ready yet) is declined: the request
    moves on and the deployment's health is untouched. RESOURCE_EXHAUSTED is a rate limit, even when its
    message says "quota"; with a QuotaFailure on a token metric, a limit the request's size counts against.
    """
    error = (json_object(content) or {}).get("error")
    if not isinstance(error, dict):
        error = {"message": error} if isinstance(error, str) else {}
    message = error["message"] if isinstance(error.get("message"), str) else ""
    state = error["status"] if isinstance(error.get("status"), str) else ""
    reasons, delay, token_limit = set(), None, False
    details = error.get("details")
    for detail in details if isinstance(details, list) else ():
        if not isinstance(detail, dict):
            continue
        if detail.get("@type") == ERROR_INFO and isinstance(detail.get("reason"), str):
            reasons.add(detail["reason"])
        if detail.get("@type") == QUOTA_FAILURE and isinstance(detail.get("violations"), list):
            token_limit = token_limit or any(
                "token" in str(violation.get(name, "")).lower() for violation in detail["violations"]
                if isinstance(violation, dict) for name in ("quotaMetric", "quotaId"))
        if isinstance(detail.get("retryDelay"), str):
            delay = _seconds(detail["retryDelay"])
    refused = bool(reasons & SECRET_REFUSED) or state in ("UNAUTHENTICATED", "PERMISSION_DENIED")
    return GeminiRefusal(message=message, code=(state.lower() or None) if status != 429 else None,
                         out_of_credit=refused, token_limit=token_limit,
                         declined=state == "FAILED_PRECONDITION" and not refused, retry_delay=delay)


def _seconds(duration: str) -> float | None:
    """A protobuf Duration in JSON ("13s", "0.5s") as seconds."""
    try:
        seconds = float(duration.removesuffix("s"))
    except ValueError:
        return None
    return seconds if seconds > 0 and math.isfinite(seconds) else None


class GeminiTransport(HttpTransport):
    """Google sends its retry hint in a 429's body (RetryInfo), not as Retry-After: read as if it were one,
    so the deployment cools down for as long as Google asks."""

    def refused(self, status: int, headers: Mapping[str, str], refusal: Refusal) -> GatewayError:
        delay = getattr(refusal, "retry_delay", None)
        if status == 429 and delay and not headers.get("Retry-After"):
            headers = {**headers, "Retry-After": f"{delay:g}"}
        return super().refused(status, headers, refusal)


# ---------------------------------------------------------------- the adapter

@register("gemini")
class GeminiAdapter(HttpAdapter):
    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"x-goog-api-key": secret}

    def read_error(self, status: int, content: bytes) -> Refusal:
        return gemini_refusal(status, content)

    transport_class = GeminiTransport

    @property
    def resource(self) -> str:
        """The model's resource name: a bare model name is under models/; "tunedModels/…" is kept as it is."""
        name = self.upstream_model
        return name if "/" in name else f"models/{name}"

    def path(self, method: str) -> str:
        return f"/{quote(self.resource)}:{method}"

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = generate_request(payload, self.fetch_image, self.ignored)
        body = self.transport.post_json(self.path("generateContent"), request)
        return completion(body, model=self.upstream_model, malformed=self.transport.malformed)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        request = generate_request(payload, self.fetch_image, self.ignored)
        events = self.transport.stream(self.path("streamGenerateContent") + "?alt=sse", request)
        usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        return ChunkStream(self._chunks(events, candidates=payload.get("n") or 1, usage=usage), events.close)

    def _chunks(self, events: EventStream, *, candidates: int, usage: bool) -> Iterator[dict[str, Any]]:
        stream = StreamTranslation(model=self.upstream_model, candidates=candidates)
        for data in events:
            event = json_object(data)
            if event is None:
                raise self.transport.malformed("stream event")
            if "error" in event:
                raise self._stream_error(event, data)
            chunk = stream.translate(event, malformed=self.transport.malformed)
            if chunk is not None:
                yield chunk
            if stream.done:
                events.finished()
                break
        if not stream.finished_any:
            raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")
        if usage and stream.usage is not None:
            yield stream.usage_chunk()

    def _stream_error(self, event: dict[str, Any], data: str) -> GatewayError:
        """An error Google sends as an event once the stream is under way: read like an error answer."""
        error = event.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        status = code if type(code) is int and 400 <= code <= 599 else 502
        return self.transport.refused(status, {}, gemini_refusal(status, data))

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        dimensions = payload.get("dimensions")
        request = {"requests": [{"model": self.resource, "content": {"parts": [{"text": text}]},
                                 **({"outputDimensionality": dimensions} if dimensions else {})} for text in texts]}
        body = self.transport.post_json(self.path("batchEmbedContents"), request)
        return embedding_list(body, model=self.upstream_model, normalise=bool(dimensions),
                              base64_encoded=payload.get("encoding_format") == "base64",
                              malformed=self.transport.malformed)

    def fetch_image(self, url: str, where: str) -> dict[str, Any]:
        """An image the client gave by URL, fetched by the gateway and sent inline.

        Gemini's fileData takes only URIs of Google's own Files API (and a few hosts), so
        any other URL has to travel as bytes. The fetch is SSRF-checked like every image
        fetch, on public addresses only (transport.fetch_image with ``client``), and counts
        against the attempt's deadline. The attempt's images together may come to
        MAX_IMAGE_FETCH_BYTES: the fetch that would pass it stops there (before reading the
        body when its Content-Length says so). A URL that cannot be used is the client's
        fault (400, refunded), never the deployment's.
        """
        left = settings.MAX_IMAGE_FETCH_BYTES - self._image_bytes
        limit = min(left, settings.UPSTREAM_MAX_BYTES)
        too_many = InvalidRequest(f"The images this request gives by URL come to more than "
                                  f"{settings.MAX_IMAGE_FETCH_BYTES} bytes (MAX_IMAGE_FETCH_BYTES), the most this "
                                  f"gateway fetches for one request; the one at {where} passed it. Send smaller "
                                  f"images, or fewer.", param=where)
        if left <= 0:
            raise too_many
        try:
            content, content_type = self.transport.fetch_image(url, limit=limit, client=True)
        except AnswerTooLarge:
            if limit < left:
                raise InvalidRequest(f"The image at {where} is larger than {limit} bytes (UPSTREAM_MAX_BYTES), the "
                                     f"largest image this gateway fetches.", param=where) from None
            raise too_many from None
        except UpstreamError:
            raise InvalidRequest(f"The image at {where} could not be fetched: it must be a public http(s) URL of a "
                                 f"PNG, JPEG, WebP or GIF image, answering within the request's time.",
                                 param=where) from None
        self._image_bytes += len(content)
        note_fetched(len(content))
        data = base64.b64encode(content).decode("ascii")
        del content  # only the base64 travels on
        return {"inlineData": {"mimeType": content_type, "data": data}}

    _image_bytes = 0  # fetched by this adapter, which serves one attempt


# ---------------------------------------------------------------- the request

def generate_request(payload: dict[str, Any], fetch_image: Callable[[str, str], dict[str, Any]],
                     ignored: list[str] | None = None) -> dict[str, Any]:
    """A GenerateContentRequest for an OpenAI-shaped chat request. A parameter whose absence would change the
    answer's shape raises; one Gemini has no use for is left out and named in ``ignored`` (honour)."""
    refuse_unsupported(payload)
    name_left_out(payload, ignored, LEFT_OUT)
    if payload.get("parallel_tool_calls") is False and ignored is not None:
        ignored.append("parallel_tool_calls")  # Gemini cannot be kept from calling several functions at once
    walk = SchemaWalk()  # the request's schemas, all of them within its limits
    tools = payload.get("tools")
    declarations = [declaration(tool, index, walk) for index, tool in enumerate(tools)] if tools else []
    config = generation_config(payload, walk)
    # The schemas first: a request they refuse is refused before any of its images is fetched.
    system, contents = conversation(payload["messages"], fetch_image)
    request: dict[str, Any] = {"contents": contents}
    if system:
        request["systemInstruction"] = {"parts": system}
    if declarations:
        request["tools"] = [{"functionDeclarations": declarations}]
    if payload.get("tool_choice") is not None:
        request["toolConfig"] = {"functionCallingConfig": calling_config(payload["tool_choice"])}
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


def _unsupported(param: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"The parameter '{param}' is not supported for this model: {why}.", param=param)


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
    effort = payload.get("reasoning_effort")
    if effort is not None:
        # Gemini counts thinking in tokens (thinkingBudget, which Gemini 3 models also take); "none" is 0.
        config["thinkingConfig"] = {"thinkingBudget": thinking_budget(effort) or 0}
    return config


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
    raise _unsupported("response_format", f"Gemini has no response format {kind!r}")


# -- tools

def declaration(tool: dict[str, Any], index: int, walk: SchemaWalk | None = None) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise UnsupportedParameter(f"tools.{index}: tools of type {tool.get('type')!r} are not supported for this "
                                   f"model; only function tools are.", param="tools")
    function = tool["function"]
    found = {"name": function["name"]}
    if isinstance(function.get("description"), str) and function["description"]:
        found["description"] = function["description"]
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidRequest(f"tools.{index}.function.parameters must be a JSON schema object.",
                             param=f"tools.{index}.function.parameters")
    schema = gemini_schema(parameters, walk, f"tools.{index}.function.parameters") if parameters else {}
    # A function without parameters has none at all for Gemini: it refuses an object without properties.
    if schema.get("properties"):
        found["parameters"] = schema
    return found


def calling_config(choice: Any) -> dict[str, Any]:
    """OpenAI's tool_choice as Gemini's functionCallingConfig: auto, none, required, or one named function."""
    if isinstance(choice, str):
        return {"mode": {"auto": "AUTO", "none": "NONE", "required": "ANY"}[choice]}
    function = choice.get("function") if choice.get("type") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise UnsupportedParameter("tool_choice must be 'auto', 'none', 'required' or "
                                   "{\"type\": \"function\", \"function\": {\"name\": …}} for this model.",
                                   param="tool_choice")
    return {"mode": "ANY", "allowedFunctionNames": [function["name"]]}


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


# -- messages

def conversation(messages: list[dict[str, Any]],
                 fetch_image: Callable[[str, str], dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """(systemInstruction parts, contents). System and developer messages become the system instruction,
    wherever they stand; assistant turns are the "model" role; the results of one assistant turn's tool
    calls go back as functionResponse parts of one user turn, in the order of the calls (Gemini pairs
    them by position and name); turns of one role in a row are merged (Gemini wants them to alternate)."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    calls: dict[str, tuple[str, int]] = {}  # tool call id -> (function name, position in its assistant turn)
    results: list[tuple[int, dict[str, Any]]] = []  # the functionResponse parts of the tool messages in a row

    def flush_results() -> None:
        _add(contents, "user", [part for _, part in sorted(results, key=lambda result: result[0])])
        results.clear()

    for index, message in enumerate(messages):
        role, where = message["role"], f"messages.{index}"
        if role in ("system", "developer"):
            system.extend(_text_parts(message.get("content"), where))
        elif role == "tool":
            call = calls.get(message.get("tool_call_id", ""))
            if call is None:
                raise InvalidRequest(f"{where}.tool_call_id matches no tool call of an earlier assistant message; "
                                     f"send the assistant message with its tool_calls before the results.",
                                     param=f"{where}.tool_call_id")
            name, position = call
            results.append((position, {"functionResponse": {"name": name,
                                                            "response": _function_response(message["content"])}}))
        elif role == "assistant":
            flush_results()
            parts = _text_parts(message.get("content"), where)
            turn_calls = list(message.get("tool_calls") or ())
            if message.get("function_call"):  # the older single-call form
                turn_calls.append({"function": message["function_call"]})
            for position, call in enumerate(turn_calls):
                part = _function_call(call, f"{where}.tool_calls.{position}")
                if call.get("id"):
                    calls[call["id"]] = (part["functionCall"]["name"], position)
                parts.append(part)
            _add(contents, "model", parts)
        else:
            flush_results()
            _add(contents, "user", _user_parts(message.get("content"), where, fetch_image))
    flush_results()
    return system, contents


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return  # an empty turn (an assistant message with empty content): Gemini refuses one
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _function_call(call: dict[str, Any], where: str) -> dict[str, Any]:
    name, args = function_call(call, where)
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
    extra = call.get("extra_content")
    signature = extra.get(SIGNATURE_KEY, {}).get("thought_signature") if isinstance(extra, dict) else None
    if isinstance(signature, str) and signature:
        part["thoughtSignature"] = signature
    return part


def _function_response(content: Any) -> dict[str, Any]:
    """A tool's result as Gemini's response object: a JSON object result as it is, anything else under "output"
    (the key Gemini's documentation names for a function's output)."""
    text = content_text(content)
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"output": text}


def _text_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts = []
    for index, part in enumerate(content):
        if part.get("type") in ("text", "refusal"):
            text = part.get("text") if part.get("type") == "text" else part.get("refusal")
            if isinstance(text, str) and text:
                parts.append({"text": text})
        else:
            raise _part_unsupported(part, f"{where}.content.{index}")
    return parts


def _user_parts(content: Any, where: str, fetch_image: Callable[[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return _text_parts(content, where)
    parts = []
    for index, part in enumerate(content):
        at = f"{where}.content.{index}"
        kind = part.get("type")
        if kind == "text":
            if part["text"]:
                parts.append({"text": part["text"]})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise InvalidRequest(f"{at}.image_url needs a url.", param=f"{at}.image_url")
            parts.append(_inline(url, f"{at}.image_url.url") if url.startswith("data:")
                         else fetch_image(url, f"{at}.image_url.url"))
        elif kind == "input_audio":
            audio = part.get("input_audio") if isinstance(part.get("input_audio"), dict) else {}
            mime = AUDIO_FORMATS.get(audio.get("format", ""))
            if mime is None or not isinstance(audio.get("data"), str):
                raise InvalidRequest(f"{at}.input_audio needs base64 data and a format of wav or mp3.",
                                     param=f"{at}.input_audio")
            parts.append({"inlineData": {"mimeType": mime, "data": audio["data"]}})
        elif kind == "file" and isinstance(part.get("file"), dict) and isinstance(part["file"].get("file_data"), str):
            parts.append(_inline(part["file"]["file_data"], f"{at}.file.file_data"))
        else:
            raise _part_unsupported(part, at)
    return parts


def _part_unsupported(part: dict[str, Any], where: str) -> UnsupportedParameter:
    what = "file parts by file_id" if part.get("type") == "file" else f"content parts of type {part.get('type')!r}"
    return UnsupportedParameter(f"{where}: {what} are not supported for this model.", param="messages")


def _inline(url: str, where: str) -> dict[str, Any]:
    mime, data = data_url(url, where)
    return {"inlineData": {"mimeType": mime, "data": data}}


# ---------------------------------------------------------------- the answer

def finish_reason(reason: Any, called: bool) -> str | None:
    """Gemini's finish reason as a chat answer's (``google_finish_reason`` is its reverse)."""
    if called:
        return StopReason.TOOL_CALLS.value  # an answer that calls a function, whatever Gemini's reason
    if not reason:
        return None
    return (StopReason.CONTENT_FILTER if reason in FILTERED else FINISH_REASONS.get(reason, StopReason.STOP)).value


def google_finish_reason(finish: Any) -> str:
    """A chat answer's finish reason as Gemini's (``finish_reason`` is its reverse)."""
    return GOOGLE_REASONS.get(finish, "STOP")


def usage(meta: Any) -> dict[str, Any] | None:
    """Gemini's usageMetadata as OpenAI's usage. prompt_tokens counts every input token: the prompt (cached
    part included) and what built-in tools fed back; completion_tokens counts the thinking tokens too, as
    OpenAI counts reasoning tokens and as Google bills them (at the output price)."""
    if not isinstance(meta, dict):
        return None
    # Google leaves out a count of 0. One sent but unusable (negative, fractional) leaves its total out, and
    # the gateway's estimate is metered instead (docs/hardening.md); the metering clamps what is left.
    prompt, tools, thoughts, candidates, cached = (tokens_reported(meta, name) for name in (
        "promptTokenCount", "toolUsePromptTokenCount", "thoughtsTokenCount", "candidatesTokenCount",
        "cachedContentTokenCount"))
    counted: dict[str, Any] = {}
    if prompt is not None and tools is not None:
        counted["prompt_tokens"] = prompt + tools
    if candidates is not None and thoughts is not None:
        counted["completion_tokens"] = candidates + thoughts
    if len(counted) == 2:
        counted["total_tokens"] = counted["prompt_tokens"] + counted["completion_tokens"]
    if cached is not None:
        counted["prompt_tokens_details"] = {"cached_tokens": cached}
    if thoughts is not None:
        counted["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    return counted


def blocked(body: dict[str, Any]) -> UpstreamRejected | None:
    """A prompt Gemini refused to answer (promptFeedback.blockReason, no candidates): the request's fault,
    answered as Azure OpenAI answers a filtered prompt (400 content_filter), not retried elsewhere."""
    feedback = body.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if not reason or body.get("candidates"):
        return None
    return UpstreamRejected(f"The prompt was blocked by the upstream's content filter ({reason}).", status=400,
                            code="content_filter", param="messages")


def _candidates(body: dict[str, Any], malformed: Malformed) -> list[dict[str, Any]]:
    candidates = body.get("candidates") or []
    if not isinstance(candidates, list) or not all(isinstance(candidate, dict) for candidate in candidates):
        raise malformed("response")
    return candidates


def read_parts(candidate: dict[str, Any], malformed: Malformed) -> tuple[list[str], list[dict[str, Any]]]:
    """The answer's text pieces and function calls (thought summaries left out)."""
    content = candidate.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    if parts is None:
        return [], []
    if not isinstance(parts, list):
        raise malformed("response")
    texts, calls = [], []
    for part in parts:
        if not isinstance(part, dict):
            raise malformed("response")
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif "functionCall" in part:
            calls.append(tool_call(part, malformed))
    return texts, calls


def tool_call(part: dict[str, Any], malformed: Malformed) -> dict[str, Any]:
    call = part["functionCall"]
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise malformed("function call")
    args = call.get("args") or {}
    if not isinstance(args, dict):
        raise malformed("function call")
    found = {"id": call["id"] if isinstance(call.get("id"), str) and call["id"] else tool_call_id(),
             "type": "function", "function": {"name": call["name"], "arguments": json.dumps(args, ensure_ascii=False)}}
    if isinstance(part.get("thoughtSignature"), str):
        found["extra_content"] = {SIGNATURE_KEY: {"thought_signature": part["thoughtSignature"]}}
    return found


def logprobs(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini's logprobsResult as OpenAI's choice logprobs (content tokens with their top alternatives)."""
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    chosen = result.get("chosenCandidates")
    if not isinstance(chosen, list):
        chosen = []
    tops = result.get("topCandidates")
    if not isinstance(tops, list):
        tops = []

    def token(entry: dict[str, Any]) -> dict[str, Any]:
        text = entry.get("token")
        if not isinstance(text, str):
            text = ""
        value = entry.get("logProbability")
        return {"token": text, "logprob": float(value) if isinstance(value, (int, float)) else 0.0,
                "bytes": list(text.encode())}

    content = []
    for index, entry in enumerate(item for item in chosen if isinstance(item, dict)):
        top = tops[index].get("candidates") if index < len(tops) and isinstance(tops[index], dict) else None
        content.append({**token(entry), "top_logprobs": [token(alternative) for alternative in top or ()
                                                         if isinstance(alternative, dict)]})
    return {"content": content, "refusal": None}


def completion(body: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    rejected = blocked(body)
    if rejected:
        raise rejected
    candidates = _candidates(body, malformed)
    if not candidates:
        raise malformed("response (no candidates)")
    choices = []
    for position, candidate in enumerate(candidates):
        texts, calls = read_parts(candidate, malformed)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if calls:
            message["tool_calls"] = calls
        index = candidate.get("index")
        choices.append({"index": index if type(index) is int else position, "message": message,
                        "logprobs": logprobs(candidate),
                        "finish_reason": finish_reason(candidate.get("finishReason") or "STOP", bool(calls))})
    answer = {"id": _completion_id(body), "object": "chat.completion", "created": int(time.time()), "model": model,
              "choices": choices}
    counted = usage(body.get("usageMetadata"))
    if counted:
        answer["usage"] = counted
    return answer


def _completion_id(body: dict[str, Any]) -> str:
    response_id = body.get("responseId")
    return f"chatcmpl-{response_id}" if isinstance(response_id, str) and response_id else \
        f"chatcmpl-{uuid.uuid4().hex[:24]}"


class StreamTranslation:
    """Gemini's stream events, each a GenerateContentResponse with the next piece of each candidate, as
    chat.completion.chunk objects: one chunk per event, as it arrives. A function call arrives whole in
    one event and becomes one tool call delta, its arguments complete."""

    def __init__(self, *, model: str, candidates: int):
        self.model = model
        self.expected = candidates
        self.id = ""
        self.created = int(time.time())
        self.usage: dict[str, Any] | None = None
        self.opened: set[int] = set()  # choices whose first chunk (with the role) was sent
        self.calls: dict[int, int] = {}  # choice -> tool calls sent so far (the next call's index)
        self.finished: set[int] = set()

    @property
    def finished_any(self) -> bool:
        return bool(self.finished)

    @property
    def done(self) -> bool:
        return len(self.finished) >= self.expected

    def translate(self, event: dict[str, Any], *, malformed: Malformed) -> dict[str, Any] | None:
        rejected = blocked(event)
        if rejected:
            raise rejected
        self.id = self.id or _completion_id(event)
        counted = usage(event.get("usageMetadata"))
        if counted:
            self.usage = counted
        choices = []
        for position, candidate in enumerate(_candidates(event, malformed)):
            index = candidate.get("index")
            if type(index) is not int:
                index = position
            texts, calls = read_parts(candidate, malformed)
            delta: dict[str, Any] = {}
            if index not in self.opened:
                delta["role"] = "assistant"
            if texts and "".join(texts):
                delta["content"] = "".join(texts)
            if calls:
                first = self.calls.get(index, 0)
                delta["tool_calls"] = [{"index": first + offset, **call} for offset, call in enumerate(calls)]
                self.calls[index] = first + len(calls)
            reason = candidate.get("finishReason")
            finish = finish_reason(reason, index in self.calls) if reason else None
            if not delta.keys() - {"role"} and finish is None:
                continue  # nothing to say yet (an empty text or a thought summary)
            self.opened.add(index)
            if finish:
                self.finished.add(index)
            choices.append({"index": index, "delta": delta, "logprobs": logprobs(candidate),
                            "finish_reason": finish})
        if not choices:
            return None
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices}

    def usage_chunk(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage}


# ---------------------------------------------------------------- embeddings

def embedding_list(body: dict[str, Any], *, model: str, normalise: bool, base64_encoded: bool,
                   malformed: Malformed) -> dict[str, Any]:
    """batchEmbedContents' answer as OpenAI's list of embeddings.

    With ``dimensions`` Gemini cuts its vector short without scaling it back to length 1,
    which OpenAI's embeddings always have (clients compare them with a dot product): such
    vectors are normalised here. base64 is OpenAI's: little-endian float32.
    """
    embeddings = body.get("embeddings")
    if not isinstance(embeddings, list):
        raise malformed("list of embeddings")
    data = []
    for index, item in enumerate(embeddings):
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list) or not all(type(v) in (int, float) for v in values):
            raise malformed("list of embeddings")
        if normalise:
            length = math.sqrt(sum(value * value for value in values))
            values = [value / length for value in values] if length else values
        vector = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii") if base64_encoded \
            else [float(value) for value in values]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    answer: dict[str, Any] = {"object": "list", "data": data, "model": model}
    meta = body.get("usageMetadata")
    tokens = meta.get("promptTokenCount") if isinstance(meta, dict) else None
    if type(tokens) is int and tokens >= 0:
        answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return answer


# ---------------------------------------------------------------- Google's own requests, passed through

# Google's Gemini API inbound (gateway.gemini_api) hands a gemini deployment the client's own request: these
# send it as it came, under the deployment's name for the model (the path's), and hand back Google's answer
# or events passed through beside their chat translation, which only feeds the metering.


def native_body(adapter: GeminiAdapter, body: dict[str, Any]) -> dict[str, Any]:
    """The client's request with only the model replaced (a body names it only where Google's API lets it)."""
    return {**body, "model": adapter.resource} if "model" in body else body


def _native_translation(answer: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    """The chat translation of Google's answer, for the metering. A prompt Google refused to answer is relayed
    as Google answered it (promptFeedback, no candidates): it translates to no choice."""
    if blocked(answer) is not None:
        return {"id": _completion_id(answer), "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [], "usage": usage(answer.get("usageMetadata")) or {}}
    return completion(answer, model=model, malformed=malformed)


def generate_native(adapter: GeminiAdapter, body: dict[str, Any]) -> PassedThrough:
    answer = adapter.transport.post_json(adapter.path("generateContent"), native_body(adapter, body))
    return PassedThrough(_native_translation(answer, model=adapter.upstream_model,
                                             malformed=adapter.transport.malformed), answer)


def stream_native(adapter: GeminiAdapter, body: dict[str, Any]) -> ChunkStream:
    events = adapter.transport.stream(adapter.path("streamGenerateContent") + "?alt=sse", native_body(adapter, body))
    config = body.get("generationConfig") or body.get("generation_config")
    count = (config.get("candidateCount") or config.get("candidate_count")) if isinstance(config, dict) else None
    return ChunkStream(_native_chunks(adapter, events, candidates=count if type(count) is int and count > 0 else 1),
                       events.close)


def _native_chunks(adapter: GeminiAdapter, events: EventStream, *, candidates: int) -> Iterator[dict[str, Any]]:
    """Each of Google's events passed through beside the chunk that translates it (no choice for an event
    that says nothing to the metering, a thought summary say), with its usage where it carries usageMetadata."""
    stream = StreamTranslation(model=adapter.upstream_model, candidates=candidates)
    for data in events:
        event = json_object(data)
        if event is None:
            raise adapter.transport.malformed("stream event")
        if "error" in event:
            raise adapter._stream_error(event, data)
        chunk = stream.translate(event, malformed=adapter.transport.malformed) or {
            "id": stream.id, "object": "chat.completion.chunk", "created": stream.created, "model": stream.model,
            "choices": []}
        counted = usage(event.get("usageMetadata"))
        if counted:
            chunk["usage"] = counted
        yield PassedThrough(chunk, event)
        if stream.done:
            events.finished()
            break
    if not stream.finished_any:
        raise UpstreamError(f"The upstream provider '{adapter.name}' closed the stream before it finished.")


def embed_native(adapter: GeminiAdapter, method: str, body: dict[str, Any]) -> tuple[list[list[float]], int | None]:
    """embedContent or batchEmbedContents as the client sent it: (the vectors in order, the input tokens
    Google reported, or None)."""
    if method == "batchEmbedContents":
        requests = body.get("requests")
        request = {**body, "requests": [{**item, "model": adapter.resource}
                                        for item in (requests if isinstance(requests, list) else ())]}
    else:
        request = native_body(adapter, body)
    answer = adapter.transport.post_json(adapter.path(method), request)
    found = answer.get("embeddings") if method == "batchEmbedContents" else [answer.get("embedding")]
    if not isinstance(found, list):
        raise adapter.transport.malformed("list of embeddings")
    vectors = []
    for item in found:
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list) or not all(type(value) in (int, float) for value in values):
            raise adapter.transport.malformed("list of embeddings")
        vectors.append([float(value) for value in values])
    meta = answer.get("usageMetadata")
    tokens = meta.get("promptTokenCount") if isinstance(meta, dict) else None
    return vectors, tokens if type(tokens) is int and tokens >= 0 else None
