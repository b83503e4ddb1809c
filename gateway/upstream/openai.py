"""OpenAI's API, and any OpenAI-compatible one: the request goes as the client sent it, under the
deployment's upstream name, and the answer comes back as it is once its shape is checked."""
import base64
import json
from urllib.parse import quote
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from gateway.conversation import (Delta, PassedThrough, StopReason, StreamPiece, ToolCall, ToolCallDelta, Usage,
                                  token_count)
from gateway.conversation_request import Message
from gateway.media_serializers import SPEECH_DEFAULTS
from gateway.upstream import register
from gateway.upstream.base import HttpAdapter
from gateway.upstream.images import image_type
from gateway.upstream.shapes import EVENT_NAME, Audio, ChunkStream, Image, tool_call_id
from gateway.upstream.sse import EventStream
from utils_app.errors import UpstreamError, UpstreamRejected
from utils_app.http import json_object

_T = TypeVar("_T")
# Members of OpenAI's API that some of its models refuse as unsupported (a 400 naming the member).
MODEL_DEPENDENT = ("reasoning_effort", "verbosity")


@register("openai")
class OpenAIAdapter(HttpAdapter):
    """Paths are relative to ``base_url`` (e.g. https://api.openai.com/v1); the secret is a bearer token."""

    def auth_headers(self, secret: str) -> dict[str, Any]:
        return {"Authorization": f"Bearer {secret}"}

    def path(self, operation: str) -> str:
        """Where an operation is posted; Azure puts the deployment and api-version in it."""
        return {"chat": "/chat/completions", "image": "/images/generations", "speech": "/audio/speech",
                "embedding": "/embeddings"}[operation]

    def body(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "model": self.upstream_model}

    # -- operations

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self._honoured(self._chat, payload)

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        return self._honoured(self._chat_stream, payload)

    def _chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(self.path("chat"), self.body(payload))
        if not is_completion(body):
            raise self.transport.malformed("completion")
        return body

    def _chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        events = self.transport.stream(self.path("chat"), self.body(payload))
        return ChunkStream(self._chunks(events), events.close)

    def _honoured(self, call: Callable[[dict[str, Any]], _T], payload: dict[str, Any]) -> _T:
        """The call, asked again without a member the deployment's model refuses although the API has it (a
        model without reasoning refuses reasoning_effort, which /v1/messages sends for Claude Code's
        thinking): left out and named, as CONTRACT section 8 has it. Any other refusal is the answer."""
        while True:
            try:
                return call(payload)
            except UpstreamRejected as refused:
                param = refused.param
                if refused.status != 400 or refused.retry or param not in MODEL_DEPENDENT or param not in payload:
                    raise
                self.ignored.append(param)
                payload = {name: value for name, value in payload.items() if name != param}

    def _chunks(self, events: EventStream) -> Iterator[dict[str, Any]]:
        for data in events:
            if data == "[DONE]":
                events.finished()
                return
            chunk = json_object(data)
            if chunk is None or not isinstance(chunk.get("choices") or [], list):
                raise self.transport.malformed("stream event")
            if chunk.get("error"):
                error = chunk["error"]
                detail = error.get("message") if isinstance(error, dict) else str(error)
                raise UpstreamError(f"The upstream provider '{self.name}' failed during the stream: "
                                    f"{self.transport.clean(str(detail))}")
            yield chunk
        raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")

    def images(self, payload: dict[str, Any]) -> list[Image]:
        body = self.transport.post_json(self.path("image"), self.body(payload))
        items = body.get("data")
        if not isinstance(items, list) or not items:
            raise UpstreamError(f"The upstream provider '{self.name}' sent no images.")
        images = []
        for item in items[:payload.get("n", 1)]:  # images past the n asked for: not fetched, not handed out
            if not isinstance(item, dict):
                raise self.transport.malformed("image")
            revised = item.get("revised_prompt") if isinstance(item.get("revised_prompt"), str) else None
            if isinstance(item.get("b64_json"), str):
                try:
                    content = base64.b64decode(item["b64_json"], validate=True)
                except ValueError:
                    raise self.transport.malformed("image") from None
                images.append(Image(content, image_type(content), revised))
            elif isinstance(item.get("url"), str):
                content, content_type = self.transport.fetch_image(item["url"])  # within the same deadline
                images.append(Image(content, content_type, revised))
            else:
                raise UpstreamError(f"The upstream provider '{self.name}' sent an image without data.")
        return images

    def speech(self, payload: dict[str, Any]) -> Audio:
        reply = self.transport.post(self.path("speech"), self.body(payload))
        content_type = reply.headers.get("Content-Type", "").split(";")[0].strip().lower() or "application/octet-stream"
        if not reply.content or not audio_type(content_type):
            raise UpstreamError(f"The upstream provider '{self.name}' sent no audio.")
        return Audio(reply.content, content_type, payload.get("response_format", SPEECH_DEFAULTS["response_format"]))

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self.transport.post_json(self.path("embedding"), self.body(payload))
        if not is_embedding_list(body):
            raise self.transport.malformed("list of embeddings")
        return body

    def probe_image(self) -> None:
        # Retrieving the model proves the secret and the model without generating (and paying for) an image.
        # The name is one path segment whatever it holds ("org/model", "..", "?"): it can lead nowhere else.
        self.transport.get(f"/models/{quote(self.upstream_model, safe='')}")

    # -- OpenAI's Responses API, passed through (CONTRACT section 9; gateway.responses)

    @property
    def speaks_responses(self) -> bool:
        """Whether the deployment takes a Responses request as it is (the catalog's ``responses_api``)."""
        return self.provider.responses_api

    def responses_path(self) -> str:
        return "/responses"

    def responses(self, body: dict[str, Any]) -> PassedThrough:
        """A Responses request under the deployment's model name, never stored upstream. The answer is its
        chat translation, for the metering, passed through with the response object itself beside it."""
        answer = self.transport.post_json(self.responses_path(), {**body, "model": self.upstream_model,
                                                                  "store": False, "stream": False})
        if not isinstance(answer.get("output"), list) or not all(isinstance(item, dict) for item in answer["output"]):
            raise self.transport.malformed("response")
        if answer.get("status") == "failed":
            raise UpstreamError(f"The upstream provider '{self.name}' failed the response: "
                                f"{self.transport.clean(str(_error_message(answer.get('error'))))}")
        return PassedThrough(responses_completion(answer), answer)

    def responses_stream(self, body: dict[str, Any]) -> ChunkStream:
        """The events of a streamed Responses request, each passed through beside a chunk that translates
        what the metering needs (text, tool calls, the finish and the usage) and commits the stream."""
        events = self.transport.stream(self.responses_path(), {**body, "model": self.upstream_model,
                                                               "store": False, "stream": True})
        return ChunkStream(self._response_events(events), events.close)

    def _response_events(self, events: EventStream) -> Iterator[dict[str, Any]]:
        for data in events:
            event = json_object(data)
            if event is None or not isinstance(event.get("type"), str) or not EVENT_NAME.fullmatch(event["type"]):
                raise self.transport.malformed("stream event")
            kind = event["type"]
            if ("response" in event or kind in RESPONSE_ENDS) and not isinstance(event.get("response"), dict):
                # The client's events carry it as an object, and the last one is the response kept and metered.
                raise self.transport.malformed("stream event")
            if kind in ("error", "response.failed"):
                # A response here is an object (checked above), or left out.
                detail = event.get("message") if kind == "error" else _error_message(
                    (event.get("response") or {}).get("error"))
                raise UpstreamError(f"The upstream provider '{self.name}' failed during the stream: "
                                    f"{self.transport.clean(str(detail))}")
            yield PassedThrough(response_event_chunk(event), event)
            if kind in RESPONSE_ENDS:
                events.finished()
                return
        raise UpstreamError(f"The upstream provider '{self.name}' closed the stream before it finished.")


def audio_type(content_type: str) -> bool:
    """Whether a speech answer's content type may be audio: any but a page or a document (text, JSON, XML,
    HTML), which is an error or a proxy's page sent with a 200, not sound to charge for and hand on.
    Servers name audio variously (audio/*, application/ogg, application/octet-stream), so only those are
    refused."""
    return not (content_type.startswith("text/") or content_type.endswith(("json", "xml", "html"))
                or content_type == "application/x-www-form-urlencoded")


def is_completion(body: dict[str, Any]) -> bool:
    """A chat.completion the gateway can read: choices are objects, a finish reason a string or null, a
    message is an object, its content a string, null or a list of content-part objects, its tool calls
    null or a list of objects."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        message = choice.get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            return False
        content = message.get("content")
        if not (content is None or isinstance(content, str)
                or isinstance(content, list) and all(isinstance(part, dict) for part in content)):
            return False
        calls = message.get("tool_calls")
        if not (calls is None or isinstance(calls, list) and all(isinstance(call, dict) for call in calls)):
            return False
        if not (choice.get("finish_reason") is None or isinstance(choice["finish_reason"], str)):
            return False
    return True


def is_embedding_list(body: dict[str, Any]) -> bool:
    """OpenAI's list of embeddings: objects with a vector (or its base64) and, if any, an integer index."""
    data = body.get("data")
    return isinstance(data, list) and all(
        isinstance(item, dict) and isinstance(item.get("embedding"), (list, str))
        and (type(item.get("index", 0)) is int) for item in data)


# ---------------------------------------------------------------- the Responses API's answers, for the metering

# The events that end a Responses stream with the response itself.
RESPONSE_ENDS = ("response.completed", "response.incomplete")
# The output items of a response that call a tool.
CALL_ITEMS = ("function_call", "custom_tool_call")
# The Responses API's reasons for an incomplete response as the neutral stop reasons, and the neutral reasons
# that leave a response incomplete as its reasons (gateway.responses answers with these; any other reason
# completes it). A response incomplete for a reason not named here was cut short: length.
FINISHES = {"max_output_tokens": StopReason.LENGTH, "content_filter": StopReason.CONTENT_FILTER}
INCOMPLETE: dict[str, str] = {StopReason.LENGTH: "max_output_tokens", StopReason.CONTENT_FILTER: "content_filter"}


def incomplete_reason(finish: StopReason | None) -> str | None:
    """A chat answer's finish reason as the reason a response is incomplete: None when it completed."""
    return INCOMPLETE.get(finish) if finish else None


def _error_message(error: Any) -> str:
    return str(error.get("message") or "unknown error") if isinstance(error, dict) else "unknown error"


def response_counts(usage: Any) -> Usage:
    """The Responses API's usage as the neutral counts (``response_usage`` is its reverse). A count left out
    or unusable is not known: the metering estimates a total it cannot read (gateway.prices)."""
    usage = usage if isinstance(usage, dict) else {}
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    inputs, outputs = inputs if isinstance(inputs, dict) else {}, outputs if isinstance(outputs, dict) else {}
    return Usage(input_tokens=token_count(usage.get("input_tokens")),
                 output_tokens=token_count(usage.get("output_tokens")),
                 cached_tokens=token_count(inputs.get("cached_tokens")),
                 reasoning_tokens=token_count(outputs.get("reasoning_tokens")),
                 cache_write_tokens=token_count(inputs.get("cache_write_tokens")))


def response_usage(counted: Usage) -> dict[str, Any]:
    """The neutral counts as the Responses API's usage (``response_counts`` is its reverse): every member,
    a count not known as 0 (OpenAI's SDK requires each; a chat upstream reports no cache writes), the
    reasoning never more than the output."""
    input_tokens, output_tokens = counted.input_tokens or 0, counted.output_tokens or 0
    return {"input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": counted.cached_tokens or 0,
                                     "cache_write_tokens": counted.cache_write_tokens or 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": min(counted.reasoning_tokens or 0, output_tokens)},
            "total_tokens": input_tokens + output_tokens}


def response_tool_call(item: dict[str, Any]) -> ToolCall:
    """A function_call item as the neutral tool call (``function_call_item`` is its reverse), for the
    metering: a call_id left out or empty is made up, a name left out reads as "". A custom_tool_call's
    input is read as the arguments as it is, not as the object ``custom_tool_call_item`` reads it from."""
    arguments = item.get("arguments") if item["type"] == "function_call" else item.get("input")
    call_id, name = item.get("call_id"), item.get("name")
    return ToolCall(id=call_id if isinstance(call_id, str) and call_id else tool_call_id(),
                    name=name if isinstance(name, str) else "", arguments=str(arguments or ""))


def input_tool_call(item: dict[str, Any]) -> ToolCall:
    """A function_call or custom_tool_call item a client sends back in its input, checked already
    (gateway.responses.chat_request), as the neutral tool call (``function_call_item`` and
    ``custom_tool_call_item`` are its reverse). Unlike an answer's (``response_tool_call``, read for the
    metering), a custom tool's input becomes the ``input`` member of the arguments, as the gateway declares
    a custom tool to a chat upstream: a function of that one string parameter."""
    arguments = item["arguments"] if item["type"] == "function_call" else \
        json.dumps({"input": item["input"]}, ensure_ascii=False)
    return ToolCall(id=item["call_id"], name=item["name"], arguments=arguments)


def function_call_item(call: ToolCall, *, item_id: str) -> dict[str, Any]:
    """The neutral tool call as a completed function_call item (``response_tool_call`` is its reverse): a
    call id not given is made up, arguments left empty go out as "{}" (the item always has them)."""
    return {"id": item_id, "type": "function_call", "status": "completed", "call_id": call.id or tool_call_id(),
            "name": call.name, "arguments": call.arguments or "{}"}


def custom_tool_call_item(call: ToolCall, *, item_id: str) -> dict[str, Any]:
    """The neutral tool call of a custom tool as a completed custom_tool_call item. A chat upstream calls a
    custom tool as a function of one string parameter, ``input`` (gateway.responses.chat_request): the
    item's input is that member of the arguments, or the arguments themselves when they do not parse; what
    is not a string goes out as its JSON text (empty arguments as "null"). A call id not given is made up."""
    try:
        value = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        value = call.arguments
    text = value.get("input") if isinstance(value, dict) else value
    return {"id": item_id, "type": "custom_tool_call", "status": "completed", "call_id": call.id or tool_call_id(),
            "name": call.name, "input": text if isinstance(text, str) else json.dumps(text)}


def responses_completion(response: dict[str, Any]) -> dict[str, Any]:
    """A response object as the chat.completion the metering reads: its text, its tool calls, its finish."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response["output"]:
        if item.get("type") == "message":
            parts = item.get("content")
            texts += [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)] \
                if isinstance(parts, list) else []
        elif item.get("type") in CALL_ITEMS:
            calls.append(response_tool_call(item))
    message = Message("assistant", "".join(texts), tuple(calls)).to_chat()
    completion = {"id": response.get("id"), "object": "chat.completion",
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": response_finish(response, calls=bool(calls)).value}]}
    if isinstance(response.get("usage"), dict):
        completion["usage"] = response_counts(response["usage"]).to_chat()
    return completion


def response_finish(response: dict[str, Any], *, calls: bool) -> StopReason:
    """Why a response object ended: an incomplete one's reason (its output's length when the reason is not
    one chat has), else a tool call's when it calls tools, else a stop."""
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return FINISHES.get(str(reason), StopReason.LENGTH)
    return StopReason.TOOL_CALLS if calls else StopReason.STOP


def response_event_chunk(event: dict[str, Any]) -> dict[str, Any]:
    """What one Responses stream event says to the metering, as a chat chunk (``StreamPiece``'s brief one):
    text as content, a tool call as it opens, the end with its finish reason and usage; nothing for the
    others. An ending event's ``response`` is an object: the adapter refuses a stream whose is not."""
    kind, delta = event["type"], Delta()
    if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
        delta = Delta(text=event["delta"])
    elif kind == "response.output_item.added" and isinstance(event.get("item"), dict) \
            and event["item"].get("type") in CALL_ITEMS:
        call = response_tool_call(event["item"])
        index = event["output_index"] if type(event.get("output_index")) is int else 0
        # The item opens with its arguments empty; they follow in function_call_arguments events.
        delta = Delta(tool_calls=(ToolCallDelta(index, call.id, call.name),))
    elif kind in RESPONSE_ENDS:
        response: dict[str, Any] = event["response"]
        output: list[Any] = response["output"] if isinstance(response.get("output"), list) else []
        calls = any(isinstance(item, dict) and item.get("type") in CALL_ITEMS for item in output)
        counted = response_counts(response["usage"]) if isinstance(response.get("usage"), dict) else None
        return StreamPiece((Delta(finish=response_finish(response, calls=calls)),), counted).to_chunk(brief=True)
    return StreamPiece((delta,) if delta != Delta() else ()).to_chunk(brief=True)
