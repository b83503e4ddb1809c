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
