"""Strings an upstream or a client chooses, turned against the gateway: a free endpoint made to burn CPU,
a secret quoted back in another form than the one sent, and line breaks that forge a log line, a table row
or a whole server-sent event (docs/hardening.md, "Hostile strings")."""
import base64
import contextlib
import json
import logging
import re
from io import StringIO
from urllib.parse import unquote, urlsplit

import pytest
from django.core.management import CommandError, call_command

from gateway import probes, tokens
from gateway.conversation import PassedThrough
from gateway.messages.stream import AnthropicEvents
from gateway.upstream.scrub import scrub
from models_catalog.models import Deployment, Provider
from tests.gateway.anthropic_fake import (
    ANTHROPIC_KEY,
    ANTHROPIC_KEY_ENV,
    FORGED_TYPE,
    FakeAnthropic,
    forged_event,
    start_event,
    stream_events,
)
from tests.gateway.conftest import UPSTREAM_KEY_ENV, UPSTREAM_SECRET, credits_of, post, serve
from tests.gateway.fake_servers import FORGED_LINE, quoted_back
from utils_app import logging as request_log
from utils_app.errors import UpstreamError
from utils_app.logging import JsonFormatter, RequestIdFilter

pytestmark = pytest.mark.django_db
HELLO = [{"role": "user", "content": "Hello"}]
COUNT = "/v1/messages/count_tokens"
FORMS = sorted(quoted_back("sk-x", "h:1"))


# ---------------------------------------------------------------- what the tests look at

class Logs:
    """Every record logged while it is installed, formatted plain and as JSON (the two LOG_FORMATs)."""

    def __init__(self, settings):
        self.plain, self.json = StringIO(), StringIO()
        plain_format = settings.LOGGING["formatters"]["plain"]["format"]
        self.handlers = [self._handler(self.plain, logging.Formatter(plain_format)),
                         self._handler(self.json, JsonFormatter())]

    @staticmethod
    def _handler(stream, formatter) -> logging.Handler:
        handler = logging.StreamHandler(stream)
        handler.addFilter(RequestIdFilter())
        handler.setFormatter(formatter)
        return handler

    @property
    def text(self) -> str:
        return self.plain.getvalue() + self.json.getvalue()

    def summaries(self) -> list[dict]:
        lines = [json.loads(line) for line in self.json.getvalue().splitlines()]
        return [line for line in lines if line["logger"] == "gateway.requests"]


@pytest.fixture
def logs(settings):
    found = Logs(settings)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    for handler in found.handlers:
        root.addHandler(handler)
    yield found
    for handler in found.handlers:
        root.removeHandler(handler)
    root.setLevel(level)


def b64_cores(secret: str) -> set[str]:
    """What of the secret's base64 no other bytes can change, at each of the 3 places it may start in a
    3-byte group of a longer base64 text, in both alphabets."""
    raw, cores = secret.encode(), set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            encoded = encode(bytes(offset) + raw).decode()
            cores.add(encoded[-(-8 * offset // 6):8 * (offset + len(raw)) // 6])
    return cores


def leaks(text: str, secret: str, base_url: str) -> list[str]:
    """The forms in which ``text`` still holds the secret or the upstream's address: read back the way a
    person would (percent and JSON escapes undone, any case, separators dropped), and the secret's base64."""
    host = urlsplit(base_url)
    plain = re.sub(r"\\u([0-9a-fA-F]{4})", lambda escape: chr(int(escape[1], 16)), unquote(text)).lower()
    joined = re.sub(r"""[\s"'+]""", "", plain)
    found = [needle for needle in (secret.lower(), host.netloc.lower(), host.hostname.lower()) if needle in joined]
    unwrapped = re.sub(r"\s|\\[rn]", "", text)
    return found + [core for core in b64_cores(secret) if core in unwrapped]


# ---------------------------------------------------------------- count_tokens: a bounded free call

def test_count_tokens_refuses_a_body_over_its_limit_before_parsing_it(client, seeded, free_key, settings):
    key, secret = free_key
    settings.COUNT_TOKENS_MAX_BYTES = 4096
    refused = post(client, COUNT, b'{"model": "local-chat", ' + b"x" * 5000, secret)  # not even JSON
    assert refused.status_code == 413, refused.content
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "request_too_large"
    assert "4096 bytes" in error["error"]["message"]
    fits = post(client, COUNT, {"model": "local-chat", "messages": [{"role": "user", "content": "x" * 3000}]},
                secret)
    assert fits.status_code == 200 and fits.json() == {"input_tokens": 600}
    assert credits_of(key) == 100


def test_count_tokens_takes_two_mebibytes_unless_told_otherwise(client, seeded, free_key, settings):
    """Far below MAX_REQUEST_BYTES: a 15 MB body took 1.9 s of CPU to count, where refusing a chat request
    of that size takes a tenth of a second."""
    _, secret = free_key
    assert settings.COUNT_TOKENS_MAX_BYTES == 2 * 1024 * 1024 < settings.MAX_REQUEST_BYTES
    text = "def f(x):\n    return {'a': [x, 2]}\n"
    body = {"model": "local-chat", "messages": [{"role": "user", "content": text * 40000}]}
    counted = post(client, COUNT, body, secret)
    assert counted.status_code == 200 and counted.json() == {"input_tokens": tokens.count_tokens(text * 40000)}
    body["messages"][0]["content"] = text * 70000  # 2.6 MB of JSON
    assert post(client, COUNT, body, secret).json()["error"]["type"] == "request_too_large"


def _counted_word_by_word(text: str) -> int:
    """The estimate's rule, spelled out: a punctuation mark is a token, a word one per started 5 characters."""
    total = sum(1 + (len(word) - 1) // 5 for word in re.findall(r"\w+", text))
    return max(total + len(re.findall(r"[^\w\s]", text)), 1) if text else 0


@pytest.mark.parametrize("text", ["", " \n\t ", "a", "Hello there.", "internationalization", "x" * 23 + "!",
                                  "naïve café, 東京タワー: 12345678901 (a_b_c_d_e_f)", "def f(x):\n    return {'a': [1]}\n",
                                  "sk-" + "Ab1_" * 40, "\u2028\x00\x1f" * 3])
def test_the_estimate_still_counts_by_its_rule(text):
    assert tokens.count_tokens(text) == _counted_word_by_word(text)


# ---------------------------------------------------------------- secrets in other forms

@pytest.fixture
def hostile_claude(monkeypatch, db):
    """An anthropic deployment named by host name (localhost), so that its address has letters to change
    the case of."""
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)
    fake = FakeAnthropic().start()
    base_url = f"http://localhost:{fake.server.server_address[1]}"
    provider = Provider.objects.create(name="hostile-claude", type="anthropic", base_url=base_url,
                                       api_key_env=ANTHROPIC_KEY_ENV, timeout=5)
    serve("claude-chat", [(provider, "claude-sonnet-4-5", 1)])
    yield fake, base_url
    fake.stop()


@pytest.fixture
def hostile_openai(upstream, monkeypatch, db):
    monkeypatch.setenv(UPSTREAM_KEY_ENV, UPSTREAM_SECRET)
    base_url = f"http://localhost:{upstream.server.server_address[1]}/v1"
    serve("gpt-chat", [(Provider.objects.create(name="hostile-openai", type="openai", base_url=base_url,
                                                api_key_env=UPSTREAM_KEY_ENV, timeout=5), "gpt-x", 1)])
    return upstream, base_url


@pytest.mark.parametrize("form", FORMS)
def test_an_anthropic_upstream_quoting_its_key_back_in_any_form_is_told_to_nobody(client, free_key, hostile_claude,
                                                                                  logs, form):
    fake, base_url = hostile_claude
    _, secret = free_key
    fake.quote_back(form)
    response = post(client, "/v1/messages", {"model": "claude-chat", "max_tokens": 16, "messages": HELLO}, secret)
    assert response.status_code == 400, response.content
    message = response.json()["error"]["message"]
    assert "[redacted]" in message or "[upstream]" in message, message
    assert leaks(response.content.decode(), ANTHROPIC_KEY, base_url) == []
    assert leaks(logs.text, ANTHROPIC_KEY, base_url) == []
    assert logs.summaries()[-1]["error"]  # the log did get the message, scrubbed


@pytest.mark.parametrize("form", FORMS)
def test_an_openai_upstream_quoting_its_key_back_in_message_code_and_param_is_told_to_nobody(client, free_key,
                                                                                          hostile_openai, logs, form):
    upstream, base_url = hostile_openai
    _, secret = free_key
    host = urlsplit(base_url).netloc
    text = quoted_back(UPSTREAM_SECRET, host)[form]
    upstream.fail_all(400, {"error": {"message": text, "code": text, "param": text, "type": "invalid_request_error"}})
    response = post(client, "/v1/chat/completions", {"model": "gpt-chat", "messages": HELLO}, secret)
    assert response.status_code == 400, response.content
    assert leaks(response.content.decode(), UPSTREAM_SECRET, base_url) == []
    assert leaks(logs.text, UPSTREAM_SECRET, base_url) == []


@pytest.mark.parametrize("before", [b"", b"a", b"ab", b"abc", b"user:", b"Bearer:x"])
@pytest.mark.parametrize("after", [b"", b"!", b"?x", b"xyz"])
def test_a_secret_inside_a_longer_base64_text_is_taken_out_at_every_alignment(before, after, monkeypatch):
    other = "sk-another-providers-secret-9876543210"  # held by the gateway, never sent to this upstream
    monkeypatch.setenv("GATEWAY_UPSTREAM_OTHER_KEY", other)
    for secret in (UPSTREAM_SECRET, other):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(before + secret.encode() + after).decode()
            cleaned = scrub(f"header {encoded} refused", UPSTREAM_SECRET, "http://127.0.0.1:9/v1")
            assert "[redacted]" in cleaned
            assert [core for core in b64_cores(secret) if core in cleaned] == []


def test_the_scrubber_leaves_text_that_only_looks_alike():
    text = "Model 'gpt-x' does not exist; see https://platform.example.com/docs (error sk-12 of 3)."
    assert scrub(text, UPSTREAM_SECRET, "http://127.0.0.1:9/v1") == text


# ---------------------------------------------------------------- line breaks into logs, tables, events

@pytest.mark.parametrize("status", [400, 429])
def test_an_upstream_code_with_a_line_break_forges_no_log_line(client, free_key, hostile_openai, logs, status):
    upstream, _ = hostile_openai
    _, secret = free_key
    upstream.fail_all(status, {"error": {"message": "refused" + FORGED_LINE, "code": "bad" + FORGED_LINE,
                                         "param": "messages" + FORGED_LINE, "type": "invalid_request_error"}})
    response = post(client, "/v1/chat/completions", {"model": "gpt-chat", "messages": HELLO}, secret)
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert "\n" not in error["code"] and "\n" not in (error["param"] or "")
    plain = logs.plain.getvalue()
    assert "[forged]" in plain  # the forged words are there, inside the one summary line
    assert not [line for line in plain.splitlines() if line.startswith("2026-01-01")]
    [summary] = [line for line in plain.splitlines() if " gateway.requests " in line]
    attempts = re.search(r" failed_attempts=(\S+) ", summary)
    assert attempts and attempts[1].startswith("hostile-openai#") and "_2026-01-01_00_00_00" in attempts[1]
    assert all(re.fullmatch(r"[^\s,]+", attempt) for attempt in logs.summaries()[-1]["failed_attempts"])


def test_the_summary_line_keeps_failed_attempts_on_it_whoever_noted_them(logs):
    line = request_log.begin("attempts-1", method="POST")
    line.attempts.append("p#1:bad" + FORGED_LINE)
    request_log.write(line, 502)
    [summary] = logs.plain.getvalue().splitlines()
    assert " failed_attempts=p#1:bad 2026-01-01 00:00:00,000 INFO gateway.requests [forged]" in summary


def test_one_line_leaves_no_character_that_ends_a_line():
    assert request_log.one_line("a\u2028b\x1b[31mc\r\n\x00d\x85e\tf") == "a b [31mc d e f"


def test_a_probe_failure_with_line_breaks_stays_one_row_of_the_table(hostile_openai):
    upstream, _ = hostile_openai
    upstream.fail_all(400, {"error": {"message": "no" + FORGED_LINE, "code": "bad" + FORGED_LINE}})
    deployment = Deployment.objects.get(model__model_id="gpt-chat")
    assert "\n" not in probes.probe(deployment).detail
    out = StringIO()
    with contextlib.suppress(CommandError):  # a failed probe may make the command exit with status 1
        call_command("probe_deployments", "--all", stdout=out)
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if line.startswith("2026-01-01")]
    [row] = [line for line in lines if line.split()[:3] == [str(deployment.pk), "gpt-chat", "hostile-openai"]]
    assert "bad 2026-01-01" in row and "[forged]" in row


def sse_events(response) -> list[tuple[list[str], str]]:
    """The client's events: the event: lines and the data of each block."""
    assert response.status_code == 200, response.content
    text = b"".join(response.streaming_content).decode()
    blocks = [block.split("\n") for block in text.strip("\n").split("\n\n")]
    return [([line[7:] for line in block if line.startswith("event: ")],
             "".join(line[6:] for line in block if line.startswith("data: "))) for block in blocks]


def test_an_event_type_holding_an_event_of_its_own_is_refused_before_any_output(client, free_key, hostile_claude):
    fake, _ = hostile_claude
    key, secret = free_key
    fake.stream(start_event(), forged_event(), *stream_events("Hello")[1:])
    response = post(client, "/v1/messages", {"model": "claude-chat", "max_tokens": 16, "messages": HELLO,
                                             "stream": True}, secret)
    assert response.status_code == 502, response.content
    assert response.json()["error"]["type"] == "api_error"
    assert "malformed stream event" in response.json()["error"]["message"]
    assert credits_of(key) == 100  # refunded: nothing reached the client


def test_an_event_type_holding_an_event_of_its_own_after_output_ends_the_stream_with_an_error(client, free_key,
                                                                                              hostile_claude):
    fake, _ = hostile_claude
    _, secret = free_key
    events = stream_events("Hello")
    at = next(index for index, event in enumerate(events) if event["type"] == "content_block_delta") + 1
    fake.stream(*events[:at], forged_event(), *events[at:])
    response = post(client, "/v1/messages", {"model": "claude-chat", "max_tokens": 16, "messages": HELLO,
                                             "stream": True}, secret)
    found = sse_events(response)
    assert all(len(names) == 1 and re.fullmatch(r"[a-z_]+", names[0]) and data for names, data in found), found
    names = [names[0] for names, _ in found]
    assert names[-1] == "error" and "message_stop" not in names
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert json.loads(found[-1][1])["error"]["type"] == "api_error"


@pytest.mark.parametrize("kind", [FORGED_TYPE, "ping\r", "", None, 7, "message stop"])
def test_the_messages_stream_never_names_an_event_with_what_is_not_a_name(kind):
    with pytest.raises(UpstreamError):
        AnthropicEvents().chunk(PassedThrough({"model": "claude-chat"}, {"type": kind}))
    assert AnthropicEvents().chunk(PassedThrough({"model": "claude-chat"}, {"type": "ping"})) == (
        b'event: ping\ndata: {"type":"ping"}\n\n')
