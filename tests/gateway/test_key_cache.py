"""The process's key cache and the shared keys version (keys.auth_cache): fewer reads, changes still within 1 s."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from keys import auth_cache
from keys.models import ApiKey
from utils_app import windows
from tests.gateway.conftest import LOCAL_BODIES, _database_url, assert_error, post

ROOT = Path(__file__).resolve().parents[2]
CHAT = LOCAL_BODIES["chat"]


@pytest.fixture
def clock(monkeypatch):
    """The monotonic clock the key cache and the limits read, moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(auth_cache.time, "monotonic", lambda: now[0])
    return now


def key_reads(client, secret: str) -> tuple[int, int]:
    """One metered chat request: (its status, how many times it read a key row)."""
    with CaptureQueriesContext(connection) as captured:
        status = post(client, *CHAT, secret).status_code
    return status, sum('"digest"' in query["sql"] and "keys_apikey" in query["sql"]
                       for query in captured.captured_queries)


@pytest.mark.redis
@pytest.mark.django_db
def test_a_key_in_steady_use_is_read_again_only_when_a_key_changes(client, seeded, make_key, clock, settings):
    settings.KEY_CACHE_SECONDS = 1.0
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    reads = []
    for step in (0, 1.1, 0.8, 0.8, 0.8, 0.8):  # each within a second of the one before
        clock[0] += step
        status, read = key_reads(client, secret)
        assert status == 200
        reads.append(read)
    # The first read's row could not be vouched for (no version was known yet); the second's could.
    assert reads == [1, 1, 0, 0, 0, 0]


@pytest.mark.redis
@pytest.mark.django_db
def test_without_confirmation_a_row_expires_after_its_seconds(client, seeded, make_key, clock, settings):
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    key_reads(client, secret)
    clock[0] += 1.1
    key_reads(client, secret)
    cache.clear()  # the shared cache restarted empty: the version is gone, and a new one is made
    clock[0] += 0.5
    assert key_reads(client, secret) == (200, 0)  # trusted for its second, then dropped at the answer
    clock[0] += 0.1
    assert key_reads(client, secret) == (200, 1)


@pytest.mark.redis
@pytest.mark.django_db
def test_a_row_is_read_again_after_the_longest_trust_even_while_nothing_changes(client, seeded, make_key, clock,
                                                                               settings):
    settings.KEY_CACHE_MAX_SECONDS = 3.0
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    key_reads(client, secret)
    clock[0] += 1.1
    reads = []
    for _ in range(6):
        reads.append(key_reads(client, secret)[1])
        clock[0] += 0.9
    assert reads == [1, 0, 0, 0, 1, 0]  # read at 1.1 s, trusted until 4.1 s


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_change_made_in_another_process_applies_within_a_second_here(client, seeded, make_key, clock):
    key, secret = make_key(credits=100, max_credits=100, rpm=1000)
    key_reads(client, secret)
    clock[0] += 1.1
    assert key_reads(client, secret) == (200, 1)  # cached, and vouched for by the version
    clock[0] += 0.8
    assert key_reads(client, secret) == (200, 0)

    # Another process lowers the key's rpm below what it has already used this minute.
    script = ("from keys.models import ApiKey\nfrom keys.services import update_key\n"
              f"update_key(key=ApiKey.objects.get(pk={key.pk}), changes={{'rpm': 2}}, actor='other process')\n")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "DATABASE_URL": _database_url(), "LOG_LEVEL": "WARNING"})

    # Within the second the old row may still answer once, and its script sees the version moved.
    clock[0] += 0.1
    assert key_reads(client, secret) == (200, 0)
    clock[0] += 0.1
    refused = post(client, *CHAT, secret)
    assert_error(refused, 429, "rate_limit_exceeded", "rate_limit_error", param="rpm")
    assert ApiKey.objects.get(pk=key.pk).rpm == 2


@pytest.mark.redis
@pytest.mark.django_db
def test_a_change_that_cannot_be_published_is_logged(free_key, monkeypatch, caplog,
                                                      django_capture_on_commit_callbacks):
    def unreachable(*args, **kwargs):
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(cache, "run_script", unreachable, raising=False)
    with caplog.at_level(logging.ERROR, logger="gateway.keys"), django_capture_on_commit_callbacks(execute=True):
        auth_cache.changed(free_key[0].digest)
    assert "KEY_CACHE_MAX_SECONDS" in caplog.text


@pytest.mark.redis
def test_the_limits_script_reads_a_name_along_and_gives_it_a_value_when_it_has_none():
    first = windows.count_and_read("key:reads", (60, 3600), read="reads:version", default="v1")
    second = windows.count_and_read("key:reads", (60, 3600), read="reads:version", default="v2")
    assert [window.count for window in first[0]] == [1, 1] and first[1] == "v1"
    assert [window.count for window in second[0]] == [2, 2] and second[1] == "v1"


def test_without_a_shared_cache_nothing_is_read_along(settings):
    settings.SHARED_CACHE = False
    counted, value = windows.count_and_read("key:memory", (60, 3600), read="reads:version", default="v1")
    assert [window.count for window in counted] == [1, 1] and value is None
