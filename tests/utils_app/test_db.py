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


def test_charges_and_settlements_still_work_through_the_lock(transactional_db, seeded, make_key):
    from gateway import metering
    from models_catalog.models import AiModel, UsageEvent

    key, _ = make_key(credits=5)
    chat = AiModel.objects.get(model_id="local-chat")
    first = metering.charge(key=key, model=chat, operation="chat", amount=2, request_id="a")
    second = metering.charge(key=key, model=chat, operation="chat", amount=1, request_id="b")
    assert key.credits == 2
    assert metering.complete(entry=first, key=key, model=chat, operation="chat", provider="local", input_tokens=1,
                             output_tokens=1, latency_ms=3)
    assert metering.refund(entry=second) == 3
    assert UsageEvent.objects.filter(key=key).count() == 1
    assert not db._sqlite_write.locked()


@pytest.mark.postgres
def test_a_connection_the_server_ended_is_told_apart_without_a_round_trip(transactional_db):
    import time

    import psycopg

    settings_dict = connection.settings_dict
    params = dict(host=settings_dict["HOST"] or "127.0.0.1", port=settings_dict["PORT"] or 5432,
                  user=settings_dict["USER"], dbname=settings_dict["NAME"], autocommit=True)
    with psycopg.connect(**params) as pooled, psycopg.connect(**params) as admin:
        assert not db.ended_by_server(pooled)  # healthy and idle: nothing waiting on its socket
        admin.execute("SELECT pg_terminate_backend(%s)", [pooled.info.backend_pid])
        time.sleep(0.2)  # the server's goodbye reaches the socket
        assert db.ended_by_server(pooled)


@pytest.mark.postgres
def test_the_pool_never_hands_out_a_connection_the_server_ended(transactional_db):
    import time

    from django.db import connections

    other = connections.create_connection("default")  # a connection of its own, from the same pool
    try:
        other.ensure_connection()
        doomed = other.connection.info.backend_pid
        other.close()  # back to the pool, idle
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [doomed])
        time.sleep(0.2)
        other.ensure_connection()
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] != doomed
    finally:
        other.close()


@pytest.mark.postgres
def test_a_connection_numbered_past_select_s_limit_is_checked_too(transactional_db):
    import os

    import psycopg

    settings_dict = connection.settings_dict
    pipes = [os.pipe() for _ in range(520)]  # a busy gevent worker holds thousands of sockets
    try:
        with psycopg.connect(host=settings_dict["HOST"] or "127.0.0.1", port=settings_dict["PORT"] or 5432,
                             user=settings_dict["USER"], dbname=settings_dict["NAME"]) as conn:
            assert conn.fileno() > 1024
            assert not db.ended_by_server(conn)
    finally:
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)
