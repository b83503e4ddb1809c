"""Django's PostgreSQL backend, except that a pooled connection the server has ended is never used.

After a database restart every idle connection in the pool is dead, and the first use of each
would fail a request. Django's CONN_HEALTH_CHECKS would ping the server at every checkout, a round
trip per request on the hot path; here a dead connection is told apart without one
(utils_app.db.ended_by_server), closed, and given back so the pool drops it, and the next one is
taken. Everything else is Django's backend unchanged.
"""
from django.db.backends.postgresql import base

from utils_app.db import ended_by_server


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        conn = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return conn
        # Bounded: at most every connection the pool can hold is dead, then it opens new ones.
        for _ in range(pool.max_size):
            if not ended_by_server(conn):
                return conn
            conn.close()
            pool.putconn(conn)  # closed: the pool discards it and opens a replacement
            conn = super().get_new_connection(conn_params)
        return conn
