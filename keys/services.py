"""Workflows on keys shared by the admin API, the staff UI and the management commands."""
from django.db import transaction
from django.db.models import F

from keys import ledger
from keys.auth_cache import forget
from keys.models import (
    MAX_CONCURRENT_RANGE,
    OWNER_FIELDS,
    RPH_RANGE,
    RPM_RANGE,
    TIERS,
    ApiKey,
    AuditLog,
    LedgerEntry,
    generate_secret,
)
from utils_app.errors import InvalidRequest, NotFound


def check_config(*, tier: str, credits: int, max_credits: int, rpm: int, rph: int, max_concurrent: int = 16,
                 prefix: str = "") -> None:
    """The rules every key configuration must satisfy; ``prefix`` leads the error's param path."""
    def fail(field, message):
        raise InvalidRequest(message, code="invalid_value", param=f"{prefix}{field}")

    if tier not in TIERS:
        fail("tier", f"tier must be one of: {', '.join(TIERS)}.")
    if credits < 0:
        fail("credits", "credits must be 0 or more.")
    if max_credits < 0:
        fail("maxCredits", "maxCredits must be 0 or more.")
    if not RPM_RANGE[0] <= rpm <= RPM_RANGE[1]:
        fail("rpm", f"rpm must be between {RPM_RANGE[0]} and {RPM_RANGE[1]}.")
    if not RPH_RANGE[0] <= rph <= RPH_RANGE[1]:
        fail("rph", f"rph must be between {RPH_RANGE[0]} and {RPH_RANGE[1]}.")
    if not MAX_CONCURRENT_RANGE[0] <= max_concurrent <= MAX_CONCURRENT_RANGE[1]:
        fail("maxConcurrent", f"maxConcurrent must be between {MAX_CONCURRENT_RANGE[0]} and {MAX_CONCURRENT_RANGE[1]}.")
    if credits > max_credits:
        fail("credits", f"credits ({credits}) may not exceed maxCredits ({max_credits}).")


def audit(*, actor: str, action: str, key: ApiKey | None, before: dict | None, after: dict | None) -> AuditLog:
    return AuditLog.objects.create(actor=actor, action=action, key=key, key_prefix=key.prefix if key else "",
                                   before=before, after=after)


def key_snapshot(key: ApiKey) -> dict:
    """What the audit log keeps of a key: its configuration and flags, never the secret."""
    return {**key.config(), "is_admin": key.is_admin, "is_active": key.is_active, "name": key.name}


def issue_key(*, actor: str, tier: str = "free", credits: int = 0, max_credits: int | None = None,
              rpm: int = 60, rph: int = 1000, max_concurrent: int = 16, owner: dict | None = None,
              is_admin: bool = False, name: str = "", param_prefix: str = "") -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, the only time the secret exists."""
    if max_credits is None:
        max_credits = credits
    check_config(tier=tier, credits=credits, max_credits=max_credits, rpm=rpm, rph=rph,
                 max_concurrent=max_concurrent, prefix=param_prefix)
    secret = generate_secret()
    key = ApiKey(tier=tier, credits=credits, max_credits=max_credits, rpm=rpm, rph=rph,
                 max_concurrent=max_concurrent, is_admin=is_admin, name=name)
    for member, value in (owner or {}).items():
        setattr(key, OWNER_FIELDS[member], value or "")
    key.set_secret(secret)
    with transaction.atomic():
        key.save()
        ledger.record_change(key=key, before=0, kind=LedgerEntry.GRANT, actor=actor)
        audit(actor=actor, action="create_key", key=key, before=None, after=key_snapshot(key))
    return key, secret


def create_key(*, config: dict, actor: str, name: str = "", is_admin: bool = False) -> tuple[ApiKey, str]:
    """issue_key for the admin API: ``config`` uses the API's member names (maxCredits, owner, ...)."""
    return issue_key(actor=actor, tier=config.get("tier", "free"), credits=config.get("credits", 0),
                     max_credits=config.get("maxCredits"), rpm=config.get("rpm", 60), rph=config.get("rph", 1000),
                     max_concurrent=config.get("maxConcurrent", 16), owner=config.get("owner"), is_admin=is_admin, name=name, param_prefix="config.")


def find_key(secret: str) -> ApiKey:
    """The key whose secret this is, revoked or not; 404 key_not_found otherwise (one indexed query)."""
    key = ApiKey.objects.by_secret(secret).first()
    if key is None:
        raise NotFound("No API key matches 'key'.", code="key_not_found", param="key")
    return key


def refill_all(*, actor: str) -> int:
    """Set every active key's credits to its maxCredits; returns how many keys changed."""
    with transaction.atomic():
        # Locked first: a charge between reading a balance and raising it would
        # make the refill entry's amount wrong.
        keys = list(ApiKey.objects.active().exclude(credits=F("max_credits")).select_for_update()
                    .only("id", "credits", "max_credits"))
        ledger.refill(keys, actor=actor)
        changed = ApiKey.objects.filter(pk__in=[key.pk for key in keys]).update(credits=F("max_credits"))
        AuditLog.objects.create(actor=actor, action="refill_all", key=None, before=None,
                                after={"keys_refilled": changed})
    return changed


def update_key(*, key: ApiKey, changes: dict, actor: str, param_prefix: str = "update.") -> ApiKey:
    """Apply a partial configuration change (API names: tier, credits, maxCredits, rpm, rph, owner).

    ``owner`` is merged member by member. The row is locked while the change is
    computed so a concurrent charge cannot slip between the read and the write;
    the new values apply to the key's very next request.
    """
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        before = key_snapshot(key)
        balance_before = key.credits
        for api_name, field in (("tier", "tier"), ("credits", "credits"), ("maxCredits", "max_credits"),
                                ("rpm", "rpm"), ("rph", "rph"), ("maxConcurrent", "max_concurrent")):
            if api_name in changes:
                setattr(key, field, changes[api_name])
        for member, value in (changes.get("owner") or {}).items():
            setattr(key, OWNER_FIELDS[member], value if value is not None else "")
        check_config(tier=key.tier, credits=key.credits, max_credits=key.max_credits, rpm=key.rpm, rph=key.rph,
                     max_concurrent=key.max_concurrent, prefix=param_prefix)
        key.save()
        ledger.record_change(key=key, before=balance_before, kind=LedgerEntry.ADJUSTMENT, actor=actor)
        audit(actor=actor, action="update_key", key=key, before=before, after=key_snapshot(key))
    forget(key.digest)
    return key


def set_active(*, key: ApiKey, active: bool, actor: str) -> ApiKey:
    """Revoke (active=False) or reactivate a key. A revoked key gets 401 everywhere."""
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        if key.is_active == active:
            return key
        before = key_snapshot(key)
        key.is_active = active
        key.save(update_fields=["is_active", "updated_at"])
        audit(actor=actor, action="reactivate_key" if active else "revoke_key", key=key, before=before,
              after=key_snapshot(key))
    forget(key.digest)
    return key
