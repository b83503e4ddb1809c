"""Workflows on keys shared by the admin API, the staff UI and the management commands.

They speak ApiKey's field names and keep the rules the model states (ApiKey.check_rules):
naming a field in the caller's own terms is the caller's business.
"""
from django.db import transaction
from django.db.models import F

from keys import ledger
from keys.auth_cache import changed, changed_all
from keys.models import CONFIG_FIELDS, ApiKey, AuditLog, LedgerEntry, generate_secret
from keys.serializers import ApiKeyConfigOut
from utils_app.errors import NotFound


def audit(*, actor: str, action: str, key: ApiKey | None, before: dict | None, after: dict | None) -> AuditLog:
    return AuditLog.objects.create(actor=actor, action=action, key=key, key_prefix=key.prefix if key else "",
                                   before=before, after=after)


def key_snapshot(key: ApiKey) -> dict:
    """What the audit log keeps of a key: its configuration and flags, never the secret."""
    # The configuration under the API's names, as the admin API shows it.
    return {**ApiKeyConfigOut(key).data, "is_admin": key.is_admin, "is_active": key.is_active, "name": key.name}


def issue_key(*, actor: str, **fields) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, the only time the secret exists.

    ``fields`` are ApiKey fields (tier, credits, max_credits, rpm, rph, max_concurrent, the owner
    columns or ``owner``, name, is_admin); what is left out or None takes its default
    (ApiKey.new). A configuration that breaks a rule raises KeyRuleError and creates nothing.
    """
    unknown = set(fields) - {*CONFIG_FIELDS, "owner", "name", "is_admin"}
    if unknown:
        raise TypeError(f"issue_key cannot set {', '.join(sorted(unknown))}")
    key = ApiKey.new(**fields)
    secret = generate_secret()
    key.set_secret(secret)
    with transaction.atomic():
        key.save()
        ledger.record_change(key=key, before=0, kind=LedgerEntry.GRANT, actor=actor)
        audit(actor=actor, action="create_key", key=key, before=None, after=key_snapshot(key))
    return key, secret


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
        refilled = ApiKey.objects.filter(pk__in=[key.pk for key in keys]).update(credits=F("max_credits"))
        AuditLog.objects.create(actor=actor, action="refill_all", key=None, before=None,
                                after={"keys_refilled": refilled})
    changed_all()  # the balances a refusal reports (X-Remaining-Credits) come from the rows
    return refilled


def update_key(*, key: ApiKey, changes: dict, actor: str) -> ApiKey:
    """Apply a partial configuration change: ``changes`` maps fields of CONFIG_FIELDS to values.

    A change that would leave the key breaking a rule raises KeyRuleError and changes nothing.
    The row is locked while the change is computed so a concurrent charge cannot slip between
    the read and the write; the new values apply to the key's very next request.
    """
    unknown = set(changes) - set(CONFIG_FIELDS)
    if unknown:
        raise TypeError(f"update_key cannot change {', '.join(sorted(unknown))}")
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        before = key_snapshot(key)
        balance_before = key.credits
        for field, value in changes.items():
            setattr(key, field, value)
        key.check_rules()
        key.save()
        ledger.record_change(key=key, before=balance_before, kind=LedgerEntry.ADJUSTMENT, actor=actor)
        audit(actor=actor, action="update_key", key=key, before=before, after=key_snapshot(key))
    changed(key.digest)
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
    changed(key.digest)
    return key
