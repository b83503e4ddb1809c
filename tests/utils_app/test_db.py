"""utils_app.db: SQLite writers of one process queue on a lock instead of in SQLite's busy handler;
PostgreSQL's pool hands out live connections, opens without ever closing itself, and says why it cannot."""
import pytest
from django.db import OperationalError, connection, transaction

from utils_app import db
from utils_app.speed import statements


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


@pytest.mark.parametrize(("message", "cause"), [
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  sorry, too many clients '
     'already', "too many clients (the server's max_connections is reached)"),
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  remaining connection slots '
     'are reserved for non-replication superuser connections', "too many clients (only the server's reserved "
                                                                "connections are left)"),
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n\tIs the server '
     'running on that host and accepting TCP/IP connections?', "connection refused (no server listening)"),
    ("FATAL:  the database system is shutting down", "the server is shutting down"),
    ("terminating connection due to administrator command\nserver closed the connection unexpectedly",
     "connection ended by the server (a restart or a terminated backend)"),
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  database "gw" does not '
     'exist', 'database "gw" does not exist'),
])
def test_a_database_failure_is_named_in_words(message, cause):
    assert db.failure_cause(message) == cause
    wrapped = OperationalError(message)  # Django's, as a request meets it, around the driver's own
    wrapped.__cause__ = ValueError(message)
    assert db.failure_cause(wrapped) == cause


def test_a_pool_timeout_says_whether_its_connections_were_busy_or_could_not_be_opened(monkeypatch):
    from psycopg_pool import PoolTimeout

    monkeypatch.setattr(db, "_last_connect_failure", None)
    timeout = PoolTimeout("couldn't get a connection after 3.00 sec")
    assert db.unavailable_cause(timeout) == "pool timeout after 3 s (every pooled connection busy)"
    db.note_connect(OperationalError("FATAL:  sorry, too many clients already"))
    assert db.unavailable_cause(timeout).startswith(
        "pool timeout after 3 s (the pool cannot open connections: too many clients (the server's max_connections "
        "is reached), 0.0 s ago")
    db.note_connect(None)  # a connection opened since
    assert db.unavailable_cause(timeout) == "pool timeout after 3 s (every pooled connection busy)"


def nothing_listens() -> int:
    """A port on 127.0.0.1 that refuses connections."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refused_pool(name: str, **options):
    """A pool of the backend's connections to a port where nothing listens, and how to point it elsewhere."""
    from psycopg_pool import ConnectionPool

    from utils_app.postgresql.base import Connection

    target = {"conninfo": f"host=127.0.0.1 port={nothing_listens()} user=postgres dbname=gw connect_timeout=2"}
    pool = ConnectionPool(lambda: target["conninfo"], connection_class=Connection, open=False, name=name,
                          kwargs={"autocommit": True}, **options)
    return pool, target


def test_pool_warnings_name_their_cause_in_words_on_one_line(caplog, monkeypatch):
    import logging
    import time

    monkeypatch.setattr(db, "_last_connect_failure", None)
    pool, _ = refused_pool("refused", min_size=1, max_size=1, reconnect_timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
        pool.open()
        try:
            assert wait_for_text(caplog, "failed after", seconds=5)
        finally:
            pool.close()
    lines = [record.getMessage() for record in caplog.records if record.name == "psycopg.pool"]
    assert "error connecting in 'refused': connection refused (no server listening)" in lines
    assert ("reconnection attempt in pool 'refused' failed after 0.5 sec: last connect failed: connection refused "
            "(no server listening)") in lines
    assert not any("\n" in line for line in lines)
    assert db.last_connect_failure().cause == "connection refused (no server listening)"
    assert time.monotonic() - db.last_connect_failure().at < 5


def wait_for_text(caplog, text: str, *, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while text not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    return text in caplog.text


@pytest.mark.postgres
def test_a_pool_the_server_refused_at_start_stays_open_and_connects_once_the_server_accepts(transactional_db,
                                                                                            monkeypatch):
    import time
    from types import SimpleNamespace

    from utils_app import env

    monkeypatch.setattr(db, "_last_connect_failure", None)
    pool, target = refused_pool("recovering", min_size=1, max_size=2, timeout=3,
                                reconnect_timeout=env.DATABASE_RECONNECT_SECONDS)
    worker = SimpleNamespace(vendor="postgresql", pool=pool)  # what a worker's connection offers open_whole_pool
    try:
        began = time.monotonic()
        missing = db.open_whole_pool(worker, wait_seconds=10)
        # The server refused: no point waiting out the ten seconds, and the pool stays open.
        assert missing == "0 of 2 connections open: connection refused (no server listening)"
        assert time.monotonic() - began < 5
        assert not pool.closed

        settings_dict = connection.settings_dict
        target["conninfo"] = (f"host={settings_dict['HOST'] or '127.0.0.1'} port={settings_dict['PORT'] or 5432} "
                              f"user={settings_dict['USER']} dbname={settings_dict['NAME']}")  # the server is back
        with pool.connection(timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        deadline = time.monotonic() + 10
        while pool.get_stats()["pool_available"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.get_stats()["pool_available"] == 2  # the whole pool, without a restart
        assert db.last_connect_failure() is None
    finally:
        pool.close()


@pytest.mark.postgres
def test_a_request_waits_its_turn_behind_busy_connections_but_not_long_once_the_server_refuses(transactional_db,
                                                                                               monkeypatch):
    import threading
    import time

    from django.db import connections
    from psycopg_pool import PoolTimeout

    monkeypatch.setattr(db, "_last_connect_failure", None)
    monkeypatch.setitem(connection.settings_dict["OPTIONS"]["pool"], "timeout", 0.5)  # DATABASE_POOL_TIMEOUT
    monkeypatch.setitem(connection.settings_dict, "POOL_QUEUE_TIMEOUT", 10.0)  # DATABASE_POOL_QUEUE_TIMEOUT
    connection.ensure_connection()
    pool = connection.pool
    monkeypatch.setattr(pool, "timeout", 0.5)  # as psycopg's pool was built from the settings
    held = []
    try:
        while True:  # every connection the pool may hold, lent out: the pool is busy
            try:
                held.append(pool.getconn(timeout=0.3))
            except PoolTimeout:
                break

        def request(outcome: dict) -> None:
            other = connections.create_connection("default")
            began = time.monotonic()
            try:
                other.ensure_connection()
                outcome["served"] = True
            except OperationalError as error:
                outcome["error"] = db.failure_cause(error)
            finally:
                outcome["waited"] = time.monotonic() - began
                other.close()

        busy = {}
        waiting = threading.Thread(target=request, args=(busy,))
        waiting.start()
        time.sleep(1.5)  # three times DATABASE_POOL_TIMEOUT
        pool.putconn(held.pop())
        waiting.join(15)
        assert busy.get("served") and busy["waited"] >= 1.4, busy

        db.note_connect(OperationalError("FATAL:  sorry, too many clients already"))  # the server now refuses
        held.append(pool.getconn(timeout=1))
        refused = {}
        request(refused)
        assert refused["error"] == "pool timeout after 0.5 s"
        assert refused["waited"] < 1.5
    finally:
        for conn in held:
            pool.putconn(conn)


def test_a_pool_warning_about_a_closed_connection_says_what_ended_it():
    import logging

    import psycopg

    from utils_app.postgresql.base import ENDED_BY_SERVER, Connection, PoolWarnings

    def warning(conn) -> str:
        record = logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, "discarding closed connection: %s",
                                   (conn,), None)
        PoolWarnings().filter(record)
        return record.getMessage()

    class Closed:  # what libpq says of a connection once it is closed
        status = psycopg.pq.ConnStatus.BAD
        error_message = b"connection pointer is NULL\n"

    ended = Connection.__new__(Connection)  # no server needed: only what the warning reads of it
    ended.pgconn = Closed()
    ended.closed_because = ENDED_BY_SERVER
    assert warning(ended) == f"discarding closed connection: {ENDED_BY_SERVER}"

    closed = psycopg.Connection.__new__(psycopg.Connection)
    closed.pgconn = Closed()
    assert warning(closed) == "discarding closed connection: connection already closed"


def test_the_context_s_wrapper_is_the_one_django_lists_as_initialized_and_none_before_it_is_made():
    """context_wrapper (utils_app.speed.statements) looks up the wrapper a context made, as connections.all(initialized_only=True) lists it,
    in one lookup; a context (here a fresh thread) that made none gets None and is left without one."""
    import threading

    from django.db import connections

    seen = {}

    def fresh_context():
        seen["before"] = statements.context_wrapper("default")
        seen["listed_before"] = connections.all(initialized_only=True)
        made = connections["default"]
        seen["after"] = statements.context_wrapper("default") is made
        seen["listed_after"] = [wrapper is made for wrapper in connections.all(initialized_only=True)]
        made.close()

    thread = threading.Thread(target=fresh_context)
    thread.start()
    thread.join()
    assert (seen["before"], seen["listed_before"]) == (None, [])
    assert seen["after"] is True and seen["listed_after"] == [True]
    assert statements.context_wrapper("default") is connections["default"]
    assert statements.context_wrapper("no such alias") is None
