"""A real, scriptable OpenAI-compatible upstream on 127.0.0.1 and models that point at it.

The fake upstream is an HTTP/1.1 server in a thread (port 0): the gateway talks to
it over a socket exactly as it would to a real provider, so timeouts, dropped
connections, chunked event streams and client disconnects are real, not mocked.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest
import requests
from django.db import connection

from keys.ledger import mismatches
from keys.models import TIERS, ApiKey, LedgerEntry
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider, UsageEvent
from tests.conftest import bearer

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_SECRET = "sk-upstream-secret-0123456789abcdef"

# A valid body for each operation, on the in-process local models.
LOCAL_BODIES = {
    "chat": ("/v1/chat/completions", {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}),
    "image": ("/v1/images/generations", {"model": "local-image", "prompt": "a red fox", "size": "64x64"}),
    "speech": ("/v1/audio/speech", {"model": "local-speech", "input": "Hello there", "voice": "alloy"}),
    "embedding": ("/v1/embeddings", {"model": "local-embedding", "input": "Hello"}),
}
OPERATIONS = tuple(LOCAL_BODIES)
UPSTREAM_PATHS = {"chat": "/chat/completions", "image": "/images/generations", "speech": "/audio/speech",
                  "embedding": "/embeddings"}


def body_for(operation: str, model: str | None = None, **changes) -> tuple[str, dict]:
    path, body = LOCAL_BODIES[operation]
    body = {**body, **changes}
    if model:
        body["model"] = model
    return path, body


def post(client, path: str, body, secret: str | None = None, **extra):
    headers = bearer(secret) if secret else {}
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(path, data, content_type="application/json", **headers, **extra)


# The APIs whose error shapes in_error_shape tells apart.
OPENAI, ANTHROPIC, GOOGLE = "openai", "anthropic", "google"


def in_error_shape(api: str, status: int, answer) -> bool:
    """Whether ``answer`` is an error as the API's clients parse one: Anthropic's, Google's (its code the
    status) or the contract's (OpenAI's, which the Responses API shares)."""
    if not isinstance(answer, dict):
        return False
    if api == ANTHROPIC:
        return (set(answer) == {"type", "error"} and answer["type"] == "error"
                and isinstance(answer["error"], dict) and set(answer["error"]) == {"type", "message"})
    error = answer.get("error")
    if not isinstance(error, dict):
        return False
    if api == GOOGLE:
        return set(error) == {"code", "message", "status"} and error["code"] == status
    return set(error) == {"message", "type", "param", "code"}


def assert_error(response, status: int, code: str, type_: str = "invalid_request_error", param=...):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["type"]) == (code, type_), error
    if param is not ...:
        assert error["param"] == param, error
    return error


# ---------------------------------------------------------------- scripted upstream answers

@dataclass
class Pause:
    seconds: float


@dataclass
class Gate:
    """Holds the stream until the test opens it; records whether it was opened in time."""

    timeout: float = 10.0
    event: threading.Event = field(default_factory=threading.Event)
    opened_in_time: bool | None = None

    def open(self):
        self.event.set()


DROP = "drop"  # close the connection in the middle of the stream


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    stream: list | None = None
    headers: dict = field(default_factory=dict)


@dataclass
class Received:
    method: str
    path: str
    headers: dict
    body: dict | None
    peer_port: int = 0  # the gateway's side of the connection: equal ports mean a reused connection


def chat_completion(text: str = "Hi from upstream", *, model: str = "upstream-model", prompt_tokens: int = 7,
                    completion_tokens: int = 4) -> dict:
    return {"id": "chatcmpl-up", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chunk(content: str | None = None, *, finish_reason=None, usage=None, choices=True) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1700000000, "model": "upstream-model",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
            if choices else [], "usage": usage}


def usage_chunk(prompt_tokens: int = 9, completion_tokens: int = 3) -> dict:
    return chunk(choices=False, usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                       "total_tokens": prompt_tokens + completion_tokens})


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of connections from the gateway's pool is accepted at once

    def handle_error(self, request, client_address):
        # The gateway drops kept-alive or half-read connections when a stream ends early: expected here.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class FakeUpstream:
    def __init__(self):
        self.replies: dict[str, Reply] = {}
        self.fallback_reply: Reply | None = None
        self.calls: list[Received] = []
        self.files: dict[str, tuple[bytes, str]] = {}
        self.redirects: dict[str, str] = {}
        self.client_gone = threading.Event()
        self.events_sent = 0
        self.release = threading.Event()  # ends every pending delay at teardown
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the second waits for the
            # client's delayed acknowledgement of the first (about 40 ms an answer).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_GET(self):
                upstream.calls.append(Received("GET", self.path, dict(self.headers), None, self.client_address[1]))
                path = self.path.removeprefix("/v1")
                if path in upstream.redirects:
                    self.send_response(302)
                    self.send_header("Location", upstream.redirects[path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path not in upstream.files:
                    return self._send(Reply(404, b'{"error": {"message": "no such file"}}'))
                content, content_type = upstream.files[path]
                self._send(Reply(200, content, content_type))

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                upstream.calls.append(Received("POST", self.path, dict(self.headers), body, self.client_address[1]))
                path = self.path.removeprefix("/v1")
                reply = upstream.replies.get(path) or upstream.fallback_reply or Reply(
                    404, b'{"error": {"message": "no reply scripted"}}')
                if reply.delay:
                    upstream.release.wait(reply.delay)
                if reply.stream is not None:
                    return self._stream(reply)
                self._send(reply)

            def _send(self, reply: Reply):
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def _stream(self, reply: Reply):
                self.send_response(reply.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for step in reply.stream:
                        if isinstance(step, Pause):
                            upstream.release.wait(step.seconds)
                        elif isinstance(step, Gate):
                            step.opened_in_time = step.event.wait(step.timeout)
                        elif step == DROP:
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            self.close_connection = True
                            return
                        else:
                            data = step if isinstance(step, str) else json.dumps(step)
                            self._chunk(f"data: {data}\n\n".encode())
                            upstream.events_sent += 1
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    upstream.client_gone.set()
                    self.close_connection = True

            def _chunk(self, data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        # A short poll: shutdown() waits for the loop's next turn, and every test using one pays it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self):
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # -- scripting

    def json(self, path: str, body: dict, *, status: int = 200, delay: float = 0.0):
        self.replies[path] = Reply(status, json.dumps(body).encode(), "application/json", delay)

    def raw(self, path: str, body: bytes, *, content_type: str, status: int = 200, headers: dict | None = None):
        self.replies[path] = Reply(status, body, content_type, headers=headers or {})

    def sse(self, path: str, steps: list, *, status: int = 200):
        self.replies[path] = Reply(status, stream=steps)

    def fail_all(self, status: int = 500, body: dict | None = None, *, delay: float = 0.0):
        payload = body or {"error": {"message": "upstream exploded", "type": "server_error", "code": None}}
        self.fallback_reply = Reply(status, json.dumps(payload).encode(), "application/json", delay)

    def serve_file(self, path: str, content: bytes, content_type: str):
        self.files[path] = (content, content_type)

    def redirect(self, path: str, location: str):
        self.redirects[path] = location

    def posts(self) -> list[Received]:
        return [call for call in self.calls if call.method == "POST"]

    def succeed_all(self):
        """A correct answer for every operation (speech as mp3 bytes, images as b64)."""
        import base64

        self.json("/chat/completions", chat_completion())
        self.json("/images/generations", {"created": 1700000000, "data": [
            {"b64_json": base64.b64encode(PNG_1X1).decode(), "revised_prompt": "a fox, revised"}]})
        self.raw("/audio/speech", b"ID3fake-mp3-bytes", content_type="audio/mpeg")
        self.json("/embeddings", {"object": "list", "model": "up-embed", "data": [
            {"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5}})


# The smallest valid PNG (1x1, grey), for upstream image answers.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a49444154789c63600000000200015c0d0a2d0000000049454e44ae426082")


def _start_upstream():
    server = FakeUpstream()
    server.start()
    return server


@pytest.fixture
def upstream():
    server = _start_upstream()
    yield server
    server.stop()


@pytest.fixture
def backup_upstream():
    server = _start_upstream()
    yield server
    server.stop()


def closed_port_url() -> str:
    """An address on which nothing listens: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# Under GATEWAY_UPSTREAM_, a prefix every provider may name (models_catalog.served.secret_env_allowed).
UPSTREAM_KEY_ENV = "GATEWAY_UPSTREAM_FAKE_KEY"


def add_provider(name: str, base_url: str, *, timeout: float = 3.0, api_key_env: str = UPSTREAM_KEY_ENV):
    return Provider.objects.create(name=name, type="openai", base_url=base_url, api_key_env=api_key_env,
                                   timeout=timeout)


def add_models(provider: Provider, *, prefix: str = "fake", fallbacks=(), cost: int = 1, tiers=TIERS,
               **model_fields) -> dict:
    """One model of each type on the provider, with the providers named in ``fallbacks`` as further
    deployments at priorities 2, 3… (the older catalog form): {operation: model id}."""
    ids = {}
    chain = [provider, *(Provider.objects.get(name=name) for name in fallbacks)]
    for operation in OPERATIONS:
        model_id = f"{prefix}-{operation}"
        model = AiModel.objects.create(model_id=model_id, type=operation, owned_by="fake", cost=cost,
                                       tiers=list(tiers), **model_fields)
        for priority, member in enumerate(chain, start=1):
            for secret_env in member.secret_envs():
                Deployment.objects.create(model=model, provider=member, secret_env=secret_env,
                                          upstream_model=f"up-{operation}", priority=priority)
        ids[operation] = model_id
    catalog.invalidate()
    return ids


# The shipped catalog gives local-image and local-speech only to the paid tiers (docs/catalog.md); a
# test that runs every local model uses a key of the first of them.
LOCAL_TIER = "augmented"


def serve(model_id: str, members: list, *, type: str = "chat") -> AiModel:
    """A model served by (provider, upstream model, priority) deployments."""
    model = AiModel.objects.create(model_id=model_id, type=type, owned_by="test", cost=1, tiers=["free"])
    for provider, upstream_model, priority in members:
        Deployment.objects.create(model=model, provider=provider, secret_env=provider.api_key_env,
                                  upstream_model=upstream_model, priority=priority)
    catalog.invalidate()
    return model


@pytest.fixture
def sdk(live_server, free_key):
    """The openai SDK on a live server, with a free key of 100 credits: (client, key)."""
    key, secret = free_key
    with openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30) as client:
        yield client, key


def credits_of(key) -> int:
    return ApiKey.objects.get(pk=key.pk).credits


def charged_once(key, provider: str, operation: str | None = None) -> UsageEvent:
    """One completed charge of one credit by ``provider``, its usage row, and a ledger that reconciles."""
    assert credits_of(key) == 99
    charge = LedgerEntry.objects.get(kind="charge")
    assert (charge.status, charge.provider) == ("completed", provider)
    assert operation in (None, charge.operation)
    assert mismatches() == []
    return UsageEvent.objects.get(success=True)


def failed_answers(sdk_client, attempts) -> list[str]:
    """Each (model, stream) of ``attempts`` asked of the chat API through the openai SDK, which must fail
    with 502 (a stream read to its end); the error bodies, as JSON."""
    answers = []
    for model, stream in attempts:
        with pytest.raises(openai.APIStatusError) as failed:
            result = sdk_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                                        stream=stream)
            if stream:
                list(result)
        assert failed.value.status_code == 502
        answers.append(json.dumps(failed.value.body))
    return answers


def assert_told_nowhere(client, texts, *secrets: str) -> None:
    """None of ``secrets`` (an upstream's key, its URLs) in ``texts`` (answers, the captured log), in
    /metrics (``settings.METRICS_TOKEN`` must be set) or in any row the failures wrote."""
    from django.conf import settings

    scrape = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}")
    assert scrape.status_code == 200
    rows = json.dumps([list(UsageEvent.objects.values()), list(Deployment.objects.values()),
                       list(LedgerEntry.objects.values())], default=str)
    for text in (*texts, scrape.content.decode(), rows):
        for secret in secrets:
            assert secret not in text


@pytest.fixture
def local_key(make_key):
    """A key whose tier may use every local model of the shipped catalog, with 100 credits."""
    return make_key(tier=LOCAL_TIER, credits=100, max_credits=100)


@pytest.fixture
def fake_models(seeded, upstream, monkeypatch):
    """fake-chat, fake-image, fake-speech, fake-embedding, served by the fake upstream."""
    monkeypatch.setenv("GATEWAY_UPSTREAM_FAKE_KEY", UPSTREAM_SECRET)
    ids = add_models(add_provider("fake", upstream.base_url))
    catalog.snapshot()
    return ids


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll until predicate() is true or the time is up; returns the last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def key_clear_of_window_edges(make_key, margin: float = 20.0, **fields):
    """make_key(**fields) for a test whose limits are counted by served processes, which read the real
    clock, not the test's: a key whose minute and hour windows each have at least ``margin`` seconds
    left, so its requests cannot straddle two windows. utils_app.windows shifts each key's windows by
    a hash of its id, so another key is issued until one fits (two tries in three do); nothing waits."""
    from utils_app.windows import seconds_left

    for _ in range(100):
        key, secret = make_key(**fields)
        if min(seconds_left(f"key:{key.pk}", period) for period in (60, 3600)) >= margin:
            return key, secret
    raise AssertionError(f"no key of 100 had {margin} s left in its windows")


# ---------------------------------------------------------------- the service under gunicorn

def _free_port() -> int:
    for port in range(18100, 18200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18100-18199")


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Server(str):
    """A served base URL that also knows the gunicorn master's process id."""

    pid: int

    def worker_pids(self) -> list[int]:
        children = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True).stdout
        return [int(pid) for pid in children.split()]


@contextmanager
def gunicorn(data_dir: Path, *, workers: int = 1, threads: int = 4, env: dict | None = None):
    """The working tree served by gunicorn in a subprocess, on the test database (PostgreSQL only:
    it must be reachable from another process) and on REDIS_URL when the tests have one."""
    port = _free_port()
    name = data_dir.name
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "gunicorn.log"
    env = {**os.environ, "DATABASE_URL": _database_url(), "GATEWAY_DATA_DIR": str(data_dir),
           "BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers), "GUNICORN_THREADS": str(threads),
           "ACCESS_LOG": os.devnull, "LOG_LEVEL": "WARNING",
           # Each served worker opens its whole share at start; the tests' servers share one
           # PostgreSQL (its max_connections) with each other and with the tests.
           "DATABASE_MAX_CONNECTIONS": "16", **(env or {})}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c",
                                    "python:gateway.gunicorn_conf", "gateway.wsgi"],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = Server(f"http://127.0.0.1:{port}")
    base.pid = process.pid
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn {name} exited: {log_path.read_text()[-2000:]}")
            try:
                if requests.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # refused or slow: the workers are still booting
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn {name} did not start within 60 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
