"""The request path's shortcuts past framework internals, each kept only while a benchmark shows it pays.

Two remain (docs/performance.md has their figures; tests/utils_app/test_fastpath.py
proves each returns what the plain path returns):

- SharedFields: a request serializer binds its declared fields once per class instead of
  DRF deep-copying them for every instance. Relies on Serializer.fields, get_fields and
  BindingDict, which DRF does not promise to keep.
- ScriptedRedisCache.run_script: a Lua script in one round trip through the Redis client
  of Django's cache (Django's RedisCache._cache is private), so both request windows of a
  key are counted with one network call and share the cache's connection pool.

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


class ScriptedRedisCache(RedisCache):
    """Django's Redis cache, plus Lua scripts run in one round trip."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self._scripts = {}  # Lua source -> redis-py Script (sent by SHA after the first call)

    def run_script(self, source: str, *, keys: list[str], args: list):
        """Run a Lua script on the server in one round trip; ``keys`` must come from make_key()."""
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self._cache.get_client(write=True).register_script(source)
        return script(keys=keys, args=args)
