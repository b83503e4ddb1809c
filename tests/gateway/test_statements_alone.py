"""Outside a transaction, the metered request's two statements run alone on pooled connections
(utils_app.postgresql.base.DatabaseWrapper.run_alone): same statements, same answers, Django's errors."""
import pytest
from django.db import DatabaseError, ProgrammingError, connection
from django.test.utils import CaptureQueriesContext

from gateway import metering
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


def test_a_metered_request_takes_two_pooled_connections_one_per_statement_and_no_wrapper(
        client, seeded, free_key, checkouts):
    key, secret = free_key
    assert post(client, PATH, BODY, secret).status_code == 200  # authenticates: the key is cached
    release_connection(connection)
    checkouts.clear()
    with CaptureQueriesContext(connection) as captured:
        response = post(client, PATH, BODY, secret)
    assert response.status_code == 200 and response["X-Remaining-Credits"] == "98"
    # Logged as Django logs its own: the charge with its ledger row, the settlement with the usage row.
    assert [query["sql"].split()[:2] for query in captured.captured_queries] == [
        ["WITH", "taken"], ["WITH", "settled"]]
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
    release_connection(connection)  # this one goes back alive
    assert ended >= 1
    for _ in range(3):
        assert post(client, PATH, BODY, secret).status_code == 200
    assert ApiKey.objects.get(pk=key.pk).credits == 96
