import pytest

from keys.models import ApiKey, AuditLog, KeyRuleError
from keys.services import issue_key, set_active, update_key

pytestmark = pytest.mark.django_db


def test_update_merges_owner_and_audits(make_key):
    key, _ = make_key(credits=5, max_credits=10, owner={"platform_id": "1", "platform_username": "ann"})
    update_key(key=key, changes={"tier": "premium", "owner_category": "vip"}, actor="test")
    key.refresh_from_db()
    assert key.tier == "premium"
    assert key.owner == {"platform_id": "1", "platform_username": "ann", "platform_img": "", "category": "vip"}
    entry = AuditLog.objects.filter(action="update_key").get()
    assert entry.before["tier"] == "free" and entry.after["tier"] == "premium"
    assert entry.after["owner"]["category"] == "vip"


@pytest.mark.parametrize("changes, field", [
    ({"credits": 11}, "credits"),
    ({"max_credits": 4}, "credits"),
    ({"rpm": 0}, "rpm"),
    ({"rph": 10001}, "rph"),
    ({"tier": "gold"}, "tier"),
])
def test_update_refuses_broken_configurations_naming_the_field(make_key, changes, field):
    key, _ = make_key(credits=5, max_credits=10)
    with pytest.raises(KeyRuleError) as raised:
        update_key(key=key, changes=changes, actor="test")
    assert raised.value.field == field
    key.refresh_from_db()
    assert (key.credits, key.max_credits, key.rpm, key.tier) == (5, 10, 60, "free")
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_revoke_and_reactivate_are_audited_once(make_key):
    key, _ = make_key()
    set_active(key=key, active=False, actor="test")
    set_active(key=key, active=False, actor="test")
    assert not ApiKey.objects.get(pk=key.pk).is_active
    set_active(key=key, active=True, actor="test")
    assert list(AuditLog.objects.filter(key=key).order_by("id").values_list("action", flat=True)) == [
        "create_key", "revoke_key", "reactivate_key"]


def test_max_concurrent_is_set_at_issue_and_changed_with_its_range_checked(db):
    key, _ = issue_key(actor="test", tier="free", credits=5, max_concurrent=3)
    assert key.max_concurrent == 3
    assert update_key(key=key, changes={"max_concurrent": 40}, actor="test").max_concurrent == 40
    with pytest.raises(KeyRuleError) as refused:
        update_key(key=key, changes={"max_concurrent": 0}, actor="test")
    assert refused.value.field == "max_concurrent"
    assert ApiKey.objects.get(pk=key.pk).max_concurrent == 40


def test_issue_key_command_takes_max_concurrent(db):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("issue_key", "--tier", "free", "--max-concurrent", "5", stdout=out)
    assert "maxConcurrent=5" in out.getvalue()
    assert ApiKey.objects.get().max_concurrent == 5
    with pytest.raises(CommandError, match="maxConcurrent must be between 1 and 1000"):
        call_command("issue_key", "--tier", "free", "--max-concurrent", "2000", stdout=StringIO())


def test_issue_and_update_take_only_configuration_fields_by_their_model_names(make_key):
    key, _ = make_key()
    for changes in ({"maxCredits": 7}, {"is_admin": True}, {"digest": "x"}):
        with pytest.raises(TypeError):
            update_key(key=key, changes=changes, actor="test")
    for fields in ({"maxCredits": 7}, {"in_flight": 3}, {"is_active": False}):
        with pytest.raises(TypeError):
            issue_key(actor="test", **fields)
    assert list(AuditLog.objects.values_list("action", flat=True)) == ["create_key"]


def test_a_new_key_takes_the_models_defaults_and_max_credits_defaults_to_credits(db):
    key, _ = issue_key(actor="test", credits=7, rpm=None)
    defaults = {name: ApiKey._meta.get_field(name).default for name in ("tier", "rpm", "rph", "max_concurrent")}
    assert (key.tier, key.rpm, key.rph, key.max_concurrent) == tuple(defaults.values())
    assert (key.credits, key.max_credits) == (7, 7)
