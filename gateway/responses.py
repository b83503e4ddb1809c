"""OpenAI's Responses API, inbound: ``POST /v1/responses`` and the stored responses (CONTRACT section 9), for
the clients that speak nothing else (Codex CLI) or prefer it (the openai SDK's ``responses.*``, the OpenAI
Agents SDK, LangChain's ``use_responses_api``, LiteLLM's ``responses()``).

A request runs through the very same metering pipeline as /v1/chat/completions
(gateway.services.chat_completion) with its own dialect, ``ResponsesDialect``:

- towards an ``openai`` or ``azure`` deployment whose provider serves the Responses API (the catalog's
  ``responses_api``, true unless set otherwise) the request is passed through, with the deployment's model,
  ``store: false`` and the conversation rebuilt from the gateway's store; its answer or events reach the
  client under the gateway's ``resp_`` id, the client's model name and the gateway's own sequence numbers;
- towards every other deployment it is translated into a chat request (``chat_params``), and the chat
  completion or chunks come back as a response object or the Responses event stream.

The gateway keeps the state: with ``store`` true the response and its input items are written by the
settlement statement itself (``kept``: gateway.metering.Also), so they exist before the answer or the
stream's last event leaves. Encrypted reasoning is handed out wrapped with the id of the deployment that
made it; a follow-up prefers that deployment (gateway.routing.Attempts.prefer) and leaves the items out
towards any other. What is passed, translated, dropped and refused is listed in docs/responses.md.
"""
import json
import re
import uuid
from typing import Any

from gateway import metering, serializers
from gateway.conversation import PassedThrough
from gateway.models import StoredResponse
from gateway.pipeline import Meter
from gateway.relay import OpenAIEvents
from gateway.services import ChatDialect
from gateway.upstream.openai import incomplete_reason
from gateway.upstream.shapes import EVENT_NAME, content_text, tool_call_id
from keys.models import ApiKey
from utils_app import clock
from utils_app.errors import GatewayError, InvalidRequest, NotFound, UnsupportedParameter, UpstreamError

# The members of a request this module reads; any other is passed through to native deployments and
# dropped (and named in X-Gateway-Ignored) towards translated ones.
MEMBERS = {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
           "max_output_tokens", "temperature", "top_p", "stream", "store", "previous_response_id", "include",
           "metadata", "truncation", "user", "safety_identifier", "prompt_cache_key", "service_tier",
           "stream_options", "background", "conversation"}
# Members a chat upstream has no equivalent of, whose absence leaves a correct answer: dropped and named.
DROPPED = ("safety_identifier", "prompt_cache_key", "service_tier", "truncation")
# Chat roles a message item may have; "developer" and "system" stay in place.
ROLES = ("user", "assistant", "system", "developer")
FORMATS = ("text", "json_object", "json_schema")
# An encrypted reasoning item's content as the gateway hands it out: which deployment made it, then the
# upstream's own text (which only that upstream account can read).
WRAPPED = re.compile(r"gw1\.(?P<deployment>\d{1,18})\.(?P<content>.+)\Z", re.S)
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string", "description": "The tool's input."}},
                "required": ["input"], "additionalProperties": False}
TABLE = StoredResponse._meta.db_table


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def _object(value: Any) -> dict:
    """``value`` if it is a JSON object, else an empty one: what an optional object member reads as."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------- the request

def check_request(body: dict, *, counting: bool = False) -> None:
    """The request's own members, each of the type OpenAI's API takes (a 400 naming it, before any charge);
    ``background`` and ``conversation`` are refused: the gateway does not offer them (yet)."""
    _need(isinstance(body.get("model"), str) and bool(body["model"]), "model", "is required (a chat model's id).")
    if body.get("background"):
        raise UnsupportedParameter("background: background responses are not offered by this gateway; send the "
                                   "request without it (stream it, if it is long).", param="background")
    if body.get("conversation") is not None:
        raise UnsupportedParameter("conversation: conversations are not offered by this gateway; chain responses "
                                   "with previous_response_id.", param="conversation")
    if body.get("input") is None:
        _need(body.get("previous_response_id") is not None, "input", "Field required.")
    else:
        _need(isinstance(body["input"], (str, list)), "input", "must be a string or an array of input items.")
        if isinstance(body["input"], list):
            for index, item in enumerate(body["input"]):
                _need(isinstance(item, dict), f"input.{index}", "must be an input item object.")
    types = {"instructions": (str,), "tools": (list,), "tool_choice": (str, dict), "text": (dict,),
             "reasoning": (dict,), "metadata": (dict,), "include": (list,), "previous_response_id": (str,),
             "user": (str,), "parallel_tool_calls": (bool,), "stream": (bool,), "store": (bool,)}
    for name, kinds in types.items():
        value = body.get(name)
        if value is not None:
            _need(isinstance(value, kinds), name, f"must be {' or '.join(_kind_name(kind) for kind in kinds)}.")
    if counting:
        return
    if body.get("max_output_tokens") is not None:
        value = body["max_output_tokens"]
        _need(type(value) is int and value >= 1, "max_output_tokens", "must be an integer of at least 1.")
    for name, most in (("temperature", 2), ("top_p", 1)):
        if body.get(name) is not None:
            _need(_number(body[name]) and 0 <= body[name] <= most, name, f"must be a number from 0 to {most}.")
    for index, tool in enumerate(body.get("tools") or ()):
        _need(isinstance(tool, dict) and isinstance(tool.get("type"), str), f"tools.{index}",
              "must be a tool object with a type.")
    metadata = body.get("metadata") or {}
    _need(len(metadata) <= 16 and all(isinstance(value, str) and len(name) <= 64 and len(value) <= 512
                                      for name, value in metadata.items()),
          "metadata", "must be at most 16 string pairs (keys up to 64 characters, values up to 512).")
    text_format = (body.get("text") or {}).get("format")
    if text_format is not None:
        _need(isinstance(text_format, dict) and text_format.get("type") in FORMATS, "text.format.type",
              f"must be one of {', '.join(FORMATS)}.")
        if text_format["type"] == "json_schema":
            _need(isinstance(text_format.get("schema"), dict), "text.format.schema", "must be a JSON schema object.")
            _need(isinstance(text_format.get("name"), str) and bool(text_format["name"]), "text.format.name",
                  "is required.")


def _kind_name(kind: type) -> str:
    return {str: "a string", list: "an array", dict: "an object", bool: "a boolean"}[kind]


def input_items(body: dict) -> list[dict]:
    """The request's input as items: a string is one user message; a message item may leave out its type."""
    value = body.get("input")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return [{"type": "message", **item} if item.get("type") is None and "role" in item else item for item in value]


def previous(key: ApiKey, response_id: str | None) -> StoredResponse | None:
    """The stored response a follow-up continues (one read); unknown, another key's, deleted or never stored
    is a 404 response_not_found, before anything is charged."""
    if response_id is None:
        return None
    found = StoredResponse.objects.filter(pk=response_id, key=key).first()
    if found is None:
        raise not_found(response_id, param="previous_response_id")
    return found


def not_found(response_id: str, *, param: str | None = None) -> NotFound:
    return NotFound(f"No response with id '{response_id}' is stored for this key (it may have been deleted, have "
                    f"expired, or have been made with store: false).", code="response_not_found", param=param)


def conversation(stored: StoredResponse | None, body: dict) -> list[dict]:
    """Every item of the conversation so far: the previous response's input and output, then this request's
    input, each with an id (what GET /v1/responses/{id}/input_items lists)."""
    items = list(stored.input_items) + list(stored.response.get("output") or ()) if stored is not None else []
    known = {item["id"]: item for item in items if isinstance(item.get("id"), str)}
    for item in input_items(body):
        if item.get("type") == "item_reference":
            # An item of an earlier turn, by its id: what it names, where the store has it; else it is left out.
            found = known.get(str(item.get("id")))
            if found is not None:
                items.append(found)
            continue
        items.append(item if isinstance(item.get("id"), str) else {"id": new_id(_id_prefix(item)), **item})
    return items


def _id_prefix(item: dict) -> str:
    return {"message": "msg", "function_call": "fc", "function_call_output": "fco", "custom_tool_call": "ctc",
            "custom_tool_call_output": "ctco", "reasoning": "rs"}.get(str(item.get("type")), "item")


# ---------------------------------------------------------------- translated: a chat request

def chat_params(body: dict, items: list[dict], ignored: list[str]) -> tuple[dict, set[str]]:
    """The chat request for a Responses request over ``items`` (validated afterwards as every chat request
    is), and the names of its custom tools; what has no chat equivalent is named in ``ignored``."""
    messages: list[dict] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for index, item in enumerate(items):
        _chat_item(item, f"input.{index}", messages, ignored)
    params: dict[str, Any] = {"model": body["model"], "messages": messages}
    tools, customs = chat_tools(body.get("tools") or [], ignored)
    if tools:
        params["tools"] = tools
    if body.get("tool_choice") is not None:
        choice = _tool_choice(body["tool_choice"], ignored)
        if isinstance(choice, tuple):  # allowed_tools: the tools it names, then its mode
            allowed, choice = choice
            params["tools"] = [tool for tool in tools if tool["function"]["name"] in allowed]
        if choice is not None and params.get("tools"):
            params["tool_choice"] = choice
    if body.get("parallel_tool_calls") is not None and params.get("tools"):
        params["parallel_tool_calls"] = body["parallel_tool_calls"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            params[name] = body[name]
    if body.get("max_output_tokens") is not None:
        params["max_completion_tokens"] = body["max_output_tokens"]
    if body.get("user"):
        params["user"] = body["user"][:256]
    text = body.get("text") or {}
    text_format = text.get("format") or {}
    if text_format.get("type") == "json_object":
        params["response_format"] = {"type": "json_object"}
    elif text_format.get("type") == "json_schema":
        schema = {"name": text_format["name"], "schema": text_format["schema"]}
        if isinstance(text_format.get("strict"), bool):
            schema["strict"] = text_format["strict"]
        params["response_format"] = {"type": "json_schema", "json_schema": schema}
    if text.get("verbosity") is not None:
        ignored.append("text.verbosity")
    reasoning = body.get("reasoning") or {}
    if reasoning.get("summary") is not None:
        ignored.append("reasoning.summary")  # a chat upstream writes no summaries
    for name in DROPPED:
        if body.get(name) is not None and not (name == "truncation" and body[name] == "disabled"):
            ignored.append(name)
    ignored.extend(sorted(set(body) - MEMBERS))
    if body.get("stream"):
        # The usage chunk is always asked for: response.completed carries the usage.
        params.update(stream=True, stream_options={"include_usage": True})
    return params, customs


def _chat_item(item: dict, where: str, messages: list[dict], ignored: list[str]) -> None:
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        _need(role in ROLES, f"{where}.role", f"must be one of {', '.join(ROLES)}.")
        content = _content(item.get("content"), f"{where}.content", role == "assistant", ignored)
        if role == "assistant":
            messages.append({"role": "assistant", "content": content_text(content)})
        else:
            messages.append({"role": role, "content": content if role == "user" else content_text(content)})
    elif kind in ("function_call", "custom_tool_call"):
        _need(isinstance(item.get("name"), str) and bool(item["name"]), f"{where}.name", "is required.")
        _need(isinstance(item.get("call_id"), str) and bool(item["call_id"]), f"{where}.call_id", "is required.")
        if kind == "function_call":
            arguments = item.get("arguments")
            _need(isinstance(arguments, str), f"{where}.arguments", "must be a string of JSON.")
        else:
            _need(isinstance(item.get("input"), str), f"{where}.input", "must be a string.")
            arguments = json.dumps({"input": item["input"]}, ensure_ascii=False)
        call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": arguments}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
            last["content"] = last.get("content") or None
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind in ("function_call_output", "custom_tool_call_output"):
        _need(isinstance(item.get("call_id"), str) and bool(item["call_id"]), f"{where}.call_id", "is required.")
        output = item.get("output")
        if isinstance(output, list):
            output = content_text(_content(output, f"{where}.output", True, ignored))
        _need(isinstance(output, str), f"{where}.output", "must be a string or an array of content parts.")
        messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
    elif kind == "reasoning":
        return  # an earlier turn's reasoning: the answer it led to is what the next turn needs
    else:
        ignored.append(f"input:{kind}")


def _content(content: Any, where: str, text_only: bool, ignored: list[str]) -> Any:
    """A message's content as chat's: a string, or parts (text, image_url, file). A part chat cannot carry
    (an uploaded file by its id, a part of a newer type) is left out and named: a deployment that speaks
    the Responses API gets it as it came."""
    if isinstance(content, str):
        return content
    _need(isinstance(content, list), where, "must be a string or an array of content parts.")
    parts: list[dict] = []
    for index, part in enumerate(content):
        at = f"{where}.{index}"
        _need(isinstance(part, dict) and isinstance(part.get("type"), str), at, "must be a content part with a type.")
        kind = part["type"]
        if kind in ("input_text", "output_text", "text", "refusal", "summary_text"):
            text = part.get("refusal") if kind == "refusal" else part.get("text")
            _need(isinstance(text, str), f"{at}.text", "must be a string.")
            parts.append({"type": "text", "text": text})
        elif kind == "input_image" and not text_only:
            url = part.get("image_url")
            if not isinstance(url, str):
                ignored.append(at)  # an uploaded file (file_id): chat takes images by URL only
                continue
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and not text_only and isinstance(part.get("file_data"), str):
            parts.append({"type": "file", "file": {"filename": str(part.get("filename") or "file.pdf"),
                                                   "file_data": part["file_data"]}})
        else:
            ignored.append(at)
    return parts


def chat_tools(tools: list, ignored: list[str]) -> tuple[list[dict], set[str]]:
    """Function tools as chat's; a custom tool as a function of one string parameter ``input`` (its grammar,
    if any, told to the model in the description); any other type dropped and named ``tools:<type>``.
    Also the names of the custom tools, whose calls come back as custom_tool_call."""
    found, customs = [], set()
    for index, tool in enumerate(tools):
        kind = tool["type"]
        if kind not in ("function", "custom"):
            ignored.append(f"tools:{kind}")
            continue
        _need(isinstance(tool.get("name"), str) and bool(tool["name"]), f"tools.{index}.name", "is required.")
        function: dict[str, Any] = {"name": tool["name"]}
        description = tool.get("description") if isinstance(tool.get("description"), str) else ""
        if kind == "function":
            parameters = tool.get("parameters")
            _need(parameters is None or isinstance(parameters, dict), f"tools.{index}.parameters",
                  "must be a JSON schema object.")
            function["parameters"] = parameters or {"type": "object", "properties": {}}
            if isinstance(tool.get("strict"), bool):
                function["strict"] = tool["strict"]
        else:
            customs.add(tool["name"])
            grammar = tool.get("format") if isinstance(tool.get("format"), dict) else {}
            if grammar.get("type") == "grammar" and isinstance(grammar.get("definition"), str):
                description += (f"\n\nThe input must follow this {grammar.get('syntax') or 'lark'} grammar:\n"
                                f"{grammar['definition']}")
            function["parameters"] = CUSTOM_INPUT
        if description:
            function["description"] = description
        found.append({"type": "function", "function": function})
    return found, customs


def _tool_choice(choice: Any, ignored: list[str]) -> Any:
    if isinstance(choice, str):
        _need(choice in ("auto", "none", "required"), "tool_choice", "must be 'auto', 'none' or 'required'.")
        return choice
    kind = choice.get("type")
    if kind in ("function", "custom"):
        _need(isinstance(choice.get("name"), str) and bool(choice["name"]), "tool_choice.name", "is required.")
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools":
        _need(choice.get("mode") in ("auto", "required") and isinstance(choice.get("tools"), list),
              "tool_choice", "allowed_tools needs mode 'auto' or 'required' and a list of tools.")
        return {tool.get("name") for tool in choice["tools"] if isinstance(tool, dict)}, choice["mode"]
    ignored.append("tool_choice")  # a built-in tool forced: the upstream has none of them
    return None


# ---------------------------------------------------------------- the answer

def response_object(body: dict, *, response_id: str, created_at: int, model: str, output: list[dict],
                    status: str = "completed", usage: dict | None = None, reason: str | None = None,
                    error: dict | None = None) -> dict:
    """The response object as OpenAI shapes it, the request's settings echoed."""
    text, reasoning = _object(body.get("text")), _object(body.get("reasoning"))
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "background": False, "error": error,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model, "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, **text},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation") or "disabled",
        "usage": usage, "user": body.get("user"), "metadata": body.get("metadata") or {},
    }


def response_usage(*, input_tokens: int, output_tokens: int, cached: int, reasoning: int = 0) -> dict:
    # cache_write_tokens: OpenAI's usage has it (the SDK requires it); a chat upstream reports none.
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": min(reasoning, output_tokens)},
            "total_tokens": input_tokens + output_tokens}


def message_item(text: str, *, status: str = "completed", item_id: str | None = None) -> dict:
    return {"id": item_id or new_id("msg"), "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(call_id: str, name: str, arguments: str, customs: set[str], *, item_id: str | None = None) -> dict:
    """A chat tool call as a function_call item, or a custom_tool_call for a custom tool (its ``input``)."""
    if name in customs:
        try:
            value = json.loads(arguments) if arguments else {}
        except ValueError:
            value = arguments
        text = value.get("input") if isinstance(value, dict) else value
        return {"id": item_id or new_id("ctc"), "type": "custom_tool_call", "status": "completed",
                "call_id": call_id, "name": name, "input": text if isinstance(text, str) else json.dumps(text)}
    return {"id": item_id or new_id("fc"), "type": "function_call", "status": "completed", "call_id": call_id,
            "name": name, "arguments": arguments or "{}"}


def _reasoning_tokens(usage: Any) -> int:
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return value if type(value) is int and value >= 0 else 0


def wrap(content: Any, deployment: int | None) -> Any:
    """An upstream's encrypted reasoning as the gateway hands it out: naming the deployment that made it."""
    if not isinstance(content, str) or deployment is None or WRAPPED.match(content):
        return content
    return f"gw1.{deployment}.{content}"


def origin(content: Any) -> int | None:
    match = WRAPPED.match(content) if isinstance(content, str) else None
    return int(match["deployment"]) if match else None


class ResponsesDialect(ChatDialect):
    """A Responses request: passed through to deployments that speak the Responses API, translated for any
    other; the answer is the response object or the Responses event stream either way, and with ``store``
    the settlement keeps it (``kept``)."""

    records_as = "responses"

    def __init__(self, body: dict, stored: StoredResponse | None, *, key: ApiKey):
        self.body = body
        self.key = key
        self.store = body.get("store") is not False
        self.items = conversation(stored, body)
        self.ignored: list[str] = []  # what a translated attempt leaves out (the same for every such attempt)
        params, self.customs = chat_params(body, self.items, self.ignored)
        self.params, _ = serializers.ChatCompletionRequest.with_data(params).validated()
        self.response_id = new_id("resp")
        self.created_at = int(clock.now())
        self.model = body["model"]
        self.deployment: int | None = None  # the one that answered
        self.final: dict | None = None  # the response object the client got, for the store
        self.wants_encrypted = "reasoning.encrypted_content" in (body.get("include") or ())

    # -- the attempts

    def admitted(self, meter: Meter) -> None:
        """Encrypted reasoning in the conversation goes back to the deployment that made it, while it is
        available: the newest such item names it."""
        for item in reversed(self.items):
            if item.get("type") == "reasoning" and origin(item.get("encrypted_content")) is not None:
                meter.attempts.prefer(origin(item["encrypted_content"]))
                return

    @staticmethod
    def native(client: Any) -> bool:
        return bool(getattr(client, "speaks_responses", False))

    def complete(self, client: Any, payload: dict) -> dict:
        self.deployment = client.deployment.pk
        if self.native(client):
            return client.responses(self.upstream_body(client.deployment.pk))
        client.ignored.extend(self.ignored + self._translated_extras(client, payload))
        return client.chat(payload)

    def stream(self, client: Any, payload: dict) -> Any:
        self.deployment = client.deployment.pk
        if self.native(client):
            return client.responses_stream(self.upstream_body(client.deployment.pk))
        client.ignored.extend(self.ignored + self._translated_extras(client, payload))
        return client.chat_stream(payload)

    def _translated_extras(self, client: Any, payload: dict) -> list[str]:
        """reasoning.effort is chat's reasoning_effort for an OpenAI-compatible upstream; any other leaves
        it out (named). Gemini cannot be kept from parallel calls: its parallel_tool_calls is left out too."""
        extras = []
        effort = (self.body.get("reasoning") or {}).get("effort")
        payload.pop("reasoning_effort", None)
        if effort is not None:
            if client.deployment.provider.type in ("openai", "azure"):
                payload["reasoning_effort"] = effort
            else:
                extras.append("reasoning.effort")
        if client.deployment.provider.type == "gemini" and "parallel_tool_calls" in payload:
            payload.pop("parallel_tool_calls")
            extras.append("parallel_tool_calls")
        return extras

    def upstream_body(self, deployment: int) -> dict:
        """The request as the client sent it, its conversation rebuilt from the store, and the encrypted
        reasoning this deployment can read (no other). Items go without ids (the gateway's own mean nothing
        upstream), but for reasoning items, whose ids are the upstream's and which its API requires."""
        # include and stream_options go on as they came: they ask for what the upstream adds to its answer.
        body = {name: value for name, value in self.body.items() if name not in ("store", "previous_response_id")}
        items = []
        for item in self.items:
            if item.get("type") != "reasoning":
                item = {name: value for name, value in item.items() if name != "id"}
            else:
                content = item.get("encrypted_content")
                made_by = origin(content)
                if made_by is not None and made_by != deployment or made_by is None and content is None:
                    continue  # another account's reasoning, or none to send back: the turn goes on without it
                if made_by is not None:
                    item = {**item, "encrypted_content": str(content).split(".", 2)[2]}  # the upstream's own text
            items.append(item)
        body["input"] = items
        return body

    # -- the answer

    def client_response(self, response: dict) -> dict:
        """An upstream's response object as the client gets it: the gateway's id, the client's model name and
        settings, encrypted reasoning wrapped (or left out unless asked for)."""
        output = [self.client_item(item) for item in response.get("output") or () if isinstance(item, dict)]
        return {**response, "id": self.response_id, "model": self.model, "output": output, "store": self.store,
                "previous_response_id": self.body.get("previous_response_id"),
                "metadata": self.body.get("metadata") or response.get("metadata") or {}}

    def client_item(self, item: dict) -> dict:
        if item.get("type") == "reasoning" and "encrypted_content" in item:
            if not self.wants_encrypted:
                return {name: value for name, value in item.items() if name != "encrypted_content"}
            return {**item, "encrypted_content": wrap(item["encrypted_content"], self.deployment)}
        return item

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        usage = response_usage(input_tokens=input_tokens, output_tokens=output_tokens, cached=cached,
                               reasoning=_reasoning_tokens(completion.get("usage")))
        if "cost" in _object(completion.get("usage")):  # the credits charged (CONTRACT section 12)
            usage["cost"] = completion["usage"]["cost"]
        if isinstance(completion, PassedThrough):
            response = self.client_response(completion.native)
            self.final = {**response, "usage": usage}
            return self.final
        choices = completion.get("choices") or [{}]
        choice = _object(choices[0])
        message = _object(choice.get("message"))
        output = []
        text = content_text(message.get("content"))
        if text:
            output.append(message_item(text))
        for call in message.get("tool_calls") or ():
            function = _object(_object(call).get("function"))
            output.append(call_item(_object(call).get("id") or tool_call_id(), str(function.get("name") or ""),
                                    str(function.get("arguments") or ""), self.customs))
        reason = incomplete_reason(choice.get("finish_reason"))
        self.final = response_object(self.body, response_id=self.response_id, created_at=self.created_at,
                                     model=self.model, output=output, status="incomplete" if reason else "completed",
                                     usage=usage, reason=reason)
        return self.final

    def events(self) -> "ResponsesEvents":
        return ResponsesEvents(self)

    def kept(self) -> metering.Also | None:
        """The stored response, written by the settlement statement (with store true)."""
        if not self.store or self.final is None:
            return None
        return metering.Also(
            postgres=(f"INSERT INTO {TABLE} (id, key_id, response, input_items, created_at, request_id) SELECT "
                      f"%(stored_id)s, key_id, %(stored_response)s::jsonb, %(stored_items)s::jsonb, %(now)s, "
                      f"request_id FROM settled"),
            sqlite=(f"INSERT INTO {TABLE} (id, key_id, response, input_items, created_at, request_id) VALUES "
                    f"(%(stored_id)s, %(key_id)s, %(stored_response)s, %(stored_items)s, %(now)s, %(request_id)s)"),
            params={"stored_id": self.response_id, "stored_response": json.dumps(self.final, ensure_ascii=False),
                    "stored_items": json.dumps(self.items, ensure_ascii=False)})


def _sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps(data, separators=(",", ":"),
                                                         ensure_ascii=False).encode() + b"\n\n"


class ResponsesEvents(OpenAIEvents):
    """Chat chunks as the Responses event stream, as they arrive (or a native deployment's own events, renamed
    and renumbered): ``response.created`` and ``response.in_progress`` first, each output item opened, filled
    and closed, and ``response.completed`` (or ``response.incomplete``) last, holding every item streamed.
    A failure once the stream is under way is an ``error`` event, then ``response.failed``."""

    def __init__(self, dialect: ResponsesDialect):
        self.dialect = dialect
        self.sequence = 0
        self.started = False
        self.passed_through = False
        self.items: list[dict] = []  # every output item, in order (closed ones complete)
        self.open: int | None = None  # the index of the item being streamed
        self.tools: dict[int, int] = {}  # chat tool call index -> output index
        self.arguments: dict[int, str] = {}  # output index -> the tool call's arguments so far
        self.text = ""
        self.finish: str | None = None
        self.usage: dict = {}

    def _event(self, kind: str, data: dict) -> bytes:
        event = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return _sse(kind, event)

    def _snapshot(self, status: str, **extra: Any) -> dict:
        return response_object(self.dialect.body, response_id=self.dialect.response_id,
                               created_at=self.dialect.created_at, model=self.dialect.model,
                               output=list(self.items), status=status, **extra)

    def chunk(self, chunk: dict) -> bytes:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]  # the metered counts (and the credits charged)
        if isinstance(chunk, PassedThrough):
            return self._passed(chunk.native)
        events = []
        if not self.started:
            self.started = True
            events += [self._event("response.created", {"response": self._snapshot("in_progress")}),
                       self._event("response.in_progress", {"response": self._snapshot("in_progress")})]
        choices = [choice for choice in chunk.get("choices") or () if isinstance(choice, dict)]
        for choice in choices[:1]:
            delta = _object(choice.get("delta"))
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self._text(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    events += self._tool_call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return b"".join(events)

    def _text(self, text: str) -> list[bytes]:
        events = []
        if self.open is None or self.items[self.open]["type"] != "message":
            events += self._close()
            item = message_item("", status="in_progress")
            item["content"] = []
            events += self._open(item)
            events.append(self._event("response.content_part.added", {
                "item_id": item["id"], "output_index": self.open, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}))
            self.text = ""
        self.text += text
        assert self.open is not None
        events.append(self._event("response.output_text.delta", {
            "item_id": self.items[self.open]["id"], "output_index": self.open, "content_index": 0, "delta": text,
            "logprobs": []}))
        return events

    def _tool_call(self, call: dict) -> list[bytes]:
        position: int = call["index"] if type(call.get("index")) is int else 0
        function = _object(call.get("function"))
        events = []
        if position not in self.tools:
            events += self._close()
            name = str(function.get("name") or "")
            item = call_item(str(call.get("id") or tool_call_id()), name, "", self.dialect.customs)
            item.update(status="in_progress", **({"input": ""} if item["type"] == "custom_tool_call" else
                                                  {"arguments": ""}))
            events += self._open(item)
            assert self.open is not None
            self.tools[position] = self.open
            self.arguments[self.open] = ""
        index = self.tools[position]
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            self.arguments[index] += piece
            if self.items[index]["type"] == "function_call" and index == self.open:
                events.append(self._event("response.function_call_arguments.delta", {
                    "item_id": self.items[index]["id"], "output_index": index, "delta": piece}))
        return events

    def _open(self, item: dict) -> list[bytes]:
        self.items.append(item)
        self.open = len(self.items) - 1
        return [self._event("response.output_item.added", {"output_index": self.open, "item": item})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        index, item = self.open, self.items[self.open]
        self.open = None
        events = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
            events += [self._event("response.output_text.done", {"item_id": item["id"], "output_index": index,
                                                                 "content_index": 0, "text": self.text,
                                                                 "logprobs": []}),
                       self._event("response.content_part.done", {"item_id": item["id"], "output_index": index,
                                                                  "content_index": 0, "part": part})]
            done = {**item, "status": "completed", "content": [part]}
        else:
            done = call_item(item["call_id"], item["name"], self.arguments.get(index, ""), self.dialect.customs,
                             item_id=item["id"])
            if done["type"] == "custom_tool_call":
                events += [self._event("response.custom_tool_call_input.delta", {
                               "item_id": item["id"], "output_index": index, "delta": done["input"]}),
                           self._event("response.custom_tool_call_input.done", {
                               "item_id": item["id"], "output_index": index, "input": done["input"]})]
            else:
                events.append(self._event("response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": index, "name": done["name"],
                    "arguments": done["arguments"]}))
        self.items[index] = done
        events.append(self._event("response.output_item.done", {"output_index": index, "item": done}))
        return events

    def _passed(self, event: dict) -> bytes:
        """A native deployment's own event, as the client gets it: under the gateway's id and model name,
        encrypted reasoning wrapped, numbered in the gateway's sequence."""
        self.started = self.passed_through = True
        event = dict(event)
        kind = event["type"]
        if not EVENT_NAME.fullmatch(kind):
            raise UpstreamError("The upstream sent a stream event whose type is not an event name.")
        if isinstance(event.get("response"), dict):
            event["response"] = self.dialect.client_response(event["response"])
        if isinstance(event.get("item"), dict):
            event["item"] = self.dialect.client_item(event["item"])
            if kind == "response.output_item.done":
                self.items.append(event["item"])
        if kind in ("response.completed", "response.incomplete"):
            response = event["response"]
            if not response.get("output") and self.items:
                response["output"] = list(self.items)  # never an empty output after items were streamed
            if "cost" in self.usage and isinstance(response.get("usage"), dict):
                response["usage"] = {**response["usage"], "cost": self.usage["cost"]}
            self.dialect.final = response
        event.pop("sequence_number", None)
        return self._event(kind, event)

    def error(self, error: GatewayError) -> bytes:
        body = error.body()["error"]
        events = self._close() if not self.passed_through else []
        events.append(self._event("error", {"code": body.get("code"), "message": body.get("message"),
                                            "param": body.get("param")}))
        failed = self._snapshot("failed", usage=self._usage(),
                                error={"code": "server_error" if error.status >= 500 else str(body.get("code")),
                                       "message": body.get("message")})
        self.dialect.final = failed
        events.append(self._event("response.failed", {"response": failed}))
        return b"".join(events)

    def _usage(self) -> dict | None:
        if not self.usage:
            return None
        details = _object(self.usage.get("prompt_tokens_details"))
        usage = response_usage(input_tokens=int(self.usage.get("prompt_tokens") or 0),
                               output_tokens=int(self.usage.get("completion_tokens") or 0),
                               cached=int(details.get("cached_tokens") or 0), reasoning=_reasoning_tokens(self.usage))
        if "cost" in self.usage:
            usage["cost"] = self.usage["cost"]
        return usage

    def end(self) -> bytes:
        if self.passed_through:
            return b""
        events = self._close()
        reason = incomplete_reason(self.finish)
        final = self._snapshot("incomplete" if reason else "completed", usage=self._usage(), reason=reason)
        self.dialect.final = final
        events.append(self._event("response.incomplete" if reason else "response.completed", {"response": final}))
        return b"".join(events)

    def kept(self) -> metering.Also | None:
        return self.dialect.kept()


def input_tokens(*, key: ApiKey, body: dict) -> int:
    """POST /v1/responses/input_tokens: the gateway's own count of what the request would send."""
    from gateway.services import estimate_chat_tokens

    check_request(body, counting=True)
    items = conversation(previous(key, body.get("previous_response_id")), body)
    params, _ = chat_params({**body, "stream": False}, items, [])
    params, _ = serializers.ChatCompletionRequest.with_data(params).validated()
    return estimate_chat_tokens(key=key, params=params)


def input_items_page(stored: StoredResponse, *, limit: Any, order: Any, after: Any) -> dict:
    """GET /v1/responses/{id}/input_items: a page of the items the response was made from."""
    try:
        size = int(limit) if limit is not None else 20
    except ValueError:
        size = 0
    _need(1 <= size <= 100, "limit", "must be an integer from 1 to 100.")
    order = order or "desc"
    _need(order in ("asc", "desc"), "order", "must be 'asc' or 'desc'.")
    items = list(stored.input_items) if order == "asc" else list(reversed(stored.input_items))
    if after:
        ids = [item.get("id") for item in items]
        _need(after in ids, "after", "must be the id of one of the response's input items.")
        items = items[ids.index(after) + 1:]
    page = items[:size]
    return {"object": "list", "data": page, "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None, "has_more": len(items) > size}
