"""The model catalog: its one rule checker and loading it from a TOML file.

The rules of a provider and of a model's pool of deployments are checked here once,
by ``check_provider`` and ``check_pool``, for the file loader, the staff forms and the
admin API alike: each refusal is a CatalogError naming the entry and the field.

The cached snapshot the request path reads (``snapshot``, ``get_model``, ``invalidate``)
is models_catalog.served's, named here too.
"""
import re
import tomllib
from decimal import Decimal
from typing import Any, cast
from pathlib import Path

from django.conf import settings
from django.db import transaction

from keys.models import TIERS
from models_catalog.models import ROUTING_STRATEGIES, AiModel, Deployment, Provider
from models_catalog.provider_types import MODEL_TYPES, TYPES
# The snapshot the request path reads lives beside its frozen values, and so does the rule on secret variables
# an adapter applies at each call; their names are the catalog's too.
from models_catalog.served import (  # noqa: F401
    SECRET_ENV_PREFIX,
    Snapshot,
    get_model,
    invalidate,
    secret_env_allowed,
    snapshot,
)
from utils_app.env import ENV_NAME_RE

DEFAULT_CATALOG = Path(__file__).resolve().parent / "default_catalog.toml"
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
    """A catalog entry that breaks a rule; ``field`` names the field at fault (None: the entry as a whole)."""

    def __init__(self, message: str, *, where: str = "", field: str | None = None):
        self.where, self.field, self.reason = where, field, message
        prefix = f"{where}: " if where else ""
        # "field 'cost' must be int", but "field 'api_key_env': SECRET_KEY is not …" for a whole sentence.
        named = (f"field '{field}'" + (": " if message[:1].isupper() else " ")) if field else ""
        super().__init__(f"{prefix}{named}{message}")


# ---------------------------------------------------------------- the rules

PROVIDER_FIELDS = {"type", "base_url", "api_key_env", "api_key_envs", "timeout", "api_version", "max_tokens_default",
                   "responses_api"}
MODEL_FIELDS = {"id", "type", "owned_by", "cost", "access", "enabled", "routing", "allowed_fails", "cooldown_seconds",
                "provider", "upstream_model", "fallbacks", "deployments", "pricing", "max_output_tokens", "aliases"}
DEPLOYMENT_FIELDS = {"provider", "upstream_model", "priority", "weight", "rpm"}
DEPLOYMENT_DEFAULTS = {"upstream_model": "", "priority": 1, "weight": 1, "rpm": 0}


def _value(entry: dict, name: str, kind, where: str, *, required: bool = True, default=None):
    if name not in entry or entry[name] is None and not required:
        if required:
            raise CatalogError("is missing", where=where, field=name)
        return default
    value = entry[name]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise CatalogError(f"must be {expected}, got {value!r}", where=where, field=name)
    return value


# The columns' limits: a value past them would pass here and fail in the database.
SMALL, LARGE = 32767, 2**31 - 1


def _whole(entry: dict, name: str, where: str, *, default: int, minimum: int, maximum: int = LARGE) -> int:
    value = _value(entry, name, int, where, required=False, default=default)
    if value < minimum:
        raise CatalogError(f"must be {minimum} or more, got {value}", where=where, field=name)
    if value > maximum:
        raise CatalogError(f"must be {maximum} or less, got {value}", where=where, field=name)
    return value


def _text(entry: dict, name: str, where: str, *, max_length: int, required: bool = True) -> str:
    value = _value(entry, name, str, where, required=required, default="").strip()
    if required and not value:
        raise CatalogError("must not be empty", where=where, field=name)
    if len(value) > max_length:
        raise CatalogError(f"must be at most {max_length} characters", where=where, field=name)
    return value


def _unknown(entry: dict, known: set, where: str) -> None:
    extra = set(entry) - known
    if extra:
        raise CatalogError(f"unknown field(s): {', '.join(sorted(extra))}", where=where)


def check_provider(name: str, entry: dict, *, where: str = "") -> dict:
    """A provider's fields checked and normalised: the Provider columns, ``name`` included."""
    where = where or f"[providers.{name}]"
    if not isinstance(entry, dict):
        raise CatalogError("must be a table", where=where)
    _unknown(entry, PROVIDER_FIELDS, where)
    kind_name = _value(entry, "type", str, where, required=False, default="openai") or "openai"
    kind = TYPES.get(kind_name)
    if kind is None:
        raise CatalogError(f"must be one of {', '.join(TYPES)}, got {kind_name!r}", where=where, field="type")
    base_url = _value(entry, "base_url", str, where, required=False, default="").strip().rstrip("/")
    if kind.takes_base_url:
        base_url = base_url or kind.default_base_url
        if not base_url:
            raise CatalogError(f"is required for a provider of type {kind.name}", where=where, field="base_url")
        if not base_url.startswith(("http://", "https://")):
            raise CatalogError(f"must be an http(s) URL, got {base_url!r}", where=where, field="base_url")
    elif base_url:
        raise CatalogError(f"is not used by a provider of type {kind.name}", where=where, field="base_url")
    timeout = _value(entry, "timeout", (int, float), where, required=False, default=60)
    if isinstance(timeout, bool) or timeout <= 0:
        raise CatalogError("must be a positive number of seconds", where=where, field="timeout")
    single = _value(entry, "api_key_env", str, where, required=False, default="").strip()
    several = _value(entry, "api_key_envs", list, where, required=False, default=[])
    if single and several:
        raise CatalogError("a provider has either api_key_env or api_key_envs, not both", where=where,
                           field="api_key_envs")
    for variable in several:
        if not isinstance(variable, str) or not variable.strip():
            raise CatalogError(f"must list variable names, got {variable!r}", where=where, field="api_key_envs")
    several = [variable.strip() for variable in several]
    if len(set(several)) != len(several):
        raise CatalogError("names a variable twice", where=where, field="api_key_envs")
    for variable, field_name in [(single, "api_key_env")] + [(v, "api_key_envs") for v in several]:
        problem = secret_env_problem(variable)
        if problem:
            raise CatalogError(problem, where=where, field=field_name)
    if not kind.takes_secrets and (single or several):
        raise CatalogError(f"a provider of type {kind.name} takes no secret", where=where,
                           field="api_key_envs" if several else "api_key_env")
    for particular in ("api_version", "max_tokens_default"):
        if particular in entry and particular not in kind.fields:
            raise CatalogError(f"is not used by a provider of type {kind.name}", where=where, field=particular)
    api_version = _value(entry, "api_version", str, where, required=False, default="").strip()
    max_tokens_default = _whole(entry, "max_tokens_default", where, default=Provider.max_tokens_default.field.default,
                                minimum=1)
    # Whether the upstream serves OpenAI's Responses API (CONTRACT section 9): an OpenAI-compatible server
    # with chat completions only says false, and /v1/responses is then translated to chat for it.
    if "responses_api" in entry and kind.name not in ("openai", "azure"):
        raise CatalogError(f"is not used by a provider of type {kind.name}", where=where, field="responses_api")
    responses_api = _value(entry, "responses_api", bool, where, required=False, default=True)
    return {"name": name, "type": kind.name, "base_url": base_url, "api_key_env": single, "api_key_envs": several,
            "timeout": float(timeout), "api_version": api_version, "max_tokens_default": max_tokens_default,
            "responses_api": responses_api}


# One path segment of a model's name where the URL carries it (ProviderType.model_in_path): Google's model
# and tuned-model ids (gemini-2.5-flash, text-embedding-004, my-model-7) and Azure's deployment names are
# letters, digits, '.', '_' and '-'. Nothing else: no '/', '?', '#', '%', backslash or space, and no "..".
PATH_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def model_path_problem(name: str, kind) -> str | None:
    """Why ``name`` cannot be the upstream model of a provider of type ``kind`` (a sentence), or None."""
    if not kind.model_in_path:
        return None
    collection, segment = name.split("/", 1) if "/" in name else (None, name)
    if (PATH_SEGMENT.fullmatch(segment) and ".." not in segment
            and (collection is None or collection in kind.model_collections)):
        return None
    under = "".join(f" or {collection}/<name>" for collection in kind.model_collections)
    return (f"must be one name of letters, digits, '.', '_' and '-' without '..'{under}, since the URL of a "
            f"{kind.name} provider carries it; got {name!r}")


def check_pool(model_id: str, model_type: str, deployments: list, providers: dict, *, where: str = "") -> list[dict]:
    """A model's deployments checked and normalised, in the order given.

    ``providers`` maps each known provider name to its type name. Each entry becomes
    ``{"provider", "upstream_model", "priority", "weight", "rpm"}``; the expansion into one
    deployment per secret happens when they are saved.
    """
    where = where or f"model {model_id!r}"
    if not isinstance(deployments, list) or not deployments:
        raise CatalogError("a model needs at least one deployment", where=where, field="deployments")
    checked, seen = [], set()
    for index, entry in enumerate(deployments):
        at = f"{where}, deployment #{index + 1}"
        if not isinstance(entry, dict):
            raise CatalogError("must be a table", where=at)
        _unknown(entry, DEPLOYMENT_FIELDS, at)
        provider = _value(entry, "provider", str, at)
        if provider not in providers:
            raise CatalogError(f"names unknown provider {provider!r}", where=at, field="provider")
        kind = TYPES[providers[provider]]
        if not kind.serves(model_type):
            raise CatalogError(f"provider {provider!r} is of type {kind.name}, which cannot serve {model_type} "
                               f"models (it serves {', '.join(kind.operations)})", where=at, field="provider")
        upstream_model = _text(entry, "upstream_model", at, max_length=120, required=False)
        problem = model_path_problem(upstream_model or model_id, kind)
        if problem:
            if not upstream_model:
                problem = f"is empty, so the model's id is sent instead, and it {problem}"
            raise CatalogError(problem, where=at, field="upstream_model")
        pair = (provider, upstream_model or model_id)
        if pair in seen:
            raise CatalogError(f"provider {provider!r} with upstream model {pair[1]!r} is listed twice",
                               where=at, field="upstream_model" if upstream_model else "provider")
        seen.add(pair)
        checked.append({"provider": provider, "upstream_model": upstream_model,
                        "priority": _whole(entry, "priority", at, default=1, minimum=1, maximum=SMALL),
                        "weight": _whole(entry, "weight", at, default=1, minimum=0),
                        "rpm": _whole(entry, "rpm", at, default=0, minimum=0)})
    return checked


def _cost(entry: dict, where: str) -> int:
    cost = _value(entry, "cost", int, where)
    if cost < 0:
        raise CatalogError(f"must be 0 or more, got {cost}", where=where, field="cost")
    if cost > LARGE:
        raise CatalogError(f"must be {LARGE} or less, got {cost}", where=where, field="cost")
    return cost


# ---------------------------------------------------------------- token prices and aliases

# Which token prices each model type may carry (credits per million tokens); image and speech models are
# priced by their per-request cost alone. An embedding has no output and no cached input.
PRICED_TOKENS = {"chat": ("input", "cached_input", "output"), "embedding": ("input",)}
# The columns' shape (DecimalField(max_digits=18, decimal_places=6)): a price past it would fail in the database.
PRICE_PLACES, PRICE_LIMIT = 6, Decimal(10) ** 12
NAME_MAX_LENGTH = 120  # a model's id column, which an alias stands in for
_UNSENDABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


def _price(value: Any, where: str, field: str) -> Decimal:
    """A TOML number (or a form's Decimal) as an exact Decimal: 2.5 stays 2.5, never 2.4999…"""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise CatalogError(f"must be a number, got {value!r}", where=where, field=field)
    price = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    if not price.is_finite() or price < 0:
        raise CatalogError(f"must be a number of 0 or more, got {value!r}", where=where, field=field)
    if price >= PRICE_LIMIT:
        raise CatalogError(f"must be less than {PRICE_LIMIT:,} credits per million tokens, got {value!r}",
                           where=where, field=field)
    if -cast(int, price.normalize().as_tuple().exponent) > PRICE_PLACES:
        raise CatalogError(f"may have at most {PRICE_PLACES} decimal places, got {value!r}", where=where, field=field)
    return price


def check_pricing(entry: dict, model_type: str, where: str) -> dict:
    """A model's ``pricing`` and ``max_output_tokens`` checked: the AiModel columns they fill (None: unpriced)."""
    pricing = _value(entry, "pricing", dict, where, required=False, default=None)
    cap = _value(entry, "max_output_tokens", int, where, required=False, default=None)
    columns: dict[str, Any] = {"pricing_input": None, "pricing_cached_input": None, "pricing_output": None,
                               "max_output_tokens": cap}
    if cap is not None:
        if model_type != "chat":
            raise CatalogError(f"is for chat models only, not {model_type}", where=where, field="max_output_tokens")
        if not 1 <= cap <= LARGE:
            raise CatalogError(f"must be between 1 and {LARGE}, got {cap}", where=where, field="max_output_tokens")
    if pricing is None:
        return columns
    kinds = PRICED_TOKENS.get(model_type)
    if kinds is None:
        raise CatalogError(f"{model_type} models are priced by their cost per request alone", where=where,
                           field="pricing")
    extra = set(pricing) - set(kinds)
    if extra:
        only = "input only" if kinds == ("input",) else "input, cached_input and output"
        raise CatalogError(f"{model_type} models price {only}; unknown or not allowed: {', '.join(sorted(extra))}",
                           where=where, field="pricing")
    for required in ("input", "output") if "output" in kinds else ("input",):
        if required not in pricing:
            raise CatalogError("is missing", where=where, field=f"pricing.{required}")
    prices = {kind: _price(pricing[kind], where, f"pricing.{kind}") for kind in kinds if kind in pricing}
    columns["pricing_input"] = prices["input"]
    if model_type == "chat":
        columns["pricing_cached_input"] = prices.get("cached_input", prices["input"])
        columns["pricing_output"] = prices["output"]
        if cap is None:
            raise CatalogError("is required for a priced chat model (a request that names no output cap is held for "
                               "it)", where=where, field="max_output_tokens")
    return columns


def check_aliases(entry: dict, model_id: str, where: str) -> list[str]:
    """A model's ``aliases``: exact names, each once, none its own id (the catalog-wide rule is check_names)."""
    aliases = _value(entry, "aliases", list, where, required=False, default=[])
    for alias in aliases:
        if not isinstance(alias, str) or not alias or alias != alias.strip():
            raise CatalogError(f"must list model names without surrounding spaces, got {alias!r}", where=where,
                               field="aliases")
        if len(alias) > NAME_MAX_LENGTH:
            raise CatalogError(f"names may be at most {NAME_MAX_LENGTH} characters, got {alias!r}", where=where,
                               field="aliases")
        if _UNSENDABLE.search(alias):
            # A client could never send such a name, and PostgreSQL's jsonb cannot hold a NUL (a 500 on saving).
            raise CatalogError(f"names may not hold control characters or lone surrogates, got {alias!r}",
                               where=where, field="aliases")
        if alias == model_id:
            raise CatalogError(f"{alias!r} is the model's own id", where=where, field="aliases")
    if len(set(aliases)) != len(aliases):
        raise CatalogError("names an alias twice", where=where, field="aliases")
    return list(aliases)


def check_names(models: list[tuple[str, list[str]]], taken: dict[str, str] | None = None) -> None:
    """Every model id and alias names one model only: ``models`` are (id, aliases) pairs, ``taken`` maps the
    names of the models checked elsewhere (the database's others) to their ids. The error names the alias."""
    owners = dict(taken or {})
    for model_id, _ in models:
        owner = owners.get(model_id)
        if owner is not None and owner != model_id:
            raise CatalogError(f"is already an alias of model {owner!r}", where=f"model {model_id!r}", field="id")
        owners[model_id] = model_id
    for model_id, aliases in models:
        for alias in aliases:
            owner = owners.setdefault(alias, model_id)
            if owner != model_id:
                what = "the id" if owner == alias else "an alias"
                raise CatalogError(f"{alias!r} is already {what} of model {owner!r}", where=f"model {model_id!r}",
                                   field="aliases")


def names_in_use(models) -> dict[str, str]:
    """Each id and alias of the stored ``models`` (a QuerySet of AiModel: those not being checked), mapped to its
    model's id."""
    names: dict[str, str] = {}
    for model_id, aliases in models.values_list("model_id", "aliases"):
        names[model_id] = model_id
        for alias in aliases if isinstance(aliases, list) else []:
            names.setdefault(alias, model_id)
    return names


def catalog_pricing(model: AiModel) -> dict | None:
    """A model's token prices as the catalog file writes them (None: unpriced): what the staff form hands the
    checker, and what the model list shows."""
    if model.pricing_input is None:
        return None
    pricing = {"input": model.pricing_input}
    if model.pricing_cached_input is not None:
        pricing["cached_input"] = model.pricing_cached_input
    if model.pricing_output is not None:
        pricing["output"] = model.pricing_output
    return pricing


def check_model(entry: dict, providers: dict, *, where: str) -> dict:
    """A model entry checked and normalised: the AiModel columns plus its ``deployments``.

    The older single-provider form (``provider``, ``upstream_model``, ``fallbacks``) means one
    deployment per provider at priorities 1, 2, 3… in the order given, all under that upstream name.
    """
    if not isinstance(entry, dict):
        raise CatalogError("must be a table", where=where)
    _unknown(entry, MODEL_FIELDS, where)
    model_id = _text(entry, "id", where, max_length=120)
    model_type = _value(entry, "type", str, where)
    if model_type not in MODEL_TYPES:
        raise CatalogError(f"must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}", where=where, field="type")
    access = _value(entry, "access", list, where)
    for tier in access:
        if tier not in TIERS:
            raise CatalogError(f"names unknown tier {tier!r}", where=where, field="access")
    routing = _value(entry, "routing", str, where, required=False, default="weighted")
    if routing not in ROUTING_STRATEGIES:
        raise CatalogError(f"must be one of {', '.join(ROUTING_STRATEGIES)}, got {routing!r}", where=where,
                           field="routing")
    old_form = [name for name in ("provider", "upstream_model", "fallbacks") if name in entry]
    if old_form and "deployments" in entry:
        raise CatalogError(f"a model has either deployments or {'/'.join(old_form)}, not both", where=where,
                           field="deployments")
    if "deployments" in entry:
        deployments = _value(entry, "deployments", list, where)
    else:
        provider = _value(entry, "provider", str, where)
        upstream_model = _value(entry, "upstream_model", str, where, required=False, default="")
        fallbacks = _value(entry, "fallbacks", list, where, required=False, default=[])
        if provider not in providers:
            raise CatalogError(f"names unknown provider {provider!r}", where=where, field="provider")
        for fallback in fallbacks:
            if not isinstance(fallback, str):
                raise CatalogError(f"must list provider names, got {fallback!r}", where=where, field="fallbacks")
            if fallback not in providers:
                raise CatalogError(f"names unknown provider {fallback!r}", where=where, field="fallbacks")
        for index, fallback in enumerate(fallbacks):
            if fallback == provider or fallback in fallbacks[:index]:
                # Each would be tried twice: a pool has each provider (and upstream name) once.
                raise CatalogError(f"names provider {fallback!r} twice (the model's provider counts)", where=where,
                                   field="fallbacks")
        deployments = [{"provider": name, "upstream_model": upstream_model, "priority": priority}
                       for priority, name in enumerate([provider, *fallbacks], start=1)]
    return {
        "model_id": model_id, "type": model_type, "owned_by": _text(entry, "owned_by", where, max_length=64),
        "cost": _cost(entry, where),
        "tiers": [tier for tier in TIERS if tier in access],
        "enabled": _value(entry, "enabled", bool, where, required=False, default=True),
        "routing": routing,
        "allowed_fails": _whole(entry, "allowed_fails", where, default=3, minimum=1, maximum=SMALL),
        "cooldown_seconds": _whole(entry, "cooldown_seconds", where, default=30, minimum=1),
        **check_pricing(entry, model_type, where),
        "aliases": check_aliases(entry, model_id, where),
        "deployments": check_pool(model_id, model_type, deployments, providers, where=where),
    }


# ---------------------------------------------------------------- TOML catalog files

def parse_catalog(text: str) -> tuple[list[dict], list[dict]]:
    """Check a catalog document; returns (providers, models) as plain field dicts."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"not valid TOML: {exc}") from None
    unknown = set(document) - {"providers", "models"}
    if unknown:
        raise CatalogError(f"unknown top-level section(s): {', '.join(sorted(unknown))}")
    raw_providers = _value(document, "providers", dict, "catalog")
    providers = [check_provider(name, entry) for name, entry in raw_providers.items()]
    types = {provider["name"]: provider["type"] for provider in providers}
    models, seen = [], set()
    for index, entry in enumerate(_value(document, "models", list, "catalog")):
        where = f"[[models]] #{index + 1}"
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            where += f" (id {entry['id']!r})"
        model = check_model(entry, types, where=where)
        if model["model_id"] in seen:
            raise CatalogError("is a duplicate: an earlier model has that id", where=where, field="id")
        seen.add(model["model_id"])
        models.append(model)
    check_names([(model["model_id"], model["aliases"]) for model in models])
    return providers, models


def load_catalog(path: Path | None = None) -> dict:
    """Upsert providers, models and their deployments from a catalog file; returns what was
    created/updated/unchanged. A deployment keeps its id, and a disabled one stays disabled, as
    long as the file still lists it."""
    path = Path(path) if path else DEFAULT_CATALOG
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"cannot read {path.name}: {exc}") from None
    providers, models = parse_catalog(text)
    report: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": []}
    with transaction.atomic():
        # The stored models the file leaves as they are keep their names: a file's alias may not take one.
        check_names([(model["model_id"], model["aliases"]) for model in models],
                    names_in_use(AiModel.objects.exclude(model_id__in=[model["model_id"] for model in models])))
        by_name = {}
        for fields in providers:
            name = fields.pop("name")
            by_name[name], outcome = _upsert(Provider, {"name": name}, fields)
            report[outcome].append(f"provider {name}")
        for fields in models:
            model_id, pool = fields.pop("model_id"), fields.pop("deployments")
            model, outcome = _upsert(AiModel, {"model_id": model_id}, fields)
            if save_pool(model, [{**entry, "provider": by_name[entry["provider"]]} for entry in pool]) \
                    and outcome == "unchanged":
                outcome = "updated"
            report[outcome].append(f"model {model_id}")
    invalidate()
    return report


def save_pool(model: AiModel, pool: list[dict]) -> bool:
    """Make the model's deployments those of ``pool`` (checked entries with Provider objects), one per
    secret of each provider; returns whether anything changed. Rows that stay keep their id and state."""
    wanted: dict[tuple[int, str, str], dict[str, Any]] = {}
    for entry in pool:
        for secret_env in entry["provider"].secret_envs():
            wanted[(entry["provider"].pk, secret_env, entry["upstream_model"])] = entry
    changed = False
    for deployment in list(model.deployments.all()):
        kept = wanted.pop((deployment.provider_id, deployment.secret_env, deployment.upstream_model), None)
        if kept is None:
            deployment.delete()
            changed = True
            continue
        values = {name: kept[name] for name in ("priority", "weight", "rpm")}
        if any(getattr(deployment, name) != value for name, value in values.items()):
            Deployment.objects.filter(pk=deployment.pk).update(**values)
            changed = True
    for (_, secret_env, upstream_model), entry in wanted.items():
        Deployment.objects.create(model=model, provider=entry["provider"], secret_env=secret_env,
                                  upstream_model=upstream_model, priority=entry["priority"], weight=entry["weight"],
                                  rpm=entry["rpm"])
        changed = True
    if changed:
        invalidate()
    return changed


def sync_secrets(provider: Provider) -> None:
    """After a provider's secrets changed: every pool listing it gets one deployment per secret again,
    each new one like its siblings (priority, weight, rpm), the ones whose secret went away removed."""
    groups: dict[tuple, list[Deployment]] = {}
    for deployment in Deployment.objects.filter(provider=provider).order_by("id"):
        groups.setdefault((deployment.model_id, deployment.upstream_model), []).append(deployment)
    secrets = provider.secret_envs()
    for (model_id, upstream_model), rows in groups.items():
        template = rows[0]
        for deployment in rows:
            if deployment.secret_env not in secrets:
                deployment.delete()
        present = {deployment.secret_env for deployment in rows}
        for secret_env in secrets:
            if secret_env not in present:
                Deployment.objects.create(model_id=model_id, provider=provider, secret_env=secret_env,
                                          upstream_model=upstream_model, priority=template.priority,
                                          weight=template.weight, rpm=template.rpm)
    invalidate()


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
