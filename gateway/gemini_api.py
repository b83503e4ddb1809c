"""Google's Gemini API, inbound (CONTRACT section 10): the codec between Google's shapes and the gateway's
OpenAI-shaped chat and embedding requests, for clients built on Google's SDKs (Gemini CLI, google-genai).

A GenerateContentRequest is decoded here into the chat parameters the rest of the gateway speaks and runs
through the very same metering pipeline as /v1/chat/completions (gateway.services.chat_completion, with
``GeminiDialect``): the same limits, charge, ledger and usage rows (operation ``gemini``), Idempotency-Key
and deployments. The chat answer and its stream chunks are encoded back into GenerateContentResponse
objects here. A ``gemini`` deployment is the exception: it gets the request as the client sent it (only
the model, which travels in the path, replaced), so everything Google's API takes reaches it untouched,
``thoughtSignature`` parts byte for byte; its answer reaches the client as Google sent it, and the
translation only feeds the metering. Embeddings (``embedContent``, ``batchEmbedContents``) are metered as
/v1/embeddings is (operation ``embedding``).

Members are read in camelCase or snake_case, as Google's API reads them. What a deployment of another type
cannot honour follows CONTRACT section 8: dropped and named in X-Gateway-Ignored where the answer keeps
its shape without it, refused (400 unsupported_parameter, after the pool's other deployments were tried)
where it would not. docs/gemini-ingress.md lists each member and what becomes of it.
"""
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


from gateway import services
from gateway.services import ChatDialect, OpenAIEvents, Outcome
from gateway.tokens import count_tokens
from gateway.upstream import gemini as gemini_upstream
from gateway.upstream.shapes import PASSED_THROUGH, content_text
from keys.models import ApiKey
from utils_app.errors import (
    GatewayError,
    InvalidRequest,
    UnsupportedParameter,
    UpstreamError,
    shaped_exception_handler,
)

# Google's status word for each HTTP status the gateway answers with (section 4's statuses are kept; a 402
# keeps its status and says RESOURCE_EXHAUSTED, as Google says of a spent quota).
STATUS_WORDS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                504: "DEADLINE_EXCEEDED"}
# OpenAI's finish reasons as Google's. A function call ends a Gemini turn with STOP.
FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY", "tool_calls": "STOP",
                  "function_call": "STOP"}
# Gemini's thinking levels, and thinking budgets in tokens, as OpenAI's reasoning efforts (the budgets are
# gateway.upstream.honour's, read the other way: the smallest effort whose budget holds the one asked for).
THINKING_LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}
BUDGET_EFFORTS = ((1024, "minimal"), (2048, "low"), (8192, "medium"), (16384, "high"))
# The generation settings a translated request carries over; every other member of generationConfig a
# deployment of another type has no use for is left out and named.
GENERATION_MEMBERS = {"temperature": "temperature", "topP": "top_p", "maxOutputTokens": "max_tokens",
                      "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty", "seed": "seed",
                      "candidateCount": "n"}
# Members of generationConfig read below, beside GENERATION_MEMBERS.
GENERATION_READ = {"stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema", "thinkingConfig",
                   "responseLogprobs", "logprobs", "responseModalities"}
# Top-level members of a GenerateContentRequest read below; any other is left out and named when translated.
REQUEST_MEMBERS = {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
                   "cachedContent", "model"}
_CAMEL_HUMP = re.compile(r"(?<!^)(?=[A-Z])")


# ---------------------------------------------------------------- errors

def status_word(status: int) -> str:
    if status in STATUS_WORDS:
        return STATUS_WORDS[status]
    return "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"


def error_body(error: GatewayError) -> dict:
    error.body()  # the request's summary line learns its reason there
    return {"error": {"code": error.status, "message": error.message, "status": status_word(error.status)}}


# The views' DRF exception handler: every error of section 4, in Google's shape and with its status.
exception_handler = shaped_exception_handler(error_body)


# ---------------------------------------------------------------- reading Google's members

def member(body: dict, name: str) -> Any:
    """A member by its camelCase name, or by its snake_case one (Google's API takes both)."""
    if name in body:
        return body[name]
    return body.get(_CAMEL_HUMP.sub("_", name).lower())


def camel(name: str) -> str:
    """A member's name as Google writes it in its documentation (camelCase), for the names the gateway reports."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _obj(value: Any) -> dict:
    """An upstream's member that should be an object, or an empty one: what a malformed answer reads as."""
    return value if isinstance(value, dict) else {}


def _index(value: Any, default: int) -> int:
    return value if type(value) is int else default


def _need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def _dict(value: Any, where: str) -> dict:
    _need(isinstance(value, dict), where, "must be an object.")
    return value


def _list(value: Any, where: str) -> list:
    _need(isinstance(value, list), where, "must be an array.")
    return value


# ---------------------------------------------------------------- the request

@dataclass
class GeminiRequest:
    """A GenerateContentRequest decoded: the chat parameters, what a translated deployment leaves out and
    names (``ignored``), and what only a gemini deployment can honour, each with why (``native_only``)."""

    params: dict
    ignored: list[str] = field(default_factory=list)
    native_only: dict[str, str] = field(default_factory=dict)


def chat_request(body: dict, model_id: str, *, stream: bool = False) -> GeminiRequest:
    """The OpenAI-shaped chat request for a GenerateContentRequest (validated again, as every chat request is,
    by gateway.serializers.ChatCompletionRequest). ``model_id`` is the model the path names."""
    found = GeminiRequest(params={"model": model_id, "messages": []})
    messages = found.params["messages"]
    system = member(body, "systemInstruction")
    if system is not None:
        text = _system_text(system)
        if text:
            messages.append({"role": "system", "content": text})
    contents = member(body, "contents")
    _need(isinstance(contents, list) and bool(contents), "contents", "must be a non-empty array of Content objects.")
    calls = _CallIds()
    for index, content in enumerate(contents):
        messages.extend(_content(content, f"contents.{index}", calls, found))
    if not any(message["role"] != "system" for message in messages) and found.native_only:
        # A conversation of parts only a gemini deployment takes (a video, say): it goes there as it is, and
        # any other deployment refuses it (native_only), so this empty turn only keeps the translation whole.
        messages.append({"role": "user", "content": ""})
    tools = member(body, "tools")
    if tools is not None:
        declared = [tool for index, item in enumerate(_list(tools, "tools"))
                    for tool in _tools(item, f"tools.{index}", found)]
        if declared:
            found.params["tools"] = declared
    tool_config = member(body, "toolConfig")
    if tool_config is not None:
        _tool_config(_dict(tool_config, "toolConfig"), found)
    config = member(body, "generationConfig")
    if config is not None:
        _generation_config(_dict(config, "generationConfig"), found)
    if member(body, "safetySettings") is not None:
        found.ignored.append("safetySettings")
    if member(body, "cachedContent") is not None:
        # The cached content is part of the prompt: an answer without it answers another question.
        found.native_only["cachedContent"] = "cached contents live on Google's side; only the model's gemini " \
                                             "deployments can read them."
    for name in sorted(body):
        if camel(name) not in REQUEST_MEMBERS:
            found.ignored.append(camel(name))
    if stream:
        # The usage chunk is always asked for: the last event carries usageMetadata.
        found.params.update(stream=True, stream_options={"include_usage": True})
    return found


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    parts = member(_dict(system, "systemInstruction"), "parts") or []
    texts = []
    for index, part in enumerate(_list(parts, "systemInstruction.parts")):
        text = member(_dict(part, f"systemInstruction.parts.{index}"), "text")
        _need(isinstance(text, str), f"systemInstruction.parts.{index}.text", "must be a string.")
        texts.append(text)
    return "\n".join(texts)


class _CallIds:
    """The ids of the conversation's function calls. Google's API pairs a functionResponse with its call by
    name and position (or by an id a client made up and sent with both); OpenAI's by the call's id. A call
    without an id gets one made from its place in the conversation, so the same request always reads the same."""

    def __init__(self) -> None:
        self.open: list[tuple[str, str]] = []  # (name, id) of the last model turn's calls not answered yet

    def called(self, call: dict, where: str) -> str:
        given = member(call, "id")
        call_id = given if isinstance(given, str) and given else f"call_{where.replace('.', '_')}"
        self.open.append((call["name"], call_id))
        return call_id

    def answered(self, response: dict, where: str) -> str:
        given = member(response, "id")
        by_id = [position for position, (_, call_id) in enumerate(self.open) if given and call_id == given]
        by_name = [position for position, (name, _) in enumerate(self.open) if name == response["name"]]
        matches = by_id or by_name
        if matches:
            return self.open.pop(matches[0])[1]
        if isinstance(given, str) and given:
            return given
        raise InvalidRequest(f"{where}.functionResponse: answers no function call of the model turn before it "
                             f"(name {response['name']!r}); send the model turn with its functionCall parts first.",
                             param=f"{where}.functionResponse")


def _content(content: Any, where: str, calls: _CallIds, found: GeminiRequest) -> list[dict]:
    """One Content as OpenAI messages: a user turn's function responses become tool messages (first, as
    they answer the turn before), a model turn's function calls its tool_calls."""
    content = _dict(content, where)
    role = member(content, "role") or "user"
    _need(role in ("user", "model", "function"), f"{where}.role", "must be 'user' or 'model'.")
    parts = member(content, "parts")
    _need(isinstance(parts, list), f"{where}.parts", "must be an array of parts.")
    if role == "model":
        return _model_turn(parts, where, calls, found)
    results: list[dict] = []
    pieces: list[dict] = []
    for index, part in enumerate(parts):
        at = f"{where}.parts.{index}"
        part = _dict(part, at)
        if member(part, "thought"):
            continue  # an earlier turn's thought summary: the answer it led to is what the next turn needs
        if isinstance(member(part, "text"), str):
            if member(part, "text"):
                pieces.append({"type": "text", "text": member(part, "text")})
        elif member(part, "functionResponse") is not None:
            response = _dict(member(part, "functionResponse"), f"{at}.functionResponse")
            _need(isinstance(response.get("name"), str) and bool(response["name"]), f"{at}.functionResponse.name",
                  "is required.")
            output = response.get("response")
            results.append({"role": "tool", "tool_call_id": calls.answered(response, at),
                            "content": output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)})
        elif member(part, "inlineData") is not None:
            piece = _inline(_dict(member(part, "inlineData"), f"{at}.inlineData"), f"{at}.inlineData", found)
            if piece:
                pieces.append(piece)
        elif member(part, "fileData") is not None:
            piece = _file(_dict(member(part, "fileData"), f"{at}.fileData"), f"{at}.fileData", found)
            if piece:
                pieces.append(piece)
        elif _only_signature(part):
            continue
        else:
            _native_part(part, at, found)
    if pieces and all(piece["type"] == "text" for piece in pieces):
        results.append({"role": "user", "content": "\n".join(piece["text"] for piece in pieces)})
    elif pieces:
        results.append({"role": "user", "content": pieces})
    return results


def _model_turn(parts: list, where: str, calls: _CallIds, found: GeminiRequest) -> list[dict]:
    calls.open = []  # a new model turn: the calls before it were answered, or never will be
    texts, tool_calls = [], []
    for index, part in enumerate(parts):
        at = f"{where}.parts.{index}"
        part = _dict(part, at)
        if member(part, "thought"):
            continue
        if isinstance(member(part, "text"), str):
            texts.append(member(part, "text"))
        elif member(part, "functionCall") is not None:
            call = _dict(member(part, "functionCall"), f"{at}.functionCall")
            _need(isinstance(call.get("name"), str) and bool(call["name"]), f"{at}.functionCall.name", "is required.")
            args = call.get("args") or {}
            _need(isinstance(args, dict), f"{at}.functionCall.args", "must be an object.")
            tool_calls.append({"id": calls.called(call, at), "type": "function", "function": {
                "name": call["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
        elif _only_signature(part):
            continue
        else:
            _native_part(part, at, found)
    text = "".join(texts)
    if not text and not tool_calls:
        return []  # a turn of thoughts only: nothing an OpenAI-shaped conversation can carry
    message: dict = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return [message]


def _only_signature(part: dict) -> bool:
    """A part that carries nothing but a thoughtSignature (Gemini 3 sends one after a turn's text)."""
    return set(part) <= {"thoughtSignature", "thought_signature", "partMetadata", "part_metadata"}


def _native_part(part: dict, where: str, found: GeminiRequest) -> None:
    kinds = sorted(set(part) - {"thoughtSignature", "thought_signature", "thought"})
    kind = camel(kinds[0]) if kinds else "empty"
    found.native_only[where] = f"parts of kind {kind!r} reach the model's gemini deployments only."


def _inline(data: dict, where: str, found: GeminiRequest) -> dict | None:
    mime, payload = member(data, "mimeType"), data.get("data")
    _need(isinstance(mime, str) and isinstance(payload, str), where, "needs mimeType and base64 data.")
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{payload}"}}
    if mime == "application/pdf":
        return {"type": "file", "file": {"filename": "document.pdf", "file_data": f"data:{mime};base64,{payload}"}}
    audio = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}.get(mime)
    if audio:
        return {"type": "input_audio", "input_audio": {"data": payload, "format": audio}}
    found.native_only[where] = f"inline data of type {mime!r} reaches the model's gemini deployments only."
    return None


def _file(data: dict, where: str, found: GeminiRequest) -> dict | None:
    uri, mime = member(data, "fileUri"), member(data, "mimeType")
    _need(isinstance(uri, str) and bool(uri), f"{where}.fileUri", "is required.")
    is_image = isinstance(mime, str) and mime.startswith("image/")
    on_google = uri.startswith("https://generativelanguage.googleapis.com/") or uri.startswith("gs://")
    if is_image and uri.startswith(("http://", "https://")) and not on_google:
        return {"type": "image_url", "image_url": {"url": uri}}
    found.native_only[where] = "files given by URI reach the model's gemini deployments only (other deployments " \
                               "take images by URL)."
    return None


# -- tools

def _tools(tool: Any, where: str, found: GeminiRequest) -> list[dict]:
    tool = _dict(tool, where)
    declared = []
    for name in sorted(tool):
        if camel(name) != "functionDeclarations":
            found.ignored.append(f"tools:{camel(name)}")  # a server tool of Google's (search, code execution…)
    for index, function in enumerate(_list(member(tool, "functionDeclarations") or [],
                                           f"{where}.functionDeclarations")):
        at = f"{where}.functionDeclarations.{index}"
        function = _dict(function, at)
        _need(isinstance(function.get("name"), str) and bool(function["name"]), f"{at}.name", "is required.")
        schema = member(function, "parametersJsonSchema")
        if schema is None:
            schema = function.get("parameters")
        parameters = json_schema(_dict(schema, f"{at}.parameters")) if schema is not None else {}
        if not parameters.get("type"):
            parameters = {"type": "object", "properties": {}, **parameters}
        found_function: dict = {"name": function["name"], "parameters": parameters}
        if isinstance(function.get("description"), str):
            found_function["description"] = function["description"]
        declared.append({"type": "function", "function": found_function})
        for extra in sorted(set(function) - {"name", "description", "parameters", "parametersJsonSchema",
                                             "parameters_json_schema"}):
            found.ignored.append(f"{at}.{camel(extra)}")
    return declared


def json_schema(schema: Any) -> Any:
    """Gemini's Schema (an OpenAPI 3.0 subset, its types upper-case, ``nullable``, ``propertyOrdering``) as a
    JSON Schema. A JSON Schema given as parametersJsonSchema goes through unchanged but for the case of its
    types (Gemini CLI writes some of them upper-case)."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict = {}
    for key, value in schema.items():
        if key in ("propertyOrdering", "property_ordering", "nullable"):
            continue
        if key == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif key == "type" and isinstance(value, list):
            out["type"] = [kind.lower() if isinstance(kind, str) else kind for kind in value]
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "any_of", "oneOf", "allOf", "additionalProperties", "not"):
            out[camel(key)] = json_schema(value)
        else:
            out[camel(key) if key in ("min_items", "max_items", "min_length", "max_length", "min_properties",
                                      "max_properties") else key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _tool_config(config: dict, found: GeminiRequest) -> None:
    calling = member(config, "functionCallingConfig")
    for name in sorted(set(config) - {"functionCallingConfig", "function_calling_config"}):
        found.ignored.append(f"toolConfig.{camel(name)}")
    if calling is None:
        return
    calling = _dict(calling, "toolConfig.functionCallingConfig")
    mode = str(member(calling, "mode") or "AUTO").upper()
    _need(mode in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"), "toolConfig.functionCallingConfig.mode",
          "must be AUTO, ANY, NONE or VALIDATED.")
    allowed = member(calling, "allowedFunctionNames") or []
    _need(isinstance(allowed, list) and all(isinstance(name, str) for name in allowed),
          "toolConfig.functionCallingConfig.allowedFunctionNames", "must be an array of function names.")
    if mode == "ANY" and len(allowed) == 1:
        found.params["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
        return
    found.params["tool_choice"] = {"ANY": "required", "NONE": "none"}.get(mode, "auto")
    if allowed and mode != "NONE":
        # OpenAI's tool_choice names one function or none: the others stay callable.
        found.ignored.append("toolConfig.functionCallingConfig.allowedFunctionNames")


def _generation_config(config: dict, found: GeminiRequest) -> None:
    params = found.params
    for theirs, ours in GENERATION_MEMBERS.items():
        value = member(config, theirs)
        if value is not None:
            params[ours] = value
    if member(config, "topK") is not None:
        found.ignored.append("generationConfig.topK")
    stop = member(config, "stopSequences")
    if stop:
        params["stop"] = stop
    if member(config, "responseLogprobs"):
        params["logprobs"] = True
        if member(config, "logprobs") is not None:
            params["top_logprobs"] = member(config, "logprobs")
    _response_format(config, found)
    thinking = member(config, "thinkingConfig")
    if thinking is not None:
        _thinking(_dict(thinking, "generationConfig.thinkingConfig"), found)
    modalities = member(config, "responseModalities")
    if modalities is not None:
        _need(isinstance(modalities, list), "generationConfig.responseModalities", "must be an array.")
        if any(str(kind).upper() not in ("TEXT", "MODALITY_UNSPECIFIED") for kind in modalities):
            found.native_only["generationConfig.responseModalities"] = "answers in images or audio come from the " \
                                                                       "model's gemini deployments only."
    for name in sorted(config):
        if camel(name) not in GENERATION_MEMBERS and camel(name) not in GENERATION_READ and camel(name) != "topK":
            found.ignored.append(f"generationConfig.{camel(name)}")


def _response_format(config: dict, found: GeminiRequest) -> None:
    mime = member(config, "responseMimeType")
    schema = member(config, "responseJsonSchema")
    if schema is None:
        schema = member(config, "responseSchema")
    if mime in (None, "", "text/plain") and schema is None:
        return
    if mime == "application/json" or (mime in (None, "") and schema is not None):
        if schema is None:
            found.params["response_format"] = {"type": "json_object"}
        else:
            converted = json_schema(_dict(schema, "generationConfig.responseSchema"))
            found.params["response_format"] = {"type": "json_schema",
                                               "json_schema": {"name": "response", "schema": converted}}
        return
    found.native_only["generationConfig.responseMimeType"] = f"answers of type {mime!r} come from the model's " \
                                                             f"gemini deployments only."


def _thinking(thinking: dict, found: GeminiRequest) -> None:
    level, budget = member(thinking, "thinkingLevel"), member(thinking, "thinkingBudget")
    if isinstance(level, str) and level.upper() in THINKING_LEVELS:
        found.params["reasoning_effort"] = THINKING_LEVELS[level.upper()]
    elif type(budget) is int and budget == 0:
        found.params["reasoning_effort"] = "none"
    elif type(budget) is int and budget > 0:
        found.params["reasoning_effort"] = next((effort for most, effort in BUDGET_EFFORTS if budget <= most), "high")
    # A budget of -1 asks the model to decide: no effort named, the deployment's own default.
    if member(thinking, "includeThoughts"):
        # Thought summaries are Google's: an answer without them is still a whole answer.
        found.ignored.append("generationConfig.thinkingConfig.includeThoughts")


# -- countTokens

def counting_request(body: dict, model_id: str) -> dict:
    """countTokens' body: ``contents`` (with the rest of a request beside them), or a whole request under
    ``generateContentRequest``; the chat parameters whose input the gateway counts."""
    inner = member(body, "generateContentRequest")
    source = _dict(inner, "generateContentRequest") if inner is not None else body
    params = chat_request(source, model_id).params
    return {name: value for name, value in params.items() if name in ("model", "messages", "tools")}


# ---------------------------------------------------------------- the answer

def usage_metadata(*, input_tokens: int, output_tokens: int, cached: int, reasoning: int) -> dict:
    """The metered counts as Google's usageMetadata: thinking tokens apart from the answer's, as Google
    counts them (and both billed as output, as the ledger keeps them)."""
    reasoning = min(max(reasoning, 0), output_tokens)
    meta = {"promptTokenCount": input_tokens, "candidatesTokenCount": output_tokens - reasoning,
            "totalTokenCount": input_tokens + output_tokens}
    if cached:
        meta["cachedContentTokenCount"] = cached
    if reasoning:
        meta["thoughtsTokenCount"] = reasoning
    return meta


def _reasoning_tokens(usage: Any) -> int:
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if type(value) is int and value > 0 else 0


def _arguments(arguments: Any) -> dict:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def _call_part(call_id: Any, name: Any, arguments: Any) -> dict:
    call: dict = {"name": name if isinstance(name, str) else "", "args": _arguments(arguments)}
    if isinstance(call_id, str) and call_id:
        call["id"] = call_id
    return {"functionCall": call}


def response_id(completion_id: Any) -> str:
    if isinstance(completion_id, str) and completion_id:
        return completion_id.removeprefix("chatcmpl-")
    return uuid.uuid4().hex[:24]


def generate_response(completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
    """A chat.completion as a GenerateContentResponse: a candidate per choice, its text and function calls as
    parts, with the metered counts."""
    candidates = []
    for position, choice in enumerate(completion.get("choices") or ()):
        if not isinstance(choice, dict):
            continue
        message = _obj(choice.get("message"))
        parts: list[dict] = []
        text = content_text(message.get("content"))
        if text:
            parts.append({"text": text})
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                function = _obj(call.get("function"))
                parts.append(_call_part(call.get("id"), function.get("name"), function.get("arguments")))
        index = choice.get("index")
        candidates.append({"content": {"role": "model", "parts": parts},
                           "finishReason": FINISH_REASONS.get(choice.get("finish_reason") or "stop", "STOP"),
                           "index": index if type(index) is int else position})
    return {"candidates": candidates,
            "usageMetadata": usage_metadata(input_tokens=input_tokens, output_tokens=output_tokens, cached=cached,
                                            reasoning=_reasoning_tokens(completion.get("usage"))),
            "modelVersion": completion.get("model"), "responseId": response_id(completion.get("id"))}


class GeminiDialect(ChatDialect):
    """A GenerateContentRequest (``body``, as the client sent it): passed through to a gemini deployment,
    translated for any other; the answer in Google's shapes either way."""

    records_as = "gemini"

    def __init__(self, body: dict, request: GeminiRequest, *, sse: bool):
        self.body = body
        self.request = request
        self.sse = sse

    @staticmethod
    def native(client) -> bool:
        return isinstance(client, gemini_upstream.GeminiAdapter)

    def translated(self, client) -> None:
        """A deployment of another type: what only Google's API takes moves the request on to the pool's next
        deployment (a 400 naming it when none is left); what it can do without is left out and named."""
        for name, why in self.request.native_only.items():
            raise UnsupportedParameter(f"{name}: {why}", param=name)
        client.ignored.extend(self.request.ignored)

    def complete(self, client, payload: dict) -> dict:
        if self.native(client):
            return gemini_upstream.generate_native(client, self.body)
        self.translated(client)
        return client.chat(payload)

    def stream(self, client, payload: dict):
        if self.native(client):
            return gemini_upstream.stream_native(client, self.body)
        self.translated(client)
        return client.chat_stream(payload)

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        if PASSED_THROUGH in completion:  # Google's own answer, under the model's name as the client named it
            answer = completion[PASSED_THROUGH]
            return {**answer, "modelVersion": completion.get("model")} if "modelVersion" in answer else answer
        return generate_response(completion, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached)

    def events(self) -> "GeminiEvents":
        return GeminiEvents(sse=self.sse)


def _json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class GeminiEvents(OpenAIEvents):
    """Chat chunks as streamGenerateContent answers them: with ``?alt=sse`` each GenerateContentResponse as an
    SSE ``data:`` event, without it one JSON array whose items arrive as they are made.

    Text goes out as it arrives. A function call goes out whole (Google's functionCall carries its args as one
    object), in the event of its choice's finish reason; that last event waits for the usage chunk, which
    follows it, so that it carries usageMetadata as Google's last event does. An error once the stream is
    under way is one more item, ``{"error": {...}}``, as Google sends it."""

    def __init__(self, *, sse: bool):
        self.sse = sse
        self.opened = False  # something was written (the array's "[" included)
        self.passed_through = False  # the events are Google's own, usageMetadata included
        self.calls: dict[int, dict[int, dict]] = {}  # choice -> tool call index -> id, name, arguments so far
        self.final: list[dict] = []  # the candidates that finished, held for the usage
        self.id = ""
        self.model: Any = None

    def _frame(self, item: dict) -> bytes:
        if self.sse:
            self.opened = True
            return b"data: " + _json(item) + b"\r\n\r\n"
        head = b",\r\n" if self.opened else b"["
        self.opened = True
        return head + _json(item)

    def chunk(self, chunk: dict) -> bytes:
        if PASSED_THROUGH in chunk:
            self.passed_through = True
            event = chunk[PASSED_THROUGH]
            if "modelVersion" in event:
                event = {**event, "modelVersion": chunk.get("model")}
            return self._frame(event)
        if self.passed_through:
            return b""  # the metering's own chunk beside Google's events
        self.id = self.id or response_id(chunk.get("id"))
        self.model = chunk.get("model")
        out = b""
        candidates = []
        for position, choice in enumerate(chunk.get("choices") or ()):
            if not isinstance(choice, dict):
                continue
            index = _index(choice.get("index"), position)
            delta = _obj(choice.get("delta"))
            parts = [{"text": delta["content"]}] if isinstance(delta.get("content"), str) and delta["content"] else []
            for call in delta.get("tool_calls") or ():
                self._add_call(index, call)
            if choice.get("finish_reason"):
                parts += [_call_part(call["id"], call["name"], call["arguments"])
                          for _, call in sorted(self.calls.pop(index, {}).items())]
                self.final.append({"content": {"role": "model", "parts": parts},
                                   "finishReason": FINISH_REASONS.get(choice["finish_reason"], "STOP"), "index": index})
            elif parts:
                candidates.append({"content": {"role": "model", "parts": parts}, "index": index})
        if candidates:
            out += self._frame(self._response(candidates))
        if isinstance(chunk.get("usage"), dict):
            out += self._last(chunk["usage"])
        return out

    def _add_call(self, index: int, call: Any) -> None:
        if not isinstance(call, dict):
            return
        position = _index(call.get("index"), 0)
        function = _obj(call.get("function"))
        held = self.calls.setdefault(index, {}).setdefault(position, {"id": None, "name": "", "arguments": ""})
        if isinstance(call.get("id"), str) and call["id"]:
            held["id"] = call["id"]
        if isinstance(function.get("name"), str) and function["name"]:
            held["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            held["arguments"] += function["arguments"]

    def _response(self, candidates: list[dict], usage: dict | None = None) -> dict:
        item: dict = {"candidates": candidates}
        if usage is not None:
            item["usageMetadata"] = usage_metadata(
                input_tokens=_count(usage, "prompt_tokens"), output_tokens=_count(usage, "completion_tokens"),
                cached=_count(usage.get("prompt_tokens_details") or {}, "cached_tokens"),
                reasoning=_reasoning_tokens(usage))
        item.update(modelVersion=self.model, responseId=self.id)
        return item

    def _last(self, usage: dict | None) -> bytes:
        """The finished candidates, with the usage; a stream that finished no candidate ends with one that
        says STOP, so that a client always reads a finish reason."""
        candidates = self.final or [{"content": {"role": "model", "parts": [
            _call_part(call["id"], call["name"], call["arguments"])
            for calls in self.calls.values() for _, call in sorted(calls.items())]}, "finishReason": "STOP",
            "index": 0}]
        self.final, self.calls = [], {}
        return self._frame(self._response(candidates, usage))

    def error(self, error: GatewayError) -> bytes:
        event = self._frame(error_body(error))
        return event if self.sse else event + b"]"

    def end(self) -> bytes:
        out = b""
        if not self.passed_through and (self.final or self.calls):
            out += self._last(None)
        if not self.sse:
            out += b"]" if self.opened else b"[]"
        return out


def _count(counts: dict, name: str) -> int:
    value = counts.get(name) if isinstance(counts, dict) else None
    return value if type(value) is int and value >= 0 else 0


# ---------------------------------------------------------------- embeddings

@dataclass
class EmbedRequest:
    """embedContent's or batchEmbedContents' body decoded: the texts, in order, and the dimensions asked for."""

    method: str
    texts: list[str]
    dimensions: int | None
    ignored: list[str] = field(default_factory=list)


def embed_request(body: dict, model_id: str, method: str) -> EmbedRequest:
    if method == "embedContent":
        items = [(body, "")]
    else:
        requests = member(body, "requests")
        _need(isinstance(requests, list) and bool(requests), "requests", "must be a non-empty array of requests.")
        items = [(_dict(item, f"requests.{index}"), f"requests.{index}.") for index, item in enumerate(requests)]
    texts, sizes, ignored = [], set(), []
    for item, prefix in items:
        named = item.get("model")
        if isinstance(named, str) and named.removeprefix("models/") != model_id:
            raise InvalidRequest(f"{prefix}model: {named!r} does not match the model of the path "
                                 f"('models/{model_id}').", param=f"{prefix}model")
        content = _dict(member(item, "content"), f"{prefix}content")
        parts = _list(member(content, "parts"), f"{prefix}content.parts")
        pieces = []
        for index, part in enumerate(parts):
            text = member(_dict(part, f"{prefix}content.parts.{index}"), "text")
            _need(isinstance(text, str), f"{prefix}content.parts.{index}.text", "must be a string: only text is "
                                                                                  "embedded.")
            pieces.append(text)
        texts.append(" ".join(pieces))
        size = member(item, "outputDimensionality")
        sizes.add(size)
        for name in ("taskType", "title"):
            if member(item, name) is not None:
                ignored.append(f"{prefix}{name}")
    _need(len(sizes) == 1, "requests", "every request of a batch must ask for the same outputDimensionality.")
    size = sizes.pop()
    _need(size is None or (type(size) is int and size >= 1), f"{items[0][1]}outputDimensionality",
          "must be a positive integer.")
    return EmbedRequest(method=method, texts=texts, dimensions=size, ignored=ignored)


def embedding_params(request: EmbedRequest, model_id: str) -> dict:
    """The /v1/embeddings parameters of the same texts (validated by gateway.serializers.EmbeddingsRequest)."""
    params: dict = {"model": model_id, "input": request.texts}
    if request.dimensions is not None:
        params["dimensions"] = request.dimensions
    return params


def embed(*, request, key: ApiKey, model_id: str, embed_request: EmbedRequest, body: dict, params: dict) -> Outcome:
    """POST models/{id}:embedContent and :batchEmbedContents: metered as /v1/embeddings is (operation
    ``embedding``); a gemini deployment gets the request as it came, any other the texts as OpenAI's input."""
    texts = embed_request.texts
    hold = services.Hold(input_tokens=lambda: sum(count_tokens(text) for text in texts))
    with services.metered(request=request, key=key, operation="embedding", model_id=model_id, hold=hold) as meter:
        def call(client) -> tuple[list[list[float]], int | None]:
            if isinstance(client, gemini_upstream.GeminiAdapter):
                return gemini_upstream.embed_native(client, embed_request.method, body)
            client.ignored.extend(embed_request.ignored)
            answer = client.embeddings({"model": model_id, "input": texts, "encoding_format": "float",
                                        **({"dimensions": params["dimensions"]} if "dimensions" in params else {})})
            data = sorted(answer.get("data") or [], key=lambda item: item.get("index", 0))
            usage = _obj(answer.get("usage"))
            tokens = usage.get("prompt_tokens")
            return [item.get("embedding") for item in data], tokens if type(tokens) is int and tokens >= 0 else None

        vectors, reported = meter.call(call)
        if len(vectors) != len(texts) or not all(isinstance(vector, list) for vector in vectors):
            # Checked before the charge is completed: a short answer is refunded, not sold.
            raise UpstreamError(f"The upstream returned {len(vectors)} embedding(s) for {len(texts)} input(s).")
        tokens = reported if reported is not None else sum(count_tokens(text) for text in texts)
        meter.price(input_tokens=tokens, output_tokens=0)  # what X-Credits-Charged says
        answer: dict = {"embedding": {"values": vectors[0]}} if embed_request.method == "embedContent" else \
            {"embeddings": [{"values": vector} for vector in vectors]}
        outcome = Outcome(headers=meter.headers(), body=answer)
        meter.succeed(input_tokens=tokens, output_tokens=0, answer=outcome)
    return outcome


# ---------------------------------------------------------------- models

# The catalog keeps no context window. Google's clients budget their prompts from inputTokenLimit and
# outputTokenLimit, so a model is listed with the figures of Google's current models (a chat model's output
# limit is its catalog max_output_tokens when it has one); a model that takes less refuses a longer request.
CHAT_INPUT_LIMIT = 1_048_576
CHAT_OUTPUT_LIMIT = 65_536
EMBEDDING_INPUT_LIMIT = 2_048
METHODS = {"chat": ["generateContent", "streamGenerateContent", "countTokens"],
           "embedding": ["embedContent", "batchEmbedContents"]}


def model_entry(model) -> dict:
    """A catalog model as Google's Model resource."""
    chat = model.type == "chat"
    return {"name": f"models/{model.model_id}", "baseModelId": model.model_id, "version": "001",
            "displayName": model.model_id, "description": f"{model.model_id}, served by this gateway "
                                                          f"({model.owned_by}).",
            "inputTokenLimit": CHAT_INPUT_LIMIT if chat else EMBEDDING_INPUT_LIMIT,
            "outputTokenLimit": (getattr(model, "max_output_tokens", None) or CHAT_OUTPUT_LIMIT) if chat else 1,
            "supportedGenerationMethods": METHODS[model.type]}


def model_list(models: Iterable, key: ApiKey) -> list[dict]:
    """The chat and embedding models ``key`` may use, each once (the catalog also finds a model by its aliases)."""
    usable = {model.model_id: model for model in models if model.type in METHODS and key.can_use(model)}
    return [model_entry(usable[model_id]) for model_id in sorted(usable)]
