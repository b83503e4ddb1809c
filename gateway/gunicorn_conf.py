"""gunicorn settings for `make run` and production (gunicorn -c python:gateway.gunicorn_conf gateway.wsgi).

With REDIS_URL (production: PostgreSQL + Redis) the workers are gevent's: every
wait of a request (PostgreSQL through psycopg, Redis, the upstream through requests)
yields to the others, so an open stream costs a greenlet, not a thread, and one
worker per core serves thousands of them. docs/performance.md has the figures.

Without REDIS_URL (the embedded default on SQLite) the rate-limit counters live in
process memory, so exactly one worker is correct, and it runs threads: SQLite
connections are per thread and kept between requests, which greenlets, living one
request each, would not do.

With PostgreSQL each worker opens its pool (DATABASE_POOL_SIZE, 8 by default, or its share of
DATABASE_MAX_CONNECTIONS: utils_app.env.pool_size) before its first request
(utils_app.db.open_whole_pool); a pool the server refused keeps opening in the background.

Either way the workers count Prometheus metrics in files that the master empties at
start and from which it strikes a worker's live gauges when it dies (docs/operations.md).
"""
import json
import logging
import multiprocessing
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from gunicorn import util
from gunicorn.glogging import Logger
from gunicorn.workers.base_async import AsyncWorker

from utils_app.env import env_bool
from utils_app.logging import JsonFormatter


def _stop_on_a_bad_setting() -> None:
    # A bad setting stops the server here, before a worker is forked, with the one line that names it:
    # each worker would otherwise fail to load the application on its own (a line each, and with
    # several gunicorn's own traceback as it halts). Read in a process of its own, because the master
    # must not import the settings: each worker computes some after the fork (its pool sizes).
    checked = subprocess.run([sys.executable, "-c", "import manage; manage.check_settings()"],
                             cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
    if checked.returncode:
        raise SystemExit(checked.stderr.strip())


_stop_on_a_bad_setting()

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
# Each gevent worker keeps to a core of its own while there are no more workers than cores (pick_cpu).
try:
    pin_workers = env_bool("GUNICORN_PIN_WORKERS", True)
except ImproperlyConfigured as exc:
    raise SystemExit(str(exc)) from None
keepalive = 5
_json_logs = os.environ.get("LOG_FORMAT", "").strip().lower() == "json"
# Each request has its summary line (utils_app.logging: status, bytes, client, timing, the reason of
# a failure), the service's access log; gunicorn's own is a second line per request, off unless
# ACCESS_LOG names where to write it ("-": standard output).
accesslog = os.environ.get("ACCESS_LOG", "").strip() or None
# When the access line is written, it names the path only: a query string, a Referer or the user
# name of a Basic Authorization header can each carry a key (a client sending ?api_key=…), and no
# secret may reach the logs. The summary line (utils_app.logging) names the operation anyway.
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(M)sms "%(a)s"'

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


def allowed_cpus() -> list[int]:
    """The cores this process may run on (a container's cpuset included); none where the system cannot say."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return []


def pick_cpu(server) -> int | None:
    """In the master, before a worker is forked: the core it is to keep to, or None to leave it to the kernel.

    A gevent worker is one thread: it never runs on two cores at once, so keeping it to one loses it
    nothing, and with one worker per core the kernel no longer puts two of them on one core while the
    other core waits (on two cores shared with PostgreSQL and Redis: 1.83–1.91 of them busy instead
    of 1.72–1.81, and some 6 % more requests served; docs/performance.md, issue 27's sixteenth
    round). The new worker takes the core the fewest live workers keep to, so a worker that replaces
    a dead one takes the dead one's core, and during a reload (the new workers start before the old
    ones stop) each new one takes another core. Threads (gthread, the embedded default's) run at
    once on several cores, and workers more than cores are best placed by the kernel: those are not
    pinned.
    """
    if not pin_workers or not issubclass(server.cfg.worker_class, AsyncWorker):
        return None
    cpus = allowed_cpus()
    # The count the master keeps now (TTIN and TTOU change it at run time), else the configured one.
    if len(cpus) < 2 or getattr(server, "num_workers", server.cfg.workers) > len(cpus):
        return None
    held = Counter(getattr(live, "cpu", None) for live in server.WORKERS.values())
    return min(cpus, key=lambda cpu: (held[cpu], cpu))


def pre_fork(server, worker):
    worker.cpu = pick_cpu(server)


def post_fork(server, worker):
    # Before the worker loads the application, tell it what it runs with (a -w on the command
    # line included): its database pool takes its share of DATABASE_MAX_CONNECTIONS, when set, by
    # the worker count (utils_app.env.pool_size), and its keep-alive pool to each upstream holds a
    # connection for each request it serves at once (utils_app.env.upstream_pool_size).
    os.environ["GATEWAY_WORKERS"] = str(server.cfg.workers)
    if server.cfg.worker_class_str == "gthread":
        os.environ["GATEWAY_WORKER_THREADS"] = str(server.cfg.threads)
    elif issubclass(server.cfg.worker_class, AsyncWorker):  # gevent's and eventlet's
        os.environ["GATEWAY_WORKER_CONNECTIONS"] = str(server.cfg.worker_connections)
    cpu = getattr(worker, "cpu", None)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:  # the core left the process's set since, or a sandbox refuses the call
            worker.cpu = None
            server.log.warning("worker %s serves on any core: keeping it to core %s was refused (%s)",
                               os.getpid(), cpu, exc)


def post_worker_init(worker):
    # The application is loaded: start the routing upkeep (the figures of its requests, the probes of
    # disabled deployments: gateway.probes), and open this worker's whole database pool before it
    # accepts a request (utils_app.db.open_whole_pool). A server that refuses (full, down) does not
    # hold the worker back: it serves, answering 503 with the cause until the pool connects.
    from django.db import connection

    from gateway.probes import start_upkeep
    from utils_app.db import open_whole_pool

    start_upkeep()
    missing = open_whole_pool(connection, wait_seconds=10)
    if missing:
        worker.log.warning("database pool: %s; the rest keep opening in the background", missing)
    else:
        # With the pool open, a warning for each provider this worker cannot call (a secret not set);
        # a database that refused the pool says so above, and is not waited for a second time here.
        from gateway.wsgi import warn_unconfigured_providers

        warn_unconfigured_providers()


def child_exit(server, worker):
    # A dead worker's live gauges (open streams) must stop counting; its counters stay in the sums.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


class _NoQueryStrings(logging.Filter):
    """Cuts query strings out of gunicorn's own lines: an invalid request is logged with its request line."""

    _QUERY = re.compile(r"\?[^\s'\"]*")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "?" in message:
            record.msg, record.args = self._QUERY.sub("?…", message), None
        return True


class QuietLogger(Logger):
    """gunicorn's logger, its error lines without query strings."""

    def setup(self, cfg):
        super().setup(cfg)  # also on every reload
        self.error_log.addFilter(_NoQueryStrings())


class JsonLogger(QuietLogger):
    """gunicorn's own log lines (start, workers, signals) as JSON too, with LOG_FORMAT=json."""

    def setup(self, cfg):
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(JsonFormatter())


logger_class = JsonLogger if _json_logs else QuietLogger


# The errors gunicorn answers itself, before the application sees a request (a malformed request
# line or header, headers over its limits), in the contract's JSON error body instead of its HTML
# page. Every worker kind answers them through gunicorn.util.write_error, so that is the one place.
_ERROR_CODES = {400: "malformed_request", 403: "permission_denied", 414: "request_line_too_long",
                417: "expectation_failed", 431: "request_headers_too_large", 500: "internal_error",
                501: "not_implemented"}


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    kind = "server_error" if status_int >= 500 else "permission_error" if status_int == 403 else \
        "invalid_request_error"
    body = json.dumps({"error": {"message": f"{reason}: {mesg}" if mesg else reason, "type": kind, "param": None,
                                 "code": _ERROR_CODES.get(status_int, "bad_request")}}).encode()
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, head.encode("latin-1") + body)


util.write_error = write_json_error
