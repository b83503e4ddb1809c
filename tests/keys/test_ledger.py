"""The credit ledger outside requests: grants, edits, refills, and reconcile."""
import json

import pytest
from django.core.management import call_command

from keys.ledger import mismatches
from keys.models import ApiKey, LedgerEntry
from keys.services import refill_all, update_key
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def entries(key) -> list[tuple]:
    return list(LedgerEntry.objects.filter(key=key).order_by("id").values_list("kind", "amount", "balance_after",
                                                                             "status"))


def reconcile(*args) -> tuple[int, str]:
    from io import StringIO

    out = StringIO()
    try:
        call_command("reconcile", *args, stdout=out)
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


def test_a_new_key_starts_its_ledger_with_its_grant(make_key):
    key, _ = make_key(credits=40, max_credits=50)
    assert entries(key) == [("grant", 40, 40, "completed")]
    assert LedgerEntry.objects.get(key=key).actor == "test"


def test_an_admin_api_edit_of_credits_is_a_row_with_the_difference(client, make_key, admin_key):
    key, secret = make_key(credits=40, max_credits=50)
    _, admin_secret = admin_key
    response = client.post("/admin/update-key", json.dumps({"key": secret, "update": {"credits": 25}}),
                           content_type="application/json", **bearer(admin_secret))
    assert response.status_code == 200
    assert entries(key)[-1] == ("adjustment", -15, 25, "completed")
    assert LedgerEntry.objects.filter(key=key).order_by("id").last().actor.startswith("key sk-")


def test_an_edit_that_leaves_the_balance_alone_writes_no_row(make_key):
    key, _ = make_key(credits=40, max_credits=50)
    update_key(key=key, changes={"rpm": 10, "max_credits": 60}, actor="test")
    assert entries(key) == [("grant", 40, 40, "completed")]


def test_refill_writes_one_row_per_key_it_raises(make_key):
    low, _ = make_key(credits=3, max_credits=10)
    full, _ = make_key(credits=10, max_credits=10)
    assert refill_all(actor="command refill_credits") == 1
    assert entries(low)[-1] == ("refill", 7, 10, "completed")
    assert entries(full) == [("grant", 10, 10, "completed")]
    assert ApiKey.objects.get(pk=low.pk).credits == 10


def test_reconcile_is_clean_after_every_kind_of_change(make_key):
    key, _ = make_key(credits=3, max_credits=10)
    update_key(key=key, changes={"credits": 1}, actor="test")
    refill_all(actor="test")
    code, out = reconcile()
    assert code == 0
    assert "0 mismatch(es)" in out


def test_reconcile_names_a_balance_changed_behind_the_ledger_and_exits_non_zero(make_key):
    key, _ = make_key(credits=30, max_credits=30)
    clean, _ = make_key(credits=5, max_credits=5)
    ApiKey.objects.filter(pk=key.pk).update(credits=27)  # a write that bypassed the ledger
    code, out = reconcile()
    assert code == 1
    assert f"MISMATCH {key.prefix}…: credits 27 but the ledger sums to 30 (difference -3)" in out
    assert clean.prefix not in out
    assert reconcile("--key", clean.prefix)[0] == 0


def test_reconcile_checks_the_in_flight_count_against_pending_charges(make_key):
    key, _ = make_key(credits=30, max_credits=30)
    ApiKey.objects.filter(pk=key.pk).update(in_flight=2)
    [found] = mismatches()
    assert (found.in_flight, found.pending) == (2, 0)
    assert "2 request(s) counted in flight but 0 pending charge(s)" in str(found)


def test_the_database_refuses_credits_above_max_credits(make_key):
    from django.db import IntegrityError, transaction

    key, _ = make_key(credits=5, max_credits=5)
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(credits=6)
