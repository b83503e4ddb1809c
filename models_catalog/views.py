"""The model catalog, the statistics operations and /benchmark.

Each body is rendered by the serializer its schema declares, from the domain
values of models_catalog.analytics.

Keyless operations are limited per client address (PUBLIC_RATE_LIMIT).
/v1/statistic/key needs a key but is not metered: it costs no credits and does
not count against the key's rpm/rph (reading one's own usage must not eat the
budget it reports on); it shares the per-address limit of the public operations.
"""
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from keys.auth import BearerKeyAuthentication, HasApiKey
from models_catalog import analytics
from models_catalog import serializers as s
from utils_app.limits import PublicAPIView
from utils_app.schema import error_responses


class ModelListView(PublicAPIView):
    @extend_schema(
        operation_id="list_models", tags=["models"],
        summary="List the enabled models",
        description=("Default: the OpenAI-compatible `{\"object\": \"list\", \"data\": [...]}` without analytics "
                     "(the OpenAI SDKs' models.list() reads it). `web-view=true`: `{\"object\": \"list\", "
                     "\"success\": true, \"models\": [... with analytics], \"globalStats\": {...}}`. "
                     "No key needed."),
        parameters=[OpenApiParameter("web-view", OpenApiTypes.BOOL, OpenApiParameter.QUERY, required=False,
                                     description="true for the web view with analytics.")],
        responses={200: s.ModelListResponse, **error_responses(400, 429, 500)},
    )
    def get(self, request):
        # A plain dict, not the QueryDict: DRF would read an empty "web-view=" from a QueryDict as absent.
        query = s.ModelsQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        if query.validated_data["web-view"]:
            listing = analytics.model_list_with_usage(now=timezone.now())
            return Response(s.ModelListResponse(listing, web_view=True).data)
        return Response(s.ModelListResponse(analytics.model_list(), web_view=False).data)


class KeyStatisticsView(PublicAPIView):
    authentication_classes = [BearerKeyAuthentication]
    fresh_key_lookup = True
    permission_classes = [HasApiKey]

    @extend_schema(
        operation_id="statistic_key", tags=["statistics"],
        summary="The calling key's own usage",
        description=("Requests, completed, failed, tokens in/out and credits spent, in total and per model, "
                     "all time and over the last 24 hours. Not metered: costs no credits and does not count "
                     "against the key's rpm/rph; limited per client address like the keyless operations."),
        responses={200: s.KeyStatisticsResponse, **error_responses(401, 429, 500)},
    )
    def get(self, request):
        statistics = analytics.key_statistics(key=request.user, now=timezone.now())
        return Response(s.KeyStatisticsResponse(statistics).data)


class GlobalStatisticsView(PublicAPIView):
    @extend_schema(
        operation_id="statistic_global", tags=["statistics"],
        summary="Usage of the whole service",
        description="Totals over all recorded usage and a per-day series for the last 30 UTC days. No key needed.",
        responses={200: s.GlobalStatisticsResponse, **error_responses(429, 500)},
    )
    def get(self, request):
        return Response(s.GlobalStatisticsResponse(analytics.global_statistics(now=timezone.now())).data)


class BenchmarkView(PublicAPIView):
    @extend_schema(
        operation_id="benchmark", tags=["statistics"],
        summary="Per-model latency and success rate over the last hour",
        description=("From recorded usage: request count, success rate, and latency p50/p95 (nearest rank, "
                     "completed requests) per enabled model over the last hour. Cached for up to 10 seconds. "
                     "No key needed."),
        responses={200: s.BenchmarkResponse, **error_responses(429, 500)},
    )
    def get(self, request):
        return Response(s.BenchmarkResponse(analytics.benchmark(now=timezone.now())).data)
