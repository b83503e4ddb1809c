"""Django's PostgreSQL backend, with two changes for the metered request path.

A pooled connection the server has ended is never used. After a database restart every
idle connection in the pool is dead, and the first use of each would fail a request.
Django's CONN_HEALTH_CHECKS would ping the server at every checkout, a round trip per
request on the hot path; here a dead connection is told apart without one
(utils_app.db.ended_by_server), closed, and given back so the pool drops it, and the next
one is taken.

A cursor may send its parameters apart from the statement (``server_bound_cursor``).
Django binds parameters on the client by default: the values are quoted into the
statement's text, which is what every ORM query here still gets. The two statements of
a metered request (gateway.metering) instead travel as text plus parameters, which
costs PostgreSQL about half the CPU per request and psycopg less quoting
(docs/performance.md). Statements are not prepared either way: a connection pooler in
front of the database would break prepared statements, and preparing gained little.

Everything else is Django's backend unchanged.
"""
from django.db.backends.postgresql import base

from utils_app.db import ended_by_server


class DatabaseWrapper(base.DatabaseWrapper):
    _binds_on_server = False

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

    def server_bound_cursor(self):
        """Like ``cursor()`` (Django's wrapper: query logging, execute wrappers, error mapping), but its
        statements carry their parameters separately instead of quoted into the text."""
        self._binds_on_server = True
        try:
            return self.cursor()
        finally:
            self._binds_on_server = False

    def create_cursor(self, name=None):
        if name is not None or not self._binds_on_server:
            return super().create_cursor(name)
        # psycopg builds a connection's cursors with its cursor_factory: lend it the server-binding
        # class for this one cursor, so Django's own set-up of the cursor (its time zone) still runs.
        connection = self.connection
        factory, connection.cursor_factory = connection.cursor_factory, base.ServerBindingCursor
        try:
            return super().create_cursor(name)
        finally:
            connection.cursor_factory = factory
