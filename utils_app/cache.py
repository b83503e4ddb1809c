"""Django's Redis cache with a one-round-trip ``incr``.

Django's RedisCacheClient.incr asks EXISTS and then INCRBY: two round trips, and
django-ratelimit calls it for every window of every metered request. Here both
steps run as one small Lua script on the server, which is also atomic: the key
cannot expire between the check and the increment.
"""
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_INCR_IF_EXISTS = (
    "if redis.call('exists', KEYS[1]) == 1 then return redis.call('incrby', KEYS[1], ARGV[1]) end "
    "return false"
)


class FastIncrClient(RedisCacheClient):
    def incr(self, key, delta=1):
        value = self.get_client(key, write=True).eval(_INCR_IF_EXISTS, 1, key, delta)
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value


class GatewayRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = FastIncrClient
