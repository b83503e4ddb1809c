"""The charge and its settlement on the ledger: rows, refunds, faults after the upstream answered, the sweeper."""
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError
from django.utils import timezone

from gateway import metering
from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from keys.services import update_key
from models_catalog.models import AiModel, UsageEvent
from tests.gateway.conftest import assert_error, body_for, post

pytestmark = pytest.mark.django_db
HELLO = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


def charges(key):
    return LedgerEntry.objects.filter(key=key, kind="charge").order_by("id")


def test_a_success_completes_its_charge_row_with_tokens_and_latency_and_records_usage(client, seeded, free_key):
    key, secret = free_key
    response = post(client, "/v1/chat/completions", HELLO, secret)
    assert response.status_code == 200
    [charge] = charges(key)
    assert (charge.amount, charge.balance_after, charge.status) == (-1, 99, "completed")
    assert (charge.operation, charge.model, charge.provider, charge.request_id) == ("chat", "local-chat", "local",
                                                                                   response["X-Request-ID"])
    usage = response.json()["usage"]
    assert (charge.input_tokens, charge.output_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert charge.latency_ms is not None and charge.settled_at >= charge.created_at
    event = UsageEvent.objects.get(key=key)
    assert (event.credits_charged, event.input_tokens, event.success) == (1, charge.input_tokens, True)
    assert ApiKey.objects.get(pk=key.pk).in_flight == 0
    assert mismatches() == []


def test_a_refund_never_lifts_credits_above_max_credits_and_records_what_it_restored(client, fake_models, upstream,
                                                                                     make_key):
    key, secret = make_key(credits=10, max_credits=10)
    chat = AiModel.objects.get(model_id="fake-chat")
    entry = metering.charge(key=key, model=chat, operation="chat", amount=4, request_id="r")
    update_key(key=key, changes={"max_credits": 7}, actor="staff")  # lowered while the request runs
    assert metering.refund(entry=entry) == 7
    refund = LedgerEntry.objects.get(key=key, kind="refund")
    assert (refund.amount, refund.balance_after, refund.charge_id) == (1, 7, entry)
    assert LedgerEntry.objects.get(pk=entry).status == "refunded"
    assert mismatches() == []
    update_key(key=key, changes={"rpm": 30}, actor="staff")  # later edits still work


def test_a_failed_upstream_call_is_refunded_and_recorded_as_a_failure(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.fail_all(500)
    response = post(client, "/v1/chat/completions", {**HELLO, "model": "fake-chat"}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert response["X-Remaining-Credits"] == "100"
    assert [c.status for c in charges(key)] == ["refunded"]
    assert UsageEvent.objects.get(key=key).success is False
    assert mismatches() == []


def test_a_settlement_the_database_refuses_twice_keeps_the_answer_and_the_sweeper_refunds_it(
        client, seeded, free_key, monkeypatch, settings):
    key, secret = free_key

    def database_gone(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(metering, "complete", database_gone)
    response = post(client, "/v1/chat/completions", HELLO, secret)
    assert response.status_code == 200  # the client keeps the answer it was charged for
    [charge] = charges(key)
    assert charge.status == "pending"
    monkeypatch.undo()

    out = StringIO()
    call_command("settle_stale", "--older-than", "0", stdout=out)
    assert "abandoned and refunded 1 charge(s)" in out.getvalue()
    charge.refresh_from_db()
    assert charge.status == "abandoned"
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert mismatches() == []


def test_a_failure_after_the_upstream_answered_refunds_and_answers_with_a_clear_error(client, seeded, local_key,
                                                                                      monkeypatch):
    key, secret = local_key

    def disk_full(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr("gateway.media.save", disk_full)
    path, body = body_for("image")
    response = post(client, path, {**body, "response_format": "url"}, secret)
    assert_error(response, 500, "internal_error", "server_error")
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert [c.status for c in charges(key)] == ["refunded"]
    assert mismatches() == []


def test_an_embeddings_answer_missing_vectors_is_refunded_as_a_502(client, fake_models, upstream, free_key):
    key, secret = free_key
    upstream.json("/embeddings", {"object": "list", "data": [], "model": "m", "usage": {"prompt_tokens": 1}})
    response = post(client, "/v1/embeddings", {"model": "fake-embedding", "input": "Hello"}, secret)
    assert_error(response, 502, "upstream_unavailable", "upstream_error")
    assert ApiKey.objects.get(pk=key.pk).credits == 100
    assert UsageEvent.objects.get(key=key).success is False


def test_settle_stale_abandons_only_charges_older_than_its_limit(seeded, make_key):
    key, _ = make_key(credits=10, max_credits=10)
    chat = AiModel.objects.get(model_id="local-chat")
    old = metering.charge(key=key, model=chat, operation="chat", amount=2, request_id="old")
    recent = metering.charge(key=key, model=chat, operation="chat", amount=3, request_id="recent")
    LedgerEntry.objects.filter(pk=old).update(created_at=timezone.now() - timedelta(hours=1))
    out = StringIO()
    call_command("settle_stale", "--older-than", "900", "--dry-run", stdout=out)
    assert "would abandon and refund 1 charge(s)" in out.getvalue()
    assert LedgerEntry.objects.get(pk=old).status == "pending"
    call_command("settle_stale", "--older-than", "900", stdout=StringIO())
    assert LedgerEntry.objects.get(pk=old).status == "abandoned"
    assert LedgerEntry.objects.get(pk=recent).status == "pending"
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (7, 1)
    assert UsageEvent.objects.get(key=key).status == 0  # abandoned: nobody knows what the client got
    assert mismatches() == []
    # The request that was still running settles normally; the abandoned one cannot be settled again.
    assert metering.complete(entry=recent, key=key, model=chat, operation="chat", provider="local", input_tokens=1,
                             output_tokens=1, latency_ms=5)
    assert not metering.complete(entry=old, key=key, model=chat, operation="chat", provider="local",
                                 input_tokens=1, output_tokens=1, latency_ms=5)
    assert metering.refund(entry=old) is None
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (7, 0)
    assert mismatches() == []


def test_a_key_at_its_max_concurrent_gets_429_until_a_stream_ends(client, seeded, make_key):
    key, secret = make_key(credits=10, max_credits=10)
    ApiKey.objects.filter(pk=key.pk).update(max_concurrent=1)
    stream = post(client, "/v1/chat/completions", {**HELLO, "stream": True}, secret)
    assert stream.status_code == 200  # its body is not read yet: the request is still in flight
    refused = post(client, "/v1/chat/completions", HELLO, secret)
    assert_error(refused, 429, "concurrency_limit", "rate_limit_error", param="maxConcurrent")
    assert refused["Retry-After"] == "1"
    assert ApiKey.objects.get(pk=key.pk).credits == 9  # the refusal cost nothing
    b"".join(stream.streaming_content)
    assert post(client, "/v1/chat/completions", HELLO, secret).status_code == 200
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (8, 0)
    assert mismatches() == []


def test_a_key_revoked_in_another_process_is_not_charged_while_its_row_is_cached(client, seeded, free_key):
    key, secret = free_key
    assert post(client, "/v1/chat/completions", HELLO, secret).status_code == 200  # now cached
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)  # as another instance would
    assert_error(post(client, "/v1/chat/completions", HELLO, secret), 401, "invalid_api_key",
                 "authentication_error")
    assert ApiKey.objects.get(pk=key.pk).credits == 99
    assert_error(post(client, "/v1/chat/completions", HELLO, secret), 401, "invalid_api_key",
                 "authentication_error")


def test_a_tier_changed_in_another_process_is_checked_by_the_charge(client, seeded, make_key):
    from models_catalog import catalog

    AiModel.objects.filter(model_id="local-chat").update(tiers=["premium"])
    catalog.invalidate()
    key, secret = make_key(tier="premium", credits=10, max_credits=10)
    assert post(client, "/v1/chat/completions", HELLO, secret).status_code == 200  # the key is now cached
    ApiKey.objects.filter(pk=key.pk).update(tier="free")  # as another instance would
    assert_error(post(client, "/v1/chat/completions", HELLO, secret), 403, "model_not_allowed", "permission_error")
    assert ApiKey.objects.get(pk=key.pk).credits == 9
    assert charges(key).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_settlement_refused_twice_is_completed_in_the_background_once_the_database_is_back(
        client, seeded, free_key, monkeypatch):
    from gateway import sweeper
    from tests.gateway.conftest import wait_for

    key, secret = free_key
    monkeypatch.setattr(sweeper, "SETTLE_RETRY_SECONDS", 0.05)
    real_complete, refusals = metering.complete, [3]

    def database_coming_back(**kwargs):
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError("the database system is starting up")
        return real_complete(**kwargs)

    monkeypatch.setattr(metering, "complete", database_coming_back)
    assert post(client, "/v1/chat/completions", HELLO, secret).status_code == 200
    assert wait_for(lambda: charges(key).get().status == "completed", timeout=10)
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (99, 0)
    assert UsageEvent.objects.filter(key=key, success=True).count() == 1
    assert mismatches() == []


def test_the_sweep_mark_rises_past_settled_charges_and_stops_below_the_first_pending_one(seeded, make_key):
    from gateway.sweeper import move_sweep_mark, settle_stale, sweep_mark

    key, _ = make_key(credits=10, max_credits=10)
    chat = AiModel.objects.get(model_id="local-chat")
    old = timezone.now() - timedelta(hours=1)

    def charge(name):
        entry = metering.charge(key=key, model=chat, operation="chat", amount=1, request_id=name)
        LedgerEntry.objects.filter(pk=entry).update(created_at=old)
        return entry

    def settle(entry):
        assert metering.complete(entry=entry, key=key, model=chat, operation="chat", provider="local",
                                 input_tokens=1, output_tokens=1, latency_ms=5)

    first, second, running, fourth = charge("a"), charge("b"), charge("c"), charge("d")
    settle(first), settle(second), settle(fourth)
    recent = metering.charge(key=key, model=chat, operation="chat", amount=1, request_id="recent")
    assert move_sweep_mark(timezone.now() - timedelta(seconds=900)) == running - 1 == sweep_mark()
    # The charge still pending above the mark is found by every later sweep, however long it takes.
    assert settle_stale(older_than=900) == 1
    assert LedgerEntry.objects.get(pk=running).status == "abandoned"
    # Past the abandoned one now, and up to the last entry made long enough ago, never a recent one.
    last_old = LedgerEntry.objects.filter(created_at__lt=timezone.now() - timedelta(seconds=60)).latest("id").pk
    assert sweep_mark() == last_old < recent
    LedgerEntry.objects.filter(pk=recent).update(created_at=old)
    assert settle_stale(older_than=900) == 1
    assert LedgerEntry.objects.get(pk=recent).status == "abandoned"
    assert mismatches() == []


def test_the_sweep_mark_never_moves_down(seeded, make_key):
    from gateway.sweeper import move_sweep_mark, sweep_mark
    from keys.models import SweepMark

    key, _ = make_key(credits=10, max_credits=10)
    SweepMark.objects.create(pk=1, ledger_id=10**9)
    assert move_sweep_mark(timezone.now()) == 10**9 == sweep_mark()


def test_a_settlement_changes_no_indexed_column_so_postgresql_updates_it_hot(seeded, free_key, client, vendor):
    if vendor != "postgresql":
        pytest.skip("heap-only updates are PostgreSQL's")
    from django.db import connection

    _, secret = free_key

    def hot_updates():
        with connection.cursor() as cursor:
            cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
                           "WHERE relname = 'keys_ledgerentry'")
            return cursor.fetchone() or (0, 0)

    before = hot_updates()
    for _ in range(5):
        assert post(client, "/v1/chat/completions", HELLO, secret).status_code == 200
    updated, hot = (after - was for after, was in zip(hot_updates(), before))
    assert updated == hot == 5
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'keys_ledgerentry'")
        assert "fillfactor=90" in cursor.fetchone()[0]
