"""A fake Google Gemini API on 127.0.0.1, held to what the real one takes and sends.

It serves ``POST /v1beta/models/{model}:generateContent``, ``:streamGenerateContent?alt=sse`` and
``:batchEmbedContents`` over a real socket (an HTTP/1.1 server in a thread, like conftest's
FakeUpstream), wants the key in ``x-goog-api-key`` and answers errors with Google's body.

Requests are checked as the real API checks them: each piece against the google-genai SDK's own
types (which forbid unknown fields), plus the rules the SDK does not encode and the real API
enforces (no ``id`` on function calls or responses, no ``additionalProperties`` or ``$ref`` in a
schema, no empty part or turn, as many function responses as the turn made calls). A request that
breaks one gets Google's 400 INVALID_ARGUMENT, and the reason is kept in ``problems`` for the test
to show. Answers are built by the helpers below, and test_gemini_fake.py proves the official
client parses every one of them (and that its own requests pass these checks), so a test cannot
pass against a fake the real client would reject.
"""
import base64
import json
import math
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from google.genai import types
from pydantic import ValidationError

from tests.gateway.fake_servers import FakeHandler, FakeServer

GEMINI_KEY = "AIzaSyFAKE-gemini-key-0123456789abcdefgh"
GEMINI_KEY_ENV = "GATEWAY_UPSTREAM_GEMINI_KEY"
REQUEST_FIELDS = {"contents", "systemInstruction", "tools", "toolConfig", "safetySettings", "generationConfig",
                  "cachedContent"}
EMBED_FIELDS = {"model", "content", "taskType", "title", "outputDimensionality"}
# Schema keywords of JSON Schema that Gemini's Schema (an OpenAPI 3.0 subset) refuses.
REFUSED_SCHEMA_KEYS = {"additionalProperties", "$ref", "$defs", "definitions", "$schema", "const", "oneOf", "allOf",
                       "additional_properties"}
# ---------------------------------------------------------------- answers (Gemini's JSON shapes)

def text_part(text: str, **extra) -> dict:
    return {"text": text, **extra}


def call_part(name: str, args: dict, *, id: str | None = None, signature: str | None = None) -> dict:
    call = {"name": name, "args": args}
    if id:
        call["id"] = id
    part = {"functionCall": call}
    if signature:
        part["thoughtSignature"] = signature
    return part


def usage(prompt: int = 11, candidates: int = 5, *, cached: int = 0, thoughts: int = 0, tool_prompt: int = 0) -> dict:
    meta = {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates + thoughts + tool_prompt,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
    if cached:
        meta["cachedContentTokenCount"] = cached
        meta["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    if tool_prompt:
        meta["toolUsePromptTokenCount"] = tool_prompt
    return meta


def candidate(parts: list | None = None, finish: str | None = "STOP", index: int = 0, **extra) -> dict:
    found = {"index": index, **extra}
    if parts is not None:
        found["content"] = {"role": "model", "parts": parts}
    if finish:
        found["finishReason"] = finish
    return found


def response(parts: list | None = None, *, finish: str | None = "STOP", meta: dict | None = None,
             candidates: list | None = None, model_version: str = "gemini-test-001") -> dict:
    """A GenerateContentResponse: one candidate with ``parts`` unless ``candidates`` are given."""
    body = {"candidates": candidates if candidates is not None else [candidate(parts, finish)],
            "modelVersion": model_version, "responseId": "resp-fake-1"}
    if meta is not None:
        body["usageMetadata"] = meta
    return body


def answer(text: str = "Hello from Gemini", **kwargs) -> dict:
    kwargs.setdefault("meta", usage())
    return response([text_part(text)], **kwargs)


def blocked(reason: str = "SAFETY") -> dict:
    return {"promptFeedback": {"blockReason": reason, "safetyRatings": [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}, "modelVersion": "gemini-test-001",
            "responseId": "resp-blocked"}


def text_events(*pieces: str, finish: str = "STOP", meta: dict | None = None) -> list[dict]:
    """A streamed answer: one event per piece, the last with the finish reason and the usage."""
    events = [response([text_part(piece)], finish=None) for piece in pieces[:-1]]
    events.append(response([text_part(pieces[-1])], finish=finish, meta=meta or usage()))
    return events


def error_body(code: int, status: str, message: str, details: list | None = None) -> dict:
    body = {"error": {"code": code, "message": message, "status": status}}
    if details:
        body["error"]["details"] = details
    return body


def key_invalid() -> tuple[int, dict]:
    """Google's answer to a wrong key: 400, not 401."""
    return 400, error_body(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
         "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}])


def rate_limited(retry: str = "17s") -> tuple[int, dict]:
    """Google's per-minute limit: its message speaks of quota and billing, its RetryInfo of when to retry."""
    return 429, error_body(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and "
                                                      "billing details.", [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
            {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
             "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry}])


def token_quota_exceeded(retry: str = "31s") -> tuple[int, dict]:
    """Google's 429 of a per-minute limit on input tokens: a QuotaFailure naming a token metric."""
    return 429, error_body(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and "
                                                      "billing details.", [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
            {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
             "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier"}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry}])


def said(body) -> str:
    """The text of a GenerateContentRequest's parts, as an upstream quoting the request writes it."""
    contents = body.get("contents") if isinstance(body, dict) and isinstance(body.get("contents"), list) else []
    return " ".join(part.get("text", "") for content in contents if isinstance(content, dict)
                    for part in content.get("parts") or () if isinstance(part, dict))


def embedding(values: list[float]) -> dict:
    return {"values": values}


# ---------------------------------------------------------------- request checks

def _sdk_check(model, value, where: str, problems: list) -> None:
    try:
        model.model_validate_json(json.dumps(value))
    except ValidationError as exc:
        problems.append(f"{where}: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}")


def _schema_check(schema, where: str, problems: list, top: bool = False) -> None:
    if isinstance(schema, dict):
        refused = REFUSED_SCHEMA_KEYS & set(schema)
        if refused:
            problems.append(f"{where}: Unknown name {sorted(refused)[0]!r} in schema")
        if schema.get("type") == "OBJECT" and "properties" in schema and not schema["properties"]:
            problems.append(f"{where}.properties: should be non-empty for OBJECT type")
        if top and schema.get("type") == "OBJECT" and not schema.get("properties"):
            problems.append(f"{where}.properties: should be non-empty for OBJECT type")
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    _schema_check(sub, f"{where}.properties.{name}", problems)
            elif key in ("items",):
                _schema_check(value, f"{where}.{key}", problems)
            elif key == "anyOf" and isinstance(value, list):
                for index, sub in enumerate(value):
                    _schema_check(sub, f"{where}.anyOf.{index}", problems)


def check_content(content, where: str, problems: list, *, roles=("user", "model")) -> None:
    _sdk_check(types.Content, content, where, problems)
    if not isinstance(content, dict):
        return
    if roles and content.get("role") not in roles:
        problems.append(f"{where}.role: Please use a valid role: user, model.")
    parts = content.get("parts")
    if not parts:
        problems.append(f"{where}.parts: contents.parts must not be empty")
        return
    for index, part in enumerate(parts):
        at = f"{where}.parts.{index}"
        if not isinstance(part, dict):
            continue
        data = set(part) - {"thought", "thoughtSignature", "mediaResolution", "videoMetadata", "partMetadata"}
        if len(data) != 1:
            problems.append(f"{at}: a part holds exactly one kind of data, got {sorted(data)}")
        if "text" in part and not part["text"]:
            problems.append(f"{at}: Unable to submit request because it has an empty text parameter")
        for kind in ("functionCall", "functionResponse"):
            if isinstance(part.get(kind), dict) and "id" in part[kind]:
                problems.append(f"{at}.{kind}: Invalid JSON payload received. Unknown name \"id\"")
        inline = part.get("inlineData")
        if isinstance(inline, dict):
            try:
                base64.b64decode(inline.get("data", ""), validate=True)
            except ValueError:
                problems.append(f"{at}.inlineData.data: Invalid value (bytes)")


def check_generate(body, problems: list) -> None:
    if not isinstance(body, dict):
        problems.append("the body is not a JSON object")
        return
    unknown = set(body) - REQUEST_FIELDS
    if unknown:
        problems.append(f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        problems.append("contents is not specified")
        contents = []
    for index, content in enumerate(contents):
        check_content(content, f"contents.{index}", problems)
    _check_pairing(contents, problems)
    if "systemInstruction" in body:
        check_content(body["systemInstruction"], "systemInstruction", problems, roles=None)
    for index, tool in enumerate(body.get("tools") or ()):
        _sdk_check(types.Tool, tool, f"tools.{index}", problems)
        for number, function in enumerate((tool or {}).get("functionDeclarations") or ()):
            if "parameters" in function:
                _schema_check(function["parameters"], f"tools.{index}.functionDeclarations.{number}.parameters",
                              problems, top=True)
    if "toolConfig" in body:
        _sdk_check(types.ToolConfig, body["toolConfig"], "toolConfig", problems)
    if "generationConfig" in body:
        _sdk_check(types.GenerationConfig, body["generationConfig"], "generationConfig", problems)
        if "responseSchema" in (body["generationConfig"] or {}):
            _schema_check(body["generationConfig"]["responseSchema"], "generationConfig.responseSchema", problems)


def _check_pairing(contents: list, problems: list) -> None:
    """Every model turn's function calls are answered by the next user turn, one response per call, in order."""
    for index, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        calls = [part["functionCall"].get("name") for part in content.get("parts") or ()
                 if isinstance(part, dict) and isinstance(part.get("functionCall"), dict)]
        if not calls or index + 1 >= len(contents):
            continue
        following = contents[index + 1] if isinstance(contents[index + 1], dict) else {}
        answers = [part["functionResponse"].get("name") for part in following.get("parts") or ()
                   if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)]
        if answers != calls:
            problems.append(f"contents.{index + 1}: Please ensure that the number of function response parts is "
                            f"equal to the number of function call parts of the function call turn "
                            f"(calls {calls}, responses {answers}).")


def check_embed(body, model: str, problems: list) -> None:
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not requests or set(body) != {"requests"}:
        problems.append("requests is not specified")
        return
    for index, request in enumerate(requests):
        unknown = set(request) - EMBED_FIELDS
        if unknown:
            problems.append(f"requests.{index}: Unknown name {sorted(unknown)[0]!r}")
        if request.get("model") != model:
            problems.append(f"requests.{index}.model: Model {request.get('model')!r} does not match {model!r} "
                            f"in the URL")
        check_content(request.get("content"), f"requests.{index}.content", problems, roles=None)


# ---------------------------------------------------------------- the server

@dataclass
class Reply:
    status: int = 200
    body: dict | None = None
    events: list | None = None  # a stream: answers, DROP, or raw str data


@dataclass
class Call:
    method: str
    path: str
    query: dict
    headers: dict
    body: dict | None
    problems: list = field(default_factory=list)

    @property
    def model(self) -> str:
        return self.path.split(":")[0].removeprefix("/v1beta/")


class FakeGemini(FakeServer):
    """Scripted per method (``generateContent``, ``streamGenerateContent``, ``batchEmbedContents``): a list
    of replies is answered in turn, its last one for every further call; unscripted calls get a plain
    answer (text, a short stream, or vectors of outputDimensionality values)."""

    def __init__(self, api_key: str = GEMINI_KEY):
        self.api_key = api_key
        self.calls: list[Call] = []
        self.scripts: dict[str, list[Reply]] = {}
        self.files: dict[str, tuple[bytes, str]] = {}
        self.gets: list[str] = []  # the paths asked with GET (files, or anything else)
        self.echoing: tuple[int, str] | None = None  # echo_request(): the status and status word of the refusal
        fake = self

        class Handler(FakeHandler):
            def do_GET(self):
                path = urlsplit(self.path).path
                fake.gets.append(path)
                if path not in fake.files:
                    return self._json(404, error_body(404, "NOT_FOUND", "Not found."))
                content, content_type = fake.files[path]
                self.send_body(200, content, content_type)

            def do_POST(self):
                parts = urlsplit(self.path)
                call = Call("POST", unquote(parts.path), parse_qs(parts.query), dict(self.headers), self.read_json())
                fake.calls.append(call)
                self._answer(call)

            def _answer(self, call: Call):
                given = call.headers.get("x-goog-api-key") or call.headers.get("X-Goog-Api-Key")
                if not given and "key" not in call.query:
                    return self._json(403, error_body(
                        403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without "
                                                  "established identity). Please use API Key or other form of API "
                                                  "consumer identity to call this API."))
                if (given or call.query["key"][0]) != fake.api_key:
                    return self._json(*key_invalid())
                if not call.path.startswith("/v1beta/models/") or ":" not in call.path:
                    return self._json(404, error_body(404, "NOT_FOUND", f"{call.path} is not found."))
                method = call.path.rsplit(":", 1)[1]
                if method == "generateContent" or method == "streamGenerateContent":
                    check_generate(call.body, call.problems)
                    if method == "streamGenerateContent" and call.query.get("alt") != ["sse"]:
                        call.problems.append("a stream without alt=sse answers a JSON array, not events")
                elif method == "batchEmbedContents":
                    check_embed(call.body, call.model, call.problems)
                else:
                    return self._json(404, error_body(404, "NOT_FOUND", f"Method {method} is not found."))
                if fake.echoing and method != "batchEmbedContents":
                    code, word = fake.echoing
                    return self._json(code, error_body(code, word, f"Invalid value at 'contents[0].parts[0].text' "
                                                                   f"({said(call.body)})"))
                if call.problems:
                    return self._json(400, error_body(400, "INVALID_ARGUMENT", "Invalid JSON payload received. "
                                                                               + "; ".join(call.problems)))
                reply = fake.next_reply(method, call)
                if reply.events is not None:
                    return self._stream(reply)
                self._json(reply.status, reply.body)

            def _json(self, status: int, body: dict):
                self.send_body(status, body, "application/json; charset=UTF-8")

            def _stream(self, reply: Reply):
                # Google ends its event lines with CRLF.
                self.send_events(reply.status, reply.events, lambda event: (
                    f"data: {event if isinstance(event, str) else json.dumps(event)}\r\n\r\n".encode()),
                    content_type="text/event-stream")

        self.serve(Handler)

    @property
    def base_url(self) -> str:
        """What a gemini provider's base_url is set to: the root with the API's version."""
        return f"{self.root}/v1beta"

    # -- scripting

    def script(self, method: str, *replies: Reply):
        self.scripts[method] = list(replies)

    def answer(self, body: dict, status: int = 200):
        self.script("generateContent", Reply(status, body))

    def stream(self, *events):
        self.script("streamGenerateContent", Reply(events=list(events)))

    def fail(self, status: int, body: dict, *, methods=("generateContent", "streamGenerateContent",
                                                        "batchEmbedContents")):
        for method in methods:
            self.script(method, Reply(status, body))

    def serve_file(self, path: str, content: bytes, content_type: str):
        self.files[path] = (content, content_type)

    def echo_request(self, code: int = 400, word: str = "INVALID_ARGUMENT"):
        """Refuse every chat call with Google's error of ``code`` and status ``word``, its message quoting the
        request's text (``said``) and no details: the words of the message are the client's."""
        self.echoing = (code, word)

    def next_reply(self, method: str, call: Call) -> Reply:
        replies = self.scripts.get(method)
        if replies:
            return replies.pop(0) if len(replies) > 1 else replies[0]
        if method == "generateContent":
            return Reply(body=answer())
        if method == "streamGenerateContent":
            return Reply(events=text_events("Hello", " from", " Gemini"))
        dimensions = [request.get("outputDimensionality") or 4 for request in call.body["requests"]]
        return Reply(body={"embeddings": [embedding([0.5 + 0.1 * position for position in range(size)])
                                          for size in dimensions]})

    # -- what the gateway sent

    def posts(self, method: str | None = None) -> list[Call]:
        return [call for call in self.calls if method is None or call.path.endswith(f":{method}")]

    def problems(self) -> list[str]:
        return [problem for call in self.calls for problem in call.problems]


def unit(values: list[float]) -> list[float]:
    length = math.sqrt(sum(value * value for value in values))
    return [value / length for value in values]


@pytest.fixture
def gemini():
    fake = FakeGemini().start()
    yield fake
    fake.stop()


@pytest.fixture
def second_gemini():
    fake = FakeGemini().start()
    yield fake
    fake.stop()
