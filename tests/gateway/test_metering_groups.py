"""Charges and settlements of concurrent requests grouped into one statement each (gateway.metering, PostgreSQL).

A group must write exactly what its requests' statements would have written one by one: the same
ledger rows, balances, in-flight counts, usage rows and rollups, with a refusal or a charge no
longer pending told apart for each request, and groups of several processes sharing keys must
never deadlock each other.
"""
import random
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gateway import metering, metering_groups, metering_sql
from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import AiModel, KeyDailyUsage, ModelHourlyUsage, UsageEvent
from utils_app.coalesce import Coalescer
from utils_app.db import release_connection

CHARGE, SETTLEMENT = metering_groups.CHARGE, metering_groups.SETTLEMENT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat(seeded):
    release_connection(connection)
    return AiModel.objects.get(model_id="local-chat")


def charge_item(key, model, amount=1, request_id="r"):
    return {"amount": amount, "now": timezone.now(), "key": key.pk, "tier": key.tier, "request_id": request_id,
            "idempotency_key": None, "operation": "chat", "model": model.model_id}


def settle_item(entry, key, model, *, tokens=(3, 2), deployment=None, provider="local"):
    return {"entry": entry, "key": key.pk, "model_pk": model.pk, "operation": "chat", "provider": provider,
            "input_tokens": tokens[0], "output_tokens": tokens[1], "cached_tokens": 1, "latency_ms": 12,
            "now": timezone.now(), "status": 200, "success": True, "deployment": deployment}


def ledger_rows(key):
    return list(LedgerEntry.objects.filter(key=key).order_by("id").values(
        "kind", "amount", "balance_after", "status", "operation", "model", "provider", "input_tokens",
        "output_tokens", "latency_ms", "deployment_id", "idempotency_key", "actor"))


def usage_rows(key):
    return list(UsageEvent.objects.filter(key=key).order_by("id").values(
        "model_id", "operation", "status", "success", "input_tokens", "output_tokens", "cached_tokens",
        "credits_charged", "latency_ms", "provider", "deployment_id"))


def test_a_group_of_charges_takes_from_each_key_with_its_own_row_and_refuses_each_on_its_own(chat, make_key):
    rich, _ = make_key(credits=10, max_credits=10)
    broke, _ = make_key(credits=1, max_credits=10)
    other, _ = make_key(credits=5, max_credits=5)
    results = metering_groups.run_group([(CHARGE, charge_item(rich, chat, 3, "a")), (CHARGE, charge_item(broke, chat, 2, "b")),
                                   (CHARGE, charge_item(other, chat, 1, "c"))])
    assert results[1] is None  # refused alone: the other two charged
    (rich_entry, rich_left), (other_entry, other_left) = results[0], results[2]
    assert (rich_left, other_left) == (7, 4)
    for key, entry, amount, left, request_id in ((rich, rich_entry, 3, 7, "a"), (other, other_entry, 1, 4, "c")):
        row = LedgerEntry.objects.get(pk=entry)
        assert (row.key_id, row.amount, row.balance_after, row.status, row.request_id) == (
            key.pk, -amount, left, "pending", request_id)
        key.refresh_from_db()
        assert (key.credits, key.in_flight) == (left, 1)
        assert key.last_used_at == row.created_at
    broke.refresh_from_db()
    assert (broke.credits, broke.in_flight, broke.last_used_at) == (1, 0, None)
    assert not LedgerEntry.objects.filter(key=broke, kind="charge").exists()


def test_a_group_of_charges_holds_each_condition_of_the_single_charge(chat, make_key):
    busy, _ = make_key(credits=10, max_credits=10, max_concurrent=1)
    ApiKey.objects.filter(pk=busy.pk).update(in_flight=1)
    revoked, _ = make_key(credits=10, max_credits=10)
    ApiKey.objects.filter(pk=revoked.pk).update(is_active=False)
    retiered, _ = make_key(credits=10, max_credits=10)
    item = charge_item(retiered, chat)
    item["tier"] = "premium"  # the tier this process checked is no longer the key's
    fine, _ = make_key(credits=10, max_credits=10)
    results = metering_groups.run_group([(CHARGE, charge_item(busy, chat)), (CHARGE, charge_item(revoked, chat)),
                                   (CHARGE, item), (CHARGE, charge_item(fine, chat))])
    assert results[:3] == [None, None, None] and results[3][1] == 9
    assert LedgerEntry.objects.filter(kind="charge").count() == 1


def test_a_group_of_settlements_writes_what_the_settlements_one_by_one_write(chat, make_key):
    alone, _ = make_key(credits=10, max_credits=10)
    grouped, _ = make_key(credits=10, max_credits=10)
    deployment = chat.deployments.first()
    for key in (alone, grouped):
        entries = [metering.charge(key=key, model=chat, operation="chat", amount=1, request_id=f"{key.pk}-{n}")
                   for n in range(3)]
        items = [settle_item(entries[0], key, chat, tokens=(5, 1)),
                 settle_item(entries[1], key, chat, tokens=(2, 9), deployment=deployment.pk if deployment else None),
                 settle_item(entries[2], key, chat)]
        if key is alone:
            for item in items:
                assert metering.complete(**{name: value for name, value in item.items()
                                            if name not in ("now", "key", "model_pk")}, key=key, model=chat)
        else:
            assert metering_groups.run_group([(SETTLEMENT, item) for item in items]) == [True, True, True]
    assert ledger_rows(alone) == ledger_rows(grouped)
    assert usage_rows(alone) == usage_rows(grouped)
    assert [event.request_id for event in UsageEvent.objects.filter(key=grouped).order_by("id")] == [
        f"{grouped.pk}-{n}" for n in range(3)]
    for key in (alone, grouped):
        key.refresh_from_db()
        assert (key.credits, key.in_flight) == (7, 0)
        day = KeyDailyUsage.objects.get(key=key, model=chat)
        assert (day.requests, day.completed, day.input_tokens, day.output_tokens, day.credits) == (3, 3, 10, 12, 3)
    assert sum(ModelHourlyUsage.objects.filter(model=chat).values_list("requests", flat=True)) == 6
    settled = LedgerEntry.objects.filter(key=grouped, kind="charge")
    assert all(row.settled_at >= row.created_at for row in settled)
    assert mismatches() == []


def test_a_group_of_settlements_leaves_a_charge_no_longer_pending_as_it_is(chat, make_key):
    key, _ = make_key(credits=10, max_credits=10)
    first, refunded, last = (metering.charge(key=key, model=chat, operation="chat", amount=2, request_id=name)
                             for name in "abc")
    assert metering.refund(entry=refunded) == 6
    assert metering_groups.run_group([(SETTLEMENT, settle_item(first, key, chat)),
                                (SETTLEMENT, settle_item(refunded, key, chat)),
                                (SETTLEMENT, settle_item(last, key, chat))]) == [True, False, True]
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (6, 0)  # the refund's slot was released by the refund alone
    assert LedgerEntry.objects.get(pk=refunded).status == "refunded"
    assert UsageEvent.objects.filter(key=key).count() == 2
    assert mismatches() == []


def test_charges_and_settlements_of_other_keys_share_one_statement(chat, make_key):
    settling, _ = make_key(credits=10, max_credits=10)
    charging, _ = make_key(credits=10, max_credits=10)
    broke, _ = make_key(credits=0, max_credits=10)
    first, second = (metering.charge(key=settling, model=chat, operation="chat", amount=2, request_id=name)
                     for name in ("s1", "s2"))
    release_connection(connection)
    with CaptureQueriesContext(connection) as captured:
        results = metering_groups.run_group([(SETTLEMENT, settle_item(first, settling, chat)),
                                       (CHARGE, charge_item(charging, chat, 3, "c")),
                                       (SETTLEMENT, settle_item(second, settling, chat, tokens=(7, 8))),
                                       (CHARGE, charge_item(broke, chat, 1, "b"))])
    assert len(captured.captured_queries) == 1
    assert results[0] is True and results[2] is True and results[3] is None
    entry, balance = results[1]
    assert balance == 7
    assert LedgerEntry.objects.get(pk=entry).request_id == "c"
    settling.refresh_from_db()
    charging.refresh_from_db()
    assert (settling.credits, settling.in_flight, charging.credits, charging.in_flight) == (6, 0, 7, 1)
    assert sorted(UsageEvent.objects.filter(key=settling).values_list("input_tokens", "output_tokens")) == [
        (3, 2), (7, 8)]
    assert mismatches() == []


def test_a_group_the_database_refuses_for_one_request_fails_that_request_alone(chat, make_key, monkeypatch):
    from django.db import DataError

    good, _ = make_key(credits=10, max_credits=10)
    bad, _ = make_key(credits=10, max_credits=10)
    charging, _ = make_key(credits=10, max_credits=10)
    good_entry, bad_entry = (metering.charge(key=key, model=chat, operation="chat", amount=1, request_id=name)
                             for key, name in ((good, "g"), (bad, "b")))
    refused = settle_item(bad_entry, bad, chat, provider="p" * 65)  # longer than the column holds
    results = metering_groups.run_group([(SETTLEMENT, settle_item(good_entry, good, chat)), (SETTLEMENT, refused),
                                   (CHARGE, charge_item(charging, chat, 2, "c"))])
    assert results[0] is True and isinstance(results[1], DataError) and results[2][1] == 8
    assert LedgerEntry.objects.get(pk=good_entry).status == "completed"
    assert LedgerEntry.objects.get(pk=bad_entry).status == "pending"  # its settlement is retried as before
    # Through the group, the request at fault gets its own error raised.
    metering_groups.groups.resize(16)
    monkeypatch.setattr(metering_groups.groups.coalescer, "work", lambda items: [results[1]])
    release_connection(connection)
    with pytest.raises(DataError):
        metering.complete(entry=bad_entry, key=bad, model=chat, operation="chat", provider="p" * 65,
                          input_tokens=1, output_tokens=1, latency_ms=1)
    assert mismatches() == []


def test_the_in_flight_count_released_by_a_group_never_goes_below_zero(chat, make_key):
    key, _ = make_key(credits=10, max_credits=10)
    entries = [metering.charge(key=key, model=chat, operation="chat", amount=1, request_id=str(n)) for n in range(3)]
    ApiKey.objects.filter(pk=key.pk).update(in_flight=1)  # as a single settlement's CASE guards it
    assert metering_groups.run_group([(SETTLEMENT, settle_item(entry, key, chat)) for entry in entries]) == [True] * 3
    key.refresh_from_db()
    assert key.in_flight == 0


@pytest.fixture
def held_key():
    """Holds a key's row locked from another connection (another process's statement, a staff edit) until
    the test lets it go."""
    import psycopg
    from django.db import connection as django_connection

    settings = django_connection.settings_dict
    other = psycopg.connect(host=settings["HOST"] or None, port=settings["PORT"] or None, user=settings["USER"],
                            password=settings["PASSWORD"] or None, dbname=settings["NAME"], autocommit=False)

    def hold(key):
        other.execute("SELECT id FROM keys_apikey WHERE id = %s FOR UPDATE", [key.pk])

    yield hold
    other.rollback()
    other.close()


def test_a_group_leaves_out_a_key_another_transaction_holds_instead_of_waiting_for_it(chat, make_key, held_key):
    held, _ = make_key(credits=10, max_credits=10)
    free, _ = make_key(credits=10, max_credits=10)
    entry = metering.charge(key=held, model=chat, operation="chat", amount=1, request_id="earlier")
    held_key(held)
    results = metering_groups.run_group([(CHARGE, charge_item(held, chat, 2, "a")), (CHARGE, charge_item(free, chat, 2, "b"))])
    assert results[0] is metering_groups.SKIPPED and results[1][1] == 8
    assert metering_groups.run_group([(SETTLEMENT, settle_item(entry, held, chat)),
                                (SETTLEMENT, settle_item(results[1][0], free, chat))]) == [metering_groups.SKIPPED, True]
    assert LedgerEntry.objects.get(pk=entry).status == "pending"  # its settlement runs alone, later
    assert not LedgerEntry.objects.filter(request_id="a").exists()


def test_a_request_left_out_of_its_group_runs_its_statement_alone_once_the_key_is_free(chat, make_key, held_key,
                                                                                         monkeypatch):
    held, _ = make_key(credits=10, max_credits=10)
    metering_groups.groups.resize(16)
    calls = []
    monkeypatch.setattr(metering_groups.groups.coalescer, "work",
                        lambda items: calls.append(items) or [metering_groups.SKIPPED for _ in items])  # as if held
    release_connection(connection)  # as in a served request: the statements may run alone
    entry = metering.charge(key=held, model=chat, operation="chat", amount=3, request_id="alone")
    assert held.credits == 7
    row = LedgerEntry.objects.get(pk=entry)
    assert (row.request_id, row.amount, row.balance_after, row.status) == ("alone", -3, 7, "pending")
    release_connection(connection)
    assert metering.complete(entry=entry, key=held, model=chat, operation="chat", provider="local", input_tokens=1,
                             output_tokens=1, latency_ms=1)
    assert len(calls) == 2  # each went to its group first
    assert LedgerEntry.objects.get(pk=entry).status == "completed"
    assert mismatches() == []


def test_a_group_whose_leader_was_interrupted_fails_its_requests_as_a_lost_connection_would(chat, make_key,
                                                                                           monkeypatch):
    from django.db import OperationalError

    from utils_app.coalesce import GroupInterrupted

    key, _ = make_key(credits=10, max_credits=10)
    metering_groups.groups.resize(16)

    def interrupted(items):
        raise GroupInterrupted("the statement of this request's group was interrupted")

    monkeypatch.setattr(metering_groups.groups.coalescer, "work", interrupted)
    release_connection(connection)
    with pytest.raises(OperationalError, match="interrupted"):
        metering.charge(key=key, model=chat, operation="chat", amount=1, request_id="r")


def test_with_a_group_size_of_one_each_statement_runs_alone(chat, make_key, settings, monkeypatch):
    settings.METERING_GROUP_SIZE = 1
    key, _ = make_key(credits=10, max_credits=10)
    release_connection(connection)
    monkeypatch.setattr(metering_groups, "run_group", lambda items: pytest.fail("no group may run"))
    entry = metering.charge(key=key, model=chat, operation="chat", amount=1, request_id="r")
    assert metering_groups.groups.coalescer is None and connection.connection is None  # alone, on a pooled connection
    assert metering.complete(entry=entry, key=key, model=chat, operation="chat", provider="local", input_tokens=1,
                             output_tokens=1, latency_ms=1)
    monkeypatch.undo()
    settings.METERING_GROUP_SIZE = 8
    release_connection(connection)
    metering.charge(key=key, model=chat, operation="chat", amount=1, request_id="r2")
    assert metering_groups.groups.coalescer.max_size == 8
    assert mismatches() == []


def test_concurrent_requests_of_one_process_share_statements_and_every_credit_is_accounted_for(chat, make_key):
    keys = [make_key(credits=1000, max_credits=1000, max_concurrent=50)[0] for _ in range(6)]
    groups = []
    metering_groups.groups.resize(16)
    coalescer = metering_groups.groups.coalescer

    def counted(items):
        groups.append([kind for kind, _ in items])
        return metering_groups.run_group(items)

    coalescer.work = counted
    failures = []

    def requests(number):
        from django.db import connections
        try:
            for step in range(25):
                key = keys[(number + step) % len(keys)]
                entry = metering.charge(key=key, model=chat, operation="chat", amount=2,
                                        request_id=f"{number}-{step}")
                assert metering.complete(entry=entry, key=key, model=chat, operation="chat", provider="local",
                                         input_tokens=3, output_tokens=4, latency_ms=1)
        except Exception as exc:  # the assertion below names it
            failures.append(exc)
        finally:
            connections.close_all()

    try:
        threads = [threading.Thread(target=requests, args=(number,)) for number in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        coalescer.work = metering_groups.run_group
    assert failures == []
    kinds = [kind for group in groups for kind in group]
    assert kinds.count(CHARGE) == kinds.count(SETTLEMENT) == 300
    assert max(len(group) for group in groups) > 1  # they did share statements
    assert any(CHARGE in group and SETTLEMENT in group for group in groups)  # both kinds in one
    assert max(group.count(CHARGE) for group in groups) <= len(keys)  # one charge per key in a group
    for key in keys:
        key.refresh_from_db()
        assert (key.credits, key.in_flight) == (900, 0)
    assert UsageEvent.objects.filter(success=True).count() == 300
    assert sum(KeyDailyUsage.objects.values_list("requests", flat=True)) == 300
    assert mismatches() == []


def test_groups_of_several_processes_sharing_keys_never_deadlock(chat, make_key, monkeypatch):
    """Two coalescers stand for two worker processes: their groups lock the same key and rollup
    rows at once, which would deadlock without SKIP LOCKED on the keys and the one order of the rollups."""
    keys = [make_key(credits=10_000, max_credits=10_000, max_concurrent=100)[0] for _ in range(5)]
    models = [chat, AiModel.objects.get(model_id="local-embedding")]
    workers = [Coalescer(metering_groups.run_group, max_size=8, lock_of=metering_groups.lock_of) for _ in range(2)]
    mine = threading.local()

    class TwoWorkers:
        from django.conf import settings
        size = settings.METERING_GROUP_SIZE  # the settings' own: nothing is made anew

        @property
        def coalescer(self):
            return workers[mine.worker]

    monkeypatch.setattr(metering_groups, "groups", TwoWorkers())
    failures = []
    done = []

    def requests(number):
        from django.db import connections
        mine.worker = number % 2
        chooser = random.Random(number)
        try:
            for step in range(30):
                key, model = chooser.choice(keys), chooser.choice(models)
                entry = metering.charge(key=key, model=model, operation="chat", amount=1,
                                        request_id=f"{number}-{step}")
                assert metering.complete(entry=entry, key=key, model=model, operation="chat", provider="local",
                                         input_tokens=1, output_tokens=1, latency_ms=1)
                done.append(1)
        except Exception as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    # A deadlock would be found and broken within PostgreSQL's deadlock_timeout, failing a group.
    threads = [threading.Thread(target=requests, args=(number,)) for number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert failures == [] and len(done) == 480
    assert sum(ApiKey.objects.filter(pk__in=[key.pk for key in keys]).values_list("credits", flat=True)) == \
        50_000 - 480
    assert sum(ModelHourlyUsage.objects.values_list("requests", flat=True)) == 480
    assert ApiKey.objects.filter(pk__in=[key.pk for key in keys], in_flight__gt=0).count() == 0
    assert mismatches() == []


def test_a_request_whose_context_has_no_wrapper_meters_through_the_process_one_and_builds_none(chat, make_key):
    """A gevent worker runs each request in a greenlet of its own, where Django would build a database
    wrapper for the two statements alone; the process's wrapper runs them, and the request's context is
    left without one (utils_app.speed.statements.statements_wrapper)."""
    from django.db import connections
    from django.test import Client

    from utils_app.speed.statements import statements_wrapper

    key, secret = make_key(credits=10, max_credits=10)
    body = {"model": "local-chat", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    # The first request reads the key from the database (its context builds a wrapper then); later ones
    # find it in the process's key cache.
    assert Client().post("/v1/chat/completions", body, content_type="application/json", **headers).status_code == 200
    seen = {}

    def served_in_a_fresh_context():
        seen["answer"] = Client().post("/v1/chat/completions", body, content_type="application/json", **headers)
        seen["wrappers"] = [wrapper.alias for wrapper in connections.all(initialized_only=True)]
        seen["statements"] = statements_wrapper()

    thread = threading.Thread(target=served_in_a_fresh_context)
    thread.start()
    thread.join()
    assert seen["answer"].status_code == 200, seen["answer"].content
    assert seen["wrappers"] == []  # no wrapper built for this context
    assert seen["statements"] is not connections["default"] and seen["statements"].connection is None
    key.refresh_from_db()
    assert (key.credits, key.in_flight) == (8, 0)
    assert list(LedgerEntry.objects.filter(key=key, kind="charge").values_list("status", flat=True)) == [
        "completed", "completed"]
    assert statements_wrapper() is connections["default"]  # this context has its own: it is the one used
    assert mismatches() == []


def test_a_group_of_either_kind_or_both_sends_the_one_group_statement(chat, make_key, monkeypatch):
    # One statement text per connection to prepare and plan, whatever kinds a group holds: a group of one
    # kind sends the other kind's arrays empty (statements of one kind were planned anew at each execution).
    from utils_app.postgresql.base import DatabaseWrapper

    sent = []
    run_alone = DatabaseWrapper.run_alone

    def recording(self, sql, params, **kwargs):
        sent.append((sql, {name: value for name, value in params.items() if isinstance(value, list)}))
        return run_alone(self, sql, params, **kwargs)

    monkeypatch.setattr(DatabaseWrapper, "run_alone", recording)
    first, _ = make_key(credits=10, max_credits=10)
    second, _ = make_key(credits=10, max_credits=10)
    charged = metering_groups.run_group([(CHARGE, charge_item(first, chat)), (CHARGE, charge_item(second, chat))])
    entries = [entry for entry, _ in charged]
    assert metering_groups.run_group([(SETTLEMENT, settle_item(entries[0], first, chat)),
                                (SETTLEMENT, settle_item(entries[1], second, chat))]) == [True, True]
    mixed = metering_groups.run_group([(CHARGE, charge_item(first, chat)), (SETTLEMENT, settle_item(
        metering.charge(key=second, model=chat, operation="chat", amount=1, request_id="m"), second, chat))])
    assert mixed[1] is True and mixed[0][1] == 8
    groups = [(sql, arrays) for sql, arrays in sent if arrays]
    assert [sql for sql, _ in groups] == [metering_sql.GROUP_STATEMENT] * 3
    assert groups[0][1]["s_entry"] == [] and groups[0][1]["c_key"] == [first.pk, second.pk]
    assert groups[1][1]["c_key"] == [] and groups[1][1]["s_entry"] == entries
    assert mismatches() == []
