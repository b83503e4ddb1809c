from django.db import models
from django.db.models import Q, Sum

from keys.models import TIERS

MODEL_TYPES = ("chat", "image", "speech", "embedding")
PROVIDER_TYPES = ("openai", "local")


class Provider(models.Model):
    """An upstream: any OpenAI-compatible HTTP API, or the in-process local models.

    The upstream secret is never stored: only the name of the environment
    variable that holds it.
    """

    name = models.SlugField(max_length=64, unique=True)
    type = models.CharField(max_length=16, choices=[(t, t) for t in PROVIDER_TYPES], default="openai")
    base_url = models.URLField(max_length=300, blank=True)
    api_key_env = models.CharField(max_length=100, blank=True,
                                   help_text="Name of the environment variable holding the upstream secret.")
    timeout = models.FloatField(default=60.0, help_text="Seconds to wait for the upstream.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(timeout__gt=0), name="provider_timeout_positive")]

    def __str__(self):
        return self.name


class AiModel(models.Model):
    """A model clients can name. ``tiers`` lists the tiers allowed to use it."""

    model_id = models.CharField("id", max_length=120, unique=True, help_text="The public id clients send.")
    type = models.CharField(max_length=16, choices=[(t, t) for t in MODEL_TYPES])
    owned_by = models.CharField(max_length=64)
    cost = models.PositiveIntegerField(help_text="Credits per request (images: per image).")
    tiers = models.JSONField(default=list, blank=True, help_text="Tiers allowed to use the model.")
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="models")
    upstream_model = models.CharField(max_length=120, blank=True, help_text="Name sent upstream; empty = id.")
    fallbacks = models.JSONField(default=list, blank=True,
                                 help_text="Names of further providers tried in order on upstream failure.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model_id"]
        verbose_name = "model"
        constraints = [models.CheckConstraint(condition=Q(type__in=MODEL_TYPES), name="aimodel_type_known")]

    def __str__(self):
        return self.model_id

    def allows_tier(self, tier: str) -> bool:
        return tier in self.tiers

    def access_map(self) -> dict:
        return {tier: tier in self.tiers for tier in TIERS}

    @property
    def upstream_name(self) -> str:
        return self.upstream_model or self.model_id

    def entry(self) -> dict:
        """The SPEC's model entry, without analytics."""
        return {"id": self.model_id, "object": "model", "type": self.type, "owned_by": self.owned_by,
                "cost": self.cost, "access": self.access_map()}


class UsageEventQuerySet(models.QuerySet):
    def for_model(self, model):
        return self.filter(model=model)

    def for_key(self, key):
        return self.filter(key=key)

    def since(self, moment):
        return self.filter(created_at__gte=moment)

    def totals(self) -> dict:
        row = self.aggregate(requests=models.Count("id"),
                             completed=models.Count("id", filter=Q(success=True)),
                             input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"),
                             credits=Sum("credits_charged"))
        row = {name: value or 0 for name, value in row.items()}
        row["failed"] = row["requests"] - row["completed"]
        return row


class UsageEvent(models.Model):
    """One request that was sent upstream.

    Written by the settlement of the request's charge (gateway.metering), in the
    same statement or transaction as the ledger row, so usage and credits cannot
    disagree. Inserting a row also updates ModelHourlyUsage and KeyDailyUsage:
    database triggers (migration 0002) do it inside the same statement, so the
    rollups can never drift from the events.
    """

    # No index of their own: usage_key_time and usage_model_time below lead with these columns and serve
    # every lookup by key or model, and each index less is one write less per metered request.
    key = models.ForeignKey("keys.ApiKey", on_delete=models.PROTECT, related_name="usage_events", db_index=False)
    model = models.ForeignKey(AiModel, on_delete=models.PROTECT, related_name="usage_events", db_index=False)
    operation = models.CharField(max_length=16, choices=[(t, t) for t in MODEL_TYPES])
    status = models.PositiveSmallIntegerField(help_text="HTTP status returned to the client.")
    success = models.BooleanField()
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    provider = models.CharField(max_length=64, blank=True, help_text="Provider that answered (or failed last).")
    created_at = models.DateTimeField(db_index=True)
    request_id = models.CharField(max_length=128, blank=True, default="",
                                  help_text="X-Request-ID of the request, copied from its ledger charge row.")

    objects = UsageEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["model", "created_at"], name="usage_model_time"),
            models.Index(fields=["key", "created_at"], name="usage_key_time"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.operation} {self.status}"


class RollupQuerySet(models.QuerySet):
    def totals(self) -> dict:
        row = self.aggregate(requests=Sum("requests"), completed=Sum("completed"), failed=Sum("failed"),
                             input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"),
                             credits=Sum("credits"))
        return {name: value or 0 for name, value in row.items()}


class _Rollup(models.Model):
    requests = models.BigIntegerField(default=0)
    completed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    credits = models.BigIntegerField(default=0)
    latency_ms_total = models.BigIntegerField(default=0)

    objects = RollupQuerySet.as_manager()

    class Meta:
        abstract = True


class ModelHourlyUsage(_Rollup):
    """Per-model, per-hour counters maintained by a trigger on UsageEvent inserts."""

    model = models.ForeignKey(AiModel, on_delete=models.CASCADE, related_name="hourly_usage")
    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "hour"], name="model_hour_unique")]
        indexes = [models.Index(fields=["hour"], name="model_hourly_hour")]


class KeyDailyUsage(_Rollup):
    """Per-key, per-model, per-day counters maintained by a trigger on UsageEvent inserts."""

    key = models.ForeignKey("keys.ApiKey", on_delete=models.CASCADE, related_name="daily_usage")
    model = models.ForeignKey(AiModel, on_delete=models.CASCADE, related_name="key_daily_usage")
    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "model", "day"], name="key_model_day_unique")]
        indexes = [models.Index(fields=["day"], name="key_daily_day")]
