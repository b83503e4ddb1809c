"""The in-process development models (gateway.local_models) behind the adapter protocol.

Speech: the local model writes WAV or raw PCM only. ``pcm`` gets raw 16-bit 24 kHz
samples; every other format (mp3, opus, aac, flac, wav) gets a WAV file with an honest
``audio/wav`` content type rather than mislabelled bytes.
"""
import base64
import struct
import time
import uuid
from collections.abc import Iterator

from gateway import local_models
from gateway.serializers import IMAGE_DEFAULTS, SPEECH_DEFAULTS, image_dimensions
from gateway.upstream import register
from gateway.upstream.shapes import Audio, ChunkStream, Image, prompt_text
from gateway.upstream.transport import Deadline
from models_catalog.models import Deployment


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _chat_usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@register("local")
class LocalAdapter:
    def __init__(self, deployment: Deployment, deadline: Deadline):
        self.deployment = deployment
        self.upstream_model = deployment.upstream_name

    def chat(self, payload: dict) -> dict:
        messages = payload["messages"]
        reply = local_models.chat_reply(messages)
        prompt_tokens = local_models.count_tokens(prompt_text(messages))
        completion_tokens = local_models.count_tokens(reply)
        choices = [{"index": index, "message": {"role": "assistant", "content": reply, "refusal": None},
                    "logprobs": None, "finish_reason": "stop"} for index in range(payload.get("n", 1))]
        return {"id": _completion_id(), "object": "chat.completion", "created": int(time.time()),
                "model": self.upstream_model, "choices": choices, "system_fingerprint": None,
                "usage": _chat_usage(prompt_tokens, completion_tokens * len(choices))}

    def chat_stream(self, payload: dict) -> ChunkStream:
        return ChunkStream(self._chunks(payload), lambda: None)

    def _chunks(self, payload: dict) -> Iterator[dict]:
        messages = payload["messages"]
        reply = local_models.chat_reply(messages)
        choices = payload.get("n", 1)
        head = {"id": _completion_id(), "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.upstream_model, "system_fingerprint": None}

        def chunk(index, delta, finish_reason=None):
            return {**head, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                         "finish_reason": finish_reason}]}

        for index in range(choices):
            yield chunk(index, {"role": "assistant", "content": ""})
            for piece in local_models.chat_pieces(reply):
                yield chunk(index, {"content": piece})
            yield chunk(index, {}, "stop")
        if (payload.get("stream_options") or {}).get("include_usage"):
            usage = _chat_usage(local_models.count_tokens(prompt_text(messages)),
                                local_models.count_tokens(reply) * choices)
            yield {**head, "choices": [], "usage": usage}

    def images(self, payload: dict) -> list[Image]:
        width, height = image_dimensions(payload.get("size", IMAGE_DEFAULTS["size"]))
        return [Image(local_models.render_png(width, height, payload["prompt"], seed=seed), "image/png")
                for seed in range(payload.get("n", IMAGE_DEFAULTS["n"]))]

    def speech(self, payload: dict) -> Audio:
        voice = payload["voice"]
        voice = voice["id"] if isinstance(voice, dict) else voice
        speed = payload.get("speed", SPEECH_DEFAULTS["speed"])
        if payload.get("response_format") == "pcm":
            return Audio(local_models.synthesize_pcm(payload["input"], voice=voice, speed=speed), "audio/pcm", "pcm")
        return Audio(local_models.synthesize_wav(payload["input"], voice=voice, speed=speed), "audio/wav", "wav")

    def embeddings(self, payload: dict) -> dict:
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        dimensions = payload.get("dimensions", local_models.EMBEDDING_DIMENSIONS)
        as_base64 = payload.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = local_models.embed(text, dimensions)
            if as_base64:
                # OpenAI's base64 form: the vector packed as little-endian float32.
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(local_models.count_tokens(text) for text in texts)
        return {"object": "list", "data": data, "model": self.upstream_model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def probe(self, operation: str) -> None:
        """In-process: nothing can be wrong with a secret it does not have."""
