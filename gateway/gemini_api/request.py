"""A GenerateContentRequest decoded into the OpenAI-shaped chat request (the conversation's turns are
gateway.gemini_api.contents'): tools, tool config, generation settings, thinking; and countTokens' body."""
from typing import Any

from gateway.conversation_request import Message
from gateway.gemini_api.contents import CallIds, system_text, turn_messages
from gateway.gemini_api.members import GeminiRequest, camel, member, need, need_dict, need_list
from gateway.upstream.gemini_request import read_calling_config, read_declaration, read_thinking_config

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


def chat_request(body: dict, model_id: str, *, stream: bool = False) -> GeminiRequest:
    """The OpenAI-shaped chat request for a GenerateContentRequest (validated again, as every chat request is,
    by gateway.chat_serializers.ChatCompletionRequest). ``model_id`` is the model the path names."""
    found = GeminiRequest(params={"model": model_id, "messages": []})
    messages = found.params["messages"]
    system = member(body, "systemInstruction")
    if system is not None:
        text = system_text(system)
        if text:
            messages.append(Message("system", text).to_chat())
    contents = member(body, "contents")
    need(isinstance(contents, list) and bool(contents), "contents", "must be a non-empty array of Content objects.")
    calls = CallIds()
    for index, content in enumerate(contents):
        messages.extend(turn_messages(content, f"contents.{index}", calls, found))
    if not any(message["role"] != "system" for message in messages) and found.native_only:
        # A conversation of parts only a gemini deployment takes (a video, say): it goes there as it is, and
        # any other deployment refuses it (native_only), so this empty turn only keeps the translation whole.
        messages.append(Message("user", "").to_chat())
    need(bool(messages), "contents", "must hold at least one part a model reads (a thought part is not read).")
    tools = member(body, "tools")
    if tools is not None:
        declared = [tool for index, item in enumerate(need_list(tools, "tools"))
                    for tool in _tools(item, f"tools.{index}", found)]
        if declared:
            found.params["tools"] = declared
    tool_config = member(body, "toolConfig")
    if tool_config is not None:
        _tool_config(need_dict(tool_config, "toolConfig"), found)
    config = member(body, "generationConfig")
    if config is not None:
        _generation_config(need_dict(config, "generationConfig"), found)
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


# -- tools

def _tools(tool: Any, where: str, found: GeminiRequest) -> list[dict]:
    tool = need_dict(tool, where)
    declared = []
    for name in sorted(tool):
        if camel(name) != "functionDeclarations":
            found.ignored.append(f"tools:{camel(name)}")  # a server tool of Google's (search, code execution…)
    for index, function in enumerate(need_list(member(tool, "functionDeclarations") or [],
                                           f"{where}.functionDeclarations")):
        at = f"{where}.functionDeclarations.{index}"
        function = need_dict(function, at)
        need(isinstance(function.get("name"), str) and bool(function["name"]), f"{at}.name", "is required.")
        schema = member(function, "parametersJsonSchema")
        if schema is None:
            schema = function.get("parameters")
        parameters = json_schema(need_dict(schema, f"{at}.parameters")) if schema is not None else {}
        if not parameters.get("type"):
            parameters = {"type": "object", "properties": {}, **parameters}
        declared.append(read_declaration(function, parameters).to_chat())
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
    calling = need_dict(calling, "toolConfig.functionCallingConfig")
    mode = str(member(calling, "mode") or "AUTO").upper()
    need(mode in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"), "toolConfig.functionCallingConfig.mode",
          "must be AUTO, ANY, NONE or VALIDATED.")
    allowed = member(calling, "allowedFunctionNames") or []
    need(isinstance(allowed, list) and all(isinstance(name, str) for name in allowed),
          "toolConfig.functionCallingConfig.allowedFunctionNames", "must be an array of function names.")
    choice = read_calling_config(mode, allowed)
    found.params["tool_choice"] = choice.to_chat()
    if allowed and mode != "NONE" and choice.forced is None:
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
        _thinking(need_dict(thinking, "generationConfig.thinkingConfig"), found)
    modalities = member(config, "responseModalities")
    if modalities is not None:
        need(isinstance(modalities, list), "generationConfig.responseModalities", "must be an array.")
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
            converted = json_schema(need_dict(schema, "generationConfig.responseSchema"))
            found.params["response_format"] = {"type": "json_schema",
                                               "json_schema": {"name": "response", "schema": converted}}
        return
    found.native_only["generationConfig.responseMimeType"] = f"answers of type {mime!r} come from the model's " \
                                                             f"gemini deployments only."


def _thinking(thinking: dict, found: GeminiRequest) -> None:
    effort = read_thinking_config(member(thinking, "thinkingLevel"), member(thinking, "thinkingBudget"))
    if effort is not None:
        found.params["reasoning_effort"] = effort
    if member(thinking, "includeThoughts"):
        # Thought summaries are Google's: an answer without them is still a whole answer.
        found.ignored.append("generationConfig.thinkingConfig.includeThoughts")


# -- countTokens

def counting_request(body: dict, model_id: str) -> dict:
    """countTokens' body: ``contents`` (with the rest of a request beside them), or a whole request under
    ``generateContentRequest``; the chat parameters whose input the gateway counts."""
    inner = member(body, "generateContentRequest")
    source = need_dict(inner, "generateContentRequest") if inner is not None else body
    params = chat_request(source, model_id).params
    return {name: value for name, value in params.items() if name in ("model", "messages", "tools")}
