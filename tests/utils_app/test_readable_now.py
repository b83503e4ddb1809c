"""utils_app.db.readable_now: readiness asked of the kernel; and psycopg's own waits under gevent."""
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from utils_app.db import readable_now

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
def test_under_gevent_statements_wait_on_the_hub_and_let_other_greenlets_run():
    """In a gevent process (a served worker's set-up): a slow statement does not hold up a quick one on
    another connection (psycopg waits through gevent's patched poll)."""
    script = textwrap.dedent("""
        from gevent import monkey; monkey.patch_all()
        import os, django, gevent
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
        django.setup()
        from django.db import connection
        finished = []
        def run(name, sql):
            assert connection.run_alone(sql, {})[0] is not None
            finished.append(name)
        slow = gevent.spawn(run, "slow", "SELECT pg_sleep(0.4) IS NULL")
        gevent.sleep(0.05)
        quick = gevent.spawn(run, "quick", "SELECT 1")
        gevent.joinall([slow, quick], raise_error=True)
        print(finished)
    """)
    from django.db import connection

    database = connection.settings_dict  # the test database pytest-django made
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "DATABASE_URL": url},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "['quick', 'slow']"
