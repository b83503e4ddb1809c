"""A model call straight through the urllib3 pool of its session's adapter (switch: SPEED_UPSTREAM_POOL).

A provider's session (utils_app.http.Upstreams) carries nothing per call but its headers: it keeps
no cookies and reads the environment once. requests' per-call machinery (preparing the request,
merging settings, building its Response) is CPU spent on every model call for nothing, so here:

- ``Pools.post`` sends the call through the connection pool the session's adapter keeps for the
  upstream (its TLS settings included), with the session's headers under the call's own, and hands
  back urllib3's response (utils_app.http.Answer wraps it); urllib3's errors become requests' as
  its adapter raises them;
- the pool's connections check at each checkout that the upstream has not closed a kept-alive
  connection by asking the kernel (utils_app.db.readable_now), not gevent's patched poll.

The plain twin, with the switch off (and always through a proxy), is ``session.post(..., stream=True,
allow_redirects=False)``: the same request on the wire, the same answer (tests/utils_app/test_http.py
runs its calls through both); bench/pieces_cpu.py measures one against the other.
"""
import socket
import threading
from typing import cast
from urllib.parse import urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3 import Retry
from urllib3 import Timeout as Urllib3Timeout
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ProtocolError, ReadTimeoutError, SSLError
from urllib3.exceptions import HTTPError as Urllib3Error

from utils_app.db import readable_now

# What urllib3 makes of ``retries=False, redirect=False`` at every call (Retry.from_int), made once: no
# retry, no redirect followed. A Retry is never changed in place (each step makes a new one).
NO_RETRIES = Retry(False, redirect=False)


def enabled() -> bool:
    """Whether model calls go straight to the pool (SPEED_UPSTREAM_POOL), else through requests' session."""
    return settings.SPEED_UPSTREAM_POOL


class Pools:
    """For one Upstreams: each origin's urllib3 pool and each session's headers, found once."""

    def __init__(self) -> None:
        self._pools: dict[tuple, object] = {}  # (scheme, host:port) -> the adapter's urllib3 pool
        self._session_headers: dict[int, dict] = {}  # id of the session -> {lower-case name: (name, value)}
        self._lock = threading.Lock()

    def post(self, session: requests.Session, url: str, *, body: bytes, headers: dict, timeout):
        """urllib3's response to what ``session.post(url, ..., stream=True, allow_redirects=False)`` sends;
        its body left unread. Redirects are never followed (utils_app.http.Upstreams.post says why)."""
        merged = self._merged(session, headers, len(body))
        parts = urlsplit(url)
        try:
            return self._pool(session, url).urlopen(
                "POST", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body=body,
                headers=merged, redirect=False, retries=NO_RETRIES, assert_same_host=False, preload_content=False,
                decode_content=False, timeout=Urllib3Timeout(connect=timeout[0], read=timeout[1]))
        except Urllib3Error as exc:
            raise _as_requests_error(exc) from exc

    def _merged(self, session: requests.Session, headers: dict, length: int) -> dict:
        """The session's headers under the call's, as requests merges them (a name in any case
        replaces the session's, the call's spelling kept), and the body's Content-Length. The
        session's are set once, when it is built: they are read once, into a dict by lower-case name."""
        base = self._session_headers.get(id(session))
        if base is None:
            base = self._session_headers[id(session)] = {
                name.lower(): (name, value) for name, value in session.headers.items()}
        merged = base.copy()
        for name, value in headers.items():
            merged[name.lower()] = (name, value)
        merged["content-length"] = ("Content-Length", str(length))
        return dict(merged.values())

    def _pool(self, session: requests.Session, url: str):
        """The connection pool requests would use for ``url`` (its adapter's, with its TLS settings)."""
        origin = urlsplit(url)[:2]
        pool = self._pools.get(origin)
        if pool is None:
            with self._lock:
                adapter = cast(HTTPAdapter, session.get_adapter(url))
                prepared = requests.Request("POST", url).prepare()
                pool = adapter.get_connection_with_tls_context(prepared, session.verify)
                adapter.cert_verify(pool, cast(str, prepared.url), session.verify, None)  # prepare() set it
                pool.ConnectionCls = _CHECKED_CHEAPLY.get(pool.ConnectionCls, pool.ConnectionCls)
                self._pools[origin] = pool
        return pool


class _CheapCheck:
    """urllib3's check, at each checkout, that the upstream has not closed a kept-alive connection,
    asked of the kernel directly: the same answer, without gevent's poll."""

    sock: socket.socket | None  # the connection's, mixed into urllib3's HTTPConnection

    @property
    def is_connected(self) -> bool:
        if self.sock is None:
            return False
        return not readable_now(self.sock.fileno())


class _CheckedHTTPConnection(_CheapCheck, HTTPConnection):
    pass


class _CheckedHTTPSConnection(_CheapCheck, HTTPSConnection):
    pass


_CHECKED_CHEAPLY: dict[type, type] = {HTTPConnection: _CheckedHTTPConnection, HTTPSConnection: _CheckedHTTPSConnection}


def _as_requests_error(exc: Exception) -> Exception:
    """urllib3's error as requests' adapter raises it, so callers tell a timeout from a refusal the same
    way on either path (NewConnectionError, a refused connection or an unknown host, is a
    ConnectTimeoutError to urllib3)."""
    if isinstance(exc, (NewConnectionError, ProtocolError)):
        return requests.ConnectionError(exc)
    if isinstance(exc, ConnectTimeoutError):
        return requests.ConnectTimeout(exc)
    if isinstance(exc, ReadTimeoutError):
        return requests.ReadTimeout(exc)
    if isinstance(exc, SSLError):
        return requests.exceptions.SSLError(exc)
    return requests.ConnectionError(exc)
