"""gunicorn settings for `make run` and production (gunicorn -c python:gateway.gunicorn_conf gateway.wsgi).

With REDIS_URL (production: PostgreSQL + Redis) the workers are gevent's: every
wait of a request (PostgreSQL through psycopg, Redis, the upstream through requests)
yields to the others, so an open stream costs a greenlet, not a thread, and one
worker per core serves thousands of them. docs/performance.md has the figures.

Without REDIS_URL (the embedded default on SQLite) the rate-limit counters live in
process memory, so exactly one worker is correct, and it runs threads: SQLite
connections are per thread and kept between requests, which greenlets, living one
request each, would not do.

With PostgreSQL the workers share DATABASE_MAX_CONNECTIONS between their pools
(utils_app.env.pool_size), so the instance stays within what the server accepts, and
each opens its whole share before its first request (utils_app.db.open_whole_pool).

Either way the workers count Prometheus metrics in files that the master empties at
start and from which it strikes a worker's live gauges when it dies (docs/operations.md).
"""
import multiprocessing
import os
from pathlib import Path

from gunicorn.glogging import Logger
from gunicorn.workers.base_async import AsyncWorker

from utils_app.logging import JsonFormatter

bind = os.environ.get("BIND", "127.0.0.1:8000")
_shared_cache = bool(os.environ.get("REDIS_URL", "").strip())
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gevent" if _shared_cache else "gthread")
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() if _shared_cache else 1))
if workers > 1 and not _shared_cache:
    raise SystemExit("WEB_CONCURRENCY > 1 needs REDIS_URL: without a shared cache every worker would count "
                     "rate limits on its own, multiplying them.")
threads = int(os.environ.get("GUNICORN_THREADS", 32))  # gthread only
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", 4000))  # gevent only
# Streams can be long; the upstream deadline, not gunicorn, decides when to give up.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 300))
keepalive = 5
_json_logs = os.environ.get("LOG_FORMAT", "").strip().lower() == "json"
# With LOG_FORMAT=json each request already has its JSON summary line (utils_app.logging), so the
# plain access log is off unless ACCESS_LOG asks for it.
accesslog = os.environ.get("ACCESS_LOG", None if _json_logs else "-")

# Prometheus multiprocess mode (utils_app.metrics): every worker counts in its own mmapped files in
# this folder, and a scrape adds them all up. Set before any worker imports prometheus_client.
_data_dir = Path(os.environ.get("GATEWAY_DATA_DIR", "").strip() or Path(__file__).resolve().parent.parent / "var")
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(_data_dir.resolve() / "prometheus"))


def on_starting(server):
    # The files of an earlier run would add its counts to this one's.
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def post_fork(server, worker):
    # Before the worker loads the application, tell it what it runs with (a -w on the command
    # line included): its database pool takes its share of DATABASE_MAX_CONNECTIONS by the
    # worker count (utils_app.env.pool_size), and its keep-alive pool to each upstream holds a
    # connection for each request it serves at once (utils_app.env.upstream_pool_size).
    os.environ["GATEWAY_WORKERS"] = str(server.cfg.workers)
    if server.cfg.worker_class_str == "gthread":
        os.environ["GATEWAY_WORKER_THREADS"] = str(server.cfg.threads)
    elif issubclass(server.cfg.worker_class, AsyncWorker):  # gevent's and eventlet's
        os.environ["GATEWAY_WORKER_CONNECTIONS"] = str(server.cfg.worker_connections)


def post_worker_init(worker):
    # The application is loaded: open this worker's whole database pool before it accepts
    # a request (utils_app.db.open_whole_pool).
    from django.db import connection

    from utils_app.db import open_whole_pool

    if not open_whole_pool(connection, wait_seconds=10):
        worker.log.warning("the database pool did not open all its connections within 10 s; "
                           "it keeps opening them in the background")


def child_exit(server, worker):
    # A dead worker's live gauges (open streams) must stop counting; its counters stay in the sums.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


class JsonLogger(Logger):
    """gunicorn's own log lines (start, workers, signals) as JSON too, with LOG_FORMAT=json."""

    def setup(self, cfg):
        super().setup(cfg)  # also on every reload
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(JsonFormatter())


if _json_logs:
    logger_class = JsonLogger
