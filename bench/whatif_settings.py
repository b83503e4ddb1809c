"""What-if settings for the benchmarks only, never for serving: the gateway's own settings plus
persistent database connections on SQLite too.

gateway.settings keeps PostgreSQL connections for DATABASE_CONN_MAX_AGE seconds but gives SQLite
none, so every request opens a SQLite connection and closing it checkpoints the WAL.
`chat_overhead.py --what-if` serves the gateway with this module to measure what keeping them
would save (docs/performance.md).
"""
from gateway.settings import *  # noqa: F401,F403
from gateway.settings import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = 300
