"""HEAD requests: the GET's status and headers, no body, and no complaint from the server about one.

Django's test client drops a HEAD answer's body itself, so these go through the served application
(gateway.wsgi) as gunicorn calls it, and under gunicorn itself, whose log must stay quiet.
"""
import socket
from urllib.parse import urlsplit

import pytest
import requests
from django.core import signals
from django.db import close_old_connections
from django.test import RequestFactory

from gateway import wsgi
from tests.conftest import bearer
from tests.gateway.conftest import gunicorn
from tests.utils_app.test_api_chain import served

pytestmark = pytest.mark.django_db

# Claude Code sends HEAD / at every start; load balancers and uptime checks HEAD the others.
PATHS = ["/", "/health", "/v1/models", "/v1/models/local-chat", "/docs", "/openapi.json", "/v1/no-such-route"]


def _through_the_application(method: str, path: str, **headers) -> tuple[int, dict, bytes]:
    return served(RequestFactory().generic(method, path, **headers))


@pytest.mark.parametrize("path", PATHS)
def test_a_head_answer_has_the_gets_status_and_headers_and_no_body(seeded, free_key, path):
    _, secret = free_key
    get_status, get_headers, get_body = _through_the_application("GET", path, **bearer(secret))
    status, headers, body = _through_the_application("HEAD", path, **bearer(secret))
    assert body == b""
    assert status == get_status
    assert headers["Content-Type"] == get_headers["Content-Type"]
    # What the GET would carry (RFC 9110 allows it on HEAD), so a client can learn the size. /health
    # reports how long its checks took, so its size may differ by a digit between two requests.
    assert get_headers.get("Content-Length") == str(len(get_body))
    if path == "/health":
        assert headers.get("Content-Length", "").isdigit()
    else:
        assert headers.get("Content-Length") == get_headers.get("Content-Length")


def test_closing_a_head_answer_ends_the_request_as_closing_the_get_would(seeded):
    # The server closes what the application returned: that must still reach the response (Django's
    # request_finished, a stream's settlement, a served file's close).
    finished = []

    def note(**kwargs):
        finished.append(True)

    signals.request_started.disconnect(close_old_connections)  # they would close the test's transaction
    signals.request_finished.disconnect(close_old_connections)
    signals.request_finished.connect(note)
    try:
        answer = wsgi.application(RequestFactory().head("/v1/models").environ, lambda status, headers: None)
        assert b"".join(answer) == b""
        assert finished == []
        answer.close()
        assert finished == [True]
    finally:
        signals.request_finished.disconnect(note)
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def _head_bytes(base: str, path: str) -> bytes:
    """Everything the server sends for one HEAD on a connection it is asked to close."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while data := sock.recv(65536):
            received += data
    return received


@pytest.mark.postgres
@pytest.mark.parametrize("worker", ["gevent", "gthread"])
@pytest.mark.served
def test_served_head_requests_get_headers_only_and_leave_no_warning_in_the_log(transactional_db, seeded,
                                                                              tmp_path, worker):
    with gunicorn(tmp_path / "server", threads=4, env={"GUNICORN_WORKER_CLASS": worker}) as base:
        for path in PATHS:  # each answer made once first (the schema's is built on its first request)
            requests.get(base + path, timeout=60)
        answers = {path: _head_bytes(base, path) for path in PATHS}
    log = (tmp_path / "server" / "gunicorn.log").read_text()  # the server has stopped: all it logged is there
    for path, answer in answers.items():
        head, blank, body = answer.partition(b"\r\n\r\n")
        assert blank and body == b"", (path, answer[:300])
        assert head.split(b" ", 2)[1] == (b"404" if "no-such" in path else b"200"), (path, head)
        assert b"\r\ncontent-length: " in head.lower(), (path, head)
    assert "body bytes on a no-body response" not in log, log[-2000:]
