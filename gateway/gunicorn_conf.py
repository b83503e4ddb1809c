"""gunicorn settings for `make run` and production (gunicorn -c python:gateway.gunicorn_conf gateway.wsgi).

gthread workers: each request (a stream too) holds one thread while it waits on
the upstream, so the thread count bounds the open streams per worker.
Without REDIS_URL the rate-limit counters live in process memory, so only one
worker process is correct; with Redis, several processes share them.
"""
import multiprocessing
import os

bind = os.environ.get("BIND", "127.0.0.1:8000")
worker_class = "gthread"
_shared_cache = bool(os.environ.get("REDIS_URL"))
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2 if _shared_cache else 1))
threads = int(os.environ.get("GUNICORN_THREADS", 32))
# Streams can be long; the upstream timeout, not gunicorn, decides when to give up.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 300))
keepalive = 5
accesslog = os.environ.get("ACCESS_LOG", "-")
