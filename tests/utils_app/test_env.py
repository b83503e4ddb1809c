import pytest
from django.core.exceptions import ImproperlyConfigured

from utils_app import env


def test_database_url_unset_is_sqlite_in_the_data_dir(tmp_path):
    config = env.database_from_url("", data_dir=tmp_path)
    assert config["ENGINE"].endswith("sqlite3")
    assert config["NAME"] == str(tmp_path / "gateway.sqlite3")


def test_database_url_postgres_is_parsed():
    config = env.database_from_url("postgres://ann:p%40ss@db.internal:6543/gw?sslmode=require", data_dir=None)
    assert config["ENGINE"] == "utils_app.postgresql"
    assert (config["USER"], config["PASSWORD"], config["HOST"], config["PORT"], config["NAME"]) == (
        "ann", "p@ss", "db.internal", "6543", "gw")
    assert config["OPTIONS"]["sslmode"] == "require"
    assert config["CONN_MAX_AGE"] == 0


@pytest.mark.parametrize(("variables", "size"), [
    ({}, env.DATABASE_POOL_SIZE),  # a process of its own (a management command): it opens only what it uses
    ({"GATEWAY_WORKERS": "2"}, env.DATABASE_POOL_SIZE),  # each worker the same, whatever their count
    ({"GATEWAY_WORKERS": "16"}, env.DATABASE_POOL_SIZE),
    ({"GATEWAY_WORKERS": "4", "DATABASE_MAX_CONNECTIONS": "200"}, 50),  # an instance's total: shared out
    ({"GATEWAY_WORKERS": "3", "DATABASE_MAX_CONNECTIONS": "10"}, 3),  # shares round down, within the total
    ({"GATEWAY_WORKERS": "64", "DATABASE_MAX_CONNECTIONS": "20"}, 2),  # never below two
    ({"GATEWAY_WORKERS": "4", "DATABASE_POOL_SIZE": "7"}, 7),  # an explicit size wins
    ({"GATEWAY_WORKERS": "4", "DATABASE_POOL_SIZE": "7", "DATABASE_MAX_CONNECTIONS": "100"}, 7),
    ({"GATEWAY_WORKERS": "1", "GATEWAY_WORKER_THREADS": "4"}, 5),  # a threaded worker: its threads and the sweeper
    ({"GATEWAY_WORKERS": "2", "GATEWAY_WORKER_THREADS": "64", "DATABASE_MAX_CONNECTIONS": "90"}, 45),  # ... its share
])
def test_each_worker_pool_holds_a_few_connections_or_its_share_of_the_instance_total(monkeypatch, variables,
                                                                                      size):
    for name in ("GATEWAY_WORKERS", "GATEWAY_WORKER_THREADS", "DATABASE_MAX_CONNECTIONS", "DATABASE_POOL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config = env.database_from_url("postgres://db.internal/gw", data_dir=None)
    assert config["OPTIONS"]["pool"]["max_size"] == size


# PostgreSQL's defaults: max_connections 100, of which superuser_reserved_connections 3 only a
# superuser may take.
SERVER_CONNECTIONS = 100 - 3


def test_the_default_pools_of_four_instances_leave_postgresql_s_defaults_room_for_commands_and_psql(monkeypatch):
    for name in ("GATEWAY_WORKER_THREADS", "DATABASE_MAX_CONNECTIONS", "DATABASE_POOL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_WORKERS", "2")  # an instance on a machine of two cores, as gunicorn_conf has it
    worker = env.database_from_url("postgres://db.internal/gw", data_dir=None)["OPTIONS"]["pool"]["max_size"]
    instances = 4 * 2 * worker
    # The sweeper runs in a worker and uses its pool; a management command, a cron's
    # settle_stale and an operator's psql each take one or two connections of their own.
    assert SERVER_CONNECTIONS - instances >= 10


def test_a_pool_that_cannot_connect_gives_up_an_attempt_within_seconds_not_psycopg_s_five_minutes():
    pool = env.database_from_url("postgres://db.internal/gw", data_dir=None)["OPTIONS"]["pool"]
    # The next request that finds no connection starts another attempt (utils_app.db.open_whole_pool).
    assert pool["reconnect_timeout"] <= 2 * pool["timeout"]


@pytest.mark.parametrize(("name", "value"), [("DATABASE_MAX_CONNECTIONS", "1"), ("DATABASE_POOL_SIZE", "0"),
                                             ("DATABASE_MAX_CONNECTIONS", "many"), ("GATEWAY_WORKERS", "0"),
                                             ("GATEWAY_WORKER_THREADS", "0")])
def test_a_bad_pool_setting_names_its_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        env.database_from_url("postgres://db.internal/gw", data_dir=None)


@pytest.mark.parametrize(("variables", "size"), [
    ({}, env.UPSTREAM_POOL_SIZE),  # a process of unknown concurrency (a management command)
    ({"GATEWAY_WORKER_THREADS": "32"}, 32),  # a threaded worker: one per thread
    ({"GATEWAY_WORKER_CONNECTIONS": "4000"}, 4000),  # a gevent worker: one per connection it serves
    ({"GATEWAY_WORKER_CONNECTIONS": "4000", "UPSTREAM_POOL_SIZE": "200"}, 200),  # an explicit size wins
])
def test_the_upstream_pool_holds_what_a_worker_serves_at_once(monkeypatch, variables, size):
    for name in ("GATEWAY_WORKER_THREADS", "GATEWAY_WORKER_CONNECTIONS", "UPSTREAM_POOL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert env.upstream_pool_size() == size


@pytest.mark.parametrize(("name", "value"), [("UPSTREAM_POOL_SIZE", "0"), ("GATEWAY_WORKER_CONNECTIONS", "some")])
def test_a_bad_upstream_pool_setting_names_its_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        env.upstream_pool_size()


@pytest.mark.parametrize("url", ["mysql://x/y", "postgres://host", "postgres://h:notaport/db", "sqlite://"])
def test_a_bad_database_url_names_the_variable(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        env.database_from_url(url, data_dir=None)


def test_database_and_redis_urls_may_name_unix_sockets():
    config = env.database_from_url("postgres://gateway@/gateway?host=/var/run/postgresql", data_dir=None)
    # No host of Django's own: psycopg connects through the socket in the folder the option names.
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("", "", "gateway")
    assert config["OPTIONS"]["host"] == "/var/run/postgresql"
    cache = env.cache_from_url("unix:///var/run/redis/redis-server.sock?db=0")
    assert cache["BACKEND"].endswith("RedisCache")
    assert cache["LOCATION"] == "unix:///var/run/redis/redis-server.sock?db=0"


def test_redis_url_selects_the_redis_cache():
    assert env.cache_from_url("")["BACKEND"].endswith("LocMemCache")
    assert env.cache_from_url("redis://127.0.0.1:6379/2")["BACKEND"].endswith("RedisCache")
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        env.cache_from_url("http://127.0.0.1:6379")


def test_a_new_redis_connection_names_its_client_without_reading_package_metadata(monkeypatch):
    import redis
    from redis import utils

    def per_connection_lookup():
        raise AssertionError("the installed packages' metadata was read for a connection")

    options = env.cache_from_url("redis://127.0.0.1:6379/2")["OPTIONS"]
    monkeypatch.setattr(utils, "get_lib_version", per_connection_lookup)
    connection = redis.Connection(**options)  # built, not connected
    assert (connection.driver_info.name, connection.driver_info.lib_version) == ("redis-py", redis.__version__)


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False), ("off", False)])
def test_booleans(monkeypatch, value, expected):
    monkeypatch.setenv("DEBUG", value)
    assert env.env_bool("DEBUG") is expected


@pytest.mark.parametrize("reader, value", [
    (lambda: env.env_bool("X"), "maybe"),
    (lambda: env.env_int("X", 1), "ten"),
    (lambda: env.env_int("X", 1, minimum=5), "2"),
    (lambda: env.env_rate("X", "60/m"), "sixty"),
    (lambda: env.env_rate("X", "60/m"), "0/m"),
    (lambda: env.env_url("X", "https://a"), "ftp://a"),
])
def test_bad_values_fail_naming_the_variable(monkeypatch, reader, value):
    monkeypatch.setenv("X", value)
    with pytest.raises(ImproperlyConfigured, match="X"):
        reader()


def test_settings_fail_at_start_on_a_bad_value(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"],
                            env={"DJANGO_SETTINGS_MODULE": "gateway.settings", "PUBLIC_RATE_LIMIT": "lots",
                                 "GATEWAY_DATA_DIR": str(tmp_path), "PATH": ""},
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "PUBLIC_RATE_LIMIT" in result.stderr


def test_the_secret_key_is_generated_once_and_kept(tmp_path):
    import subprocess
    import sys

    code = "from django.conf import settings; print(settings.SECRET_KEY)"
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,  # noqa: E731
                                 env={"DJANGO_SETTINGS_MODULE": "gateway.settings",
                                      "GATEWAY_DATA_DIR": str(tmp_path)}).stdout.strip()
    first = run()
    assert len(first) >= 40 and first == run()
    assert (tmp_path / "secret_key").read_text().strip() == first


# Writes through a connection under a umask that would leave new files readable by everyone, and
# prints the modes of the database and its -wal and -shm files while the connection still holds them.
_SQLITE_MODES = """
import os, stat
os.umask(0o022)
import django
django.setup()
from django.conf import settings
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS t (x integer)")
    cursor.execute("INSERT INTO t VALUES (1)")
name = settings.DATABASES["default"]["NAME"]
print(" ".join(oct(stat.S_IMODE(os.stat(name + tail).st_mode)) for tail in ("", "-wal", "-shm")))
"""


def _sqlite_modes(data_dir) -> list[str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SQLITE_MODES], capture_output=True, text=True, timeout=60,
                          env={"DJANGO_SETTINGS_MODULE": "gateway.settings", "GATEWAY_DATA_DIR": str(data_dir),
                               "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_the_sqlite_database_and_its_wal_and_shm_files_are_their_owners_alone(tmp_path):
    # Staff password hashes and sessions live there: as private as the secret key beside it.
    assert _sqlite_modes(tmp_path) == ["0o600", "0o600", "0o600"]
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"


def test_a_database_an_earlier_run_left_readable_is_narrowed_at_start(tmp_path):
    database = tmp_path / "gateway.sqlite3"
    for file in (database, tmp_path / "gateway.sqlite3-wal"):
        file.touch()
        file.chmod(0o644)
    assert _sqlite_modes(tmp_path) == ["0o600", "0o600", "0o600"]


def test_a_sqlite_path_in_a_missing_folder_is_left_to_the_connection_to_report(tmp_path):
    env.keep_sqlite_private(tmp_path / "missing" / "gateway.sqlite3")  # no exception at start
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(("variables", "refused", "queued"), [
    ({}, 3.0, 10.0),
    ({"DATABASE_POOL_TIMEOUT": "1", "DATABASE_POOL_QUEUE_TIMEOUT": "30"}, 1.0, 30.0),
    ({"DATABASE_POOL_TIMEOUT": "5", "DATABASE_POOL_QUEUE_TIMEOUT": "2"}, 5.0, 5.0),  # never shorter than the other
])
def test_a_request_waits_longer_behind_busy_connections_than_for_a_refusing_server(monkeypatch, variables, refused,
                                                                                    queued):
    for name in ("DATABASE_POOL_TIMEOUT", "DATABASE_POOL_QUEUE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config = env.database_from_url("postgres://db.internal/gw", data_dir=None)
    assert (config["OPTIONS"]["pool"]["timeout"], config["POOL_QUEUE_TIMEOUT"]) == (refused, queued)


def test_the_request_paths_statements_are_prepared_unless_a_pooler_cannot_keep_them(monkeypatch):
    assert env.database_from_url("postgres://db.internal/gw", data_dir=None)["OPTIONS"]["prepare_threshold"] == 0
    monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", "0")
    assert env.database_from_url("postgres://db.internal/gw", data_dir=None)["OPTIONS"]["prepare_threshold"] is None
