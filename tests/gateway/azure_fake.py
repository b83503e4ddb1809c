"""A fake Azure OpenAI resource on 127.0.0.1, held to what the real one takes and sends.

It serves ``POST /openai/deployments/{deployment}/{operation}?api-version=…`` (chat completions,
embeddings, image generations, speech) and ``GET /openai/models?api-version=…``, wants the key in
the ``api-key`` header (a bearer token would be read as an Entra ID token, and refused), and answers
in Azure's shapes: OpenAI's objects plus Azure's content-filter annotations, a stream that opens
with a chunk of prompt filter results and no choices, errors as ``{"error": {"code": "401",
"message": …}}``. test_azure_upstream.py drives the official ``openai`` SDK's AzureOpenAI client
against it, so its paths and shapes are those the real client expects.
"""
import base64
import json
import struct
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.gateway.fake_servers import FakeHandler, FakeServer

AZURE_KEY = "0123456789abcdef0123456789abcdef"  # Azure keys are 32 hex digits
AZURE_KEY_ENV = "GATEWAY_UPSTREAM_AZURE_KEY"
API_VERSIONS = {"2024-10-21", "2024-06-01", "2025-01-01-preview", "2025-04-01-preview"}
OPERATIONS = {"chat/completions": "chat", "embeddings": "embedding", "images/generations": "image",
              "audio/speech": "speech"}
FILTERS = {name: {"filtered": False, "severity": "safe"} for name in ("hate", "self_harm", "sexual", "violence")}
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a49444154789c63600000000200015c0d0a2d0000000049454e44ae426082")


def azure_error(code: str, message: str, **extra) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


UNAUTHORIZED = azure_error("401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
                                  "provide a valid key for an active subscription and use a correct regional API "
                                  "endpoint for your resource.")


def completion(text: str = "Hello from Azure", *, model: str = "gpt-4o-mini", finish: str = "stop",
               prompt_tokens: int = 12, completion_tokens: int = 4, cached: int = 0) -> dict:
    return {"id": "chatcmpl-azure-1", "object": "chat.completion", "created": 1700000000, "model": model,
            "system_fingerprint": "fp_azure",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}],
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "content_filter_results": FILTERS,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}}


def chunk(delta: dict | None, *, finish=None, usage=None, filters: bool = True) -> dict:
    body = {"id": "chatcmpl-azure-2", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-4o-mini", "system_fingerprint": "fp_azure",
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish,
                                                  "logprobs": None,
                                                  **({"content_filter_results": FILTERS} if filters else {})}]}
    if usage is not None:
        body["usage"] = usage
    return body


def stream_events(*pieces: str, include_usage: bool, cached: int = 0) -> list:
    """Azure's stream: a first chunk with the prompt's filter results and no choices, the role, the
    pieces, the finish, the usage chunk when asked for, then [DONE]."""
    events = [{"id": "", "object": "", "created": 0, "model": "", "choices": [],
               "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}]},
              chunk({"role": "assistant", "content": ""}, filters=False)]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({}, finish="stop"))
    if include_usage:
        events.append(chunk(None, usage={"prompt_tokens": 10, "completion_tokens": len(pieces),
                                         "total_tokens": 10 + len(pieces),
                                         "prompt_tokens_details": {"cached_tokens": cached}}))
    return [*events, "[DONE]"]


def embeddings(inputs: list[str], encoding_format: str) -> dict:
    data = []
    for index, text in enumerate(inputs):
        vector = [round(0.1 * (len(text) % 7) + 0.05 * position, 4) for position in range(3)]
        value = base64.b64encode(struct.pack("<3f", *vector)).decode() if encoding_format == "base64" else vector
        data.append({"object": "embedding", "index": index, "embedding": value})
    return {"object": "list", "model": "text-embedding-3-small", "data": data,
            "usage": {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}}


@dataclass
class Reply:
    status: int = 200
    body: dict | bytes | None = None
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)
    events: list | None = None


@dataclass
class Call:
    method: str
    path: str
    query: dict
    headers: dict
    body: dict | None

    @property
    def deployment(self) -> str:
        return self.path.split("/")[3] if self.path.startswith("/openai/deployments/") else ""


class FakeAzure(FakeServer):
    """``deployments`` maps each Azure deployment's name to its operation. Replies are scripted per
    operation (a list is answered in turn, its last one for every further call); unscripted calls get a
    plain answer in Azure's shape."""

    def __init__(self, api_key: str = AZURE_KEY):
        self.api_key = api_key
        self.deployments = {"chat-dep": "chat", "embed-dep": "embedding", "image-dep": "image",
                            "speech-dep": "speech"}
        self.calls: list[Call] = []
        self.scripts: dict[str, list[Reply]] = {}
        fake = self

        class Handler(FakeHandler):
            def do_GET(self):
                call = self._call(None)
                if call is None:
                    return
                if call.path == "/openai/models":
                    return self._send(Reply(body={"object": "list", "data": [
                        {"id": "gpt-4o-mini", "object": "model", "status": "succeeded"}]}))
                if call.path == "/files/image.png":
                    return self._send(Reply(body=PNG_1X1, content_type="image/png"))
                self._send(Reply(404, azure_error("404", "Resource not found")))

            def do_POST(self):
                call = self._call(self.read_json())
                if call is None:
                    return
                parts = call.path.split("/", 4)  # "", "openai", "deployments", name, operation
                if len(parts) != 5 or parts[:3] != ["", "openai", "deployments"] or parts[4] not in OPERATIONS:
                    return self._send(Reply(404, azure_error("404", "Resource not found")))
                operation = OPERATIONS[parts[4]]
                if fake.deployments.get(parts[3]) != operation:
                    return self._send(Reply(404, azure_error(
                        "DeploymentNotFound", "The API deployment for this resource does not exist. If you created "
                                              "the deployment within the last 5 minutes, please wait a moment and "
                                              "try again.")))
                self._send(fake.reply(operation, call))

            def _call(self, body) -> Call | None:
                """Record the call; answer Azure's refusals of a wrong key or a missing api-version."""
                parts = urlsplit(self.path)
                call = Call(self.command, unquote(parts.path), parse_qs(parts.query), dict(self.headers), body)
                if not call.path.startswith("/files/"):
                    fake.calls.append(call)
                    if call.headers.get("api-key") != fake.api_key or "Authorization" in call.headers:
                        self._send(Reply(401, UNAUTHORIZED))
                        return None
                    version = call.query.get("api-version", [""])[0]
                    if version not in API_VERSIONS:
                        self._send(Reply(404 if not version else 400, azure_error(
                            "404" if not version else "BadRequest",
                            "Resource not found" if not version else "API version not supported")))
                        return None
                return call

            def _send(self, reply: Reply):
                if reply.events is not None:
                    return self.send_events(200, reply.events, lambda event: (
                        f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()))
                self.send_body(reply.status, reply.body, reply.content_type,
                               {"apim-request-id": "00000000-0000-0000-0000-000000000000", **reply.headers})

        self.serve(Handler)

    @property
    def endpoint(self) -> str:
        """The resource's endpoint, what an azure provider's base_url is set to."""
        return self.root

    def script(self, operation: str, *replies: Reply):
        self.scripts[operation] = list(replies)

    def fail(self, status: int, body: dict, headers: dict | None = None):
        for operation in set(OPERATIONS.values()):
            self.script(operation, Reply(status, body, headers=headers or {}))

    def reply(self, operation: str, call: Call) -> Reply:
        replies = self.scripts.get(operation)
        if replies:
            return replies.pop(0) if len(replies) > 1 else replies[0]
        body = call.body or {}
        if operation == "chat":
            if body.get("stream"):
                include = bool((body.get("stream_options") or {}).get("include_usage"))
                return Reply(events=stream_events("Hello", " from", " Azure", include_usage=include))
            return Reply(body=completion())
        if operation == "embedding":
            inputs = body["input"] if isinstance(body.get("input"), list) else [body.get("input", "")]
            return Reply(body=embeddings(inputs, body.get("encoding_format", "float")))
        if operation == "image":
            item = {"revised_prompt": "a fox, revised", "content_filter_results": FILTERS}
            if body.get("response_format") == "b64_json":
                item["b64_json"] = base64.b64encode(PNG_1X1).decode()
            else:
                item["url"] = f"{self.endpoint}/files/image.png"
            return Reply(body={"created": 1700000000, "data": [item]})
        return Reply(body=b"ID3azure-mp3-bytes", content_type="audio/mpeg")

    def posts(self) -> list[Call]:
        return [call for call in self.calls if call.method == "POST"]


@pytest.fixture
def azure():
    fake = FakeAzure().start()
    yield fake
    fake.stop()
