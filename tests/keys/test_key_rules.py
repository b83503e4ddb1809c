"""Each rule of a key's configuration is stated once (keys.models) and every door keeps it alike.

The doors: the admin API (create-key and update-key), the staff issue form and edit page,
the issue_key command, the services behind them, and the database constraints. Every case
below is refused by every door that can express it, names the same field, and changes
nothing; every boundary is accepted by all of them.
"""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from keys.forms import ApiKeyChangeForm, IssueKeyForm
from keys.models import BIGINT_MAX, OWNER_FIELDS, RANGES, TIERS, ApiKey, AuditLog, KeyRuleError
from keys.serializers import CreateKeyRequest, UpdateKeyRequest, member_path
from keys.services import issue_key, update_key
from tests.conftest import bearer

pytestmark = pytest.mark.django_db

# The SPEC's member of each field, as the admin API names it in ``param``.
MEMBER = {"tier": "tier", "credits": "credits", "max_credits": "maxCredits", "rpm": "rpm", "rph": "rph",
          "max_concurrent": "maxConcurrent", "owner_platform_id": "owner.platform_id",
          "owner_platform_username": "owner.platform_username", "owner_platform_img": "owner.platform_img",
          "owner_category": "owner.category", "budget_credits": "budget.credits", "budget_period": "budget.period",
          "tpm": "tpm"}
# The issue_key command's option for each field it takes.
OPTION = {"tier": "--tier", "credits": "--credits", "max_credits": "--max-credits", "rpm": "--rpm", "rph": "--rph",
          "max_concurrent": "--max-concurrent", "owner_platform_id": "--owner-id",
          "owner_platform_username": "--owner-username", "owner_category": "--owner-category", "name": "--name",
          "budget_credits": "--budget-credits", "budget_period": "--budget-period", "tpm": "--tpm"}
# The key every case starts from (or, for the doors that issue a key, the configuration it is issued with).
BASE = {"tier": "free", "credits": 5, "max_credits": 10, "rpm": 60, "rph": 1000, "max_concurrent": 16}


def max_length(field: str) -> int:
    return ApiKey._meta.get_field(field).max_length


def _broken():
    yield pytest.param({"tier": "gold"}, "tier", id="tier-unknown")
    for field, (least, most) in RANGES.items():
        yield pytest.param({field: least - 1}, field, id=f"{field}-below-{least}")
        if most is not None:
            yield pytest.param({field: most + 1}, field, id=f"{field}-above-{most}")
    yield pytest.param({"credits": BIGINT_MAX + 1}, "credits", id="credits-above-the-column-limit")
    yield pytest.param({"credits": 11}, "credits", id="credits-above-max_credits")
    yield pytest.param({"max_credits": 4}, "credits", id="max_credits-below-credits")
    for field in OWNER_FIELDS.values():
        yield pytest.param({field: "x" * (max_length(field) + 1)}, field, id=f"{field}-too-long")


def _accepted():
    yield pytest.param({"credits": 0, "max_credits": 0}, id="credits-at-0")
    yield pytest.param({"credits": BIGINT_MAX, "max_credits": BIGINT_MAX}, id="credits-at-the-column-limit")
    yield pytest.param({"credits": 10, "max_credits": 10}, id="credits-at-max_credits")
    for field, (least, most) in RANGES.items():
        if most is not None:
            yield pytest.param({field: least}, id=f"{field}-at-{least}")
            yield pytest.param({field: most}, id=f"{field}-at-{most}")
    yield pytest.param({field: "x" * max_length(field) for field in OWNER_FIELDS.values()}, id="owner-at-max-length")


BROKEN = list(_broken())
ACCEPTED = list(_accepted())


# ------------------------------------------------------------------ the doors

def nested(config: dict) -> dict:
    """{"owner_category": "x", "max_credits": 1} -> {"owner": {"category": "x"}, "maxCredits": 1}"""
    body = {}
    for field, value in config.items():
        *parents, leaf = MEMBER[field].split(".")
        target = body
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    if "budget" in body:  # the API takes a budget whole: its credits with a period
        body["budget"].setdefault("period", "day")
    return body


def api(client, admin_secret, path, body):
    response = client.post(path, json.dumps(body), content_type="application/json", **bearer(admin_secret))
    if response.status_code in (200, 201):
        return None
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_value")
    return error["param"]


def as_form_data(config: dict) -> dict:
    return {field: str(value) for field, value in config.items()}


def edit_form(key: ApiKey, changes: dict) -> ApiKeyChangeForm:
    """The edit page as the browser posts it back: each field with its hidden initial value."""
    shown = ApiKeyChangeForm(instance=key)
    data = {}
    for bound in shown:
        initial = shown.get_initial_for_field(bound.field, bound.name)
        data[bound.html_name] = data[bound.html_initial_name] = "" if initial is None else initial
    return ApiKeyChangeForm({**data, **as_form_data(changes)}, instance=key)


def command(config: dict) -> str | None:
    args = [part for field, value in config.items() for part in (OPTION[field], str(value))]
    try:
        call_command("issue_key", *args, stdout=StringIO())
    except CommandError as refused:
        return str(refused)
    return None


def stored(key: ApiKey, *more: str) -> tuple:
    key.refresh_from_db()
    return tuple(getattr(key, field) for field in (*BASE, *OWNER_FIELDS.values(), *more))


# ------------------------------------------------------------------ refused alike

@pytest.mark.parametrize("case, field", BROKEN)
def test_a_new_key_that_breaks_a_rule_is_refused_by_every_door(client, admin_key, case, field):
    _, admin_secret = admin_key
    config = {**BASE, **case}
    keys_before, audits_before = ApiKey.objects.count(), AuditLog.objects.count()

    assert api(client, admin_secret, "/admin/create-key", {"config": nested(config)}) == f"config.{MEMBER[field]}"
    form = IssueKeyForm(as_form_data(config))
    assert not form.is_valid() and list(form.errors) == [field]
    if all(name in OPTION for name in config):
        assert command(config) is not None
    with pytest.raises(KeyRuleError) as raised:
        issue_key(actor="test", **config)
    assert raised.value.field == field

    assert (ApiKey.objects.count(), AuditLog.objects.count()) == (keys_before, audits_before)


@pytest.mark.parametrize("case, field", BROKEN)
def test_a_change_that_breaks_a_rule_is_refused_by_every_door(client, admin_key, make_key, case, field):
    _, admin_secret = admin_key
    key, secret = make_key(**BASE)
    before = stored(key)

    assert api(client, admin_secret, "/admin/update-key", {"key": secret, "update": nested(case)}) == (
        f"update.{MEMBER[field]}")
    form = edit_form(key, case)
    assert not form.is_valid() and list(form.errors) == [field]
    with pytest.raises(KeyRuleError) as raised:
        update_key(key=key, changes=case, actor="test")
    assert raised.value.field == field

    assert stored(key) == before
    assert not AuditLog.objects.filter(action="update_key").exists()


@pytest.mark.parametrize("case, field", [case for case in BROKEN if "too-long" not in case.id
                                         and "column" not in case.id])  # limits of the column types
def test_the_database_refuses_what_the_rules_refuse(make_key, case, field):
    key, _ = make_key(**BASE)
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(**case)


# The cases the forms' own fields do not refuse first (with a choice, a max_length or the column's limit).
RULE_WORDED = [param for param in BROKEN if not any(word in param.id for word in ("tier", "too-long", "column"))]


@pytest.mark.parametrize("case, field", RULE_WORDED)
def test_the_staff_forms_the_command_and_the_services_give_the_rules_own_message(make_key, case, field):
    config = {**BASE, **case}
    with pytest.raises(KeyRuleError) as raised:
        ApiKey.new(**config)
    message = raised.value.message
    assert IssueKeyForm(as_form_data(config)).errors[field] == [message]
    assert command(config) == message
    key, _ = make_key(**BASE)
    assert edit_form(key, case).errors[field] == [message]


def test_the_admin_api_gives_the_rule_across_members_in_the_rules_own_words(client, admin_key):
    _, admin_secret = admin_key
    response = client.post("/admin/create-key", json.dumps({"config": {"credits": 11, "maxCredits": 10}}),
                           content_type="application/json", **bearer(admin_secret))
    with pytest.raises(KeyRuleError) as raised:
        ApiKey.new(credits=11, max_credits=10)
    assert response.json()["error"]["message"] == raised.value.message == "credits (11) may not exceed maxCredits (10)."


# ------------------------------------------------------------------ accepted alike

@pytest.mark.parametrize("case", ACCEPTED)
def test_the_boundaries_are_accepted_by_every_door(client, admin_key, make_key, case):
    _, admin_secret = admin_key
    config = {**BASE, **case}
    assert api(client, admin_secret, "/admin/create-key", {"config": nested(config)}) is None
    form = IssueKeyForm(as_form_data(config))
    assert form.is_valid(), form.errors
    if all(name in OPTION for name in config):
        assert command(config) is None
    issue_key(actor="test", **config)

    key, secret = make_key(**BASE)
    assert api(client, admin_secret, "/admin/update-key", {"key": secret, "update": nested(case)}) is None
    key, _ = make_key(**BASE)
    form = edit_form(key, case)
    assert form.is_valid(), form.errors
    update_key(key=key, changes=case, actor="test")
    more = [field for field in case if field not in BASE and field not in OWNER_FIELDS.values()]
    assert stored(key, *more) == tuple({**BASE, **{f: "" for f in OWNER_FIELDS.values()}, **case}.values())


# ------------------------------------------------------------------ the statements themselves

def test_the_rules_say_what_the_contract_says():
    assert TIERS == ("free", "augmented", "premium", "cool", "partner", "limited", "exclusive", "special")
    assert RANGES == {"credits": (0, None), "max_credits": (0, None), "rpm": (1, 1000), "rph": (1, 10000),
                      "max_concurrent": (1, 1000), "budget_credits": (1, None), "tpm": (1, 1_000_000_000)}


def test_the_admin_api_names_a_field_by_the_member_its_serializer_reads_into_it():
    assert member_path(UpdateKeyRequest(), "max_credits") == "update.maxCredits"
    assert member_path(UpdateKeyRequest(), "owner_platform_img") == "update.owner.platform_img"
    assert member_path(UpdateKeyRequest(), "name") is None
    assert member_path(CreateKeyRequest(), "max_concurrent") == "config.maxConcurrent"
    assert member_path(CreateKeyRequest(), "name") == "name"
    assert member_path(CreateKeyRequest(), "is_admin") == "isAdmin"


def test_the_schema_states_the_models_ranges(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    config = schema["ApiKeyConfig"]["properties"]
    budget = schema["Budget"]["properties"]
    for field, (least, most) in RANGES.items():
        member = budget["credits"] if field == "budget_credits" else config[MEMBER[field]]
        assert (member["minimum"], member["maximum"]) == (least, BIGINT_MAX if most is None else most)
    assert schema[config["tier"]["$ref"].rsplit("/", 1)[1]]["enum"] == list(TIERS)
    owner = schema["Owner"]["properties"]
    assert {member: owner[member]["oneOf"][0]["maxLength"] for member in OWNER_FIELDS} == {
        member: max_length(field) for member, field in OWNER_FIELDS.items()}
