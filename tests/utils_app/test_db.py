"""utils_app.db: SQLite writers of one process queue on a lock instead of in SQLite's busy handler."""
import pytest
from django.db import connection, transaction

from utils_app import db


def test_an_autocommit_write_on_sqlite_holds_the_lock_and_gives_it_back(transactional_db, vendor):
    with db.one_writer_at_a_time(connection):
        assert db._sqlite_write.locked() is (vendor == "sqlite")
    assert not db._sqlite_write.locked()


def test_the_lock_is_given_back_when_the_write_fails(transactional_db):
    with pytest.raises(RuntimeError):
        with db.one_writer_at_a_time(connection):
            raise RuntimeError("the statement failed")
    assert not db._sqlite_write.locked()


def test_a_write_inside_a_transaction_does_not_wait_for_the_lock(transactional_db):
    # The transaction may hold SQLite's write lock already: waiting here could deadlock.
    with transaction.atomic(), db.one_writer_at_a_time(connection):
        assert not db._sqlite_write.locked()


def test_charges_and_usage_rows_still_work_through_the_lock(transactional_db, seeded, make_key):
    from keys import credits
    from models_catalog.models import AiModel, UsageEvent

    key, _ = make_key(credits=5)
    assert credits.charge(key, 2) == 3
    assert credits.refund(key, 1) == 4
    UsageEvent.objects.record(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat",
                              status=200, success=True, credits_charged=1, created_at=key.created_at)
    assert UsageEvent.objects.filter(key=key).count() == 1
    assert not db._sqlite_write.locked()
