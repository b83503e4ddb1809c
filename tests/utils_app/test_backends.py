"""The .ci/run PostgreSQL + Redis pass must really run on them, not fall back silently."""
import os

import pytest
from django.conf import settings
from django.db import connection


@pytest.mark.django_db
def test_the_database_is_the_one_database_url_names():
    expected = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    assert connection.vendor == expected


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgres_run_really_talks_to_postgres():
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        assert cursor.fetchone()[0].startswith("PostgreSQL")


@pytest.mark.redis
def test_redis_run_really_talks_to_redis():
    from django.core.cache import cache

    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")
    cache.set("backend-probe", 7)
    client = cache._cache.get_client("backend-probe")
    assert client.ping() is True
    assert cache.get("backend-probe") == 7


@pytest.mark.redis
def test_the_redis_incr_keeps_djangos_contract():
    from django.core.cache import cache

    with pytest.raises(ValueError):
        cache.incr("incr-probe-missing")
    assert cache.get("incr-probe-missing") is None  # the failed INCR left nothing behind
    cache.set("incr-probe", 0, 30)
    assert cache.incr("incr-probe") == 1  # a counter at 0 is a key like any other
    assert cache.incr("incr-probe", 5) == 6
    client = cache._cache.get_client("incr-probe")
    assert 0 < client.ttl(cache.make_and_validate_key("incr-probe")) <= 30  # the expiry survives


@pytest.mark.redis
def test_the_redis_cache_reuses_one_client_per_connection_pool():
    from django.core.cache import cache

    client = cache._cache.get_client("reuse-probe", write=True)
    assert cache._cache.get_client("another-key", write=True) is client
    assert client.connection_pool is cache._cache._get_connection_pool(True)
    cache.set("reuse-probe", 3, 30)
    assert cache.incr("reuse-probe") == 4
    assert cache.get_many(["reuse-probe", "reuse-missing"]) == {"reuse-probe": 4}
