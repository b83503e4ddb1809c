"""The limits' Redis round trip on a connection of its own, packed by hiredis (switch: SPEED_REDIS_ROUND_TRIP).

ScriptedRedisCache is Django's Redis cache with two changes:

- one redis-py client per process, shared by every cache object of it (Django keeps one per
  context, and a gevent worker runs each request in a context of its own: each request built new
  pools, connected and loaded the script again, about 0.9 ms of CPU; docs/performance.md). It
  replaces RedisCache's private ``_cache``; it is no speed trick to switch off, but the
  correctness of the one round trip rests on it;
- ``round_trip``: a Lua script and the commands beside it in one write, on a connection of its
  own, packed by hiredis and read without redis-py's pipeline, health check, retry object and
  response callbacks. Its plain twin, with the switch off, is redis-py's own pipeline on the
  client's pool: the same commands, the same replies (tests/utils_app/test_speed.py).
"""
import hashlib
import os
import threading
from collections.abc import Sequence
from typing import Any, cast

from django.conf import settings
from django.core.cache.backends.redis import RedisCache

# hiredis's packer for the round trips (``_packed``), loaded with the process's first Redis client: a
# process without Redis (a command on the embedded default) never imports redis-py, which costs a
# command's start-up a tenth of a second or more (docs/operations.md).
_pack_command = HiredisRespSerializer = None


def _load_hiredis() -> None:
    global _pack_command, HiredisRespSerializer
    try:
        from hiredis import pack_command
        from redis.connection import HiredisRespSerializer as serializer
    except ImportError:  # redis-py without hiredis packs in Python
        return
    _pack_command, HiredisRespSerializer = pack_command, serializer


# One Redis client per process and server list: its connection pools, and the scripts the server knows.
# Django keeps a cache object per context (asgiref.local.Local), and a gevent worker runs each request
# in a greenlet of its own context, so each request built a new cache with new pools: it opened a new
# connection (connect, HELLO) and loaded the script again before its one round trip (about 0.9 ms of
# CPU a request; docs/performance.md). A redis-py client is safe to share between threads and greenlets.
_clients_lock = threading.Lock()
_clients: dict[tuple, "_Shared"] = {}  # servers -> this process's client and idle round-trip connections
_scripts: dict[str, str] = {}  # Lua source -> its SHA1, known to the server after the first call

# Idle connections kept for round trips: as many as requests of one process wait on Redis at once, at most.
IDLE_CONNECTIONS = 64


class _Shared:
    """Django's cache client for the servers, its redis.Redis for writes, and the round trips' idle connections."""

    def __init__(self, client, redis_client):
        _load_hiredis()
        self.client = client
        self.redis = redis_client
        self.idle: list = []
        self.pid = os.getpid()

    def take(self):
        """(an idle connection, True), or (a new one, not yet connected, False)."""
        if self.pid != os.getpid():  # a forked child: the parent's sockets are not its own
            self.idle, self.pid = [], os.getpid()
        try:
            return self.idle.pop(), True
        except IndexError:
            pool = self.redis.connection_pool
            return pool.connection_class(**pool.connection_kwargs), False

    def give_back(self, connection) -> None:
        if len(self.idle) < IDLE_CONNECTIONS and connection.pid == self.pid:
            self.idle.append(connection)
        else:
            connection.disconnect()


def _packed(connection, commands: list[tuple]):
    """The commands in Redis's protocol, as the connection's pack_commands would write them (a list of
    chunks, as send_packed_command takes them).

    With hiredis, each command is packed by hiredis.pack_command itself: redis-py's serializer calls
    the same function per command after building the argument tuple again and looking for spaces in
    the command's name. The commands here are the round
    trips' own, made of names without spaces and str, bytes, int and float values, which pack_command
    writes as redis-py would (tests/utils_app/test_speed.py compares the two). Otherwise (no
    hiredis, a value of another type) the connection packs them.
    """
    if _pack_command is not None and isinstance(getattr(connection, "_command_packer", None),
                                                  cast(type, HiredisRespSerializer)):  # set with _pack_command
        try:
            return [b"".join([_pack_command(command) for command in commands])]
        except TypeError:
            pass  # a value pack_command does not take: redis-py's own error, or its own encoding
    return connection.pack_commands(commands)


def _read_replies(connection, count: int) -> list:
    """``count`` replies in order; an error reply is returned in its place (it was read whole)."""
    from redis.exceptions import ResponseError

    replies = []
    for _ in range(count):
        try:
            replies.append(connection.read_response())
        except ResponseError as error:
            replies.append(error)
    return replies


def _through_pipeline(client, commands: list[tuple]) -> list:
    """The plain twin of ``round_trip``: redis-py's pipeline (no transaction) on the client's pool, its
    replies left unconverted (no response callbacks) and an error reply in its place, as the trick gives."""
    from redis.client import Pipeline

    pipe = Pipeline(client.connection_pool, {}, False, None)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)


class ScriptedRedisCache(RedisCache):
    """Django's Redis cache on one client per process, plus commands sent in one round trip (a Lua script
    with other commands beside it)."""

    # RedisCache's own attributes (set by its __init__) that the shared client is built from.
    _servers: list[str]
    _class: type
    _options: dict[str, Any]

    def _shared(self) -> _Shared:
        key = tuple(self._servers)
        found = _clients.get(key)
        if found is None:
            with _clients_lock:
                found = _clients.get(key)
                if found is None:
                    client = self._class(self._servers, **self._options)
                    found = _clients[key] = _Shared(client, client.get_client(write=True))
        return found

    @property
    def _cache(self):
        # Replaces RedisCache's cached_property: every cache object of the process shares one client.
        return self._shared().client

    def client_for_write(self):
        return self._shared().redis

    def round_trip(self, commands: list[tuple]) -> list:
        """Send ``commands`` (each a tuple of the command's words) in one write on one connection and read
        their replies in order, unconverted; an error reply is returned in its place, as an exception.

        redis-py's pipeline does the same with bookkeeping the request path does not need: a health
        check of the connection at each checkout (a poll of its socket), a retry object, the pool's
        connection-count metrics and response callbacks (0.1 ms a round trip; docs/performance.md).
        Here a connection is used by one round trip at a time and given back only after every reply
        was read; any failure disconnects it. An idle connection the server closed meanwhile (a
        restart) fails on its first use with a connection error: it is dropped and the round trip
        goes on the next one, ending at latest on a new connection (whose failure is raised). The
        server never read a round trip sent on a closed connection, so none runs twice. A timeout
        is not retried: the server may have run the commands.
        """
        from redis.exceptions import ConnectionError as RedisConnectionError

        shared = self._shared()
        if not settings.SPEED_REDIS_ROUND_TRIP:
            return _through_pipeline(shared.redis, commands)
        while True:
            connection, reused = shared.take()
            try:
                connection.send_packed_command(_packed(connection, commands), check_health=False)
                replies = _read_replies(connection, len(commands))
            except RedisConnectionError:
                connection.disconnect()
                if reused:
                    continue  # a new connection next: the loop ends at the first one
                raise
            except BaseException:  # a timeout, a killed greenlet: replies may be left unread on it
                connection.disconnect()
                raise
            shared.give_back(connection)
            return replies

    def run_script(self, source: str, *, keys: list[str], args: list, commands: Sequence[tuple] = ()) -> tuple:
        """Run a Lua script and, in the same round trip, ``commands`` (as ``round_trip`` takes them).

        Returns (the script's answer, the replies of the other commands). ``keys`` must come
        from make_key(). The script goes by its SHA; a server that does not know it (a restart,
        SCRIPT FLUSH) gets it loaded and run once more, alone: a second round trip that only
        happens then. The other commands ran once either way; an error reply to one of them is raised.
        """
        from redis.exceptions import NoScriptError

        sha = _scripts.get(source)
        if sha is None:
            sha = _scripts[source] = hashlib.sha1(source.encode()).hexdigest()
        call = (len(keys), *keys, *args)
        replies = self.round_trip([("EVALSHA", sha, *call), *commands])
        answer, rest = replies[0], replies[1:]
        for reply in rest:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(answer, NoScriptError):
            answer = self.round_trip([("EVAL", source, *call)])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer, rest
