"""The JSON API's own middleware chain (gateway.wsgi, settings.API_MIDDLEWARE).

Served requests under API_PATH_PREFIXES skip the layers that only step aside there. These tests
hold the lean chain to that: it is the whole chain in its order less those layers, and answers
through the served application are those of the whole chain (Django's test client).
"""
import json

import pytest
from django.conf import settings
from django.core import signals
from django.db import close_old_connections
from django.test import RequestFactory
from django.utils.module_loading import import_string

from gateway import wsgi
from keys.two_factor import TwoFactorMiddleware
from utils_app.middleware import _OffTheApi
from tests.conftest import bearer

# What differs between two requests made one after the other (the second has one fewer left).
VARYING = ("X-Request-ID", "Date", "X-RateLimit-", "X-Remaining-Credits")


def served(request) -> tuple[int, dict, bytes]:
    """One request through gateway.wsgi.application, as gunicorn calls it. As in Django's test client,
    the handler's signals do not close the connection: it holds the test's transaction."""
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer["status"] = int(status.split()[0])
        answer["headers"] = dict(headers)

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        body = b"".join(wsgi.application(request.environ, start_response))
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return answer["status"], answer["headers"], body


def comparable(headers) -> dict:
    return {name: value for name, value in dict(headers).items() if not name.startswith(VARYING)}


def content(body: bytes):
    """The answer's JSON less what each answer makes anew (its id and time)."""
    answer = json.loads(body or b"null")
    if isinstance(answer, dict):
        answer = {name: value for name, value in answer.items() if name not in ("id", "created")}
    return answer


def test_the_api_chain_is_the_whole_chain_less_the_layers_that_step_aside_on_the_api():
    assert set(settings.API_MIDDLEWARE) <= set(settings.MIDDLEWARE)
    order = [name for name in settings.MIDDLEWARE if name in settings.API_MIDDLEWARE]
    assert order == settings.API_MIDDLEWARE
    for left_out in set(settings.MIDDLEWARE) - set(settings.API_MIDDLEWARE):
        layer = import_string(left_out)
        stepping_aside = issubclass(layer, (_OffTheApi, TwoFactorMiddleware))
        static_only = left_out == "whitenoise.middleware.WhiteNoiseMiddleware"
        assert stepping_aside or static_only, f"{left_out} acts on the API and must stay in API_MIDDLEWARE"
    assert not any(settings.STATIC_URL.startswith(prefix.lstrip("/")) or
                   ("/" + settings.STATIC_URL.lstrip("/")).startswith(prefix)
                   for prefix in settings.API_PATH_PREFIXES)


def test_api_paths_go_through_the_lean_chain_and_the_rest_through_the_whole_one():
    api_chain = wsgi.application.api._middleware_chain
    site_chain = wsgi.application.site._middleware_chain
    assert api_chain is not site_chain
    assert len(wsgi.application.api._view_middleware) <= len(wsgi.application.site._view_middleware)


@pytest.mark.parametrize("method, path, body, headers", [
    ("get", "/v1/models", None, {}),
    ("get", "/v1/models/local-chat", None, {}),
    ("get", "/v1/models/no-such-model", None, {}),
    ("post", "/v1/chat/completions", {"model": "local-chat"}, {}),
    ("post", "/v1/chat/completions", {"model": "local-chat", "messages": [{"role": "user", "content": "hi"}]}, {}),
    ("post", "/v1/chat/completions", "{not json", {}),
    ("options", "/v1/chat/completions", None, {"HTTP_ORIGIN": "https://app.example",
                                                 "HTTP_ACCESS_CONTROL_REQUEST_METHOD": "POST"}),
    ("get", "/v1/models", None, {"HTTP_ORIGIN": "https://app.example"}),
    ("get", "/v1/no-such-route", None, {}),
])
def test_an_api_answer_through_the_served_application_is_the_whole_chains(
        client, seeded, make_key, method, path, body, headers):
    _, secret = make_key(tier="special", credits=1000, max_credits=1000)
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    kwargs = {"content_type": "application/json", **headers, **bearer(secret)}
    whole = getattr(client, method)(path, data=data, **kwargs) if data is not None \
        else getattr(client, method)(path, **kwargs)
    request = RequestFactory().generic(method.upper(), path, data=data or "", **kwargs)
    status, served_headers, served_body = served(request)
    assert status == whole.status_code
    assert comparable(served_headers) == comparable(whole.headers)
    assert content(served_body) == content(whole.content)


def test_a_staff_page_still_passes_through_sessions_and_csrf(db):
    status, headers, _ = served(RequestFactory().get("/admin/login/"))
    assert status == 200
    assert "csrftoken" in headers.get("Set-Cookie", "")
    assert headers["X-Frame-Options"] == "DENY"
