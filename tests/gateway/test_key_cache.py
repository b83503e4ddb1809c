"""The process's key cache checked against the shared keys version (keys.auth_cache): fewer reads, no stale use."""
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


def key_reads(client, secret: str) -> tuple[int, int]:
    """One metered chat request: (its status, how many times it read a key row)."""
    with CaptureQueriesContext(connection) as captured:
        status = post(client, *CHAT, secret).status_code
    return status, sum('"digest"' in query["sql"] and "keys_apikey" in query["sql"]
                       for query in captured.captured_queries)


def warm(client, clock, secret: str) -> None:
    """The key's row cached under a known version: read once, and once more if no version was known then."""
    assert key_reads(client, secret) == (200, 1)
    clock.advance(1.1)
    assert key_reads(client, secret)[0] == 200


def requests_after(client, clock, secret: str, *steps: float) -> list[tuple[int, int]]:
    """key_reads of one request after each step of the clock."""
    answers = []
    for step in steps:
        clock.advance(step)
        answers.append(key_reads(client, secret))
    return answers


def in_another_process(script: str) -> None:
    subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "DATABASE_URL": _database_url(), "LOG_LEVEL": "WARNING"})


@pytest.mark.redis
@pytest.mark.django_db
def test_a_key_in_use_is_read_again_only_when_a_key_changed_or_its_row_is_old(client, seeded, make_key, clock,
                                                                              settings):
    settings.KEY_CACHE_MAX_SECONDS = 60.0
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    assert key_reads(client, secret) == (200, 1)
    clock.advance(1.1)
    assert key_reads(client, secret) == (200, 1)  # the first row predates any known version
    # The row read at 1.1 s serves until 61.1 s.
    assert requests_after(client, clock, secret, 5, 10, 20, 20, 10) == [(200, 0)] * 4 + [(200, 1)]


@pytest.mark.redis
@pytest.mark.django_db
def test_an_emptied_shared_cache_makes_the_process_read_its_keys_again(client, seeded, make_key, clock):
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    warm(client, clock, secret)
    cache.clear()  # Redis restarted empty: the next script makes a new version
    assert requests_after(client, clock, secret, 5, 5) == [(200, 1), (200, 0)]


@pytest.mark.redis
@pytest.mark.django_db
def test_without_an_answer_from_the_shared_cache_a_row_older_than_its_seconds_is_read_again(
        client, seeded, make_key, clock, monkeypatch):
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    warm(client, clock, secret)
    monkeypatch.setattr(windows, "count_and_read", lambda *args, **kwargs: None)  # Redis unreachable
    assert requests_after(client, clock, secret, 0.5, 5) == [(200, 0), (200, 1)]


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_changes_made_in_another_process_apply_at_the_keys_next_request_here(client, seeded, make_key, clock):
    limited, limited_secret = make_key(credits=100, max_credits=100, rpm=1000)
    # The other process takes seconds, but the limit is counted here, on the stopped clock: the requests
    # it lowers the rpm below share the request's minute window, which the clock is moved to the start of
    # (each key's windows are shifted by a hash of its id: the 1.7 s below could otherwise straddle two).
    clock.advance(windows.seconds_left(f"key:{limited.pk}", 60))
    revoked, revoked_secret = make_key(credits=100, max_credits=100, rpm=1000)
    secrets = (limited_secret, revoked_secret)
    # The first key's row was read before any version was known, the second's after its script.
    assert [key_reads(client, secret) for secret in secrets] == [(200, 1)] * 2
    clock.advance(1.1)
    assert [key_reads(client, secret) for secret in secrets] == [(200, 1), (200, 0)]
    clock.advance(0.5)
    assert [key_reads(client, secret) for secret in secrets] == [(200, 0)] * 2

    # Another process lowers one key's rpm below what it has used this minute and revokes the other.
    in_another_process(
        "from keys.models import ApiKey\nfrom keys.services import set_active, update_key\n"
        f"update_key(key=ApiKey.objects.get(pk={limited.pk}), changes={{'rpm': 2}}, actor='other process')\n"
        f"set_active(key=ApiKey.objects.get(pk={revoked.pk}), active=False, actor='other process')\n")

    clock.advance(0.1)  # the rpm-limited key's row is 0.6 s old
    assert_error(post(client, *CHAT, limited_secret), 429, "rate_limit_exceeded", "rate_limit_error", param="rpm")
    assert_error(post(client, *CHAT, revoked_secret), 401, "invalid_api_key", "authentication_error")
    assert [ApiKey.objects.get(pk=key.pk).credits for key in (limited, revoked)] == [97, 97]


@pytest.mark.redis
@pytest.mark.django_db
def test_a_refill_moves_the_version_and_this_process_reads_its_keys_again(client, seeded, make_key, clock,
                                                                         django_capture_on_commit_callbacks):
    from keys.services import refill_all

    def version() -> str:
        return windows.count_and_read("key:probe", (60,), read=auth_cache.VERSION, default="unset").value

    _, secret = make_key(credits=50, max_credits=100, rpm=1000)
    warm(client, clock, secret)
    before = version()
    with django_capture_on_commit_callbacks(execute=True):
        assert refill_all(actor="test") == 1
    assert version() != before
    clock.advance(0.1)
    assert key_reads(client, secret) == (200, 1)
    assert post(client, *CHAT, secret)["X-Remaining-Credits"] == "98"


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


def test_without_a_shared_cache_a_row_is_used_for_its_seconds_only(client, seeded, make_key, clock, settings):
    settings.SHARED_CACHE = False
    _, secret = make_key(credits=100, max_credits=100, rpm=1000)
    assert requests_after(client, clock, secret, 0, 0.5, 0.6) == [(200, 1), (200, 0), (200, 1)]


@pytest.mark.redis
def test_the_limits_script_reads_a_name_along_and_gives_it_a_value_when_it_has_none():
    first = windows.count_and_read("key:reads", (60, 3600), read="reads:version", default="v1")
    second = windows.count_and_read("key:reads", (60, 3600), read="reads:version", default="v2")
    assert [window.count for window in first.windows] == [1, 1] and first.value == "v1"
    assert [window.count for window in second.windows] == [2, 2] and second.value == "v1"


def test_without_a_shared_cache_nothing_is_read_along(settings):
    settings.SHARED_CACHE = False
    counted = windows.count_and_read("key:memory", (60, 3600), read="reads:version", default="v1")
    assert [window.count for window in counted.windows] == [1, 1] and counted.value is None


@pytest.mark.django_db
def test_a_refusal_right_after_a_refunded_failure_reports_the_refunded_balance(client, seeded, make_key,
                                                                              monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # gpt-5-mini's provider cannot be called: a 502
    key, secret = make_key(credits=10, max_credits=10)
    failed = post(client, "/v1/chat/completions", {**CHAT[1], "model": "gpt-5-mini"}, secret)
    assert_error(failed, 502, "upstream_unavailable", "upstream_error")
    assert failed["X-Remaining-Credits"] == "10"
    # Within the key cache's second: the balance comes from the cached row, which the refund updated.
    refused = post(client, "/v1/chat/completions", {"model": "local-chat"}, secret)
    assert_error(refused, 400, "missing_field", param="messages")
    assert refused["X-Remaining-Credits"] == "10"
    assert ApiKey.objects.get(pk=key.pk).credits == 10


@pytest.mark.django_db
def test_a_key_read_is_the_row_the_orm_reads_attribute_for_attribute(make_key):
    """The cache's read of a key row runs the ORM's compiled query once per database wrapper; what it
    returns must be what ``ApiKey.objects.filter(digest=...).first()`` builds, every type converted."""
    from django.db import connections
    from django.utils import timezone

    key, _ = make_key(tier="free", credits=7, max_credits=100, rpm=5, max_concurrent=2)
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now(), in_flight=1)
    orm = ApiKey.objects.filter(digest=key.digest).first()
    wrapper = connections["default"]
    with CaptureQueriesContext(connection) as captured:
        read = auth_cache._select_row(wrapper, key.digest)
        again = auth_cache._select_row(wrapper, key.digest)
    assert len(captured.captured_queries) == 2  # logged as Django logs any statement
    expected = {name: getattr(orm, name) for name in auth_cache._FIELDS}
    assert read == again == expected
    assert {name: type(value) for name, value in read.items()} == {
        name: type(value) for name, value in expected.items()}
    assert auth_cache._select_row(wrapper, "no-such-digest") is None
    built = auth_cache._key_from(read, "default")
    assert built == orm and built.last_used_at == orm.last_used_at and built.is_active is True
