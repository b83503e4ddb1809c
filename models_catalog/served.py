"""The catalog as the request path reads it: a snapshot of frozen values, built once from the rows.

The snapshot lives in process memory, so resolving a model and its pool costs no query
and no cache round trip. A save in this process drops it at once (signals below);
other processes pick a change up within CATALOG_CACHE_SECONDS.

It is shared by every request of the process, so what it holds cannot change under them:
no ORM instance is reachable from it, and nothing sets an attribute on it. What a request
learns about a deployment while it runs (a failure that disabled it, its health) lives in
gateway.deployment_health, keyed by the deployment's id.

The values keep the attribute names of the rows they come from (``pk``, ``model_id``,
``cost``, ``pool``, ``provider.timeout`` ...), so that code reading a model or a deployment
reads a snapshot's value and a row alike. A rule about one row is stated on the row's class
(models_catalog.models) and either applied here when the value is built or called from here.
"""
import threading
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from collections.abc import Mapping
from types import MappingProxyType
from typing import cast

from django.conf import settings
from django.db.models.signals import post_delete, post_save

from keys.models import TIERS, ApiKey
from models_catalog import models
from utils_app import clock, state
from utils_app import logging as request_log
from utils_app.errors import AccessDenied, InvalidRequest, NotFound

# Any variable with this prefix may hold an upstream secret, besides those UPSTREAM_SECRET_ENV_ALLOW names.
SECRET_ENV_PREFIX = "GATEWAY_UPSTREAM_"


def secret_env_allowed(name: str) -> bool:
    """Whether a provider may name this environment variable as its upstream secret.

    A provider's secret is sent to its base_url, so naming any variable would let
    whoever edits providers send SECRET_KEY or DATABASE_URL to an address of their
    choosing. Only variables meant for upstream secrets qualify. (The adapters ask at each call,
    so it lives here, on the request path's side of the catalog.)
    """
    return name in settings.UPSTREAM_SECRET_ENV_ALLOW or (
        name.startswith(SECRET_ENV_PREFIX) and len(name) > len(SECRET_ENV_PREFIX))


@dataclass(frozen=True, slots=True)
class ServedProvider:
    pk: int
    name: str
    type: str
    base_url: str
    api_key_env: str
    api_key_envs: tuple[str, ...]
    timeout: float
    api_version: str
    max_tokens_default: int
    responses_api: bool
    secret_variables: tuple[str, ...]  # Provider.secret_envs(), one deployment each

    @classmethod
    def of(cls, row: models.Provider) -> "ServedProvider":
        return cls(pk=row.pk, name=row.name, type=row.type, base_url=row.base_url, api_key_env=row.api_key_env,
                   api_key_envs=tuple(row.api_key_envs or ()), timeout=row.timeout, api_version=row.api_version,
                   max_tokens_default=row.max_tokens_default, responses_api=row.responses_api,
                   secret_variables=tuple(row.secret_envs()))

    @property
    def id(self) -> int:
        return self.pk

    def secret_envs(self) -> list[str]:
        return list(self.secret_variables)

    def secret_configured(self, variable: str) -> bool:
        # Read when asked, as the row does: a secret set after the snapshot was built counts.
        return models.secret_configured(self.type, variable)


@dataclass(frozen=True, slots=True)
class ServedDeployment:
    pk: int
    provider: ServedProvider
    provider_id: int
    secret_env: str
    upstream_model: str
    upstream_name: str  # Deployment.upstream_name: what the upstream knows the model by
    priority: int
    weight: int
    rpm: int
    disabled: bool  # in the database when the snapshot was read (gateway.deployment_health knows of later ones)
    # Its model, whose pool holds it: left out of comparisons and the repr, which would go round the loop.
    model: "ServedModel" = field(compare=False, repr=False)

    @property
    def id(self) -> int:
        return self.pk


@dataclass(frozen=True, slots=True)
class ServedModel:
    pk: int
    model_id: str
    type: str
    owned_by: str
    cost: int
    pricing_input: Decimal | None
    pricing_cached_input: Decimal | None
    pricing_output: Decimal | None
    max_output_tokens: int | None
    aliases: tuple[str, ...]
    tiers: tuple[str, ...]
    allowed_tiers: frozenset[str]  # AiModel.allows_tier, asked of each tier when the value was built
    routing: str
    allowed_fails: int
    cooldown_seconds: int
    created_at: datetime
    # The enabled deployments that serve it, by priority and id.
    pool: tuple[ServedDeployment, ...] = field(default=(), compare=False)

    @property
    def id(self) -> int:
        return self.pk

    def allows_tier(self, tier: str) -> bool:
        return tier in self.allowed_tiers

    def is_configured(self, deployments) -> bool:
        return models.is_configured(deployments)


def served_model(row: models.AiModel, deployments: list[models.Deployment],
                 providers: dict[int, ServedProvider]) -> ServedModel:
    """The frozen value of a model row and of the deployments of its pool (in the order given), which point
    back at it. ``providers`` maps each provider's id to its value, shared by every pool that lists it."""
    model = ServedModel(
        pk=row.pk, model_id=row.model_id, type=row.type, owned_by=row.owned_by, cost=row.cost,
        pricing_input=row.pricing_input, pricing_cached_input=row.pricing_cached_input,
        pricing_output=row.pricing_output, max_output_tokens=row.max_output_tokens,
        aliases=tuple(row.aliases) if isinstance(row.aliases, list) else (), tiers=tuple(row.tiers or ()),
        allowed_tiers=frozenset(tier for tier in TIERS if row.allows_tier(tier)), routing=row.routing,
        allowed_fails=row.allowed_fails, cooldown_seconds=row.cooldown_seconds, created_at=row.created_at)
    pool = tuple(ServedDeployment(
        pk=deployment.pk, provider=providers[deployment.provider_id], provider_id=deployment.provider_id,
        secret_env=deployment.secret_env, upstream_model=deployment.upstream_model,
        upstream_name=_upstream_name(deployment, row),
        priority=deployment.priority, weight=deployment.weight, rpm=deployment.rpm, disabled=deployment.disabled,
        model=model) for deployment in deployments)
    # The model and its deployments point at each other, so one of them is completed after both exist: here,
    # once, before anyone else can see the value (the way a frozen dataclass's own __init__ sets its fields).
    object.__setattr__(model, "pool", pool)
    return model


def _upstream_name(deployment: models.Deployment, model: models.AiModel) -> str:
    deployment.model = model  # the row read for this value: its model is at hand, not to be queried again
    return deployment.upstream_name


# What an upstream adapter takes: a snapshot's deployment on the request path, or a row read afresh where
# people steer deployments (the probes, the admin API and the staff pages).
AnyDeployment = ServedDeployment | models.Deployment


# ---------------------------------------------------------------- the snapshot

@dataclass(frozen=True, slots=True)
class Snapshot:
    models: Mapping[str, ServedModel]  # public id -> the enabled model, with its pool
    providers: Mapping[str, ServedProvider]  # name -> provider
    aliases: Mapping[str, ServedModel]  # alias -> the model it names
    loaded_at: float = field(default_factory=lambda: clock.monotonic())


_lock = threading.Lock()
_snapshot: Snapshot | None = None


def snapshot() -> Snapshot:
    global _snapshot
    current = _snapshot
    if current is not None and clock.monotonic() - current.loaded_at < settings.CATALOG_CACHE_SECONDS:
        return current
    with _lock:
        if _snapshot is current:
            _snapshot = _load_snapshot()
        return cast(Snapshot, _snapshot)  # loaded above, or by the thread that held the lock before


def _load_snapshot() -> Snapshot:
    """The enabled models, their pools and every provider, read in three queries and frozen."""
    providers = {row.pk: ServedProvider.of(row) for row in models.Provider.objects.all()}
    rows = {row.pk: row for row in models.AiModel.objects.filter(enabled=True)}
    pools: dict[int, list[models.Deployment]] = {pk: [] for pk in rows}
    for deployment in models.Deployment.objects.filter(model__enabled=True).order_by("priority", "id"):
        pools[deployment.model_id].append(deployment)
    by_id = {row.model_id: served_model(row, pools[pk], providers) for pk, row in rows.items()}
    aliases: dict[str, ServedModel] = {}
    for model in sorted(by_id.values(), key=lambda model: model.pk):
        for alias in model.aliases:
            # The rules keep names unique; should a row written past them repeat one, an id still wins over
            # an alias and the older model keeps it, so a name never changes meaning between loads.
            if isinstance(alias, str) and alias not in by_id:
                aliases.setdefault(alias, model)
    # Read-only views: a request can neither add a model nor swap one for all the others.
    return Snapshot(models=MappingProxyType(by_id),
                    providers=MappingProxyType({provider.name: provider for provider in providers.values()}),
                    aliases=MappingProxyType(aliases))


@state.on_reset
def invalidate(**kwargs) -> None:
    global _snapshot
    _snapshot = None


for _sender in (models.AiModel, models.Provider, models.Deployment):
    post_save.connect(invalidate, sender=_sender, dispatch_uid=f"catalog-save-{_sender.__name__}")
    post_delete.connect(invalidate, sender=_sender, dispatch_uid=f"catalog-delete-{_sender.__name__}")


def get_model(name: str) -> ServedModel | None:
    """The enabled model a client names, by its id or one of its aliases (None: none is served by that name).

    Read from the snapshot: no query. The model returned is the catalog's, whose ``model_id`` is what usage
    and ledger rows record; the answer names the model as the client did."""
    current = snapshot()
    return current.models.get(name) or current.aliases.get(name)


def resolve_model(*, key: ApiKey, operation: str, model_id: str) -> ServedModel:
    """The model a request names (its id or an alias), if it exists, is of the operation's type and the key's
    tier may use it: in the contract's order, each refusal a 4xx naming the model."""
    model = get_model(model_id)
    if model is None:
        raise NotFound(f"The model '{model_id}' does not exist or is not available.", code="model_not_found",
                       param="model")
    line = request_log.current()
    if line is not None:
        line.model = model.model_id  # from the catalog, never the client's text: a bounded metric label
    if model.type != operation:
        raise InvalidRequest(f"The model '{model_id}' serves {model.type}, not {operation}: choose a "
                             f"{operation} model (GET /v1/models lists each model's type).",
                             code="model_type_mismatch", param="model")
    if not key.can_use(model):
        raise AccessDenied(f"Keys of the '{key.tier}' tier may not use the model '{model_id}'.", param="model")
    return model
