"""What the HTTP server meets before the application: chunked and unfinished bodies, oversized headers,
malformed requests, and what its access log keeps. Each runs under gunicorn, with both worker kinds."""
import json
import socket
import time
from urllib.parse import urlsplit

import pytest
import requests

from keys.models import LedgerEntry
from tests.gateway.conftest import gunicorn

pytestmark = pytest.mark.postgres

WORKERS = ["gevent", "gthread"]
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


def served(tmp_path, worker: str, **env):
    return gunicorn(tmp_path / "server", threads=4, env={"GUNICORN_WORKER_CLASS": worker, **env})


def raw_exchange(base: str, request: bytes, *, wait: float = 20.0) -> tuple[bytes, float, bool]:
    """Send bytes as they are; returns (the answer's head and body, seconds until it was whole, whether the
    server then closed the connection)."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=wait) as sock:
        started = time.monotonic()
        sock.sendall(request)
        received = b""
        try:
            while (answer := _whole(received)) is None:
                data = sock.recv(65536)
                if not data:
                    return received, time.monotonic() - started, True
                received += data
        except TimeoutError:
            return received, time.monotonic() - started, False
        elapsed = time.monotonic() - started
        sock.settimeout(5)  # the server should now close its end
        try:
            closed = sock.recv(1) == b""
        except (TimeoutError, ConnectionResetError):
            closed = False
        return answer, elapsed, closed


def _whole(received: bytes) -> bytes | None:
    """The answer as head + blank line + body once it is complete (a chunked body joined), else None."""
    head, found, body = received.partition(b"\r\n\r\n")
    if not found:
        return None
    headers = head.lower()
    if b"transfer-encoding: chunked" in headers:
        joined = b""
        while True:
            size_line, found, rest = body.partition(b"\r\n")
            if not found:
                return None
            size = int(size_line, 16)
            if size == 0:
                return head + b"\r\n\r\n" + joined
            if len(rest) < size + 2:
                return None
            joined, body = joined + rest[:size], rest[size + 2:]
    for line in headers.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return received if len(body) >= int(line.split(b":")[1]) else None
    return None


def status_and_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


@pytest.mark.parametrize("worker", WORKERS)
@pytest.mark.served
def test_a_chunked_body_is_served_by_each_worker_kind(transactional_db, seeded, make_key, tmp_path, worker):
    key, secret = make_key(credits=10, max_credits=10)
    body = json.dumps(HELLO).encode()

    def pieces():  # a generator body: requests sends it chunked, without a Content-Length
        yield body[:10]
        yield body[10:]

    with served(tmp_path, worker) as base:
        response = requests.post(f"{base}/v1/chat/completions", data=pieces(), timeout=30,
                                 headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})

    assert response.status_code == 200, response.text
    assert "You wrote: \"Hello\"" in response.json()["choices"][0]["message"]["content"]
    assert LedgerEntry.objects.get(key=key, kind="charge").status == "completed"


@pytest.mark.parametrize("worker", WORKERS)
@pytest.mark.served
def test_a_body_one_byte_short_is_answered_408_within_body_read_seconds_and_closed(transactional_db, tmp_path,
                                                                                   worker):
    body = json.dumps(HELLO).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer sk-whoever\r\nContent-Length: {len(body) + 1}\r\n\r\n").encode() + body

    with served(tmp_path, worker, BODY_READ_SECONDS="2") as base:
        answer, seconds, closed = raw_exchange(base, request)
        assert requests.get(f"{base}/health", timeout=10).status_code == 200  # the worker serves on

    status, error = status_and_error(answer)
    assert (status, error["code"], error["type"]) == (408, "request_timeout", "invalid_request_error")
    assert error["message"] == "The request body did not arrive within 2 seconds."
    assert 1.5 < seconds < 8
    assert closed


@pytest.mark.parametrize("worker", WORKERS)
@pytest.mark.served
def test_errors_the_server_answers_itself_are_in_the_json_error_shape(transactional_db, tmp_path, worker):
    with served(tmp_path, worker) as base:
        oversized = requests.get(f"{base}/v1/models", headers={"X-Padding": "p" * 10000}, timeout=10)
        malformed, _, _ = raw_exchange(base, b"BOGUS REQUEST LINE\r\n\r\n")
        bad_chunk, _, _ = raw_exchange(base, b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                                             b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")

    assert oversized.status_code == 431
    assert oversized.headers["Content-Type"] == "application/json"
    error = oversized.json()["error"]
    assert (error["code"], error["type"], error["param"]) == ("request_headers_too_large", "invalid_request_error",
                                                               None)
    assert set(error) == {"message", "type", "param", "code"}
    status, error = status_and_error(malformed)
    assert (status, error["code"]) == (400, "malformed_request")
    status, error = status_and_error(bad_chunk)  # found while the application reads the body
    assert (status, error["code"], error["message"]) == (400, "invalid_body", "The request body could not be read.")


@pytest.mark.served
def test_no_log_line_of_the_server_holds_a_query_string(transactional_db, tmp_path):
    access_log = tmp_path / "access.log"
    secret = "sk-in-the-query-0123456789abcdef"
    with served(tmp_path, "gthread", ACCESS_LOG=str(access_log), LOG_LEVEL="INFO") as base:
        assert requests.get(f"{base}/v1/models?api_key={secret}", timeout=10).status_code == 200
        requests.get(f"{base}/v1/models?api_key={secret}", headers={"Referer": f"https://app/?api_key={secret}"},
                     timeout=10)
        invalid, _, _ = raw_exchange(base, f"GET /v1/models?api_key={secret}\r\n\r\n".encode())  # no version
        time.sleep(0.5)  # the access log is written after the answer

    assert status_and_error(invalid)[0] == 400
    lines = access_log.read_text().splitlines()
    assert any('"GET /v1/models HTTP/1.1" 200' in line for line in lines), lines
    server_log = (tmp_path / "server" / "gunicorn.log").read_text()
    assert "Invalid HTTP request line: 'GET /v1/models?…'" in server_log  # the line is logged, its query is not
    for text in (access_log.read_text(), server_log):
        assert secret not in text
        assert "api_key" not in text
