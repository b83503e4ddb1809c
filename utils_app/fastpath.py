"""The request path's shortcuts past framework internals, each kept only while a benchmark shows it pays.

Two remain (docs/performance.md has their figures; tests/utils_app/test_fastpath.py
proves each returns what the plain path returns):

- SharedFields: a request serializer binds its declared fields once per class instead of
  DRF deep-copying them for every instance. Relies on Serializer.fields, get_fields and
  BindingDict, which DRF does not promise to keep.
- ScriptedRedisCache.run_script: a Lua script in one round trip through the Redis client
  of Django's cache (Django's RedisCache._cache is private), with other commands pipelined
  beside it, so both request windows of a key are counted, and the routing's health read,
  with one network call on the cache's connection pool.

Earlier shortcuts (a compiled key lookup, a prepared usage INSERT, a one-round-trip incr
and a cached redis-py client) were removed once the request path no longer used them.
"""
import threading

from django.core.cache.backends.redis import RedisCache
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict


def _build_fields(serializer) -> BindingDict:
    """What DRF's Serializer.fields does: deep-copy the declared fields and bind them to ``serializer``."""
    fields = BindingDict(serializer)
    for name, field in serializer.get_fields().items():
        fields[name] = field
    return fields


def _build_nested_fields(field) -> None:
    """Build the fields of every serializer below ``field`` now, so nothing is built lazily later."""
    if isinstance(field, serializers.Serializer):
        for child in field.fields.values():
            _build_nested_fields(child)
    child = getattr(field, "child", None)  # ListField and ListSerializer
    if child is not None:
        _build_nested_fields(child)


class SharedFields:
    """Mixed into a Serializer: its top-level instances validate with fields bound once per class.

    DRF deep-copies the declared fields for every serializer instance, so that one instance may
    change its fields without touching the others. Nothing here does that, and for the chat
    request the copy (some 30 fields, nested message serializers included) costs more than the
    validation itself. So a top-level serializer binds its fields once, to a data-less instance
    of its class, and every later instance validates with those: fields keep no per-request
    state while validating. Serializers nested in another, or made with a context or
    partial=True (which fields read through their root), build their own as DRF does — the
    plain path the tests compare against.
    """

    _shared_fields_lock = threading.Lock()

    @property
    def fields(self):
        fields = self.__dict__.get("_bound_fields")
        if fields is None:
            if self.parent is None and not self.partial and not self._context:
                fields = type(self)._class_fields()
            else:
                fields = _build_fields(self)
            self.__dict__["_bound_fields"] = fields
        return fields

    @classmethod
    def _class_fields(cls) -> BindingDict:
        fields = cls.__dict__.get("_shared_fields")
        if fields is None:
            with SharedFields._shared_fields_lock:
                fields = cls.__dict__.get("_shared_fields")
                if fields is None:
                    prototype = cls()
                    fields = _build_fields(prototype)
                    for field in fields.values():
                        _build_nested_fields(field)
                    prototype.__dict__["_bound_fields"] = fields
                    cls._shared_fields = fields
        return fields


# One Redis client per process and server list: its connection pools, and the scripts the server knows.
# Django keeps a cache object per context (asgiref.local.Local), and a gevent worker runs each request
# in a greenlet of its own context, so each request built a new cache with new pools: it opened a new
# connection (connect, HELLO) and loaded the script again before its one round trip (about 0.9 ms of
# CPU a request; docs/performance.md). A redis-py client is safe to share between threads and greenlets.
_clients_lock = threading.Lock()
_clients: dict[tuple, tuple] = {}  # servers -> (Django's RedisCacheClient, its redis.Redis for writes)
_scripts: dict[str, str] = {}  # Lua source -> its SHA1, known to the server after the first call


class ScriptedRedisCache(RedisCache):
    """Django's Redis cache on one client per process, plus Lua scripts run in one round trip with other
    commands beside them."""

    def _shared(self) -> tuple:
        key = tuple(self._servers)
        found = _clients.get(key)
        if found is None:
            with _clients_lock:
                found = _clients.get(key)
                if found is None:
                    client = self._class(self._servers, **self._options)
                    found = _clients[key] = (client, client.get_client(write=True))
        return found

    @property
    def _cache(self):
        # Replaces RedisCache's cached_property: every cache object of the process shares one client.
        return self._shared()[0]

    def client_for_write(self):
        return self._shared()[1]

    def run_script(self, source: str, *, keys: list[str], args: list, then=None) -> tuple:
        """Run a Lua script and, in the same round trip, the commands ``then(pipeline)`` adds.

        Returns (the script's answer, the replies of the other commands). ``keys`` must come
        from make_key(). The script goes by its SHA; a server that does not know it (a restart,
        SCRIPT FLUSH) gets it loaded and run once more, alone: a second round trip that only
        happens then. The other commands ran once either way.
        """
        from redis.exceptions import NoScriptError

        client = self.client_for_write()
        sha = _scripts.get(source)
        if sha is None:
            sha = _scripts[source] = client.script_load(source)
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(sha, len(keys), *keys, *args)
        if then is not None:
            then(pipe)
        replies = pipe.execute(raise_on_error=False)
        answer, rest = replies[0], replies[1:]
        for reply in rest:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(answer, NoScriptError):
            _scripts[source] = sha = client.script_load(source)
            answer = client.evalsha(sha, len(keys), *keys, *args)
        elif isinstance(answer, Exception):
            raise answer
        return answer, rest
