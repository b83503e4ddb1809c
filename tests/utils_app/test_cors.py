import pytest

pytestmark = pytest.mark.django_db

V1_OPERATIONS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/images/generations"),
    ("POST", "/v1/audio/speech"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/models"),
    ("GET", "/v1/statistic/key"),
    ("GET", "/v1/statistic/global"),
    ("GET", "/v1/community/invites"),
    ("GET", "/v1/community/guilds"),
    ("GET", "/v1/community/user"),
    ("GET", "/v1/neko"),
    ("GET", "/v1/chat/cors-test"),
    ("GET", "/utils/facts"),
]


def preflight(client, path, method, origin="https://app.example", headers="authorization, content-type"):
    return client.options(path, HTTP_ORIGIN=origin, HTTP_ACCESS_CONTROL_REQUEST_METHOD=method,
                          HTTP_ACCESS_CONTROL_REQUEST_HEADERS=headers)


@pytest.mark.parametrize("method, path", V1_OPERATIONS)
def test_every_v1_operation_answers_a_preflight_allowing_authorization(client, method, path):
    response = preflight(client, path, method)
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    allowed_headers = {name.strip() for name in response["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed_headers
    assert method in response["Access-Control-Allow-Methods"]


@pytest.mark.parametrize("path, method", [("/v1/chat/completions", "POST"), ("/v1/models", "GET")])
def test_a_preflight_allows_every_header_the_contract_names(client, path, method):
    sent = "authorization, content-type, idempotency-key, x-request-id, x-api-key, anthropic-version, anthropic-beta"
    response = preflight(client, path, method, headers=sent)

    assert response.status_code == 200
    allowed = {name.strip() for name in response["Access-Control-Allow-Headers"].split(",")}
    assert {name.strip() for name in sent.split(",")} <= allowed


def test_answers_carry_the_cors_headers_and_expose_the_metering_headers(client):
    response = client.get("/utils/facts", HTTP_ORIGIN="https://app.example")
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    exposed = response["Access-Control-Expose-Headers"]
    for header in ("X-Remaining-Credits", "X-RateLimit-Remaining-Requests", "Retry-After"):
        assert header in exposed


def test_errors_carry_the_cors_headers_too_so_browsers_can_read_them(client):
    response = client.get("/v1/community/user", {"id": "bad"}, HTTP_ORIGIN="https://app.example")
    assert response.status_code == 400
    assert response["Access-Control-Allow-Origin"] == "*"


def test_configured_origins_are_allowed_and_others_are_not(client, settings):
    settings.CORS_ALLOW_ALL_ORIGINS = False
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    allowed = preflight(client, "/v1/chat/completions", "POST", origin="https://app.example")
    assert allowed["Access-Control-Allow-Origin"] == "https://app.example"
    refused = preflight(client, "/v1/chat/completions", "POST", origin="https://evil.example")
    assert "Access-Control-Allow-Origin" not in refused


def test_the_staff_admin_is_not_opened_to_other_origins(client):
    response = preflight(client, "/admin/login/", "POST")
    assert "Access-Control-Allow-Origin" not in response


def test_cors_test_echoes_the_origin_and_the_headers_it_sends(client):
    response = client.get("/v1/chat/cors-test", HTTP_ORIGIN="https://app.example")
    assert response.status_code == 200
    body = response.json()
    assert body["origin"] == "https://app.example"
    assert body["allowed"] is True
    assert body["headers"]["access-control-allow-origin"] == "*"
    # What it reports is what it sent.
    for name, value in body["headers"].items():
        assert response[name] == value
    assert "authorization" in body["preflight"]["access-control-allow-headers"]
    assert "POST" in body["preflight"]["access-control-allow-methods"]


def test_cors_test_reports_a_refused_origin(client, settings):
    settings.CORS_ALLOW_ALL_ORIGINS = False
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    response = client.get("/v1/chat/cors-test", HTTP_ORIGIN="https://evil.example")
    body = response.json()
    assert body == {"origin": "https://evil.example", "allowed": False, "headers": {}, "preflight": {}}
    assert "Access-Control-Allow-Origin" not in response


def test_cors_test_without_an_origin_says_so(client):
    body = client.get("/v1/chat/cors-test").json()
    assert body["origin"] is None and body["allowed"] is False


def _headers_sdks_send():
    """Every header the official openai and anthropic SDKs put on a chat request, with their options
    that add headers set (organization, project), as a server of the test's own on 127.0.0.1 sees them."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import anthropic
    import openai

    seen = set()

    class Capture(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.update(name.lower() for name in self.headers)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path.endswith("/messages"):
                answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                          "stop_reason": "end_turn", "stop_sequence": None,
                          "usage": {"input_tokens": 1, "output_tokens": 1}}
            else:
                answer = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with openai.OpenAI(api_key="sk-test", base_url=f"{base}/v1", organization="org-1", project="proj-1",
                           max_retries=0, timeout=10) as client:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        with anthropic.Anthropic(api_key="sk-test", base_url=base, max_retries=0, timeout=10) as client:
            client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    finally:
        server.shutdown()
        server.server_close()
    # What a browser sets itself, never asked for in a preflight.
    return seen - {"host", "accept-encoding", "connection", "content-length", "user-agent"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_preflight_allows_every_header_the_official_sdks_send(client, path):
    sent = _headers_sdks_send()
    assert {"x-stainless-lang", "x-stainless-retry-count", "anthropic-version", "openai-organization"} <= sent
    browser_only = {"x-stainless-timeout", "anthropic-dangerous-direct-browser-access"}  # their browser builds'
    response = preflight(client, path, "POST", headers=", ".join(sorted(sent | browser_only)))

    assert response.status_code == 200
    allowed = {name.strip() for name in response["Access-Control-Allow-Headers"].split(",")}
    assert sent | browser_only <= allowed, sorted((sent | browser_only) - allowed)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", "/utils/health", "/staff/", "/"])
@pytest.mark.parametrize("method", ["get", "post", "options"])
@pytest.mark.parametrize("origin", [None, "", "https://app.example.com", "https://evil.example.net"])
def test_the_projects_cors_middleware_answers_as_the_librarys(settings, path, method, origin):
    from corsheaders.middleware import CorsMiddleware as LibraryCorsMiddleware
    from django.http import HttpResponse
    from django.test import RequestFactory

    from utils_app.middleware import CorsMiddleware

    settings.CORS_ALLOWED_ORIGINS = ["https://app.example.com"]
    extra = {} if origin is None else {"HTTP_ORIGIN": origin}
    if method == "options":
        extra["HTTP_ACCESS_CONTROL_REQUEST_METHOD"] = "POST"

    def answer(middleware_class):
        request = getattr(RequestFactory(), method)(path, **extra)
        response = middleware_class(lambda _: HttpResponse(b"x"))(request)
        return response.status_code, sorted(response.items())

    assert answer(CorsMiddleware) == answer(LibraryCorsMiddleware)
