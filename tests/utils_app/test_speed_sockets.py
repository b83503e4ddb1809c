"""utils_app.speed.sockets: readiness asked of the kernel; utils_app.speed.waits: psycopg's waits under gevent."""
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from utils_app.speed.sockets import readable_now

ROOT = Path(__file__).resolve().parents[2]


def test_a_socket_is_readable_now_only_with_data_or_an_end_waiting():
    mine, theirs = socket.socketpair()
    try:
        assert not readable_now(mine.fileno())
        theirs.sendall(b"x")
        assert readable_now(mine.fileno())
        assert mine.recv(1) == b"x"
        assert not readable_now(mine.fileno())
        theirs.close()
        assert readable_now(mine.fileno())  # end of file waiting: the peer closed it
    finally:
        mine.close()


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("gevent_waits", ["1", "0"])
def test_under_gevent_statements_wait_on_the_hub_and_let_other_greenlets_run(gevent_waits):
    """In a gevent process (a served worker's set-up): a slow statement does not hold up a quick one on
    another connection, with either wait (SPEED_GEVENT_WAITS): the trick's, whose watchers are kept
    with each connection, at most one per read, write or both; or psycopg's own, which keeps none."""
    script = textwrap.dedent("""
        from gevent import monkey; monkey.patch_all()
        import os, django, gevent
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
        django.setup()
        from django.db import connection
        from utils_app.speed import waits
        calls = []
        original = waits.wait_gevent
        def counting(gen, fileno, watchers=None):
            calls.append(watchers is not None)
            return original(gen, fileno, watchers)
        waits.wait_gevent = counting
        finished = []
        def run(name, sql):
            assert connection.run_alone(sql, {})[0] is not None
            finished.append(name)
        slow = gevent.spawn(run, "slow", "SELECT pg_sleep(0.4) IS NULL")
        gevent.sleep(0.05)
        quick = gevent.spawn(run, "quick", "SELECT 1")
        gevent.joinall([slow, quick], raise_error=True)
        kept = [getattr(conn, "_watchers", {}) for conn in connection.pool._pool]
        print(finished, len(calls), all(calls), sum(len(w) for w in kept) <= 3 * len(kept) and any(kept))
    """)
    from django.db import connection

    database = connection.settings_dict  # the test database pytest-django made
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                            env={**os.environ, "DATABASE_URL": url, "SPEED_GEVENT_WAITS": gevent_waits},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    finished, calls, given, kept = result.stdout.strip().splitlines()[-1].rsplit(" ", 3)
    assert finished == "['quick', 'slow']"
    if gevent_waits == "1":
        assert int(calls) > 0 and given == "True" and kept == "True"
    else:
        assert calls == "0" and kept == "False"
