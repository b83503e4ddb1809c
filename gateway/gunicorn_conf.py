"""gunicorn settings for `make run` and production (gunicorn -c python:gateway.gunicorn_conf gateway.wsgi).

With REDIS_URL (production: PostgreSQL + Redis) the workers are gevent's: every
wait of a request (PostgreSQL through psycopg, Redis, the upstream through requests)
yields to the others, so an open stream costs a greenlet, not a thread, and one
worker per core serves thousands of them. docs/performance.md has the figures.

Without REDIS_URL (the embedded default on SQLite) the rate-limit counters live in
process memory, so exactly one worker is correct, and it runs threads: SQLite
connections are per thread and kept between requests, which greenlets, living one
request each, would not do.
"""
import multiprocessing
import os

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
accesslog = os.environ.get("ACCESS_LOG", "-")
