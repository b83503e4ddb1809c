"""The model catalog: loading it from a TOML file, and the cached snapshot the request path reads.

The snapshot lives in process memory, so resolving a model costs no query and no
cache round trip. A save in this process drops it at once (signals below); other
processes pick a change up within CATALOG_CACHE_SECONDS.
"""
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from keys.models import TIERS
from models_catalog.models import MODEL_TYPES, PROVIDER_TYPES, AiModel, Provider
from utils_app.env import ENV_NAME_RE

DEFAULT_CATALOG = Path(__file__).resolve().parent / "default_catalog.toml"
# Any variable with this prefix may hold an upstream secret, besides those UPSTREAM_SECRET_ENV_ALLOW names.
SECRET_ENV_PREFIX = "GATEWAY_UPSTREAM_"


def secret_env_allowed(name: str) -> bool:
    """Whether a provider may name this environment variable as its upstream secret.

    A provider's secret is sent to its base_url, so naming any variable would let
    whoever edits providers send SECRET_KEY or DATABASE_URL to an address of their
    choosing. Only variables meant for upstream secrets qualify.
    """
    return name in settings.UPSTREAM_SECRET_ENV_ALLOW or (
        name.startswith(SECRET_ENV_PREFIX) and len(name) > len(SECRET_ENV_PREFIX))


def secret_env_problem(name: str) -> str | None:
    """Why ``name`` cannot be a provider's secret variable (a sentence), or None when it can (empty: no secret)."""
    if not name:
        return None
    if not ENV_NAME_RE.match(name):
        return "Enter the name of an environment variable (letters, digits, _), not the secret itself."
    if not secret_env_allowed(name):
        allowed = "".join(f"{item}, " for item in settings.UPSTREAM_SECRET_ENV_ALLOW)
        return (f"{name} is not an upstream secret variable: use {allowed}or a name starting with "
                f"{SECRET_ENV_PREFIX} (UPSTREAM_SECRET_ENV_ALLOW lists more names).")
    return None


class CatalogError(ValueError):
    """A catalog file that cannot be loaded; the message names the entry and field."""


# ---------------------------------------------------------------- cached snapshot

@dataclass(frozen=True)
class Snapshot:
    models: dict  # public id -> AiModel (enabled only, provider attached)
    providers: dict  # name -> Provider
    loaded_at: float = field(default_factory=time.monotonic)

    def providers_for(self, model: AiModel) -> list[Provider]:
        """The model's provider followed by its fallbacks, in the order they are tried."""
        chain = [model.provider]
        chain += [self.providers[name] for name in model.fallbacks if name in self.providers]
        return chain


_lock = threading.Lock()
_snapshot: Snapshot | None = None


def snapshot() -> Snapshot:
    global _snapshot
    current = _snapshot
    if current is not None and time.monotonic() - current.loaded_at < settings.CATALOG_CACHE_SECONDS:
        return current
    with _lock:
        if _snapshot is current:
            providers = {p.name: p for p in Provider.objects.all()}
            by_pk = {p.pk: p for p in providers.values()}
            models = {}
            for model in AiModel.objects.filter(enabled=True):
                model.provider = by_pk[model.provider_id]
                models[model.model_id] = model
            _snapshot = Snapshot(models=models, providers=providers)
        return _snapshot


def invalidate(**kwargs) -> None:
    global _snapshot
    _snapshot = None


for _sender in (AiModel, Provider):
    post_save.connect(invalidate, sender=_sender, dispatch_uid=f"catalog-save-{_sender.__name__}")
    post_delete.connect(invalidate, sender=_sender, dispatch_uid=f"catalog-delete-{_sender.__name__}")


def get_model(model_id: str) -> AiModel | None:
    return snapshot().models.get(model_id)


# ---------------------------------------------------------------- TOML catalog files

def _require(entry: dict, name: str, kind, where: str, *, required: bool = True, default=None):
    if name not in entry:
        if required:
            raise CatalogError(f"{where}: missing field '{name}'")
        return default
    value = entry[name]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise CatalogError(f"{where}: field '{name}' must be {expected}, got {value!r}")
    return value


def parse_catalog(text: str) -> tuple[list[dict], list[dict]]:
    """Validate a catalog document; returns (providers, models) as plain field dicts."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"not valid TOML: {exc}") from None
    unknown = set(document) - {"providers", "models"}
    if unknown:
        raise CatalogError(f"unknown top-level section(s): {', '.join(sorted(unknown))}")

    providers = []
    raw_providers = _require(document, "providers", dict, "catalog")
    for name, entry in raw_providers.items():
        where = f"[providers.{name}]"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: must be a table")
        kind = _require(entry, "type", str, where, required=False, default="openai")
        if kind not in PROVIDER_TYPES:
            raise CatalogError(f"{where}: field 'type' must be one of {', '.join(PROVIDER_TYPES)}, got {kind!r}")
        base_url = _require(entry, "base_url", str, where, required=kind != "local", default="")
        if kind != "local" and not base_url.startswith(("http://", "https://")):
            raise CatalogError(f"{where}: field 'base_url' must be an http(s) URL, got {base_url!r}")
        timeout = _require(entry, "timeout", (int, float), where, required=False, default=60)
        if isinstance(timeout, bool) or timeout <= 0:
            raise CatalogError(f"{where}: field 'timeout' must be a positive number of seconds")
        extra = set(entry) - {"type", "base_url", "api_key_env", "timeout"}
        if extra:
            raise CatalogError(f"{where}: unknown field(s): {', '.join(sorted(extra))}")
        api_key_env = _require(entry, "api_key_env", str, where, required=False, default="")
        problem = secret_env_problem(api_key_env)
        if problem:
            raise CatalogError(f"{where}: field 'api_key_env': {problem}")
        providers.append({"name": name, "type": kind, "base_url": base_url.rstrip("/"),
                          "api_key_env": api_key_env, "timeout": float(timeout)})
    names = {p["name"] for p in providers}

    models = []
    seen = set()
    for index, entry in enumerate(_require(document, "models", list, "catalog")):
        where = f"[[models]] #{index + 1}"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: must be a table")
        model_id = _require(entry, "id", str, where)
        where = f"[[models]] #{index + 1} (id {model_id!r})"
        if model_id in seen:
            raise CatalogError(f"{where}: duplicate id")
        seen.add(model_id)
        model_type = _require(entry, "type", str, where)
        if model_type not in MODEL_TYPES:
            raise CatalogError(f"{where}: field 'type' must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
        cost = _require(entry, "cost", int, where)
        if cost < 0:
            raise CatalogError(f"{where}: field 'cost' must be 0 or more, got {cost}")
        access = _require(entry, "access", list, where)
        for tier in access:
            if tier not in TIERS:
                raise CatalogError(f"{where}: field 'access' names unknown tier {tier!r}")
        provider = _require(entry, "provider", str, where)
        if provider not in names:
            raise CatalogError(f"{where}: field 'provider' names unknown provider {provider!r}")
        fallbacks = _require(entry, "fallbacks", list, where, required=False, default=[])
        for fallback in fallbacks:
            if fallback not in names:
                raise CatalogError(f"{where}: field 'fallbacks' names unknown provider {fallback!r}")
        extra = set(entry) - {"id", "type", "owned_by", "cost", "access", "provider", "upstream_model",
                              "fallbacks", "enabled"}
        if extra:
            raise CatalogError(f"{where}: unknown field(s): {', '.join(sorted(extra))}")
        models.append({
            "model_id": model_id, "type": model_type, "cost": cost, "provider": provider,
            "owned_by": _require(entry, "owned_by", str, where),
            "tiers": [tier for tier in TIERS if tier in access],
            "upstream_model": _require(entry, "upstream_model", str, where, required=False, default=""),
            "fallbacks": list(fallbacks),
            "enabled": _require(entry, "enabled", bool, where, required=False, default=True),
        })
    return providers, models


def load_catalog(path: Path | None = None) -> dict:
    """Upsert providers and models from a catalog file; returns what was created/updated/unchanged."""
    path = Path(path) if path else DEFAULT_CATALOG
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"cannot read {path.name}: {exc}") from None
    providers, models = parse_catalog(text)
    report = {"created": [], "updated": [], "unchanged": []}
    with transaction.atomic():
        by_name = {}
        for fields in providers:
            name = fields.pop("name")
            by_name[name], outcome = _upsert(Provider, {"name": name}, fields)
            report[outcome].append(f"provider {name}")
        for fields in models:
            model_id = fields.pop("model_id")
            fields["provider"] = by_name[fields["provider"]]
            _, outcome = _upsert(AiModel, {"model_id": model_id}, fields)
            report[outcome].append(f"model {model_id}")
    invalidate()
    return report


def _upsert(model_class, lookup: dict, fields: dict):
    obj = model_class.objects.filter(**lookup).first()
    if obj is None:
        return model_class.objects.create(**lookup, **fields), "created"
    changed = [name for name, value in fields.items() if getattr(obj, name) != value]
    if not changed:
        return obj, "unchanged"
    for name in changed:
        setattr(obj, name, fields[name])
    obj.save()
    return obj, "updated"
