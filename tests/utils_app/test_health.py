import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_health_is_200_when_everything_answers(client):
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["status"] == "up"
    assert body["checks"]["database"]["vendor"] == connection.vendor
    assert body["checks"]["cache"]["status"] == "up"


def test_health_stays_200_but_degraded_when_the_cache_is_down(client, monkeypatch):
    from django.core.cache import cache

    def down(*args, **kwargs):
        raise ConnectionError("cache unreachable")

    monkeypatch.setattr(cache, "set", down)
    response = client.get("/health")
    # Requests are still served (limits fail open): a load balancer must keep the instance.
    assert response.status_code == 200
    assert response.json()["status"] == "degraded"
    assert response.json()["checks"]["cache"] == {"backend": response.json()["checks"]["cache"]["backend"],
                                                   "status": "degraded", "error": "ConnectionError"}


def test_health_is_503_when_the_database_is_down(client, monkeypatch):
    from utils_app import views

    def down():
        raise OSError("database unreachable")

    monkeypatch.setattr(views, "_database", down)
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "down"
    assert response.json()["checks"]["database"]["status"] == "down"
