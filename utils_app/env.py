"""Typed readers for environment variables.

Every reader fails loudly with ImproperlyConfigured naming the variable, so a
typo in a deployment stops the service at start instead of surfacing later as a
strange 500.
"""
import ipaddress
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
RATE_RE = re.compile(r"^(\d+)/(\d*)([smhd])$")


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_rate(name: str, default: str) -> str:
    """A django-ratelimit rate such as ``60/m`` or ``1000/h``."""
    value = env_str(name, default)
    if not RATE_RE.match(value) or int(value.split("/")[0]) < 1:
        raise ImproperlyConfigured(f"{name} must look like 60/m (count/s, m, h or d), got {value!r}")
    return value


def env_url(name: str, default: str) -> str:
    value = env_str(name, default).rstrip("/")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ImproperlyConfigured(f"{name} must be an http(s) URL, got {value!r}")
    return value


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_networks(name: str, default: str = "") -> tuple:
    """Comma-separated IP addresses or CIDR networks (``10.0.0.0/8, 192.168.1.7, ::1``)."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list IP addresses or networks (10.0.0.0/8), "
                                       f"got {item!r}") from None
    return tuple(networks)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_names(name: str, default: str) -> tuple[str, ...]:
    """Comma-separated names of environment variables."""
    names = env_list(name, default)
    for item in names:
        if not ENV_NAME_RE.match(item):
            raise ImproperlyConfigured(f"{name} must list environment variable names, got {item!r}")
    return tuple(names)


# The connections each served worker's pool holds when nothing says otherwise. A metered request
# holds one for its two short statements only (utils_app.db.release_connection), so a few serve
# hundreds of requests a second, and a burst of 1,000 new streams (docs/performance.md). Small
# enough that several instances of two workers, the sweeper, management commands and an
# operator's psql fit in PostgreSQL's default max_connections of 100 (docs/operations.md).
DATABASE_POOL_SIZE = 8

# How long the pool retries opening one connection (1, 2, 4 ... s apart) before it gives that
# attempt up; the next request that finds no connection ready starts another. psycopg's own
# default (5 minutes, the attempts up to two minutes apart) would leave a worker answering 503
# for minutes after the database is back.
DATABASE_RECONNECT_SECONDS = 5.0


def pool_size() -> int:
    """The most connections this process's pool may hold.

    DATABASE_POOL_SIZE when set, else 8. DATABASE_MAX_CONNECTIONS, when set, is instead the
    connections the whole instance may hold: gunicorn's workers split it (GATEWAY_WORKERS, which
    gateway.gunicorn_conf sets in each worker), each taking an equal share of at least two.
    Either way a threaded worker (GATEWAY_WORKER_THREADS, also set by gateway.gunicorn_conf) takes
    no more than its threads use. The sum over every instance must stay within what the server
    accepts (docs/operations.md): a pool past it fails at its connect, and its requests get 503.
    """
    explicit = env_int("DATABASE_POOL_SIZE", 0, minimum=1)
    if explicit:
        return explicit
    total = env_int("DATABASE_MAX_CONNECTIONS", 0, minimum=2)
    workers = env_int("GATEWAY_WORKERS", 1, minimum=1)
    size = max(total // workers, 2) if total else DATABASE_POOL_SIZE
    # A threaded worker runs at most that many requests at once, each on one connection at a
    # time, beside the ledger sweeper's thread: a larger pool would only hold idle connections open.
    threads = env_int("GATEWAY_WORKER_THREADS", 0, minimum=1)
    return min(size, threads + 1) if threads else size


# The keep-alive connections to one upstream host that a process with no known concurrency keeps.
UPSTREAM_POOL_SIZE = 64


def upstream_pool_size() -> int:
    """The most keep-alive connections this process keeps to one upstream host.

    UPSTREAM_POOL_SIZE when set. Otherwise as many as the process serves requests at once:
    a threaded worker's threads (GATEWAY_WORKER_THREADS), a cooperative worker's connections
    (GATEWAY_WORKER_CONNECTIONS; gateway.gunicorn_conf sets both), or 64 for any other process.
    A pool smaller than that makes every request past it open a new connection and throw it
    away afterwards, and a burst of streams pays that over and over (docs/performance.md).
    """
    explicit = env_int("UPSTREAM_POOL_SIZE", 0, minimum=1)
    if explicit:
        return explicit
    threads = env_int("GATEWAY_WORKER_THREADS", 0, minimum=1)
    connections = env_int("GATEWAY_WORKER_CONNECTIONS", 0, minimum=1)
    return threads or connections or UPSTREAM_POOL_SIZE


def database_from_url(url: str, *, data_dir: Path) -> dict:
    """Django DATABASES['default'] from DATABASE_URL (empty = SQLite in the data dir)."""
    if not url:
        return _sqlite(data_dir / "gateway.sqlite3")
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = unquote(parts.path)
        if not path or path == "/":
            raise ImproperlyConfigured("DATABASE_URL sqlite:/// needs a file path")
        return _sqlite(Path(path))
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured("DATABASE_URL must name a database, e.g. postgres://user@host:5432/db")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL has a bad port: {url!r}") from None
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        # A psycopg connection pool per process: a new PostgreSQL connection costs more
        # than the whole metered request path, and the pool bounds the connections a
        # process holds however many threads it runs (gthread workers x threads could
        # otherwise exceed the server's max_connections). The pool hands out healthy
        # connections, so no per-request health-check query is needed.
        # A request waits for a connection at most DATABASE_POOL_TIMEOUT once the server
        # refuses connections, and at most DATABASE_POOL_QUEUE_TIMEOUT behind busy ones while
        # it accepts them (utils_app.postgresql.base); then it is answered 503
        # service_unavailable (utils_app.error_handler). Dead connections are dropped before use.
        # A management command opens what it uses; a served worker opens its whole pool at
        # start (utils_app.db.open_whole_pool).
        refused_wait = env_float("DATABASE_POOL_TIMEOUT", 3.0, minimum=0.1)
        # The request path's two statements, bound on the server (gateway.metering), are prepared on their
        # first use on each pooled connection: about a third of PostgreSQL's CPU per request
        # (docs/performance.md). The ORM binds on the client and never prepares. Off for a pooler that
        # cannot keep prepared statements (PgBouncer before 1.21, or without max_prepared_statements).
        options["prepare_threshold"] = 0 if env_bool("DATABASE_PREPARED_STATEMENTS", True) else None
        options["pool"] = {
            "min_size": 1,
            "max_size": pool_size(),
            "timeout": refused_wait,
            "reconnect_timeout": DATABASE_RECONNECT_SECONDS,
        }
        return {
            # Django's PostgreSQL backend, handing out only live pooled connections (utils_app.postgresql).
            "ENGINE": "utils_app.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 0,  # the pool keeps the connections; Django must not
            "OPTIONS": options,
            # Not Django's: read by utils_app.postgresql.base (psycopg's pool has one timeout).
            "POOL_QUEUE_TIMEOUT": max(refused_wait, env_float("DATABASE_POOL_QUEUE_TIMEOUT", 10.0, minimum=0.1)),
        }
    raise ImproperlyConfigured(f"DATABASE_URL must start with postgres:// or sqlite:///, got {parts.scheme!r}")


def _sqlite(path: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # Keep each thread's connection: opening one per request (and the WAL
        # checkpoint when it closes) was most of the gateway's own time per request.
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 300, minimum=0),
        "OPTIONS": {
            # WAL lets readers run beside the single writer; busy_timeout makes a
            # writer wait for the lock instead of failing under thread concurrency.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
    }


def keep_sqlite_private(path: Path) -> None:
    """The SQLite database file, and its -wal and -shm files, readable and writable by their owner alone.

    The database holds staff password hashes, sessions and the keys' digests, as private as the
    secret key beside it. SQLite creates its file under the process's umask (readable by everyone on
    most systems) and gives each -wal and -shm file it creates the database file's mode, so the file
    is created here, empty (an empty file is an empty database), before a first connection would
    create it; a database an earlier run left readable by others is narrowed, -wal and -shm with it.
    A file this process may not change (another owner's) is left as it is.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:  # no such folder: the first connection says so, naming the path
        return
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = file.stat().st_mode & 0o777
            if mode & 0o077:
                file.chmod(mode & 0o700)
        except OSError:  # not there (no -wal between runs), or not ours to change
            continue


def _redis_driver_info():
    """What each new Redis connection tells the server about its client, worked out once.

    Left to itself, redis-py looks its own version up in the installed packages' metadata for
    every connection it opens, about half a millisecond of CPU each; a burst of requests opens
    hundreds of connections at once (docs/performance.md).
    """
    import redis
    from redis.driver_info import DriverInfo

    return DriverInfo(name="redis-py", lib_version=redis.__version__)


def cache_from_url(url: str) -> dict:
    """Django CACHES['default'] from REDIS_URL (empty = local memory)."""
    if not url:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "gateway"}
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix") or (parts.scheme != "unix" and not parts.hostname):
        raise ImproperlyConfigured(f"REDIS_URL must look like redis://host:6379/0, got {url!r}")
    return {
        "BACKEND": "utils_app.speed.redis_round_trip.ScriptedRedisCache",
        "LOCATION": url,
        "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "gw"),
        "OPTIONS": {
            # Short timeouts: when Redis is down, limits fail open quickly instead
            # of holding every request for the default socket timeout.
            "socket_connect_timeout": env_float("REDIS_TIMEOUT", 0.25),
            "socket_timeout": env_float("REDIS_TIMEOUT", 0.25),
            "driver_info": _redis_driver_info(),
        },
    }
