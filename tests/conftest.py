"""Fixtures shared by every test: named keys, a seeded catalog, clean caches, private media."""
import pytest
from django.core.cache import cache
from django.db import connection

from gateway import routing
from keys import auth_cache
from keys.services import issue_key
from models_catalog import catalog
from utils_app import limits, windows


def pytest_collection_modifyitems(config, items):
    vendor_skip = pytest.mark.skip(reason="needs DATABASE_URL=postgres://… (runs in .ci/run)")
    redis_skip = pytest.mark.skip(reason="needs REDIS_URL (runs in .ci/run)")
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(vendor_skip)
        if "redis" in item.keywords and not settings.SHARED_CACHE:
            item.add_marker(redis_skip)


@pytest.fixture(autouse=True)
def _isolated_state(settings, tmp_path):
    """Each test starts with an empty cache, a fresh catalog snapshot and its own media folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.LEDGER_SWEEP_SECONDS = 0  # no background sweeps inside a test's transaction
    cache.clear()
    windows.reset()
    routing.reset()
    limits.forget_guessers()
    auth_cache.clear()
    catalog.invalidate()
    yield
    catalog.invalidate()


@pytest.fixture
def seeded(db):
    """The shipped default catalog, loaded into the test database."""
    catalog.load_catalog()
    return catalog.snapshot()


@pytest.fixture
def make_key(db):
    """Factory: make_key(tier="free", credits=10, ...) -> (ApiKey, secret)."""
    def make(**fields):
        fields.setdefault("tier", "free")
        fields.setdefault("credits", 100)
        return issue_key(actor="test", **fields)
    return make


@pytest.fixture
def free_key(make_key):
    return make_key(tier="free", credits=100, max_credits=100)


@pytest.fixture
def broke_key(make_key):
    return make_key(tier="free", credits=0, max_credits=100)


@pytest.fixture
def admin_key(make_key):
    return make_key(tier="special", credits=1000, is_admin=True)


def bearer(secret: str) -> dict:
    """Headers for Django's test client."""
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


@pytest.fixture
def vendor():
    return connection.vendor
