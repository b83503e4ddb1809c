"""The query of GET /v1/models and the response serializers of the catalog and statistics operations.

The response serializers are both the bodies' OpenAPI schema and what renders them:
the views pass them the domain values of models_catalog.analytics (the catalog snapshot's
models, counters named as in models_catalog.usage.COUNTERS), and the wire names
(``totalRequests``, ``creditsSpent``, ...) live here only, each with its ``source``.
"""
from typing import Any

from rest_framework import serializers

from keys.models import TIERS


class ModelsQuery(serializers.Serializer):
    """``web-view`` is not a Python name, so the field is declared under it in get_fields."""

    def get_fields(self):
        return {"web-view": serializers.BooleanField(
            required=False, default=False,
            help_text="true: the web view with per-model analytics and globalStats; false or absent: the "
                      "OpenAI-compatible list. Anything that is not a boolean is a 400.")}


# ---------------------------------------------------------------- fields of the response bodies

class _Fixed:
    """A member whose value the body's format fixes (``"object": "list"``): nothing is read from the instance."""

    def __init__(self, value, **kwargs):
        self.value = value
        super().__init__(**kwargs)

    def get_attribute(self, instance):
        return self.value


class FixedText(_Fixed, serializers.CharField):
    pass


class FixedFlag(_Fixed, serializers.BooleanField):
    pass


class IsoDateTime(serializers.DateTimeField):
    """A moment as ``datetime.isoformat()`` writes it: ``+00:00``, where DRF would write ``Z``."""

    def to_representation(self, value):
        return value.isoformat()


class UnixTime(serializers.IntegerField):
    """A moment as whole seconds since the Unix epoch, as OpenAI's bodies give their ``created``."""

    def to_representation(self, value):
        return int(value.timestamp())


def _leading(fields: dict, *names: str) -> dict:
    """``fields`` with ``names`` first: a subclass's own members lead its body, before the inherited ones."""
    return {**{name: fields.pop(name) for name in names}, **fields}


# ---------------------------------------------------------------- GET /v1/models

# Comments, not docstrings, say what each serializer renders: drf-spectacular would publish a
# docstring as the schema's description.

class AccessMap(serializers.Serializer):
    # Renders a model's tiers as one boolean per tier, every tier named (the fields give the schema).
    def get_fields(self):
        return {tier: serializers.BooleanField() for tier in TIERS}

    def to_representation(self, tiers):
        # Eight fields per model on the hot web view; a membership test per tier gives the same body.
        return {tier: tier in tiers for tier in TIERS}


class ModelAnalytics(serializers.Serializer):
    # Renders a model's counters (usage.COUNTERS).
    totalRequests = serializers.IntegerField(source="requests",
                                             help_text="completedRequests + failedRequests, all time.")
    completedRequests = serializers.IntegerField(source="completed",
                                                 help_text="Requests the upstream answered successfully.")
    failedRequests = serializers.IntegerField(source="failed", help_text="Requests sent upstream that failed.")
    inputTokens = serializers.IntegerField(source="input_tokens")
    outputTokens = serializers.IntegerField(source="output_tokens")


class Pricing(serializers.Serializer):
    # Renders a model's token prices (members it has no price for are left out).
    input = serializers.FloatField(source="pricing_input", help_text="Credits per million input tokens.")
    cached_input = serializers.FloatField(source="pricing_cached_input", required=False,
                                          help_text="Credits per million cached input tokens (chat models).")
    output = serializers.FloatField(source="pricing_output", required=False,
                                    help_text="Credits per million output tokens, reasoning included (chat models).")

    def to_representation(self, model):
        return {name: float(getattr(model, field.source)) for name, field in self.fields.items()
                if getattr(model, field.source) is not None}


class ModelEntry(serializers.Serializer):
    # Renders a model of the catalog snapshot; the detail view passes the name it was asked for as
    # context["name"], which may be one of the model's aliases.
    id = serializers.CharField(source="model_id", help_text="The name asked for (the model list: the model's id).")
    object = FixedText("model", help_text='Always "model".')
    created = UnixTime(source="created_at", help_text="When the model was added to the catalog, as a Unix timestamp.")
    type = serializers.ChoiceField(choices=["chat", "image", "speech", "embedding"])
    owned_by = serializers.CharField()
    cost = serializers.IntegerField(help_text="Credits per request (images: per image); with pricing, a fee per "
                                              "request on top of the tokens' price.")
    access = AccessMap(source="tiers", help_text="One boolean per tier: may a key of that tier use the model.")
    pricing = Pricing(source="*", required=False,
                      help_text="Token prices, when the model has them: the price of a request is cost plus "
                                "each kind of token times its price per million, rounded up once.")
    aliases = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="Other names the model answers to, when it has any.")

    def get_fields(self):
        # "root" (the name vLLM and OpenAI's older model objects give the underlying model) is also a property
        # of every DRF field, so it is declared here rather than on the class.
        return {**super().get_fields(), "root": serializers.CharField(
            source="model_id", required=False,
            help_text="The catalog's id of the model, when it was asked for by one of its aliases.")}

    def to_representation(self, model):
        body = super().to_representation(model)
        if model.pricing_input is None:
            del body["pricing"]
        if not model.aliases:
            del body["aliases"]
        name = self.context.get("name") if self.parent is None else None
        if name is not None and name != model.model_id:
            body["id"] = name
        else:
            del body["root"]
        return body


class ModelEntryWithAnalytics(ModelEntry):
    # Renders a model with its all-time ``usage`` (analytics.ModelWithUsage).
    analytics = ModelAnalytics(source="usage")


class GlobalStats(serializers.Serializer):
    # Renders the counters of all recorded usage.
    totalRequests = serializers.IntegerField(source="requests")
    totalInputTokens = serializers.IntegerField(source="input_tokens")
    totalOutputTokens = serializers.IntegerField(source="output_tokens")


class ModelListResponse(serializers.Serializer):
    # Renders analytics.model_list() or model_list_with_usage(). One schema describes both
    # views; ``web_view`` keeps the members of one of them (DRF's documented way of choosing
    # fields per instance). Without it, as when the schema is generated, every member is there.
    DEFAULT_VIEW = ("object", "data")
    WEB_VIEW = ("object", "success", "models", "globalStats")

    object = FixedText("list", required=False, help_text='"list".')
    success = FixedFlag(True, required=False, help_text="web view only.")
    models = ModelEntryWithAnalytics(many=True, required=False, help_text="web view only.")
    # A field: DRF's metaclass takes it off the class, so .data stays the serializer's output.
    data: Any = ModelEntry(many=True, required=False, source="models",
                           help_text="default view only (OpenAI-compatible).")
    globalStats = GlobalStats(required=False, source="totals", help_text="web view only.")

    def __init__(self, *args, web_view: bool | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if web_view is not None:
            kept = self.WEB_VIEW if web_view else self.DEFAULT_VIEW
            for name in [name for name in self.fields.keys() if name not in kept]:
                self.fields.pop(name)


# ---------------------------------------------------------------- GET /v1/statistic/key and /global

class UsageCounters(serializers.Serializer):
    # Renders a block of counters (usage.COUNTERS).
    totalRequests = serializers.IntegerField(source="requests")
    completedRequests = serializers.IntegerField(source="completed")
    failedRequests = serializers.IntegerField(source="failed")
    inputTokens = serializers.IntegerField(source="input_tokens")
    outputTokens = serializers.IntegerField(source="output_tokens")
    creditsSpent = serializers.IntegerField(source="credits")


class ModelUsage(UsageCounters):
    # Renders a model's counters, with its public id as ``model``; the id leads the entry.
    id = serializers.CharField(source="model")

    def get_fields(self):
        return _leading(super().get_fields(), "id")


class UsageBlock(UsageCounters):
    # Renders the counters in total, with the per-model ones as ``models``.
    models = ModelUsage(many=True)


class KeySummary(serializers.Serializer):
    # Renders an ApiKey.
    prefix = serializers.CharField()
    tier = serializers.CharField()
    credits = serializers.IntegerField()
    maxCredits = serializers.IntegerField(source="max_credits")


class KeyStatisticsResponse(serializers.Serializer):
    # Renders analytics.key_statistics().
    object = FixedText("statistic.key", help_text='"statistic.key".')
    key = KeySummary()
    allTime = UsageBlock(source="all_time")
    last24Hours = UsageBlock(source="last_24_hours")
    generatedAt = IsoDateTime(source="generated_at")


class DayUsage(UsageCounters):
    # Renders a day's counters, with the day as ``date``.
    date = serializers.DateField(help_text="A UTC day.")

    def get_fields(self):
        return _leading(super().get_fields(), "date")


class GlobalStatisticsResponse(serializers.Serializer):
    # Renders analytics.global_statistics().
    object = FixedText("statistic.global", help_text='"statistic.global".')
    totals = UsageCounters(help_text="All recorded usage.")
    days = DayUsage(many=True, help_text="The last 30 UTC days, oldest first, today last; days without usage are 0.")
    generatedAt = IsoDateTime(source="generated_at")


# ---------------------------------------------------------------- GET /benchmark

class Latency(serializers.Serializer):
    p50 = serializers.IntegerField(allow_null=True)
    p95 = serializers.IntegerField(allow_null=True)


class BenchmarkModel(serializers.Serializer):
    # Renders an analytics.ModelBenchmark.
    id = serializers.CharField(source="model_id")
    type = serializers.CharField()
    owned_by = serializers.CharField()
    requests = serializers.IntegerField()
    completedRequests = serializers.IntegerField(source="completed")
    failedRequests = serializers.IntegerField(source="failed")
    successRate = serializers.FloatField(source="success_rate", allow_null=True,
                                         help_text="completed / requests; null without requests.")
    latencyMs = Latency(source="*", help_text="Nearest-rank percentiles over completed requests; null without any.")


class BenchmarkResponse(serializers.Serializer):
    # Renders an analytics.Benchmark.
    object = FixedText("benchmark", help_text='"benchmark".')
    windowSeconds = serializers.IntegerField(source="window_seconds")
    to = IsoDateTime(source="until")
    models = BenchmarkModel(many=True)

    def get_fields(self):
        # "from" is a Python keyword, so it joins the declared fields here, before "to" as in the body.
        fields = super().get_fields()
        return {"object": fields.pop("object"), "windowSeconds": fields.pop("windowSeconds"),
                "from": IsoDateTime(source="since"), **fields}
