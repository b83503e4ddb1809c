"""Django's Redis cache with a one-round-trip ``incr`` and a one-round-trip count over several windows.

Django's RedisCacheClient.incr asks EXISTS and then INCRBY: two round trips, and
django-ratelimit calls it for every window it counts. Here both steps run as one
small Lua script on the server, which is also atomic: the key cannot expire
between the check and the increment.

``count_in_windows`` goes further for keys.limits, which counts every metered
request in two windows (rpm and rph): django-ratelimit's ``add`` then ``incr`` for
each window is four round trips, this is one.
"""
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_INCR_IF_EXISTS = (
    "if redis.call('exists', KEYS[1]) == 1 then return redis.call('incrby', KEYS[1], ARGV[1]) end "
    "return false"
)

# For each key in turn: create the counter at 1 with its expiry when it does not exist
# (what django-ratelimit's cache.add does), otherwise increment it (its cache.incr); stop
# after the first counter that went over its limit. ARGV holds timeout, limit per key.
_COUNT_IN_WINDOWS = (
    "local counts = {} "
    "for i, key in ipairs(KEYS) do "
    "  if redis.call('set', key, 1, 'ex', ARGV[2 * i - 1], 'nx') then counts[i] = 1 "
    "  else counts[i] = redis.call('incr', key) end "
    "  if counts[i] > tonumber(ARGV[2 * i]) then break end "
    "end "
    "return counts"
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

    def count_in_windows(self, counters: list[tuple[str, int, int]]) -> list[int]:
        """Count one event in each (key, timeout, limit) counter in turn, in one round trip.

        A counter that does not exist starts at 1 and expires after its timeout; one that
        exists is incremented and keeps its expiry. Counting stops after the first counter
        that goes over its limit, as a caller checking them one by one would stop, so the
        counts returned may be fewer than the counters. The keys are cache keys as for
        add() and incr() (prefixed and versioned here), so the counters are the same ones.
        """
        keys = [self.make_and_validate_key(key) for key, _, _ in counters]
        args = []
        for _, timeout, limit in counters:
            args += [self.get_backend_timeout(timeout), int(limit)]
        client = self._cache.get_client(keys[0], write=True)
        return [int(count) for count in client.eval(_COUNT_IN_WINDOWS, len(keys), *keys, *args)]
