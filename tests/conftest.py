"""Fixtures shared by every test: named keys, a seeded catalog, clean caches, private media."""
import logging
from types import SimpleNamespace

import django_ratelimit.core
import pytest
from django.core.cache import cache
from django.db import connection

import gateway.routing  # noqa: F401  (imported for its process state, which state.reset forgets)
from keys.services import issue_key
from models_catalog import catalog
from utils_app import clock as product_clock
from utils_app import event_loop, state


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


def pytest_unconfigure(config):
    """Nothing logs once the session is over: the clients' SDKs close their HTTP pools at interpreter exit and
    log it, to handlers whose streams pytest has closed by then (a "Logging error" after the summary)."""
    logging.disable(logging.CRITICAL)


@pytest.fixture(autouse=True)
def _isolated_state(settings, tmp_path):
    """Each test starts with an empty cache, the state of a fresh process (utils_app.state: counters,
    key cache, catalog snapshot, routing figures, metrics, the real clock) and its own media folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.LEDGER_SWEEP_SECONDS = 0  # no background sweeps inside a test's transaction
    cache.clear()
    state.reset()
    yield
    state.reset()


@pytest.fixture
def clock(monkeypatch):
    """The product's clock (utils_app.clock) stopped at the real time now for the test: windows,
    cooldowns, cache ages and usage dates stand still until the test moves them with ``.set(epoch)``
    or ``.advance(seconds)``, so no test waits for a minute or a day to turn."""
    stopped = product_clock.stop()
    # The public per-address limit (utils_app.limits.PublicRateThrottle) is django-ratelimit's, whose
    # fixed windows read time.time: here they read the stopped clock too.
    monkeypatch.setattr(django_ratelimit.core, "time", SimpleNamespace(time=lambda: product_clock.now()))
    yield stopped
    product_clock.start()


@pytest.fixture
def as_under_gevent(monkeypatch):
    """Heavy work as a gevent worker runs it (its threading patched: utils_app.event_loop), with a pool of
    its own for the test."""
    monkeypatch.setattr(event_loop.monkey, "is_module_patched", lambda name: True)
    off = event_loop.OffTheEventLoop()
    monkeypatch.setattr(event_loop, "shared", off)
    return off


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
