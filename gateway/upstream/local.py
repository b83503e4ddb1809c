"""The in-process development models (gateway.local_models, gateway.local_media) behind the adapter protocol.

Chat: OpenAI's ``tools``, ``tool_choice`` and ``response_format`` are read here into what
``local_models.chat_answer`` decides on; a request the model cannot make sense of (a forced tool
that is not among the tools, an unknown format) is a 400 naming the member, as OpenAI answers it.

Speech: the local model writes WAV or raw PCM only. ``pcm`` gets raw 16-bit 24 kHz
samples; every other format (mp3, opus, aac, flac, wav) gets a WAV file with an honest
``audio/wav`` content type rather than mislabelled bytes.
"""
import base64
import json
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from gateway import local_media, local_models
from gateway.conversation import Usage
from gateway.conversation_request import Tool, ToolChoice, conversation_from_chat
from gateway.media_serializers import IMAGE_DEFAULTS, SPEECH_DEFAULTS, image_dimensions
from gateway.tokens import count_tokens
from gateway.upstream import register
from gateway.upstream.base import REFUSALS, name_left_out, refuse_audio_output
from gateway.upstream.shapes import Audio, ChunkStream, Image, prompt_text
from gateway.upstream.transport import Deadline
from models_catalog.served import AnyDeployment
from utils_app.errors import InvalidRequest


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _function_tools(tools: Any) -> list[tuple[str, dict[str, Any] | bool]]:
    """(name, parameters schema) of each function tool, read once as a Tool: one without parameters (or with
    null ones, which chat's validation takes) has an empty schema; tools of other types are not called by
    local-chat."""
    found: list[tuple[str, dict[str, Any] | bool]] = []
    for tool in tools or ():
        function = Tool.from_chat(tool)
        if function is not None:
            found.append((function.name, {} if function.parameters is None else function.parameters))
    return found


def _named_tools(tools: list[tuple[str, dict[str, Any] | bool]], names: list[str],
                 where: str) -> list[tuple[str, dict[str, Any] | bool]]:
    known = dict(tools)
    for name in names:
        if name not in known:
            raise InvalidRequest(f"{where} names the function {name!r}, which is not among the function tools "
                                 f"of the request.", param=where)
    return [(name, known[name]) for name in dict.fromkeys(names)]


def _tool_choice(choice: Any,
                 tools: list[tuple[str, dict[str, Any] | bool]]) -> tuple[str, list[tuple[str, dict[str, Any] | bool]]]:
    """OpenAI's tool_choice as (call, tools): "none", "auto" or "required", and the tools it may call."""
    if choice is None:
        return "auto", tools
    found = ToolChoice.from_chat(choice)
    if found is None:
        raise InvalidRequest("tool_choice must be 'none', 'auto', 'required', {\"type\": \"function\", \"function\": "
                             "{\"name\": …}} or {\"type\": \"allowed_tools\", …} for this model.", param="tool_choice")
    if found.forced is not None:
        return "required", _named_tools(tools, [found.forced], "tool_choice")
    if found.allowed is not None:
        allowed_tools = _named_tools(tools, list(found.allowed), "tool_choice.allowed_tools")
        if found.mode == "required" and not allowed_tools:
            raise InvalidRequest("tool_choice.allowed_tools needs at least one function tool.", param="tool_choice")
        return found.mode, allowed_tools
    # "required" with no function tool has nothing to call: answered in prose, as "none" would be.
    return (found.mode if tools else "none"), tools


def _answer_schema(response_format: Any) -> tuple[dict[str, Any] | bool | None, bool]:
    """OpenAI's response_format as (the JSON schema the answer follows, strict); None for prose."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None, False
    if kind == "json_object":
        return local_models.JSON_OBJECT_SCHEMA, False
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise InvalidRequest("response_format.json_schema must be an object with a JSON schema in 'schema'.",
                                 param="response_format.json_schema")
        if not isinstance(spec.get("schema", {}), (dict, bool)):
            raise InvalidRequest("response_format.json_schema.schema must be a JSON schema object.",
                                 param="response_format.json_schema.schema")
        return spec.get("schema", {}), spec.get("strict") is True
    raise InvalidRequest("response_format.type must be 'text', 'json_object' or 'json_schema' for this model.",
                         param="response_format.type")


def _answer(payload: dict[str, Any]) -> local_models.ChatAnswer:
    call, tools = _tool_choice(payload.get("tool_choice"), _function_tools(payload.get("tools")))
    schema, strict = _answer_schema(payload.get("response_format"))
    return local_models.chat_answer(conversation_from_chat(payload["messages"]), tools=tools, call=call,
                                    schema=schema, strict=strict)


def _prompt_tokens(payload: dict[str, Any]) -> int:
    """The conversation's tokens and the tools' (as the gateway's own count_tokens estimate counts them)."""
    tools = payload.get("tools")
    return count_tokens(prompt_text(payload["messages"])) + (
        count_tokens(json.dumps(tools)) if tools else 0)


def _completion_tokens(answer: local_models.ChatAnswer) -> int:
    call = answer.tool_call
    return count_tokens(f"{call.name} {call.arguments}" if call else answer.text)


def _message(answer: local_models.ChatAnswer) -> tuple[dict[str, Any], str]:
    """The assistant message of an answer and its finish reason."""
    call = answer.tool_call
    if call is None:
        return {"role": "assistant", "content": answer.text, "refusal": None}, "stop"
    return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call.to_chat()]}, "tool_calls"


REFUSALS["local"] = refuse_audio_output


@register("local")
class LocalAdapter:
    def __init__(self, deployment: AnyDeployment, deadline: Deadline):
        self.deployment = deployment
        self.upstream_model = deployment.upstream_name
        self.ignored: list[str] = []  # as HttpAdapter's: what this attempt left out of the request

    def leave_out(self, payload: dict[str, Any]) -> None:
        """What the local model has no use for (OpenAI's server features, reasoning: it does not think) is
        named as left out; audio output, which it cannot give, is refused (gateway.upstream.base)."""
        refuse_audio_output(payload)
        name_left_out(payload, self.ignored)
        if payload.get("reasoning_effort") not in (None, "none"):
            self.ignored.append("reasoning_effort")

    def chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.leave_out(payload)
        answer = _answer(payload)
        message, finish_reason = _message(answer)
        choices = [{"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}
                   for index in range(payload.get("n", 1))]
        return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
                "model": self.upstream_model, "choices": choices, "system_fingerprint": None,
                "usage": Usage(input_tokens=_prompt_tokens(payload),
                               output_tokens=_completion_tokens(answer) * len(choices)).to_chat()}

    def chat_stream(self, payload: dict[str, Any]) -> ChunkStream:
        # Decided before the stream is made: a request it refuses is an ordinary 400, not a broken stream.
        self.leave_out(payload)
        return ChunkStream(self._chunks(payload, _answer(payload)), lambda: None)

    def _chunks(self, payload: dict[str, Any], answer: local_models.ChatAnswer) -> Iterator[dict[str, Any]]:
        call = answer.tool_call
        choices = payload.get("n", 1)
        head = {"id": _completion_id(), "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.upstream_model, "system_fingerprint": None}

        def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                         "finish_reason": finish_reason}]}

        for index in range(choices):
            if call is None:
                yield chunk(index, {"role": "assistant", "content": ""})
                for piece in local_models.chat_pieces(answer.text):
                    yield chunk(index, {"content": piece})
                yield chunk(index, {}, "stop")
                continue
            # As OpenAI streams a call: the id and name first, then the arguments in pieces.
            yield chunk(index, {"role": "assistant", "content": None,
                                "tool_calls": [replace(call, arguments="").to_chat(0)]})
            for piece in local_models.chat_pieces(call.arguments):
                yield chunk(index, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            yield chunk(index, {}, "tool_calls")
        if (payload.get("stream_options") or {}).get("include_usage"):
            usage = Usage(input_tokens=_prompt_tokens(payload), output_tokens=_completion_tokens(answer) * choices)
            yield {**head, "choices": [], "usage": usage.to_chat()}

    def images(self, payload: dict[str, Any]) -> list[Image]:
        width, height = image_dimensions(payload.get("size", IMAGE_DEFAULTS["size"]))
        return [Image(local_media.render_png(width, height, payload["prompt"], seed=seed), "image/png")
                for seed in range(payload.get("n", IMAGE_DEFAULTS["n"]))]

    def speech(self, payload: dict[str, Any]) -> Audio:
        voice = payload["voice"]
        voice = voice["id"] if isinstance(voice, dict) else voice
        speed = payload.get("speed", SPEECH_DEFAULTS["speed"])
        if payload.get("response_format") == "pcm":
            return Audio(local_media.synthesize_pcm(payload["input"], voice=voice, speed=speed), "audio/pcm", "pcm")
        return Audio(local_media.synthesize_wav(payload["input"], voice=voice, speed=speed), "audio/wav", "wav")

    def embeddings(self, payload: dict[str, Any]) -> dict[str, Any]:
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        dimensions = payload.get("dimensions", local_media.EMBEDDING_DIMENSIONS)
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector: list[float] | str = local_media.embed(text, dimensions)
            if as_base64:
                # OpenAI's base64 form: the vector packed as little-endian float32.
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(count_tokens(text) for text in texts)
        return {"object": "list", "data": data, "model": self.upstream_model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def probe(self, operation: str) -> None:
        """In-process: nothing can be wrong with a secret it does not have."""
