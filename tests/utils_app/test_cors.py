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
