import logging
import time

from django.core.cache import cache
from django.db import connection
from rest_framework.response import Response
from rest_framework.views import APIView

log = logging.getLogger("gateway.health")


def _check(probe) -> dict:
    started = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # the point of a health check is to report, not to raise
        log.warning("health check failed: %s", exc.__class__.__name__)
        return {"status": "down", "error": exc.__class__.__name__}
    return {"status": "up", "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


def _database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _cache():
    cache.set("health:probe", "1", 10)
    if cache.get("health:probe") != "1":
        raise RuntimeError("cache did not return the value just written")


class HealthView(APIView):
    """200 when the database and the cache answer, 503 when one does not."""

    def get(self, request):
        checks = {
            "database": {"vendor": connection.vendor, **_check(_database)},
            "cache": {"backend": "redis" if "redis" in type(cache).__module__ else "local-memory", **_check(_cache)},
        }
        healthy = all(check["status"] == "up" for check in checks.values())
        return Response({"status": "ok" if healthy else "degraded", "checks": checks},
                        status=200 if healthy else 503)
