"""utils_app.middleware: sessions, CSRF, the staff login and messages stay off the JSON API only."""
import pytest
from django.http import HttpResponse
from django.test import Client

from tests.conftest import bearer
from utils_app.middleware import (
    AuthenticationMiddleware,
    CsrfViewMiddleware,
    MessageMiddleware,
    SessionMiddleware,
    is_api_path,
)


def what_the_view_sees(rf, path: str) -> dict:
    seen = {}

    def view(request):
        seen.update(session=hasattr(request, "session"), user=hasattr(request, "user"),
                    messages=hasattr(request, "_messages"))
        return HttpResponse("ok")

    chain = SessionMiddleware(AuthenticationMiddleware(MessageMiddleware(view)))
    assert chain(rf.get(path)).status_code == 200
    return seen


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", "/utils/facts"])
def test_api_paths_get_no_session_user_or_messages(rf, path):
    assert is_api_path(rf.get(path))
    assert what_the_view_sees(rf, path) == {"session": False, "user": False, "messages": False}


@pytest.mark.parametrize("path", ["/", "/admin/", "/admin/login/", "/docs", "/v1", "/v10/models"])
def test_every_other_path_gets_them_as_before(rf, path, db):
    assert not is_api_path(rf.get(path))
    assert what_the_view_sees(rf, path) == {"session": True, "user": True, "messages": True}


def test_the_csrf_check_still_guards_the_staff_login():
    client = Client(enforce_csrf_checks=True)
    assert client.post("/admin/login/", {"username": "a", "password": "b"}).status_code == 403


def test_the_csrf_middleware_passes_api_views_by(rf):
    middleware = CsrfViewMiddleware(lambda request: HttpResponse("ok"))
    request = rf.post("/v1/embeddings")
    assert middleware.process_view(request, lambda request: None, (), {}) is None


def test_a_metered_answer_sets_no_cookie_even_for_a_logged_in_browser(client, seeded, free_key, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("ann", "ann@example.com", "pw"))
    _, secret = free_key
    response = client.post("/v1/chat/completions", {"model": "local-chat", "messages": [
        {"role": "user", "content": "hi"}]}, content_type="application/json", **bearer(secret))
    assert response.status_code == 200
    assert not response.cookies
    assert "Cookie" not in response.get("Vary", "")
