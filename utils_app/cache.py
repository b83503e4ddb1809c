"""The shared cache, read and written so that it can only ever save work, never fail a request.

When the cache cannot be reached a read is a miss and a write is skipped, with one warning
in the log; callers then compute or fetch the value themselves. (The Redis backend with
Lua scripts that the request limits use is utils_app.speed.redis_round_trip.ScriptedRedisCache.)
"""
import logging

from django.core.cache import cache

log = logging.getLogger("gateway.cache")


def cache_get(key: str, default=None, *, why: str = "computing it directly"):
    try:
        return cache.get(key, default)
    except Exception:
        log.warning("cache unreachable reading %s; %s", key, why, exc_info=True)
        return default


def cache_get_many(keys: list[str], *, why: str = "computing them directly") -> dict:
    if not keys:
        return {}
    try:
        return cache.get_many(keys)
    except Exception:
        log.warning("cache unreachable reading %d key(s); %s", len(keys), why, exc_info=True)
        return {}


def cache_set(key: str, value, seconds: int) -> None:
    try:
        cache.set(key, value, seconds)
    except Exception:
        log.warning("cache unreachable; %s not stored", key, exc_info=True)
