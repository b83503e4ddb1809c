"""Behind PgBouncer in transaction mode (Debian's, which keeps no prepared statements): the request
path's statements run, prepared statements on or off (docs/operations.md, the section on poolers).

A PgBouncer of the test's own listens on 127.0.0.1 in front of the test database; a gevent process
(a served worker's set-up) runs bursts of statements alone on its pool through it."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

BURSTS = textwrap.dedent("""
    from gevent import monkey; monkey.patch_all()
    import os, django, gevent
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    django.setup()
    from django.db import connection
    from django.utils import timezone
    answered, failed = 0, []
    def one(number):
        global answered
        try:
            row, count = connection.run_alone(
                "SELECT %(n)s::bigint * 2, %(word)s || '!', %(at)s::timestamptz <= now()",
                {"n": number, "word": f"w{number}", "at": timezone.now()})
            assert (row, count) == ((number * 2, f"w{number}!", True), 1), row
            answered += 1
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
    for burst in range(4):
        gevent.joinall([gevent.spawn(one, burst * 100 + number) for number in range(100)])
    print(answered, failed[:3])
""")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def pgbouncer():
    """A PgBouncer in transaction mode, 4 server connections, in front of the test database's server;
    yields the URL of the test database through it. Started and stopped by this fixture alone."""
    if not os.path.exists(PGBOUNCER):
        pytest.skip("needs Debian's pgbouncer (installed by .ci/run)")
    from django.db import connection

    database = connection.settings_dict
    folder = Path(tempfile.mkdtemp(prefix="gw_pgbouncer_"))
    port = _free_port()
    (folder / "users.txt").write_text(f'"{database["USER"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(textwrap.dedent(f"""
        [databases]
        * = host={database["HOST"] or "127.0.0.1"} port={database["PORT"] or 5432}
        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = {port}
        unix_socket_dir =
        auth_type = trust
        auth_file = {folder}/users.txt
        pool_mode = transaction
        default_pool_size = 4
        max_client_conn = 100
        logfile = {folder}/pgbouncer.log
        ignore_startup_parameters = extra_float_digits,options
    """))
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(folder, "postgres")
        for name in ("users.txt", "pgbouncer.ini"):
            shutil.chown(folder / name, "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
                    pytest.fail(f"pgbouncer did not start: {log[-2000:]}")
                time.sleep(0.05)
        yield f"postgres://{database['USER']}@127.0.0.1:{port}/{database['NAME']}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the group this fixture started: runuser and pgbouncer
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def _bursts(url: str, prepared: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "DATABASE_URL": url, "DATABASE_PREPARED_STATEMENTS": prepared}
    return subprocess.run([sys.executable, "-c", BURSTS], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120)


def test_with_prepared_statements_off_every_statement_runs_through_the_pooler(pgbouncer):
    result = _bursts(pgbouncer, "0")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "400 []"
    assert "prepared statements" not in result.stderr


def test_left_on_behind_a_pooler_that_cannot_keep_them_they_stop_and_the_operator_is_told(pgbouncer):
    """Each client connection names its statements _pg3_0, _pg3_1…, so on server sessions the pooler
    shares, a name is soon taken or gone: the connection goes on unprepared, no statement fails."""
    result = _bursts(pgbouncer, "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "400 []"
    warnings = [line for line in result.stderr.splitlines() if "does not keep this process's prepared" in line]
    assert len(warnings) == 1 and "DATABASE_PREPARED_STATEMENTS=0" in warnings[0]
