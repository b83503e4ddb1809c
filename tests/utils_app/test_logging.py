"""Log lines: the request id on each, one summary per request, JSON with LOG_FORMAT=json, never a secret."""
import ipaddress
import json
import logging
import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import gevent
import pytest

from tests.gateway.conftest import (
    DROP,
    FakeUpstream,
    UPSTREAM_KEY_ENV,
    UPSTREAM_SECRET,
    add_models,
    add_provider,
    chunk,
    post,
)
from utils_app import logging as request_log
from utils_app.logging import JsonFormatter, RequestIdFilter

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


class Captured:
    """Everything logged, at every level, through the filter and the formatter the settings install."""

    def __init__(self, formatter: logging.Formatter):
        self.stream = StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.addFilter(RequestIdFilter())
        self.handler.setFormatter(formatter)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.text.splitlines()]

    def summaries(self) -> list[dict]:
        return [line for line in self.json_lines() if line["logger"] == "gateway.requests"]


@pytest.fixture
def captured(settings):
    def capture(kind: str) -> Captured:
        formatters = settings.LOGGING["formatters"]
        formatter = JsonFormatter() if kind == "json" else logging.Formatter(formatters["plain"]["format"])
        found = Captured(formatter)
        root = logging.getLogger()
        previous_level = root.level
        root.addHandler(found.handler)
        root.setLevel(logging.DEBUG)
        opened.append((found.handler, previous_level))
        return found

    opened = []
    yield capture
    for handler, level in opened:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)


@pytest.fixture
def leaky_upstream(monkeypatch):
    """An upstream whose errors repeat the gateway's own credential back, as a careless one might."""
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    server = FakeUpstream()
    server.start()
    yield server
    server.stop()


@pytest.mark.django_db
def test_a_plain_line_carries_the_request_id_and_the_summary_says_what_happened(client, seeded, free_key,
                                                                              captured):
    key, secret = free_key
    logs = captured("plain")
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="plain-1")
    assert response.status_code == 200
    [summary] = [line for line in logs.text.splitlines() if " gateway.requests " in line]
    assert f"[{response['X-Request-ID']}] POST chat-completions local-chat 200 credits=1 " in summary
    assert summary.endswith(f" key={key.prefix} bytes={len(response.content)} client=127.0.0.1 "
                            f"client_request_id=plain-1")


@pytest.mark.django_db
def test_the_json_summary_has_every_field_once_per_request(client, seeded, free_key, captured):
    key, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="json-1")
    body = response.json()
    refused = post(client, CHAT, HELLO, "sk-" + "n" * 40)  # an unknown key: 401
    first, second = logs.summaries()
    assert {name: first[name] for name in ("request_id", "client_request_id", "key", "method", "operation", "model",
                                           "status", "credits", "input_tokens", "output_tokens")} == {
        "request_id": response["X-Request-ID"], "client_request_id": "json-1", "key": key.prefix, "method": "POST",
        "operation": "chat-completions",
        "model": "local-chat", "status": 200, "credits": 1, "input_tokens": body["usage"]["prompt_tokens"],
        "output_tokens": body["usage"]["completion_tokens"]}
    assert first["total_ms"] >= first["upstream_ms"] >= 0
    assert first["level"] == "INFO" and first["time"].endswith("+00:00")
    assert (second["request_id"], second["client_request_id"], second["status"], second["key"], second["model"]) == (
        refused["X-Request-ID"], None, 401, "", "")


@pytest.mark.django_db
def test_a_streams_summary_is_written_when_it_ends(client, seeded, free_key, captured):
    _, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "stream": True}, secret)
    events = iter(response.streaming_content)
    next(events)
    assert logs.summaries() == []
    rest = b"".join(events)
    assert rest.endswith(b"data: [DONE]\n\n")
    [summary] = logs.summaries()
    assert (summary["request_id"], summary["status"], summary["credits"]) == (response["X-Request-ID"], 200, 1)
    assert summary["output_tokens"] > 0


@pytest.mark.django_db
def test_a_stream_that_fails_midway_is_summed_up_with_its_error_under_its_id(client, seeded, free_key, captured,
                                                                            leaky_upstream):
    add_models(add_provider("leaky", leaky_upstream.base_url), prefix="leaky")
    leaky_upstream.sse("/chat/completions", [chunk("Hel"), DROP])
    _, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "model": "leaky-chat", "stream": True}, secret)
    made = response["X-Request-ID"]
    assert b'"upstream_unavailable"' in b"".join(response.streaming_content)
    [summary] = logs.summaries()
    # "Hel" reached the client: charged (CONTRACT section 5), and the summary says how the stream ended,
    # with the reason its error event gave.
    assert (summary["request_id"], summary["status"], summary["credits"]) == (made, 502, 1)
    assert summary["error"].startswith("upstream_unavailable: ")
    assert all(line["request_id"] == made for line in logs.json_lines())


@pytest.mark.django_db
def test_no_secret_reaches_the_logs_whatever_happens(client, seeded, free_key, captured, leaky_upstream):
    add_models(add_provider("leaky", leaky_upstream.base_url), prefix="leaky")
    leaky_upstream.fail_all(400, {"error": {"message": f"bad key {UPSTREAM_SECRET}", "code": "bad"}})
    key, secret = free_key
    plain, as_json = captured("plain"), captured("json")
    post(client, CHAT, HELLO, secret)
    post(client, CHAT, {**HELLO, "stream": True}, secret).getvalue()
    post(client, CHAT, {**HELLO, "model": "leaky-chat"}, secret)
    post(client, CHAT, HELLO, secret + "x")  # a wrong key that contains the real one
    post(client, CHAT, {"model": "local-chat"}, secret)  # invalid body
    leaky_upstream.fail_all(500, {"error": {"message": f"crashed with {UPSTREAM_SECRET}"}})
    post(client, CHAT, {**HELLO, "model": "leaky-chat"}, secret)
    assert len(as_json.summaries()) == 6
    assert any(line["status"] == 502 for line in as_json.summaries())
    for text in (plain.text, as_json.text):
        assert secret not in text and UPSTREAM_SECRET not in text
        assert key.prefix in text  # the display prefix is what names a key


def test_each_greenlet_sees_its_own_request():
    seen = {}

    def serve(request_id):
        request_log.begin(request_id)
        gevent.sleep(0)  # the other greenlet runs and begins its own request meanwhile
        seen[request_id] = request_log.current_request_id()

    gevent.joinall([gevent.spawn(serve, "first"), gevent.spawn(serve, "second")])
    assert seen == {"first": "first", "second": "second"}


def _django_process(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + code], cwd=ROOT,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway.settings", **env},
                          capture_output=True, text=True, timeout=60)


def test_log_format_json_makes_every_record_a_json_line():
    done = _django_process("import logging; logging.getLogger('somewhere').warning('disk %s full', 'very')",
                           LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(line) for line in done.stderr.splitlines()]
    assert {name: line[name] for name in ("level", "logger", "message", "request_id")} == {
        "level": "WARNING", "logger": "somewhere", "message": "disk very full", "request_id": None}


def test_an_unknown_log_format_stops_the_service_naming_the_variable():
    done = _django_process("", LOG_FORMAT="xml")
    assert done.returncode != 0
    assert "LOG_FORMAT must be plain or json" in done.stderr


# ---------------------------------------------------------------- one line per request, with its reason

def request_lines(logs: Captured, request_id: str) -> list[dict]:
    return [line for line in logs.json_lines() if line["request_id"] == request_id]


@pytest.mark.django_db
def test_a_failed_upstream_call_is_summed_up_with_its_reason_and_django_adds_no_line(client, seeded, free_key,
                                                                                   captured, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    key, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "model": "gpt-5-mini"}, secret, HTTP_X_REQUEST_ID="failed-1")
    assert response.status_code == 502
    lines = request_lines(logs, response["X-Request-ID"])
    assert not [line for line in lines if line["logger"] == "django.request"]
    [summary] = [line for line in lines if line["logger"] == "gateway.requests"]
    assert summary["error"] == response.json()["error"]["code"] + ": " + response.json()["error"]["message"] == (
        "upstream_unavailable: The upstream provider 'openai' is not configured on this gateway "
        "(OPENAI_API_KEY is not set).")
    assert (summary["status"], summary["credits"], summary["bytes"]) == (502, 0, len(response.content))
    assert 'error="upstream_unavailable: ' in summary["message"]
    key.refresh_from_db()
    assert key.credits == 100  # refunded


@pytest.mark.django_db
def test_refusals_are_summed_up_with_their_reason_and_successes_with_none(client, seeded, free_key, captured):
    _, secret = free_key
    logs = captured("json")
    post(client, CHAT, b"{not json", secret, HTTP_X_REQUEST_ID="bad-json")
    post(client, CHAT, HELLO, "sk-" + "n" * 40, HTTP_X_REQUEST_ID="bad-key")
    client.get("/no/such/path", HTTP_X_REQUEST_ID="no-path")
    post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="fine")
    errors = {line["client_request_id"]: (line["status"], line["error"]) for line in logs.summaries()}
    assert errors == {"bad-json": (400, "invalid_json: The request body is not valid JSON."),
                      "bad-key": (401, "invalid_api_key: Invalid API key."),
                      "no-path": (404, "not_found: No operation at /no/such/path."),
                      "fine": (200, None)}
    assert not [line for line in logs.json_lines() if line["logger"] == "django.request"]


@pytest.mark.django_db
@pytest.mark.urls("tests.probe_urls")
def test_an_unexpected_error_keeps_its_traceback_once_beside_its_summary(seeded, captured):
    from django.test import Client

    logs = captured("json")
    response = Client(raise_request_exception=False).get("/probe/boom", HTTP_X_REQUEST_ID="boom-1")
    lines = request_lines(logs, response["X-Request-ID"])
    assert [line["logger"] for line in lines] == ["gateway.errors", "gateway.requests"]
    assert "RuntimeError" in lines[0]["exception"]
    assert lines[1]["error"] == "internal_error: The server failed to handle the request."
    assert "secret-internal-detail" not in lines[1]["message"]


def test_an_error_message_is_kept_on_one_line_and_cut():
    line = request_log.begin("forged")
    request_log.record_error("invalid_value", "messages.0.role: bad\nINFO gateway.requests forged line" + "x" * 500)
    assert "\n" not in line.error
    assert line.error.startswith("invalid_value: messages.0.role: bad INFO gateway.requests forged line")
    assert len(line.error) == request_log.MAX_ERROR_CHARS


@pytest.mark.django_db
def test_a_forwarded_address_cannot_write_a_log_line_of_its_own(client, settings, captured):
    # Behind a trusted proxy that passes the header on as the client wrote it, the address is the client's text.
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    logs = captured("plain")
    forged = "203.0.113.5\r\nINFO gateway.requests [0] GET health - 200 forged" + "x" * 500
    response = client.get("/health", HTTP_X_FORWARDED_FOR=forged)
    [line] = [line for line in logs.text.splitlines() if f"[{response['X-Request-ID']}]" in line]
    assert " client=203.0.113.5 INFO gateway.requests [0] GET health - 200 forged" in line
    assert len(line.partition(" client=")[2]) == request_log.MAX_CLIENT_CHARS
    assert "forged" not in logs.text.replace(line, "")


@pytest.mark.django_db
def test_the_summary_names_the_route_never_the_path_or_its_query(client, seeded, captured):
    from gateway import media

    name = media.save(b"\x89PNG" + b"0" * 2044, kind="images", extension="png")
    logs = captured("plain")
    listed = client.get("/v1/models?web-view=true&token=sk-query-secret")
    downloaded = client.get(f"/media/{name}")
    assert downloaded.status_code == 200
    assert "sk-query-secret" not in logs.text and "web-view" not in logs.text
    assert name.split("/")[-1] not in logs.text  # a media file's name is what lets anyone fetch it
    [listing] = [line for line in logs.text.splitlines() if f"[{listed['X-Request-ID']}]" in line]
    [download] = [line for line in logs.text.splitlines() if f"[{downloaded['X-Request-ID']}]" in line]
    assert " GET models - 200 " in listing
    assert " GET media - 200 " in download and " bytes=2048 " in download  # the file's size, not 0


@pytest.mark.django_db
def test_a_streams_summary_counts_the_bytes_it_relayed(client, seeded, free_key, captured):
    _, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "stream": True}, secret, HTTP_X_REQUEST_ID="stream-bytes")
    body = b"".join(response.streaming_content)
    [summary] = logs.summaries()
    assert summary["bytes"] == len(body) > 0
    assert summary["client"] == "127.0.0.1"


def _gunicorn_setting(name: str, **env) -> object:
    done = subprocess.run([sys.executable, "-c", f"import gateway.gunicorn_conf as c; print(repr(c.{name}))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**{k: v for k, v in os.environ.items() if k not in ("ACCESS_LOG", "LOG_FORMAT")},
                               **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_gunicorns_access_log_is_off_unless_access_log_asks_for_it():
    assert _gunicorn_setting("accesslog") == "None"
    assert _gunicorn_setting("accesslog", LOG_FORMAT="json") == "None"
    assert _gunicorn_setting("accesslog", ACCESS_LOG="-") == "'-'"


@pytest.mark.served
def test_a_request_served_by_gunicorn_writes_one_line(tmp_path):
    import requests

    from tests.gateway.test_start_up import free_port

    env = {**{k: v for k, v in os.environ.items() if k not in ("ACCESS_LOG", "LOG_FORMAT", "DATABASE_URL",
                                                              "REDIS_URL")},
           "GATEWAY_DATA_DIR": str(tmp_path), "BIND": f"127.0.0.1:{free_port()}"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    log_path = tmp_path / "served.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([str(Path(sys.executable).parent / "gunicorn"), "-c", "python:gateway.gunicorn_conf",
                                   "gateway.wsgi"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://{env['BIND']}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/health", timeout=10).status_code == 200:
                    break
            except requests.RequestException:  # refused or slow: the worker is still booting
                time.sleep(0.1)
        answers = [requests.get(f"{base}/v1/models?web-view=1", headers={"X-Request-ID": "served-1"}, timeout=10),
                   requests.get(f"{base}/v1/models/missing", headers={"X-Request-ID": "served-2"}, timeout=10)]
        assert [answer.status_code for answer in answers] == [200, 404]
        time.sleep(0.5)  # the lines are written as the answers go out
    finally:
        server.terminate()
        server.wait(timeout=20)
    text = log_path.read_text()
    first = answers[0].headers["X-Request-ID"]
    assert [line for line in text.splitlines() if "served-1" in line or "GET /v1/models" in line] == [
        line for line in text.splitlines() if f"[{first}] GET models - 200 " in line and "client_request_id=served-1" in line]
    [missing] = [line for line in text.splitlines() if "served-2" in line or "/v1/models/missing" in line]
    assert " GET model - 404 " in missing and 'error="model_not_found: ' in missing


def test_the_summary_record_is_the_one_log_info_would_make():
    import logging as std_logging

    from utils_app import logging as request_logs

    records = []
    handler = std_logging.Handler()
    handler.emit = records.append
    logger = std_logging.getLogger("gateway.requests")
    logger.addHandler(handler)
    try:
        line = request_logs.RequestLine(request_id="req-1", method="POST", operation="chat-completions",
                                        model="m", key="gw_ab", client="127.0.0.1", credits=2)
        request_logs.write(line, 200, sent=10)
    finally:
        logger.removeHandler(handler)
    [record] = records
    assert (record.levelno, record.name, record.funcName) == (std_logging.INFO, "gateway.requests", "write")
    assert record.pathname == request_logs.__file__ and record.exc_info is None
    assert record.request_id == "req-1" and record.request_fields["credits"] == 2
    assert record.getMessage().startswith("POST chat-completions m 200 credits=2 tokens=0/0 upstream=0.0ms total=")
    assert record.getMessage().endswith(" key=gw_ab bytes=10 client=127.0.0.1")
