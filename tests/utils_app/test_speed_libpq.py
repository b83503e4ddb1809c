"""utils_app.speed.libpq: a statement straight through libpq, as psycopg's cursor would run it (SPEED_LIBPQ).

Each test sends the statements through ``run`` and reads them back through psycopg's own cursor, the plain
twin, so both must agree on every value; the metered request with the switch either way is in
tests/gateway/test_statements_alone.py."""
import pytest

from tests.gateway.test_statements_alone import own_connection  # noqa: F401  (the fixture, shared)
from utils_app.speed.libpq import run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def _prepared(conn):
    """The statements ``run`` prepared on ``conn`` (psycopg's own, for the test's queries, aside)."""
    return [row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE '\\_gw\\_%%' "
                                           "ORDER BY name", prepare=False)]


def test_each_parameter_type_arrives_as_psycopg_would_send_it(own_connection):
    from datetime import datetime, timezone

    insert = ("INSERT INTO alone (n, word, flag, at, naive) VALUES (%(n)s, %(word)s, %(flag)s, %(at)s, %(naive)s) "
              "RETURNING n, word, flag, at, naive, %(n)s = n")
    at = datetime(2026, 11, 25, 1, 2, 3, 456789, tzinfo=timezone.utc)
    naive = datetime(1999, 12, 31, 23, 59, 59)
    for n, word, flag in [(-2**63, "zéro ☃ ünïcode", True), (2**63 - 1, "it's \"quoted\" \\ ;--", False),
                          (0, "", None), (None, None, False)]:
        row, count = run(own_connection, insert, {"n": n, "word": word, "flag": flag, "at": at,
                                                          "naive": naive})
        assert count == 1 and row == (n, word, flag, at, naive, None if n is None else True)
    # What psycopg's own cursor reads back from the same rows: the same values.
    assert own_connection.execute("SELECT count(*) FROM alone WHERE at = %s AND naive = %s",
                                  [at, naive]).fetchone() == (4,)


def test_a_list_arrives_as_the_array_the_statement_casts_it_to(own_connection):
    words = ["plain", "", "it's \"quoted\" \\ {braces}, commas", "zéro ☃", "NULL", None, " spaced "]
    sql = ("SELECT %(numbers)s::int8[], %(words)s::text[], %(flags)s::bool[], "
           "array_length(%(words)s::text[], 1), %(empty)s::int4[]")
    row, _ = run(own_connection, sql, {"numbers": [1, -2**63, 2**63 - 1, None], "words": words,
                                                 "flags": [True, False, None], "empty": []})
    assert row == ([1, -2**63, 2**63 - 1, None], words, [True, False, None], len(words), [])
    # What psycopg's own cursor sends for the same lists reads back the same.
    assert own_connection.execute("SELECT %s::text[]", [words]).fetchone()[0] == words
    # A NUL byte, or an element of another type, is left to psycopg's cursor with nothing sent.
    assert run(own_connection, "SELECT %(words)s::text[]", {"words": ["nul\x00byte"]}) is None
    assert run(own_connection, "SELECT %(x)s::float8[]", {"x": [1.5]}) is None


def test_a_value_only_psycopg_can_send_is_left_to_it_without_anything_sent(own_connection):
    from decimal import Decimal

    sql = "INSERT INTO alone (n, amount, word) VALUES (%(n)s, %(amount)s, %(word)s)"
    assert run(own_connection, sql, {"n": 1, "amount": Decimal("1.5"), "word": "a"}) is None
    assert run(own_connection, sql, {"n": 2**63, "amount": None, "word": "b"}) is None  # past int8
    assert run(own_connection, sql, {"n": 1, "amount": None, "word": "nul\x00byte"}) is None
    assert own_connection.execute("SELECT count(*) FROM alone").fetchone() == (0,)
    assert _prepared(own_connection) == []


def test_a_statement_is_prepared_once_per_connection_and_parameter_types(own_connection):
    sql = "INSERT INTO alone (n, word) VALUES (%(n)s, %(word)s) RETURNING id"
    for number in range(3):
        assert run(own_connection, sql, {"n": number, "word": f"w{number}"})[1] == 1
    assert _prepared(own_connection) == ["_gw_1"]
    run(own_connection, sql, {"n": None, "word": "w3"})  # another type for n: its own statement
    assert _prepared(own_connection) == ["_gw_1", "_gw_2"]
    own_connection.prepare_threshold = None  # DATABASE_PREPARED_STATEMENTS=0: nothing more is prepared
    assert run(own_connection, "SELECT %(x)s::int", {"x": 7}) == ((7,), 1)
    assert _prepared(own_connection) == ["_gw_1", "_gw_2"]


def test_a_prepared_statement_is_prepared_anew_when_the_process_renews_its_plans_and_its_old_name_closed(
        own_connection, monkeypatch):
    """One schedule for both ways of preparing: the plans psycopg's statements follow (their text's
    plan number, tests/gateway/test_statements_alone.py) are the ones these are prepared anew for."""
    import utils_app.postgresql.base as backend

    clock = [1000.0]
    monkeypatch.setattr(backend.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(backend, "_plans", backend._Plans())
    sql = "INSERT INTO alone (n) VALUES (%(n)s) RETURNING n"
    assert run(own_connection, sql, {"n": 1}) == ((1,), 1)
    assert _prepared(own_connection) == ["_gw_1"]
    clock[0] += backend.REPLAN_FIRST_SECONDS - 0.1  # not yet
    run(own_connection, sql, {"n": 2})
    assert _prepared(own_connection) == ["_gw_1"]
    clock[0] += 0.1  # the plans are due: a new name, the old one closed, the statement run once
    assert run(own_connection, sql, {"n": 3}) == ((3,), 1)
    assert _prepared(own_connection) == ["_gw_2"]
    assert backend.planned("SELECT 1").endswith("/* plan 1 */")  # the same plans psycopg's text follows
    clock[0] += backend.REPLAN_FIRST_SECONDS  # the next turn is twice as long
    run(own_connection, sql, {"n": 4})
    assert _prepared(own_connection) == ["_gw_2"]
    clock[0] += backend.REPLAN_FIRST_SECONDS
    run(own_connection, sql, {"n": 5})
    assert _prepared(own_connection) == ["_gw_3"]
    backend.replan()  # renewed for any reason (a migration changed a result psycopg's statement returns)
    run(own_connection, sql, {"n": 6})
    assert _prepared(own_connection) == ["_gw_4"]
    assert own_connection.execute("SELECT count(*) FROM alone").fetchone() == (6,)


def test_every_row_of_a_statement_comes_back_when_asked_for(own_connection):
    sql = "INSERT INTO alone (n) SELECT g FROM generate_series(1, %(count)s) g RETURNING n"
    assert run(own_connection, sql, {"count": 3}, every_row=True) == ([(1,), (2,), (3,)], 3)
    assert run(own_connection, sql, {"count": 0}, every_row=True) == ([], 0)
    assert run(own_connection, "DELETE FROM alone WHERE n > %(n)s", {"n": 1}, every_row=True) == ([], 2)
    assert run(own_connection, sql, {"count": 2}) == ((1,), 2)  # the first row only, as before


def test_a_name_used_twice_is_one_parameter_and_other_placeholders_are_refused(own_connection):
    assert run(own_connection, "SELECT %(x)s::int + %(x)s::int, %(y)s::text",
                        {"x": 20, "y": "z", "unused": object()}) == ((40, "z"), 1)
    for sql in ("SELECT %s", "SELECT 100 %% 7", "SELECT '%(x)d'"):
        with pytest.raises(ValueError):
            run(own_connection, sql, {"x": 1})


def test_errors_are_psycopgs_and_a_prepared_statement_the_server_forgot_is_prepared_again(own_connection):
    import psycopg

    sql = "INSERT INTO alone (word) VALUES (%(word)s) RETURNING id"
    run(own_connection, sql, {"word": "once"})
    with pytest.raises(psycopg.errors.UniqueViolation):
        run(own_connection, sql, {"word": "once"})
    assert own_connection.info.transaction_status.name == "IDLE"
    # A pooler in front that does not keep prepared statements loses them between transactions: the
    # statement is prepared again and runs once.
    own_connection.execute("DEALLOCATE ALL")
    assert run(own_connection, sql, {"word": "twice"})[1] == 1
    assert _prepared(own_connection) == ["_gw_2"]
    assert own_connection.execute("SELECT count(*) FROM alone WHERE word = 'twice'").fetchone() == (1,)
    # A migration changed what the statement returns: prepared again too, run once.
    own_connection.execute("ALTER TABLE alone ALTER COLUMN id TYPE numeric")
    assert run(own_connection, sql, {"word": "thrice"})[1] == 1
    assert _prepared(own_connection) == ["_gw_3"]
    assert own_connection.execute("SELECT count(*) FROM alone").fetchone() == (3,)
    with pytest.raises(psycopg.errors.UndefinedTable):
        run(own_connection, "SELECT * FROM no_such_table WHERE id = %(id)s", {"id": 1})
    assert run(own_connection, "SELECT %(id)s::int", {"id": 3}) == ((3,), 1)


def test_a_connection_whose_prepared_statements_do_not_last_goes_on_unprepared_and_says_so(
        own_connection, caplog, monkeypatch):
    """A pooler in transaction mode without prepared-statement support hands the server session with
    another client's names on it: the name this connection picks is already taken there."""
    from utils_app.postgresql import base as backend

    monkeypatch.setattr(backend, "_told_unprepared", False)
    own_connection.execute("PREPARE _gw_1 AS SELECT 1", prepare=False)  # another client's, on this session
    sql = "INSERT INTO alone (word) VALUES (%(word)s) RETURNING word"
    with caplog.at_level("WARNING", logger="utils_app.postgresql.base"):
        for word in ("first", "second"):
            assert run(own_connection, sql, {"word": word}) == ((word,), 1)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "PostgreSQL does not keep this process's prepared statements between its statements"]
    assert "DATABASE_PREPARED_STATEMENTS=0" in caplog.records[0].getMessage()
    assert own_connection.prepare_threshold is None
    assert _prepared(own_connection) == ["_gw_1"]  # only the other client's: nothing more was prepared
    assert own_connection.execute("SELECT count(*) FROM alone").fetchone() == (2,)  # each ran once
