"""Outside a transaction, the metered request's two statements run alone on pooled connections
(utils_app.postgresql.base.DatabaseWrapper.run_alone): same statements, same answers, Django's errors."""
import time

import pytest
from django.db import DatabaseError, ProgrammingError, connection

from gateway import metering, metering_sql
from keys.models import ApiKey, LedgerEntry
from models_catalog.models import UsageEvent
from tests.gateway.conftest import post
from utils_app.db import release_connection

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
PATH = "/v1/chat/completions"
BODY = {"model": "local-chat", "messages": [{"role": "user", "content": "Hello"}]}


@pytest.fixture
def checkouts(monkeypatch):
    """Every connection taken from the pool, by who took it: the request path alone, or Django's wrapper."""
    pool = connection.pool
    assert pool is not None, "the PostgreSQL settings give each process a pool"
    taken = []
    getconn = pool.getconn

    def counting(*args, **kwargs):
        conn = getconn(*args, **kwargs)
        taken.append(conn)
        return conn

    monkeypatch.setattr(pool, "getconn", counting)
    return taken


@pytest.mark.parametrize("through_libpq", [True, False])
def test_a_metered_request_takes_two_pooled_connections_one_per_statement_and_no_wrapper(
        client, seeded, free_key, checkouts, settings, through_libpq):
    """The same statements, answers and rows whether they go straight through libpq or through psycopg's
    cursor (SPEED_LIBPQ)."""
    settings.SPEED_LIBPQ = through_libpq
    key, secret = free_key
    assert post(client, PATH, BODY, secret).status_code == 200  # authenticates: the key is cached
    release_connection(connection)
    checkouts.clear()
    # The query log without CaptureQueriesContext, which opens the wrapper's connection as it starts: the
    # charge would then go through that connection instead of a pooled one of its own.
    connection.force_debug_cursor = True
    connection.queries_log.clear()
    try:
        response = post(client, PATH, BODY, secret)
        logged = [query["sql"] for query in connection.queries]
    finally:
        connection.force_debug_cursor = False
    assert response.status_code == 200 and response["X-Remaining-Credits"] == "98"
    # Logged as Django logs its own: the charge with its ledger row, the settlement with the usage row.
    assert logged == [metering_sql.CHARGE, metering_sql.SETTLEMENT]
    assert len(checkouts) == 2
    assert connection.connection is None  # Django's wrapper never held one
    assert all(conn.info.transaction_status.name == "IDLE" for conn in checkouts)  # back, nothing left open
    assert ApiKey.objects.get(pk=key.pk).credits == 98 and ApiKey.objects.get(pk=key.pk).in_flight == 0
    assert list(LedgerEntry.objects.filter(key=key, kind="charge").values_list("status", flat=True)) == [
        "completed", "completed"]
    assert UsageEvent.objects.filter(key=key).count() == 2


def test_a_statement_run_alone_fails_with_djangos_error_and_its_connection_goes_back(checkouts):
    release_connection(connection)
    available = connection.pool.get_stats().get("pool_available", 0)
    with pytest.raises(ProgrammingError) as raised:
        connection.run_alone("UPDATE no_such_table SET x = %(x)s", {"x": 1})
    assert isinstance(raised.value, DatabaseError) and type(raised.value.__cause__).__module__.startswith("psycopg")
    assert len(checkouts) == 1 and checkouts[0].info.transaction_status.name == "IDLE"
    assert connection.pool.get_stats().get("pool_available", 0) >= available  # given back, not lost
    assert connection.run_alone("SELECT %(x)s::int + 1", {"x": 1}) == ((2,), 1)


def test_every_row_comes_back_alone_through_psycopg_and_inside_a_transaction(checkouts):
    from decimal import Decimal

    from django.db import transaction

    many = "SELECT g, %(step)s * g FROM generate_series(1, 3) g"
    release_connection(connection)
    assert connection.run_alone(many, {"step": 2}, every_row=True) == ([(1, 2), (2, 4), (3, 6)], 3)
    # A value only psycopg's cursor sends: its path gives every row too.
    assert connection.run_alone(many, {"step": Decimal("0.5")}, every_row=True)[0] == [
        (1, Decimal("0.5")), (2, Decimal("1.0")), (3, Decimal("1.5"))]
    assert connection.run_alone("SELECT 1 WHERE false", {}, every_row=True) == ([], 0)
    with transaction.atomic():
        assert connection.run_one(many, {"step": 3}, every_row=True) == ([(1, 3), (2, 6), (3, 9)], 3)
        assert connection.run_one(many, {"step": 3}) == ((1, 3), 3)


def test_inside_a_transaction_the_statements_go_through_djangos_connection(seeded, free_key):
    from django.db import transaction

    from models_catalog.catalog import get_model

    key, _ = free_key
    model = get_model("local-chat")
    with transaction.atomic():
        assert not connection.can_run_alone()
        entry = metering.charge(key=key, model=model, operation="chat", amount=1, request_id="req_in_a_transaction")
        assert connection.connection is not None  # the transaction's own connection ran it
        assert metering.complete(entry=entry, key=key, model=model, operation="chat", provider="local",
                                 input_tokens=1, output_tokens=1, latency_ms=1)
    assert LedgerEntry.objects.get(pk=entry).status == "completed"


def test_a_pooled_connection_the_server_ended_is_passed_over(client, seeded, free_key, checkouts):
    key, secret = free_key
    assert post(client, PATH, BODY, secret).status_code == 200
    # End every other connection of this database, as a restart does to the pool's idle ones.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        ended = cursor.fetchone()[0]
        # pg_terminate_backend only signals: wait until they are gone, as after a restart, so that each
        # has sent its farewell before a request checks the pool (bounded: 5 s).
        for _ in range(100):
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0] == 0:
                break
            time.sleep(0.05)
    release_connection(connection)  # this one goes back alive
    assert ended >= 1
    for _ in range(3):
        assert post(client, PATH, BODY, secret).status_code == 200
    assert ApiKey.objects.get(pk=key.pk).credits == 96


# -- prepared statements (utils_app.postgresql.base.execute_prepared): psycopg's own, kept fresh and honest

@pytest.fixture
def own_connection():
    """A psycopg connection of its own to the test database, in autocommit, preparing as the pool's do."""
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.update(autocommit=True, prepare_threshold=0)
    conn = psycopg.connect(**params)
    conn.execute("CREATE TEMPORARY TABLE alone (id bigserial PRIMARY KEY, n bigint, word text UNIQUE, flag boolean, "
                 "at timestamptz, naive timestamp, amount numeric)", prepare=False)
    yield conn
    conn.close()


@pytest.fixture
def plans(monkeypatch):
    """The process's plans started afresh, on a clock the test moves."""
    from utils_app.postgresql import base as backend

    clock = [1000.0]
    monkeypatch.setattr(backend.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(backend, "_plans", backend._Plans())
    monkeypatch.setattr(backend, "_told_unprepared", False)
    return clock


def _run(conn, sql, params):
    from utils_app.postgresql.base import execute_prepared

    cursor = conn.cursor()
    execute_prepared(conn, cursor.execute, sql, params)
    return cursor.fetchone() if cursor.description else None


def _prepared(conn):
    """The texts of the statements prepared on ``conn``'s server session."""
    return [row[0] for row in conn.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time",
                                           prepare=False)]


def test_a_statement_is_prepared_on_its_first_use_and_anew_on_a_doubling_schedule(own_connection, plans):
    from utils_app.postgresql import base as backend

    sql = "INSERT INTO alone (n) VALUES (%(n)s) RETURNING n"
    assert _run(own_connection, sql, {"n": 1}) == (1,)
    assert _run(own_connection, sql, {"n": 2}) == (2,)
    assert len(_prepared(own_connection)) == 1
    plans[0] += backend.REPLAN_FIRST_SECONDS  # its plan is due: prepared again under the next plan's text
    assert _run(own_connection, sql, {"n": 3}) == (3,)
    assert [text.endswith("/* plan 1 */") for text in _prepared(own_connection)] == [False, True]
    plans[0] += backend.REPLAN_FIRST_SECONDS  # the next turn is twice as long
    _run(own_connection, sql, {"n": 4})
    assert len(_prepared(own_connection)) == 2
    plans[0] += backend.REPLAN_FIRST_SECONDS
    _run(own_connection, sql, {"n": 5})
    assert _prepared(own_connection)[-1].endswith("/* plan 2 */")
    plans[0] += 10 * backend.REPLAN_MAX_SECONDS  # and never longer than the most
    for _ in range(12):
        backend.replan()
    assert backend._plans.interval == backend.REPLAN_MAX_SECONDS
    assert own_connection.execute("SELECT count(*) FROM alone").fetchone() == (5,)


def test_with_prepared_statements_off_nothing_is_prepared(own_connection, plans):
    own_connection.prepare_threshold = None  # DATABASE_PREPARED_STATEMENTS=0
    assert _run(own_connection, "SELECT %(x)s::int", {"x": 7}) == (7,)
    assert _prepared(own_connection) == []


def test_errors_are_psycopgs_and_a_migration_that_changed_a_result_starts_new_plans(own_connection, plans):
    import psycopg

    sql = "INSERT INTO alone_migrated (word) VALUES (%(word)s) RETURNING id"
    own_connection.execute("CREATE TABLE alone_migrated (id bigserial PRIMARY KEY, word text UNIQUE)", prepare=False)
    try:
        _run(own_connection, sql, {"word": "once"})
        with pytest.raises(psycopg.errors.UniqueViolation):
            _run(own_connection, sql, {"word": "once"})
        assert own_connection.info.transaction_status.name == "IDLE"
        with connection.cursor() as cursor:  # a migration, from another connection
            cursor.execute("ALTER TABLE alone_migrated ALTER COLUMN id TYPE numeric")
        release_connection(connection)
        assert _run(own_connection, sql, {"word": "twice"}) is not None  # prepared again, run once
        assert own_connection.execute("SELECT count(*) FROM alone_migrated", prepare=False).fetchone() == (2,)
        with pytest.raises(psycopg.errors.UndefinedTable):
            _run(own_connection, "SELECT * FROM no_such_table WHERE id = %(id)s", {"id": 1})
    finally:
        own_connection.execute("DROP TABLE alone_migrated", prepare=False)


def _take_names(conn, count=12):
    """Another client's statements on ``conn``'s session, under every name psycopg may pick next."""
    held = set(_prepared_names(conn))
    for number in range(count):
        if f"_pg3_{number}" not in held:
            conn.execute(f"PREPARE _pg3_{number} AS SELECT 1", prepare=False)


def _prepared_names(conn):
    return [row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements", prepare=False)]


def test_a_connection_whose_prepared_statements_do_not_last_goes_on_unprepared_and_says_so(
        own_connection, plans, caplog):
    """A pooler in transaction mode without prepared-statement support hands the server session with
    another client's names on it: the name psycopg picks is already taken there."""
    _take_names(own_connection)
    taken = _prepared(own_connection)
    sql = "INSERT INTO alone (word) VALUES (%(word)s) RETURNING word"
    with caplog.at_level("WARNING", logger="utils_app.postgresql.base"):
        for word in ("first", "second"):
            assert _run(own_connection, sql, {"word": word}) == (word,)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "PostgreSQL does not keep this process's prepared statements between its statements"]
    assert "DATABASE_PREPARED_STATEMENTS=0" in caplog.records[0].getMessage()
    assert own_connection.prepare_threshold is None
    assert _prepared(own_connection) == taken  # only the other client's: nothing more was prepared


def test_inside_a_transaction_a_refused_statement_is_raised_as_it_is(own_connection, plans):
    import psycopg

    _take_names(own_connection)
    with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
        with own_connection.transaction():
            _run(own_connection, "SELECT %(x)s::int", {"x": 1})
    assert own_connection.prepare_threshold == 0  # nothing decided from a transaction's refusal
