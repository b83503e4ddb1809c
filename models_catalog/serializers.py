"""The query of GET /v1/models and the response shapes of the catalog and statistics operations.

Response serializers describe the bodies for the OpenAPI schema; the bodies
themselves are built by models_catalog.analytics.
"""
from rest_framework import serializers

from keys.models import TIERS


class ModelsQuery(serializers.Serializer):
    """``web-view`` is not a Python name, so the field is declared under it in get_fields."""

    def get_fields(self):
        return {"web-view": serializers.BooleanField(
            required=False, default=False,
            help_text="true: the web view with per-model analytics and globalStats; false or absent: the "
                      "OpenAI-compatible list. Anything that is not a boolean is a 400.")}


# ---------------------------------------------------------------- response shapes (OpenAPI only)

class AccessMap(serializers.Serializer):
    def get_fields(self):
        return {tier: serializers.BooleanField() for tier in TIERS}


class ModelAnalytics(serializers.Serializer):
    totalRequests = serializers.IntegerField(help_text="completedRequests + failedRequests, all time.")
    completedRequests = serializers.IntegerField(help_text="Requests the upstream answered successfully.")
    failedRequests = serializers.IntegerField(help_text="Requests sent upstream that failed.")
    inputTokens = serializers.IntegerField()
    outputTokens = serializers.IntegerField()


class ModelEntry(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.CharField(help_text='Always "model".')
    type = serializers.ChoiceField(choices=["chat", "image", "speech", "embedding"])
    owned_by = serializers.CharField()
    cost = serializers.IntegerField(help_text="Credits per request (images: per image).")
    access = AccessMap(help_text="One boolean per tier: may a key of that tier use the model.")


class ModelEntryWithAnalytics(ModelEntry):
    analytics = ModelAnalytics()


class GlobalStats(serializers.Serializer):
    totalRequests = serializers.IntegerField()
    totalInputTokens = serializers.IntegerField()
    totalOutputTokens = serializers.IntegerField()


class ModelListResponse(serializers.Serializer):
    object = serializers.CharField(required=False, help_text='"list".')
    success = serializers.BooleanField(required=False, help_text="web view only.")
    models = ModelEntryWithAnalytics(many=True, required=False, help_text="web view only.")
    data = ModelEntry(many=True, required=False, help_text="default view only (OpenAI-compatible).")
    globalStats = GlobalStats(required=False, help_text="web view only.")


class UsageCounters(serializers.Serializer):
    totalRequests = serializers.IntegerField()
    completedRequests = serializers.IntegerField()
    failedRequests = serializers.IntegerField()
    inputTokens = serializers.IntegerField()
    outputTokens = serializers.IntegerField()
    creditsSpent = serializers.IntegerField()


class ModelUsage(UsageCounters):
    id = serializers.CharField()


class UsageBlock(UsageCounters):
    models = ModelUsage(many=True)


class KeySummary(serializers.Serializer):
    prefix = serializers.CharField()
    tier = serializers.CharField()
    credits = serializers.IntegerField()
    maxCredits = serializers.IntegerField()


class KeyStatisticsResponse(serializers.Serializer):
    object = serializers.CharField(help_text='"statistic.key".')
    key = KeySummary()
    allTime = UsageBlock()
    last24Hours = UsageBlock()
    generatedAt = serializers.DateTimeField()


class DayUsage(UsageCounters):
    date = serializers.DateField(help_text="A UTC day.")


class GlobalStatisticsResponse(serializers.Serializer):
    object = serializers.CharField(help_text='"statistic.global".')
    totals = UsageCounters(help_text="All recorded usage.")
    days = DayUsage(many=True, help_text="The last 30 UTC days, oldest first, today last; days without usage are 0.")
    generatedAt = serializers.DateTimeField()


class Latency(serializers.Serializer):
    p50 = serializers.IntegerField(allow_null=True)
    p95 = serializers.IntegerField(allow_null=True)


class BenchmarkModel(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.CharField()
    owned_by = serializers.CharField()
    requests = serializers.IntegerField()
    completedRequests = serializers.IntegerField()
    failedRequests = serializers.IntegerField()
    successRate = serializers.FloatField(allow_null=True, help_text="completed / requests; null without requests.")
    latencyMs = Latency(help_text="Nearest-rank percentiles over completed requests; null without any.")


class BenchmarkResponse(serializers.Serializer):
    object = serializers.CharField(help_text='"benchmark".')
    windowSeconds = serializers.IntegerField()
    to = serializers.DateTimeField()
    models = BenchmarkModel(many=True)

    def get_fields(self):
        # "from" is a Python keyword, so it joins the declared fields here.
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField()
        return fields
