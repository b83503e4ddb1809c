import copy
import logging
import re
import time
from typing import Any

from corsheaders.middleware import CorsMiddleware
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from utils_app import neko
from utils_app.db import unavailable_cause
from utils_app.limits import PublicAPIView, PublicRateThrottle
from utils_app.models import Fact
from utils_app.schema import error_responses

log = logging.getLogger("gateway.health")


def _check(probe) -> dict:
    started = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # the point of a health check is to report, not to raise
        log.warning("health check failed: %s", unavailable_cause(exc) if isinstance(exc, DatabaseError)
                    else exc.__class__.__name__)
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


_HealthCheck = inline_serializer(name="HealthCheck", fields={
    "status": serializers.ChoiceField(choices=["up", "down", "degraded"]),
    "latency_ms": serializers.FloatField(required=False),
    "error": serializers.CharField(required=False),
})
_Health = inline_serializer(name="Health", fields={
    "status": serializers.ChoiceField(choices=["ok", "degraded", "down"]),
    "checks": inline_serializer(name="HealthChecks", fields={"database": _HealthCheck, "cache": _HealthCheck}),
})


class HealthView(APIView):
    """200 while requests can be served: the database answers. A lost cache only degrades the
    service (rate limits fail open; credits live in the database), so it is reported but keeps
    the 200 a load balancer acts on; 503 means the database does not answer."""

    @extend_schema(operation_id="health", tags=["service"], summary="Database and cache health",
                   responses={200: _Health, 503: OpenApiResponse(_Health, description="The database is down.")})
    def get(self, request):
        database = {"vendor": connection.vendor, **_check(_database)}
        cache_check = {"backend": "redis" if settings.SHARED_CACHE else "local-memory", **_check(_cache)}
        if cache_check["status"] == "down":
            cache_check["status"] = "degraded"
        if database["status"] == "down":
            status, code = "down", 503
        else:
            status, code = ("ok" if cache_check["status"] == "up" else "degraded"), 200
        return Response({"status": status, "checks": {"database": database, "cache": cache_check}}, status=code)


# ---------------------------------------------------------------- facts

class DigitsQueryField(serializers.IntegerField):
    """Digits only: DRF's IntegerField would also take "2.0" or " 2 "."""

    def get_value(self, dictionary):
        # DRF reads an empty query value as "not sent" (so the default); "count=" is a mistake instead.
        if self.field_name in dictionary:
            return dictionary.get(self.field_name)
        return super().get_value(dictionary)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not re.fullmatch(r"[0-9]+", data):
            self.fail("invalid")
        return super().to_internal_value(data)


class FactsQuerySerializer(serializers.Serializer):
    count = DigitsQueryField(required=False, default=1, min_value=1, max_value=100,
                               help_text="How many distinct facts to return.",
                               error_messages={message: "must be a whole number from 1 to 100."
                                               for message in ("invalid", "min_value", "max_value", "max_string_length")})


class FactsSerializer(serializers.Serializer):
    facts = serializers.ListField(child=serializers.CharField())


class FactsView(PublicAPIView):
    @extend_schema(operation_id="facts", tags=["utils"], summary="Random facts",
                   description="count distinct facts in random order (fewer only if staff disabled most of them).",
                   parameters=[FactsQuerySerializer],
                   responses={200: FactsSerializer, **error_responses(400, 429)})
    def get(self, request):
        query = FactsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response({"facts": Fact.objects.random_texts(query.validated_data["count"])})


# ---------------------------------------------------------------- neko

class NekoImageSerializer(serializers.Serializer):
    url = serializers.URLField()
    artist = serializers.CharField(allow_null=True)
    artist_url = serializers.URLField(allow_null=True)
    source: Any = serializers.URLField(allow_null=True)  # a field: DRF's metaclass takes it off the class


class NekoView(PublicAPIView):
    @extend_schema(operation_id="neko", tags=["utils"], summary="A random neko image",
                   description="An image URL from the neko upstream, with artist and source when it gives them.",
                   responses={200: NekoImageSerializer, **error_responses(429, 502, 504)})
    def get(self, request):
        return Response(neko.random_image())


# ---------------------------------------------------------------- CORS

def cors_headers(request, method: str) -> dict:
    """The CORS headers the middleware would add to a ``method`` request like this one.

    Asks django-cors-headers itself, so the answer cannot drift from what it sends. ``request`` may be
    Django's or DRF's: DRF's hands every attribute the middleware reads (method, path_info, headers) on to
    the request it wraps, and the copy keeps the probe's method off the request being answered.
    """
    probe = copy.copy(request)
    probe.method = method
    response = CorsMiddleware(lambda _: HttpResponse()).add_response_headers(probe, HttpResponse())
    return {name.lower(): value for name, value in response.items() if name.lower().startswith("access-control-")}


_CorsReport = inline_serializer(name="CorsReport", fields={
    "origin": serializers.CharField(allow_null=True, help_text="The Origin header this request carried."),
    "allowed": serializers.BooleanField(help_text="Whether a browser would let that origin read the answer."),
    "headers": serializers.DictField(child=serializers.CharField(), help_text="CORS headers of this response."),
    "preflight": serializers.DictField(child=serializers.CharField(),
                                       help_text="CORS headers a preflight (OPTIONS) would get."),
})


class CorsTestView(PublicAPIView):
    @extend_schema(operation_id="cors_test", tags=["service"], summary="Echo the CORS decision",
                   responses={200: _CorsReport, **error_responses(429)})
    def get(self, request):
        actual = cors_headers(request, "GET")
        return Response({"origin": request.headers.get("Origin"),
                         "allowed": "access-control-allow-origin" in actual,
                         "headers": actual,
                         "preflight": cors_headers(request, "OPTIONS")})


# ---------------------------------------------------------------- OpenAPI

_generated_schemas: dict = {}


class SchemaView(SpectacularJSONAPIView):
    """GET /openapi.json, generated from the views' own annotations."""

    throttle_classes = [PublicRateThrottle]

    def _get_schema_response(self, request):
        # The schema depends only on the code, so each process generates it once
        # (tens to hundreds of milliseconds of CPU) instead of on every request.
        urlconf = getattr(request, "urlconf", None) or settings.ROOT_URLCONF
        if urlconf not in _generated_schemas:
            response = super()._get_schema_response(request)
            _generated_schemas[urlconf] = (response.data, dict(response.items()))
        data, headers = _generated_schemas[urlconf]
        return Response(data, headers=headers)


class HtmlPage:
    """An HTML page among the API views (the landing page, /docs).

    DRF answers OPTIONS with its metadata as a Response, which an HTML renderer would render
    with the page's own template and context missing (a 500): the Allow header DRF adds is the
    whole answer. Refusals (a 429, a 503) are rendered with templates/api_exception.html.
    """

    def options(self, request, *args, **kwargs):
        return HttpResponse()


class DocsView(HtmlPage, SpectacularSwaggerView):
    """GET /docs: Swagger UI served from our own static files (drf-spectacular-sidecar), no CDN."""

    throttle_classes = [PublicRateThrottle]
    url_name = "openapi-schema"
