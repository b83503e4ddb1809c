"""The model catalog, the statistics operations and /benchmark.

Each body is rendered by the serializer its schema declares, from the domain
values of models_catalog.analytics.

Keyless operations are limited per client address (PUBLIC_RATE_LIMIT).
The model list and a model's entry need no key; a call that sends one counts
against that key's rpm/rph instead (KeyOrAddressLimits).
/v1/statistic/key needs a key but is not metered: it costs no credits and does
not count against the key's rpm/rph (reading one's own usage must not eat the
budget it reports on); it shares the per-address limit of the public operations.
"""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from keys.auth import BearerKeyAuthentication, HasApiKey
from keys.limits import KeyRequestLimits, LimitState
from models_catalog import analytics
from models_catalog import serializers as s
from models_catalog.served import get_model
from utils_app import clock
from utils_app.errors import NotFound
from utils_app.limits import PublicAPIView, PublicRateThrottle
from utils_app.schema import error_responses


class KeyOrAddressLimits(BaseThrottle):
    """A call with a key counts against that key's rpm and rph, as a metered call does; one without,
    against its client address's PUBLIC_RATE_LIMIT.

    The SDKs send their key with every call, listing models included: counting those by address
    would refuse a client behind a shared address (an office, a NAT) for its neighbours' keyless calls.
    """

    def allow_request(self, request, view):
        if request.user is None:
            return PublicRateThrottle().allow_request(request, view)
        return KeyRequestLimits().allow_request(request, view)


class CatalogView(PublicAPIView):
    """The catalog's operations: no key needed; a key sent must be valid, and is what the call counts against."""

    authentication_classes = [BearerKeyAuthentication]
    permission_classes = [AllowAny]  # also what tells the schema that the key is optional
    throttle_classes = [KeyOrAddressLimits]
    # The key's windows once its call is counted (KeyRequestLimits), for the headers a metered answer has too.
    limit_state: LimitState | None = None

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.limit_state is not None and "X-RateLimit-Limit-Requests" not in response:
            for name, value in self.limit_state.headers().items():
                response[name] = value
        return response


class ModelListView(CatalogView):
    @extend_schema(
        operation_id="list_models", tags=["models"],
        summary="List the enabled models",
        description=("Default: the OpenAI-compatible `{\"object\": \"list\", \"data\": [...]}` without analytics "
                     "(the OpenAI SDKs' models.list() reads it). `web-view=true`: `{\"object\": \"list\", "
                     "\"success\": true, \"models\": [... with analytics], \"globalStats\": {...}}`. "
                     "No key needed; a key sent must be valid, and the call then counts against its "
                     "rpm/rph instead of the client address's limit."),
        parameters=[OpenApiParameter("web-view", OpenApiTypes.BOOL, OpenApiParameter.QUERY, required=False,
                                     description="true for the web view with analytics.")],
        responses={200: s.ModelListResponse, **error_responses(400, 401, 429, 500)},
    )
    def get(self, request):
        # A plain dict, not the QueryDict: DRF would read an empty "web-view=" from a QueryDict as absent.
        query = s.ModelsQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        if query.validated_data["web-view"]:
            listing = analytics.model_list_with_usage(now=clock.utcnow())
            return Response(s.ModelListResponse(listing, web_view=True).data)
        return Response(s.ModelListResponse(analytics.model_list(), web_view=False).data)


class ModelDetailView(CatalogView):
    @extend_schema(
        operation_id="retrieve_model", tags=["models"],
        summary="One enabled model",
        description=("The model's entry as in the list (the OpenAI SDKs' models.retrieve() reads it); 404 "
                     "`model_not_found` for an unknown or disabled id. A model's alias finds it too: the entry's "
                     "`id` is then the alias, and `root` the model's catalog id. No key needed, as for the list."),
        responses={200: s.ModelEntry, **error_responses(401, 404, 429, 500)},
    )
    def get(self, request, model_id):
        model = get_model(model_id)
        if model is None:
            raise NotFound(f"The model '{model_id}' does not exist or is not available.", code="model_not_found",
                           param="model")
        return Response(s.ModelEntry(model, context={"name": model_id}).data)


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
        statistics = analytics.key_statistics(key=request.user, now=clock.utcnow())
        return Response(s.KeyStatisticsResponse(statistics).data)


class GlobalStatisticsView(PublicAPIView):
    @extend_schema(
        operation_id="statistic_global", tags=["statistics"],
        summary="Usage of the whole service",
        description="Totals over all recorded usage and a per-day series for the last 30 UTC days. No key needed.",
        responses={200: s.GlobalStatisticsResponse, **error_responses(429, 500)},
    )
    def get(self, request):
        return Response(s.GlobalStatisticsResponse(analytics.global_statistics(now=clock.utcnow())).data)


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
        return Response(s.BenchmarkResponse(analytics.benchmark(now=clock.utcnow())).data)
