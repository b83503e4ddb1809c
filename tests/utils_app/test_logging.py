"""Log lines: the request id on each, one summary per request, JSON with LOG_FORMAT=json, never a secret."""
import json
import logging
import os
import subprocess
import sys
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
    assert "[plain-1] POST chat-completions local-chat 200 credits=1 " in summary
    assert summary.endswith(f"key={key.prefix}")


@pytest.mark.django_db
def test_the_json_summary_has_every_field_once_per_request(client, seeded, free_key, captured):
    key, secret = free_key
    logs = captured("json")
    body = post(client, CHAT, HELLO, secret, HTTP_X_REQUEST_ID="json-1").json()
    post(client, CHAT, HELLO, "sk-" + "n" * 40, HTTP_X_REQUEST_ID="json-2")  # an unknown key: 401
    first, second = logs.summaries()
    assert {name: first[name] for name in ("request_id", "key", "method", "operation", "model", "status",
                                           "credits", "input_tokens", "output_tokens")} == {
        "request_id": "json-1", "key": key.prefix, "method": "POST", "operation": "chat-completions",
        "model": "local-chat", "status": 200, "credits": 1, "input_tokens": body["usage"]["prompt_tokens"],
        "output_tokens": body["usage"]["completion_tokens"]}
    assert first["total_ms"] >= first["upstream_ms"] >= 0
    assert first["level"] == "INFO" and first["time"].endswith("+00:00")
    assert (second["request_id"], second["status"], second["key"], second["model"]) == ("json-2", 401, "", "")


@pytest.mark.django_db
def test_a_streams_summary_is_written_when_it_ends(client, seeded, free_key, captured):
    _, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "stream": True}, secret, HTTP_X_REQUEST_ID="stream-1")
    events = iter(response.streaming_content)
    next(events)
    assert logs.summaries() == []
    rest = b"".join(events)
    assert rest.endswith(b"data: [DONE]\n\n")
    [summary] = logs.summaries()
    assert (summary["request_id"], summary["status"], summary["credits"]) == ("stream-1", 200, 1)
    assert summary["output_tokens"] > 0


@pytest.mark.django_db
def test_a_stream_that_fails_midway_is_summed_up_with_its_error_under_its_id(client, seeded, free_key, captured,
                                                                            leaky_upstream):
    add_models(add_provider("leaky", leaky_upstream.base_url), prefix="leaky")
    leaky_upstream.sse("/chat/completions", [chunk("Hel"), DROP])
    _, secret = free_key
    logs = captured("json")
    response = post(client, CHAT, {**HELLO, "model": "leaky-chat", "stream": True}, secret,
                    HTTP_X_REQUEST_ID="broken-1")
    assert response["X-Request-ID"] == "broken-1"
    assert b'"upstream_unavailable"' in b"".join(response.streaming_content)
    [summary] = logs.summaries()
    assert (summary["request_id"], summary["status"], summary["credits"]) == ("broken-1", 502, 0)
    assert all(line["request_id"] == "broken-1" for line in logs.json_lines())


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
