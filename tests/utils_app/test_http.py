import socket
import zlib

import pytest
import requests
import responses as responses_lib
from urllib3 import Retry
from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError

from utils_app.errors import UpstreamError, UpstreamTimeout, error_body
from utils_app.http import TRANSPORT_ERRORS, USER_AGENT, Upstreams, is_timeout, json_object, timeouts
from utils_app.speed.upstream_pool import NO_RETRIES

BASE = "https://upstream.test/v1"


@pytest.fixture
def upstream():
    with responses_lib.RequestsMock() as mock:
        yield mock


@pytest.fixture
def clean_environment(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


# ---------------------------------------------------------------- sessions

def test_each_upstream_gets_one_session_shared_by_every_call():
    upstreams = Upstreams(pool_size=8)
    assert upstreams.session(BASE) is upstreams.session(BASE)
    assert upstreams.session(BASE) is not upstreams.session("https://other.test/v1")


def test_the_pool_holds_as_many_connections_as_asked_and_never_retries_by_itself():
    adapter = Upstreams(pool_size=32, hosts=2).session(BASE).get_adapter(BASE)
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 32
    assert adapter.max_retries.total == 0


def test_every_request_says_who_is_calling(upstream):
    upstream.get(f"{BASE}/a", json={})
    upstream.get("https://platform.test/api", json={})
    Upstreams(pool_size=1).session(BASE).get(f"{BASE}/a")
    Upstreams(pool_size=1, user_agent="DiscordBot (x, 1)").session("https://platform.test").get(
        "https://platform.test/api")
    assert upstream.calls[0].request.headers["User-Agent"] == USER_AGENT
    assert upstream.calls[1].request.headers["User-Agent"] == "DiscordBot (x, 1)"


def test_a_cookie_one_answer_sets_never_rides_along_with_later_requests(upstream):
    # One session serves every client: a cookie kept from one answer would be sent for everyone.
    upstream.get(f"{BASE}/first", json={}, headers={"Set-Cookie": "session=client-a; Path=/"})
    upstream.get(f"{BASE}/second", json={})
    session = Upstreams(pool_size=1).session(BASE)
    session.get(f"{BASE}/first")
    session.get(f"{BASE}/second")
    assert "Cookie" not in upstream.calls[1].request.headers
    assert len(session.cookies) == 0


@pytest.fixture
def recording_server():
    """A real HTTP server on 127.0.0.1 that answers {"ok": true} and records what each request carried."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                         "port": self.client_address[1]})
            answer = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.seen = seen
    server.base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(params=[True, False], ids=["straight to the pool", "requests' session"])
def either_path(request, settings):
    """Upstreams.post with its speed trick on (utils_app.speed.upstream_pool) and off: the same wire, the same answer."""
    settings.SPEED_UPSTREAM_POOL = request.param
    return request.param


def test_post_sends_what_the_session_would_with_the_calls_headers_over_the_sessions(recording_server, either_path):
    base = recording_server.base
    upstreams = Upstreams(pool_size=1)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-up", "accept-encoding": "identity"}
    upstreams.session(base).post(f"{base}/chat?x=1", data='{"a": 1}', headers=headers, timeout=(1, 2))
    answer = upstreams.post(base, f"{base}/chat?x=1", data='{"a": 1}', headers=headers, timeout=(1, 2))
    assert answer.status_code == 200 and answer.raw.read() == b'{"ok": true}'
    answer.close()
    by_session, by_post = recording_server.seen
    assert by_post["headers"] == by_session["headers"]
    assert by_post["headers"]["accept-encoding"] == "identity"  # the call's own, whatever its case
    assert by_post["headers"]["user-agent"] == USER_AGENT
    assert (by_post["path"], by_post["body"]) == (by_session["path"], by_session["body"]) == ("/v1/chat?x=1",
                                                                                               b'{"a": 1}')


def test_through_a_proxy_post_sends_the_same_headers_and_body_by_requests_own_path(recording_server,
                                                                                  clean_environment):
    # The recording server stands in for the proxy: a plain-HTTP upstream is asked for in absolute form.
    proxy = recording_server.base.removesuffix("/v1")
    clean_environment.setenv("HTTP_PROXY", proxy)
    base = "http://upstream.invalid/v1"
    upstreams = Upstreams(pool_size=1)
    assert upstreams.session(base).proxies["http"] == proxy
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-up", "accept-encoding": "identity"}
    with upstreams.post(base, f"{base}/chat?x=1", data='{"é": 1}', headers=headers, timeout=(1, 2)) as answer:
        assert answer.status_code == 200 and answer.raw.read() == b'{"ok": true}'
    upstreams.session(base).post(f"{base}/chat?x=1", data='{"é": 1}'.encode(), headers=headers, timeout=(1, 2))
    by_post, by_session = recording_server.seen
    assert by_post["path"] == by_session["path"] == "http://upstream.invalid/v1/chat?x=1"
    assert by_post["body"] == by_session["body"] == '{"é": 1}'.encode()
    assert by_post["headers"] == by_session["headers"]
    assert by_post["headers"]["accept-encoding"] == "identity" and by_post["headers"]["content-length"] == "9"


def test_post_keeps_its_connection_for_the_next_call_once_the_answer_was_read(recording_server, either_path):
    base = recording_server.base
    upstreams = Upstreams(pool_size=1)
    for _ in range(3):
        with upstreams.post(base, f"{base}/chat", data="{}", headers={}, timeout=(1, 2)) as answer:
            assert answer.raw.read() == b'{"ok": true}'
    assert len({call["port"] for call in recording_server.seen}) == 1


def test_post_reports_a_refused_connection_and_a_timeout_as_requests_would(recording_server, either_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    with pytest.raises(requests.ConnectionError) as refused:
        Upstreams(pool_size=1).post(closed, f"{closed}/chat", data="{}", headers={}, timeout=(1, 2))
    assert not is_timeout(refused.value)
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        base = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(requests.ReadTimeout) as slow:
            Upstreams(pool_size=1).post(base, f"{base}/chat", data="{}", headers={}, timeout=(1, 0.2))
    assert is_timeout(slow.value)


def test_proxies_and_the_ca_bundle_are_read_from_the_environment_once(clean_environment):
    clean_environment.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    clean_environment.setenv("NO_PROXY", "local.test")
    clean_environment.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/company-bundle.pem")
    upstreams = Upstreams(pool_size=1)
    session = upstreams.session(BASE)
    clean_environment.setenv("HTTPS_PROXY", "http://elsewhere.internal:3128")
    assert session.trust_env is False  # requests does not read the environment again per request
    assert session.proxies["https"] == "http://proxy.internal:3128"
    assert session.verify == "/etc/ssl/company-bundle.pem"
    assert upstreams.session("https://local.test/v1").proxies == {}  # NO_PROXY names it


def test_without_environment_settings_the_session_goes_direct_and_verifies_with_the_default_bundle(
        clean_environment):
    session = Upstreams(pool_size=1).session(BASE)
    assert session.proxies == {}
    assert session.verify is True


# ---------------------------------------------------------------- timeouts

def test_the_timeout_pair_is_connect_then_read():
    assert timeouts(8) == (3.05, 8)
    assert timeouts(60, connect=10) == (10, 60)


def test_connecting_never_waits_longer_than_the_whole_call_may():
    assert timeouts(0.5, connect=10) == (0.5, 0.5)


# ---------------------------------------------------------------- transport failures

@pytest.mark.parametrize("failure", [
    requests.ConnectTimeout("no answer to SYN"),
    requests.ReadTimeout("silent"),
    requests.ConnectionError(ReadTimeoutError(None, "/", "read timed out")),  # a timeout loading the body
    ReadTimeoutError(None, "/", "read timed out"),
    socket.timeout("timed out"),
])
def test_running_out_of_time_is_a_timeout(failure):
    assert isinstance(failure, TRANSPORT_ERRORS)
    assert is_timeout(failure)


@pytest.mark.parametrize("failure", [
    requests.ConnectionError("refused"),
    requests.exceptions.ChunkedEncodingError("cut short"),
    ProtocolError("reset", ConnectionResetError(104, "reset")),
    ConnectionResetError(104, "reset"),
    DecodeError("bad gzip"),
])
def test_every_other_transport_failure_is_caught_and_is_not_a_timeout(failure):
    assert isinstance(failure, TRANSPORT_ERRORS)
    assert not is_timeout(failure)


@pytest.mark.parametrize("failure, timed_out", [(requests.ConnectionError("refused"), False),
                                                 (requests.ConnectTimeout("slow"), True),
                                                 (requests.ReadTimeout("slow"), True)])
def test_a_failing_request_is_caught_and_classified(upstream, failure, timed_out):
    upstream.get(f"{BASE}/a", body=failure)
    with pytest.raises(TRANSPORT_ERRORS) as caught:
        Upstreams(pool_size=1).session(BASE).get(f"{BASE}/a", timeout=timeouts(1))
    assert is_timeout(caught.value) is timed_out


def test_a_body_that_fails_to_decompress_is_a_transport_failure(upstream):
    upstream.get(f"{BASE}/a", body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    with pytest.raises(TRANSPORT_ERRORS):
        Upstreams(pool_size=1).session(BASE).get(f"{BASE}/a")


def test_an_upstream_timeout_is_a_504_in_the_upstream_family():
    error = UpstreamTimeout("The image service did not answer in time.")
    assert isinstance(error, UpstreamError)
    assert error.status == 504
    assert error.body() == error_body("The image service did not answer in time.", "upstream_error",
                                      "upstream_timeout")


# ---------------------------------------------------------------- bodies

def test_a_json_object_is_read(upstream):
    upstream.get(f"{BASE}/a", json={"data": [1, 2]})
    response = Upstreams(pool_size=1).session(BASE).get(f"{BASE}/a")
    assert json_object(response.content) == {"data": [1, 2]}
    assert json_object('{"text": "é"}') == {"text": "é"}


@pytest.mark.parametrize("content", [
    '{"t": "a\\ud800b", "\\udfff": ["\\ud83e\\udd8a", {"x": "\\uDBFF"}]}',
    b'{"t": "a\\ud800b", "\\udfff": ["\\ud83e\\udd8a", {"x": "\\uDBFF"}]}'])
def test_a_lone_surrogate_escape_reads_as_a_replacement_character_anywhere(content):
    assert json_object(content) == {"t": "a\ufffdb", "\ufffd": ["\U0001f98a", {"x": "\ufffd"}]}
    assert json_object('{"t": "\\\\ud800"}') == {"t": "\\ud800"}  # an escaped backslash: no surrogate at all


def test_a_compressed_json_object_is_read(upstream):
    packer = zlib.compressobj(wbits=31)  # gzip
    upstream.get(f"{BASE}/a", body=packer.compress(b'{"ok": true}') + packer.flush(),
                 headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert json_object(Upstreams(pool_size=1).session(BASE).get(f"{BASE}/a").content) == {"ok": True}


@pytest.mark.parametrize("content", [b"", b"<html>Bad gateway</html>", b"{", b"[1, 2]", b"null", b'"text"', b"42",
                                     b'{"a": "\xff"}', b"[" * 100000])
def test_anything_but_a_json_object_is_none_never_an_exception(content):
    assert json_object(content) is None


def test_a_kept_alive_connection_the_upstream_closed_is_told_apart_and_replaced(recording_server):
    import socket
    import time

    base = recording_server.base
    upstreams = Upstreams(pool_size=1)
    with upstreams.post(base, f"{base}/chat", data="{}", headers={}, timeout=(1, 2)) as answer:
        assert answer.raw.read() == b'{"ok": true}'
    kept = upstreams._pools._pool(upstreams.session(base), f"{base}/chat").pool.queue[-1]  # given back, idle and open
    assert type(kept).__name__ == "_CheckedHTTPConnection" and kept.is_connected
    # The server ends it, as an upstream ends an idle keep-alive connection: told to by our half-close.
    kept.sock.shutdown(socket.SHUT_WR)
    for _ in range(200):
        if not kept.is_connected:
            break
        time.sleep(0.01)
    assert not kept.is_connected  # end of file waiting on its socket
    with upstreams.post(base, f"{base}/chat", data="{}", headers={}, timeout=(1, 2)) as answer:
        assert answer.raw.read() == b'{"ok": true}'
    assert len({call["port"] for call in recording_server.seen}) == 2  # a new connection, not the ended one


def test_the_shared_retry_is_what_urllib3_makes_of_no_retries_and_no_redirects():
    # Upstreams.post hands urllib3 one Retry made at import instead of retries=False, redirect=False,
    # which urllib3 turns into a new Retry at every call: the two must be the same settings.
    made = Retry.from_int(False, redirect=False)
    assert vars(NO_RETRIES) == vars(made)
    assert NO_RETRIES.total is False and NO_RETRIES.redirect == 0  # no retry, no redirect followed
