import pytest

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.probe_urls")]


def error_of(response, status):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("raw", [b"", b"not json", b"{", b"[1, 2]", b'"text"', b"42", b"\xff\xfe\x00",
                                 b"[" * 100000])
def test_garbage_bodies_are_invalid_json(client, raw):
    error = error_of(client.post("/probe/echo", raw, content_type="application/json"), 400)
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_json")


@pytest.mark.parametrize("raw", [b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"[" * 100000])
def test_json_nested_too_deeply_is_refused_as_too_deep_not_as_invalid(client, raw):
    error = error_of(client.post("/probe/echo", raw, content_type="application/json"), 400)
    assert error["code"] == "invalid_json"
    assert error["message"] == ("The request body nests arrays or objects too deeply to be read: it may be valid "
                                "JSON, but this service reads JSON nested at most a few hundred levels deep.")


def test_json_nested_a_little_is_read(client):
    nested = {"a": [[[[[[[[[[1]]]]]]]]]]}
    assert client.post("/probe/echo", nested, content_type="application/json").json() == {"received": nested}


def test_a_json_object_passes(client):
    response = client.post("/probe/echo", {"a": 1}, content_type="application/json")
    assert response.json() == {"received": {"a": 1}}


def test_an_unknown_path_is_a_json_404(client):
    error = error_of(client.get("/v1/nothing-here"), 404)
    assert error["code"] == "not_found"


def test_a_wrong_method_is_a_json_405(client):
    error = error_of(client.post("/health"), 405)
    assert (error["type"], error["code"]) == ("invalid_request_error", "method_not_allowed")


def test_an_oversized_body_is_413_before_it_is_read(client, settings):
    from utils_app import middleware

    limit = settings.MAX_REQUEST_BYTES
    error = error_of(client.post("/probe/echo", b"x", content_type="application/json",
                                 CONTENT_LENGTH=str(limit + 1)), 413)
    assert error["code"] == "request_too_large"
    assert middleware.BodySizeLimitMiddleware  # the middleware, not the view, answered


def test_an_unexpected_error_is_a_500_without_details(client):
    client.raise_request_exception = False
    response = client.get("/probe/boom")
    error = error_of(response, 500)
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    text = response.content.decode()
    assert "secret-internal-detail" not in text and "SELECT" not in text and "Traceback" not in text


def test_django_level_500_handler_is_json(rf):
    from utils_app.error_handler import handler500

    response = handler500(rf.get("/"))
    assert response.status_code == 500
    assert b'"internal_error"' in response.content
