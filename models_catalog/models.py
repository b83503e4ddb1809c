import os

from django.db import models
from django.db.models import Q, Sum

from keys.models import TIERS
from models_catalog.provider_types import DEFAULT_MAX_TOKENS, MODEL_TYPES, PROVIDER_TYPES

ROUTING_STRATEGIES = ("weighted", "latency")


class Provider(models.Model):
    """An upstream: an HTTP API spoken in its type's protocol, or the in-process local models.

    Upstream secrets are never stored: only the names of the environment variables that
    hold them. A provider with several secrets (``api_key_envs``) stands for one deployment
    per secret wherever a model lists it.
    """

    name = models.SlugField(max_length=64, unique=True)
    type = models.CharField(max_length=16, choices=[(t, t) for t in PROVIDER_TYPES], default="openai")
    base_url = models.URLField(max_length=300, blank=True)
    api_key_env = models.CharField(max_length=100, blank=True,
                                   help_text="Name of the environment variable holding the upstream secret.")
    api_key_envs = models.JSONField(default=list, blank=True,
                                    help_text="Names of several secret variables, each its own deployment "
                                              "(instead of api_key_env).")
    timeout = models.FloatField(default=60.0, help_text="Seconds to wait for the upstream.")
    api_version = models.CharField(max_length=40, blank=True, help_text="Azure: the api-version sent.")
    max_tokens_default = models.PositiveIntegerField(
        default=DEFAULT_MAX_TOKENS, help_text="Anthropic: max_tokens sent when the client gives none.")
    responses_api = models.BooleanField(default=True, help_text="openai and azure: the upstream serves OpenAI's "
                                                                "Responses API (off: translated to chat).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(timeout__gt=0), name="provider_timeout_positive")]

    def __str__(self):
        return self.name

    def secret_envs(self) -> list[str]:
        """The variables of its secrets, one deployment each; [""] for a provider without a secret."""
        if self.api_key_envs:
            return list(self.api_key_envs)
        return [self.api_key_env]

    def secret_configured(self, variable: str) -> bool:
        """Whether this process holds the secret in ``variable`` (one of secret_envs()), so that a call
        through it can succeed (``secret_configured`` below)."""
        return secret_configured(self.type, variable)


def secret_configured(provider_type: str, variable: str) -> bool:
    """Whether this process holds the secret in ``variable`` for a provider of ``provider_type``: the rule
    of Provider.secret_configured, which the catalog snapshot's providers (models_catalog.served) ask too.

    A local provider, or a deployment without a secret variable (an upstream without
    authentication), needs none. Only whether the variable is set is looked at, never its value;
    one a provider may not name (served.secret_env_allowed) is never read, so it counts as unset.
    """
    from models_catalog.served import secret_env_allowed  # the served module imports this one

    if provider_type == "local" or not variable:
        return True
    return secret_env_allowed(variable) and bool(os.environ.get(variable, "").strip())


def is_configured(deployments) -> bool:
    """Whether one of the deployments that serve a model (its pool) has its secret here: if none has, every
    call fails with a 502. AiModel.is_configured and the snapshot's models (models_catalog.served) ask it."""
    return any(deployment.provider.secret_configured(deployment.secret_env) for deployment in deployments)


class AiModel(models.Model):
    """A model clients can name, served by its pool of deployments. ``tiers`` lists the tiers allowed to use it."""

    model_id = models.CharField("id", max_length=120, unique=True, help_text="The public id clients send.")
    type = models.CharField(max_length=16, choices=[(t, t) for t in MODEL_TYPES])
    owned_by = models.CharField(max_length=64)
    cost = models.PositiveIntegerField(help_text="Credits per request (images: per image).")
    # Credits per million tokens (section 12 of the contract); empty: the model is priced by cost alone.
    pricing_input = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    pricing_cached_input = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    pricing_output = models.DecimalField(max_digits=18, decimal_places=6, null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True,
                                                    help_text="The output cap a token-priced request is held for "
                                                              "when it names none.")
    aliases = models.JSONField(default=list, blank=True, help_text="Other names the model answers to.")
    tiers = models.JSONField(default=list, blank=True, help_text="Tiers allowed to use the model.")
    routing = models.CharField(max_length=16, choices=[(r, r) for r in ROUTING_STRATEGIES], default="weighted",
                               help_text="How a deployment is picked within a priority: by weight, or by "
                                         "the lowest recent time to first byte.")
    allowed_fails = models.PositiveSmallIntegerField(
        default=3, help_text="Failures of a deployment within 60 s that cool it down.")
    cooldown_seconds = models.PositiveIntegerField(default=30, help_text="How long a cooled deployment gets no "
                                                                         "traffic.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model_id"]
        verbose_name = "model"
        constraints = [
            models.CheckConstraint(condition=Q(type__in=MODEL_TYPES), name="aimodel_type_known"),
            models.CheckConstraint(condition=Q(routing__in=ROUTING_STRATEGIES), name="aimodel_routing_known"),
            models.CheckConstraint(condition=Q(allowed_fails__gte=1), name="aimodel_allowed_fails_positive"),
        ]

    def __str__(self):
        return self.model_id

    def allows_tier(self, tier: str) -> bool:
        return tier in self.tiers

    def access_map(self) -> dict:
        return {tier: tier in self.tiers for tier in TIERS}

    def is_configured(self, deployments) -> bool:
        """Whether one of the deployments that serve it (its pool) has its secret here (``is_configured``)."""
        return is_configured(deployments)

    def entry(self) -> dict:
        """The SPEC's model entry, without analytics."""
        return {"id": self.model_id, "object": "model", "type": self.type, "owned_by": self.owned_by,
                "cost": self.cost, "access": self.access_map()}


class Deployment(models.Model):
    """One way to serve a model: a provider, one of its secrets, and the name that upstream knows the model by.

    Its health (failures, cooldowns, latency, rpm) lives in the shared cache (gateway.deployment_health);
    only whether it is disabled lives here, because a bad secret stays bad across restarts
    until a probe or a person says otherwise.
    """

    model = models.ForeignKey(AiModel, on_delete=models.CASCADE, related_name="deployments")
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="deployments")
    secret_env = models.CharField(max_length=100, blank=True,
                                  help_text="The variable holding this deployment's secret (one of the "
                                            "provider's); empty for a provider without one.")
    upstream_model = models.CharField(max_length=120, blank=True, help_text="Name sent upstream; empty = the "
                                                                           "model's id.")
    priority = models.PositiveSmallIntegerField(default=1, help_text="Lower is tried first.")
    weight = models.PositiveIntegerField(default=1, help_text="Share of traffic within its priority; 0 = only "
                                                              "as a last resort there.")
    rpm = models.PositiveIntegerField(default=0, help_text="Requests per minute sent to it, fleet-wide (0 = "
                                                           "no cap).")
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    # A person's disable sticks: probes re-enable only what the router disabled for a refused secret.
    disabled_by_hand = models.BooleanField(default=False)

    class Meta:
        ordering = ["model", "priority", "id"]
        constraints = [
            models.UniqueConstraint(fields=["model", "provider", "secret_env", "upstream_model"],
                                    name="deployment_once_per_model"),
            models.CheckConstraint(condition=Q(priority__gte=1), name="deployment_priority_positive"),
        ]

    def __str__(self):
        return f"{self.model_id}: {self.provider_id} #{self.pk}"

    @property
    def upstream_name(self) -> str:
        return self.upstream_model or self.model.model_id

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None


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
    # The part of input_tokens the upstream served from its prompt cache (OpenAI's cached_tokens,
    # Anthropic's cache reads, Gemini's cachedContentTokenCount).
    cached_tokens = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(default=0)
    provider = models.CharField(max_length=64, blank=True, help_text="Provider that answered (or failed last).")
    # The deployment that answered (or failed last); no foreign key, so usage outlives catalog edits
    # and the insert checks nothing more.
    deployment_id = models.PositiveIntegerField(null=True, blank=True)
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

    model = models.ForeignKey(AiModel, on_delete=models.CASCADE, related_name="hourly_usage", db_index=False)
    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "hour"], name="model_hour_unique")]
        indexes = [models.Index(fields=["hour"], name="model_hourly_hour")]


class KeyDailyUsage(_Rollup):
    """Per-key, per-model, per-day counters maintained by a trigger on UsageEvent inserts."""

    key = models.ForeignKey("keys.ApiKey", on_delete=models.CASCADE, related_name="daily_usage", db_index=False)
    model = models.ForeignKey(AiModel, on_delete=models.CASCADE, related_name="key_daily_usage")
    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "model", "day"], name="key_model_day_unique")]
        indexes = [models.Index(fields=["day"], name="key_daily_day")]
