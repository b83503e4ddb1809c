"""What one cheap request may make the gateway do is bounded: the images it fetches for a Gemini
deployment (how many, how many bytes, from where), the JSON schemas it expands (however the
references fan out, and malformed ones refused by name), and what a stream's relay holds.

Each refusal is a 400 naming the member and the limit; one decided while validating costs nothing
and reaches no upstream, one found while fetching is refunded and is no failure of the deployment."""
import base64
import json
import time
import tracemalloc
from types import SimpleNamespace

import pytest

from gateway import deployment_health
from gateway.conversation_request import Tool
from gateway.json_schemas import SchemaWalk
from gateway.tokens import count_tokens
from gateway.relay import ChatRelay, ReplyTokens
from gateway.upstream import images
from gateway.upstream.anthropic_request import tool_definition
from gateway.upstream.gemini_request import gemini_schema
from keys.ledger import mismatches
from keys.models import LedgerEntry
from models_catalog.models import Deployment, Provider
from tests.conftest import bearer
from tests.gateway.anthropic_fake import ANTHROPIC_KEY, ANTHROPIC_KEY_ENV, claude  # noqa: F401 (fixture)
from tests.gateway.conftest import PNG_1X1, credits_of, serve
from tests.gateway.fake_servers import FakeHandler, FakeServer
from tests.gateway.gemini_fake import GEMINI_KEY, GEMINI_KEY_ENV, gemini  # noqa: F401 (fixture)
from utils_app.errors import InvalidRequest

HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def models(gemini, claude, monkeypatch, db):  # noqa: F811
    """gem-chat served by the fake Gemini, claude-chat by the fake Anthropic."""
    monkeypatch.setenv(GEMINI_KEY_ENV, GEMINI_KEY)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    google = Provider.objects.create(name="google", type="gemini", base_url=gemini.base_url,
                                     api_key_env=GEMINI_KEY_ENV, timeout=5)
    anthropic = Provider.objects.create(name="anthropic", type="anthropic", base_url=claude.base_url,
                                        api_key_env=ANTHROPIC_KEY_ENV, timeout=5)
    serve("gem-chat", [(google, "gemini-2.5-flash", 1)])
    serve("claude-chat", [(anthropic, "claude-sonnet-4-5", 1)])
    return {"gem-chat": gemini, "claude-chat": claude}


class ImageHost(FakeServer):
    """A host of images: ``/N.png`` is a PNG of N bytes, sent in chunks without a Content-Length (so only
    reading it tells its size); ``finished`` and ``cut`` record how each answer's sending ended."""

    def __init__(self):
        self.gets: list[str] = []
        self.finished: list[str] = []
        self.cut: list[str] = []
        host = self

        class Handler(FakeHandler):
            def do_GET(self):
                host.gets.append(self.path)
                size = int(self.path.strip("/").removesuffix(".png"))
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                body = PNG_1X1 + bytes(size - len(PNG_1X1))
                try:
                    for start in range(0, len(body), 65536):
                        piece = body[start:start + 65536]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    host.finished.append(self.path)
                except OSError:
                    host.cut.append(self.path)
                    self.close_connection = True

        self.serve(Handler)


@pytest.fixture
def image_host(monkeypatch):
    host = ImageHost().start()
    # A client's image URL is fetched from public addresses only: this loopback host stands for one.
    monkeypatch.setattr(images, "is_public", lambda address: True)
    yield host
    host.stop()


def image(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def chat(client, secret: str, model: str = "gem-chat", **body):
    body.setdefault("messages", HELLO)
    return client.post("/v1/chat/completions", json.dumps({"model": model, **body}),
                       content_type="application/json", **bearer(secret))


def messages(client, secret: str, model: str, **body):
    body.setdefault("messages", HELLO)
    return client.post("/v1/messages", json.dumps({"model": model, "max_tokens": 50, **body}),
                       content_type="application/json", **bearer(secret))


def refused(response, param: str) -> str:
    """The 400's message, in either API's error shape, after checking it names ``param``."""
    assert response.status_code == 400, response.content
    body = response.json()
    if "type" in body and body["type"] == "error":  # Anthropic's shape: no param member, the message names it
        assert body["error"]["type"] == "invalid_request_error"
        assert param in body["error"]["message"], body
        return body["error"]["message"]
    assert (body["error"]["code"], body["error"]["param"]) == ("invalid_value", param), body
    return body["error"]["message"]


def nothing_charged(key) -> None:
    assert credits_of(key) == 100 and not LedgerEntry.objects.filter(kind="charge").exists()


def not_its_fault(model_id: str) -> None:
    deployment = Deployment.objects.get(model__model_id=model_id)
    assert deployment_health.states([deployment])[deployment.pk].failures == 0 and not deployment.disabled_at


# ---------------------------------------------------------------- images

def test_image_urls_past_the_limit_are_refused_before_any_fetch_or_charge(client, free_key, models, image_host,
                                                                           settings):
    key, secret = free_key
    settings.MAX_CHAT_IMAGE_URLS = 2
    png = base64.b64encode(PNG_1X1).decode()
    parts = [{"type": "text", "text": "Compare"}, image(f"data:image/png;base64,{png}"),  # inline: not counted
             *(image(f"{image_host.root}/{size}.png") for size in (100, 200, 300))]
    answer = chat(client, secret, messages=[{"role": "user", "content": parts}])
    assert "MAX_CHAT_IMAGE_URLS" in refused(answer, "messages.0.content.4")
    blocks = [{"type": "image", "source": {"type": "url", "url": f"{image_host.root}/{size}.png"}}
              for size in (100, 200, 300)]
    for model in ("gem-chat", "claude-chat"):
        answer = messages(client, secret, model, messages=[{"role": "user", "content": blocks}])
        assert "MAX_CHAT_IMAGE_URLS" in refused(answer, "messages.0.content.2")
    assert image_host.gets == [] and models["gem-chat"].posts() == [] and models["claude-chat"].posts() == []
    nothing_charged(key)
    # At the limit the request is served, its images fetched.
    answer = chat(client, secret, messages=[{"role": "user", "content": parts[:4]}])
    assert answer.status_code == 200, answer.content
    assert sorted(image_host.gets) == ["/100.png", "/200.png"]


def test_images_past_the_fetched_bytes_limit_stop_the_fetch_and_are_refunded(client, free_key, models, image_host,
                                                                            settings):
    key, secret = free_key
    settings.MAX_IMAGE_FETCH_BYTES = 256 * 1024
    answer = chat(client, secret, messages=[{"role": "user", "content": [
        image(f"{image_host.root}/{200 * 1024}.png"), image(f"{image_host.root}/{8 * 1024 * 1024}.png"),
        image(f"{image_host.root}/{100 * 1024}.png")]}])
    message = refused(answer, "messages.0.content.1.image_url.url")
    assert "MAX_IMAGE_FETCH_BYTES" in message and str(256 * 1024) in message
    # The 8 MiB image was dropped once the limit was passed, not read to its end; the next one never asked.
    deadline = time.monotonic() + 5
    while f"/{8 * 1024 * 1024}.png" not in image_host.cut and time.monotonic() < deadline:
        time.sleep(0.05)
    assert image_host.cut == [f"/{8 * 1024 * 1024}.png"] and image_host.gets == [
        f"/{200 * 1024}.png", f"/{8 * 1024 * 1024}.png"]
    assert models["gem-chat"].posts() == []
    # Refunded: the client's fault, not the deployment's.
    assert credits_of(key) == 100 and mismatches() == []
    assert LedgerEntry.objects.get(kind="charge").status == "refunded"
    not_its_fault("gem-chat")


def test_a_client_image_url_on_the_providers_own_host_is_not_fetched(client, free_key, models):
    key, secret = free_key
    gemini = models["gem-chat"]
    gemini.serve_file("/v1beta/files/cat.png", PNG_1X1, "image/png")
    for path in ("/v1beta/files/cat.png", "/internal/admin"):
        answer = chat(client, secret, messages=[{"role": "user", "content": [image(f"{gemini.root}{path}")]}])
        assert "public http(s) URL" in refused(answer, "messages.0.content.0.image_url.url")
    assert gemini.gets == [] and gemini.posts() == []
    assert credits_of(key) == 100 and mismatches() == []
    not_its_fault("gem-chat")


def test_only_an_upstreams_own_image_urls_may_be_on_its_host(monkeypatch):
    """The provider's host (here a private address) is trusted for the image URLs its upstream hands out,
    never for a client's, at the first hop or at any redirect."""
    provider = {"name": "p", "base_url": "http://10.0.0.5:8000/v1beta"}
    lookups = []
    monkeypatch.setattr(images.socket, "getaddrinfo", lambda host, port, **kw: lookups.append(host) or [
        (None, None, None, "", ("10.0.0.5", port))])
    images.check_image_url("http://10.0.0.5:8000/files/cat.png", **provider)  # the upstream's own: trusted as it is
    assert lookups == []
    with pytest.raises(images.UpstreamError):
        images.check_image_url("http://10.0.0.5:8000/files/cat.png", **provider, client=True)
    assert lookups == ["10.0.0.5"]


def test_memory_is_given_back_after_a_request_that_fetched_images(client, free_key, models, image_host, monkeypatch):
    key, secret = free_key
    trims = []
    monkeypatch.setattr(images, "_trim", trims.append)
    monkeypatch.setattr(images, "_fetched_bytes", 0)
    monkeypatch.setattr(images, "GIVE_BACK_AFTER_BYTES", 64 * 1024)
    parts = [image(f"{image_host.root}/{100 * 1024}.png")]
    answer = chat(client, secret, messages=[{"role": "user", "content": parts}])
    assert answer.status_code == 200, answer.content
    answer.close()
    assert trims == [0]
    answer = chat(client, secret)
    answer.close()
    assert trims == [0]  # nothing fetched since: nothing to give back


# ---------------------------------------------------------------- schemas

def fanned_out(per_level: int = 6, levels: int = 8) -> dict:
    """About 2 KB of schema that inlines to per_level ** levels objects."""
    defs = {f"L{level}": {"type": "object", "properties": {f"p{index}": {"$ref": f"#/$defs/L{level + 1}"}
                                                           for index in range(per_level)}}
            for level in range(levels)}
    defs[f"L{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"root": {"$ref": "#/$defs/L0"}}}


def test_a_schema_that_fans_out_is_a_fast_400_on_every_api_and_deployment(client, free_key, models):
    key, secret = free_key
    schema = fanned_out()
    assert len(json.dumps(schema)) < 3000
    started = time.monotonic()
    for model in models:
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        message = refused(chat(client, secret, model, tools=[tool]), "tools.0.function.parameters")
        assert "MAX_SCHEMA_NODES" in message or "MAX_SCHEMA_BYTES" in message
        refused(chat(client, secret, model, response_format={"type": "json_schema", "json_schema": {
            "name": "a", "schema": schema}}), "response_format.json_schema.schema")
        refused(messages(client, secret, model, tools=[{"name": "f", "input_schema": schema}]),
                "tools.0.input_schema")
    assert time.monotonic() - started < 5  # was 45 s of a worker's time for one of them
    assert models["gem-chat"].posts() == [] and models["claude-chat"].posts() == []
    nothing_charged(key)


def test_a_schema_within_the_limits_still_reaches_gemini_inlined(client, free_key, models):
    key, secret = free_key
    tool = {"type": "function", "function": {"name": "f", "parameters": fanned_out(per_level=3, levels=3)}}
    answer = chat(client, secret, tools=[tool])
    assert answer.status_code == 200, answer.content
    [call] = models["gem-chat"].posts()
    parameters = call.body["tools"][0]["functionDeclarations"][0]["parameters"]
    assert parameters["properties"]["root"]["properties"]["p2"]["properties"]["p0"]["properties"]["p1"] == {
        "type": "STRING"}


def test_the_expansion_itself_stops_at_the_limit(settings):
    """Each converter walks through the same bounded walk: called without the checks before it, it still
    stops with a 400 rather than building the whole expansion."""
    settings.MAX_SCHEMA_NODES = 1000
    for convert in (lambda schema: gemini_schema(schema, where="tools.0.function.parameters"),
                    lambda schema: tool_definition(Tool(name="f", parameters=schema), 0)):
        started = time.monotonic()
        with pytest.raises(InvalidRequest) as stopped:
            convert(fanned_out())
        assert stopped.value.param == "tools.0.function.parameters" and "MAX_SCHEMA_NODES" in stopped.value.message
        assert time.monotonic() - started < 1
    # Repeated descriptions weigh what they add to the JSON sent on.
    walk = SchemaWalk(nodes=10 ** 6, size=64 * 1024)
    wordy = fanned_out(per_level=2, levels=6)
    wordy["$defs"]["L6"] = {"type": "string", "description": "x" * 2000}
    with pytest.raises(InvalidRequest) as stopped:
        gemini_schema(wordy, walk, "response_format.json_schema.schema")
    assert "MAX_SCHEMA_BYTES" in stopped.value.message


MALFORMED = [
    ({"type": "object", "required": 7}, "required"),
    ({"type": "object", "required": ["a", 3]}, "required"),
    ({"type": "object", "$defs": [1]}, "$defs"),
    ({"type": "object", "definitions": "x"}, "definitions"),
    ({"type": "object", "properties": ["a"]}, "properties"),
    ({"type": "object", "properties": {"a": 5}}, "properties.a"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": "x"}}}, "properties.a.items"),
    ({"type": "object", "properties": {"a": {"$ref": 5}}}, "properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}}, "properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"anyOf": {"type": "string"}}}}, "properties.a.anyOf"),
    ({"type": [{}], "properties": {"a": {}}}, "type"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": {}}}}, "properties.a.format"),
    ({"type": "object", "$defs": {"b": {"required": 7}}}, "$defs.b.required"),
]


@pytest.mark.parametrize("schema, member", MALFORMED, ids=[member for _, member in MALFORMED])
def test_a_malformed_schema_is_a_400_naming_the_member_on_every_api_and_deployment(client, free_key, models,
                                                                                   schema, member):
    key, secret = free_key
    for model in models:
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        refused(chat(client, secret, model, tools=[tool]), f"tools.0.function.parameters.{member}")
        refused(chat(client, secret, model, response_format={"type": "json_schema", "json_schema": {
            "name": "a", "schema": schema}}), f"response_format.json_schema.schema.{member}")
        refused(messages(client, secret, model, tools=[{"name": "f", "input_schema": schema}]),
                f"tools.0.input_schema.{member}")
    assert models["gem-chat"].posts() == [] and models["claude-chat"].posts() == []
    nothing_charged(key)
    # The converters refuse it the same way on their own: a 400, never a traceback.
    with pytest.raises(InvalidRequest) as converted:
        gemini_schema(schema, where="tools.0.function.parameters")
    assert converted.value.param == f"tools.0.function.parameters.{member}"


# ---------------------------------------------------------------- a long stream's relay

class Stream:
    """Upstream chunks made as they are read: ``pieces`` of text, then the finish."""

    def __init__(self, pieces):
        self.pieces = pieces

    def __iter__(self):
        for text in self.pieces:
            yield {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        yield {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}

    def close(self):
        pass


def relayed(pieces, *, claim: bool):
    settled = {}
    meter = SimpleNamespace(claim=object() if claim else None, model=SimpleNamespace(model_id="m"), model_name="m", provider="p",
                            deployment=None, settled=False, succeed=lambda **counts: settled.update(counts))
    relay = ChatRelay(meter=meter, upstream=Stream(pieces), include_usage=False, messages=HELLO)
    return relay, settled


def test_a_long_streams_relay_holds_a_bounded_amount(settings):
    settings.IDEMPOTENCY_MAX_BODY_BYTES = 64 * 1024
    word = "lorem ipsum, dolor sit amet; "  # 29 characters
    pieces = (word * 70 for _ in range(10_000))  # 20 MB of text in 10,000 deltas, made as they are read
    relay, settled = relayed(pieces, claim=True)
    tracemalloc.start()
    try:
        size = sum(len(event) for event in relay)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 20_000_000
    assert peak < 4 * 1024 * 1024, peak  # the stream itself is 20 MB of text and more of events
    # Past the limit nothing was kept for a replay (a retry is told so); the estimate is the whole text's.
    assert settled["answer"] is None
    assert settled["output_tokens"] == count_tokens(word * 70) * 10_000


def test_a_short_stream_is_still_kept_for_its_replay(settings):
    settings.IDEMPOTENCY_MAX_BODY_BYTES = 64 * 1024
    relay, settled = relayed(["Hello", " world"], claim=True)
    events = b"".join(relay)
    assert settled["answer"] == events and settled["output_tokens"] == count_tokens("Hello world")


@pytest.mark.parametrize("pieces", [
    ["Hel", "lo wor", "ld, again."],
    ["   ", "\n"],
    ["x" * 40_000],  # one endless word
    ["a, b " * 5000, "c" * 30_000, ". d"],
])
def test_the_running_count_is_the_count_of_the_whole_text(pieces):
    tally = ReplyTokens()
    for piece in pieces:
        tally.add(piece)
    assert abs(tally.tokens() - count_tokens("".join(pieces))) <= (1 if len("".join(pieces)) > 16384 else 0)
