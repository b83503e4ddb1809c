"""The request body is read whole by the body middleware: chunked like any other, bounded in size and time."""
import io
import json

import pytest

from keys.models import LedgerEntry
from tests.gateway.conftest import assert_error
from tests.conftest import bearer

pytestmark = pytest.mark.django_db

CHAT = "/v1/chat/completions"
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


def chunked(client, path: str, body: bytes, secret: str | None = None):
    """A body as a server hands over a chunked one: no Content-Length, Transfer-Encoding: chunked."""
    return client.generic("POST", path, content_type="application/json", CONTENT_LENGTH="",
                          HTTP_TRANSFER_ENCODING="chunked", **{"wsgi.input": io.BytesIO(body)},
                          **(bearer(secret) if secret else {}))


def test_a_chunked_body_is_read_like_any_other(client, seeded, free_key):
    key, secret = free_key
    response = chunked(client, CHAT, json.dumps(HELLO).encode(), secret)

    assert response.status_code == 200, response.content
    assert "You wrote: \"Hello\"" in response.json()["choices"][0]["message"]["content"]
    charge = LedgerEntry.objects.get(key=key, kind="charge")
    assert (charge.status, charge.amount) == ("completed", -1)


@pytest.mark.urls("tests.probe_urls")
def test_an_empty_chunked_body_is_an_empty_body(client):
    assert_error(chunked(client, "/probe/echo", b""), 400, "invalid_json")


def test_a_chunked_body_over_the_limit_is_a_413_and_charges_nothing(client, seeded, free_key, settings):
    settings.MAX_REQUEST_BYTES = 2048
    key, secret = free_key
    body = json.dumps({**HELLO, "messages": [{"role": "user", "content": "x" * 4000}]}).encode()

    response = chunked(client, CHAT, body, secret)

    assert_error(response, 413, "request_too_large")
    assert not LedgerEntry.objects.filter(key=key, kind="charge").exists()


def test_a_chunked_body_of_exactly_the_limit_is_served(client, seeded, free_key, settings):
    settings.MAX_REQUEST_BYTES = 2048
    _, secret = free_key
    body = json.dumps({**HELLO, "messages": [{"role": "user", "content": ""}]}).encode()
    body = body.replace(b'"content": ""', b'"content": "' + b"x" * (2048 - len(body)) + b'"')
    assert len(body) == 2048

    assert chunked(client, CHAT, body, secret).status_code == 200


def test_a_body_shorter_than_its_content_length_is_a_400_and_charges_nothing(client, seeded, free_key):
    key, secret = free_key
    body = json.dumps(HELLO).encode()
    response = client.generic("POST", CHAT, content_type="application/json", CONTENT_LENGTH=str(len(body) + 10),
                              **{"wsgi.input": io.BytesIO(body)}, **bearer(secret))

    error = assert_error(response, 400, "invalid_body")
    assert error["message"] == (f"The request body ended after {len(body)} of the {len(body) + 10} bytes its "
                                "Content-Length announced.")
    assert not LedgerEntry.objects.filter(key=key, kind="charge").exists()


@pytest.mark.urls("tests.probe_urls")
def test_a_body_read_here_is_what_the_view_reads(client):
    response = client.post("/probe/echo", json.dumps({"a": [1, 2, {"b": "ü"}]}), content_type="application/json")

    assert response.json() == {"received": {"a": [1, 2, {"b": "ü"}]}}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/admin/update-key", "/v1/embeddings"])
def test_every_operation_with_a_body_documents_the_408(client, path):
    responses = client.get("/openapi.json").json()["paths"][path]["post"]["responses"]

    assert "request_timeout" in responses["408"]["description"]
    assert "invalid_body" in responses["400"]["description"]
