"""The staff pages for API keys: list, issue, edit, revoke, bulk actions, usage panel."""
import re
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse

from gateway import metering
from keys.models import ApiKey, AuditLog, digest_secret
from models_catalog.models import AiModel

pytestmark = pytest.mark.django_db

LIST = reverse("admin:keys_apikey_changelist")
ADD = reverse("admin:keys_apikey_add")


def change_url(key):
    return reverse("admin:keys_apikey_change", args=[key.pk])


def edit_form(response) -> dict:
    """The change form as the browser would post it back (hidden initials included)."""
    form = response.context["adminform"].form
    data = {}
    for bound in form:
        value = bound.value()
        data[bound.html_name] = "" if value is None else value
        if bound.field.show_hidden_initial:
            initial = form.get_initial_for_field(bound.field, bound.name)
            data[bound.html_initial_name] = "" if initial is None else initial
    return data


ISSUE = {"name": "for ann", "tier": "premium", "credits": "50", "max_credits": "200", "rpm": "30", "rph": "600",
         "owner_platform_id": "42", "owner_platform_username": "ann", "owner_platform_img": "",
         "owner_category": "beta"}


# ------------------------------------------------------------------ who may use the pages

@pytest.mark.parametrize("url", [LIST, ADD, reverse("admin:models_catalog_aimodel_access"),
                                 reverse("admin:models_catalog_dashboard"),
                                 reverse("admin:models_catalog_usageevent_changelist"),
                                 reverse("admin:keys_auditlog_changelist")])
def test_anonymous_and_non_staff_users_are_sent_to_the_login_page(client, django_user_model, url):
    assert client.get(url).status_code == 302
    user = django_user_model.objects.create_user("mallory", password="pw-for-mallory-1")
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_a_non_staff_user_cannot_issue_edit_revoke_or_bulk_change(client, django_user_model, free_key, seeded):
    key, _ = free_key
    client.force_login(django_user_model.objects.create_user("mallory", password="pw-for-mallory-1"))
    chat = AiModel.objects.get(model_id="local-chat")
    matrix = reverse("admin:models_catalog_aimodel_access")
    for url, data in ((ADD, ISSUE), (reverse("admin:keys_apikey_revoke", args=[key.pk]), {}),
                      (change_url(key), {"tier": "special", "credits": "100", "max_credits": "100"}),
                      (LIST, {"action": "change_tier", ACTION_CHECKBOX_NAME: [key.pk], "apply": "1",
                              "tier": "special"}),
                      (matrix, {"model": [chat.pk], "was": [f"{chat.pk}:free"]})):
        response = client.post(url, data)
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login")), url
    key.refresh_from_db()
    assert (ApiKey.objects.count(), key.tier, key.is_active) == (1, "free", True)
    assert "free" in AiModel.objects.get(pk=chat.pk).tiers
    assert list(AuditLog.objects.values_list("action", flat=True)) == ["create_key"]


def test_staff_without_change_permission_can_look_but_not_touch(limited_staff_client, free_key):
    key, _ = free_key
    assert limited_staff_client.get(LIST).status_code == 200
    assert limited_staff_client.get(change_url(key)).status_code == 200
    assert limited_staff_client.get(ADD).status_code == 403
    assert limited_staff_client.post(ADD, ISSUE).status_code == 403
    assert limited_staff_client.post(reverse("admin:keys_apikey_revoke", args=[key.pk])).status_code == 403
    assert limited_staff_client.post(change_url(key), {"tier": "special"}).status_code == 403
    key.refresh_from_db()
    assert (key.tier, key.is_active, ApiKey.objects.count()) == ("free", True, 1)


# ------------------------------------------------------------------ the list

def test_the_list_shows_display_prefixes_and_never_a_secret_or_digest(staff_client, make_key):
    key, secret = make_key(name="visible label")
    body = staff_client.get(LIST).content.decode()
    assert f"{key.prefix}…" in body and "visible label" in body
    assert secret not in body and secret[len(key.prefix):] not in body
    assert key.digest not in body


def test_the_list_searches_prefix_owner_and_category(staff_client, make_key):
    ann, _ = make_key(owner={"platform_id": "1001", "platform_username": "ann", "category": "beta"})
    bob, _ = make_key(owner={"platform_id": "2002", "platform_username": "bob", "category": "staff"})

    def found(term):
        return {k.pk for k in staff_client.get(LIST, {"q": term}).context["cl"].result_list}

    assert found("ann") == {ann.pk}
    assert found("2002") == {bob.pk}
    assert found("beta") == {ann.pk}
    assert found(bob.prefix) == {bob.pk}


def test_a_whole_secret_posted_to_the_find_form_opens_its_key(staff_client, make_key):
    wanted, secret = make_key()
    make_key()
    response = staff_client.post(reverse("admin:keys_apikey_find"), {"secret": secret})
    assert response.status_code == 302
    assert response["Location"] == change_url(wanted)
    missing = staff_client.post(reverse("admin:keys_apikey_find"), {"secret": secret + "x"}, follow=True)
    assert "No key has that secret." in missing.content.decode()
    assert staff_client.get(reverse("admin:keys_apikey_find")).status_code == 403


def test_a_whole_secret_in_the_search_url_is_refused_not_looked_up(staff_client, make_key):
    _, secret = make_key()
    response = staff_client.get(LIST, {"q": secret})
    assert list(response.context["cl"].result_list) == []
    assert "secrets do not belong in a URL" in response.content.decode()
    assert 'id="find-by-secret"' in response.content.decode()


def test_the_list_filters_keys_at_zero_credits_and_by_tier(staff_client, make_key):
    broke, _ = make_key(credits=0, max_credits=10)
    make_key(credits=5, max_credits=10)
    premium, _ = make_key(tier="premium", credits=0, max_credits=0)
    zero = {k.pk for k in staff_client.get(LIST, {"credits": "zero"}).context["cl"].result_list}
    assert zero == {broke.pk, premium.pk}
    tier = {k.pk for k in staff_client.get(LIST, {"tier__exact": "premium"}).context["cl"].result_list}
    assert tier == {premium.pk}


def test_the_list_sorts_by_credits(staff_client, make_key):
    for credits in (7, 3, 9):
        make_key(credits=credits, max_credits=10)
    index = staff_client.get(LIST).context["cl"].list_display.index("balance")
    rows = staff_client.get(LIST, {"o": f"-{index}"}).context["cl"].result_list
    assert [k.credits for k in rows] == [9, 7, 3]


# ------------------------------------------------------------------ issuing

def test_issuing_shows_the_secret_once_and_stores_only_its_digest(staff_client):
    response = staff_client.post(ADD, ISSUE)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = response.context["secret"]
    assert re.fullmatch(r"sk-[A-Za-z0-9_-]{43}", secret)
    body = response.content.decode()
    assert f'value="{secret}"' in body and "cannot be shown again" in body
    key = ApiKey.objects.get()
    assert key.digest == digest_secret(secret)
    assert (key.tier, key.credits, key.max_credits, key.rpm, key.rph, key.max_concurrent, key.name) == (
        "premium", 50, 200, 30, 600, 16, "for ann")
    assert key.owner == {"platform_id": "42", "platform_username": "ann", "platform_img": "", "category": "beta"}
    entry = AuditLog.objects.get(action="create_key")
    assert (entry.actor, entry.key_id) == ("staff alice", key.pk)
    assert secret not in str(entry.after)
    # Never again: not on the key's page, not in the list.
    assert secret not in staff_client.get(change_url(key)).content.decode()
    assert secret not in staff_client.get(LIST).content.decode()


def test_issuing_an_admin_key_with_default_max_credits(staff_client):
    response = staff_client.post(ADD, {**ISSUE, "max_credits": "", "is_admin": "on"})
    assert response.status_code == 200
    key = ApiKey.objects.get()
    assert key.is_admin and key.max_credits == key.credits == 50


def test_an_unedited_issue_form_issues_a_key_that_can_make_calls(staff_client, seeded, client):
    form = staff_client.get(ADD).context["form"]
    unedited = {name: "" if form[name].value() is None else form[name].value() for name in form.fields}
    assert unedited["credits"] == 1000 and unedited["tier"] == "free"
    response = staff_client.post(ADD, {name: value for name, value in unedited.items() if value is not False})
    assert response.status_code == 200
    key = ApiKey.objects.get()
    assert (key.credits, key.max_credits, key.tier) == (1000, 1000, "free")
    call = client.post("/v1/chat/completions", {"model": "local-chat", "messages": [{"role": "user", "content": "hi"}]},
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {response.context['secret']}")
    assert call.status_code == 200
    key.refresh_from_db()
    assert key.credits == 999


def test_the_index_names_every_section_in_words(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    headings = re.findall(r'<caption>\s*<a [^>]*class="section"[^>]*>([^<]+)</a>', page)
    for expected in ("Staff sign-in lockouts", "Two-factor: authenticator apps", "Two-factor: recovery codes",
                     "API keys and credits"):
        assert expected in headings
    assert not [heading for heading in headings if "_" in heading or heading.lower() in ("axes", "keys")]


@pytest.mark.parametrize("change, field, message", [
    ({"credits": "300"}, "credits", "may not exceed maxCredits"),
    ({"rpm": "0"}, "rpm", "rpm must be between 1 and 1000"),
    ({"rph": "10001"}, "rph", "rph must be between 1 and 10000"),
    ({"max_credits": "-1", "credits": "0"}, "max_credits", "maxCredits must be 0 or more"),
    ({"max_concurrent": "1001"}, "max_concurrent", "maxConcurrent must be between 1 and 1000"),
    ({"tier": "gold"}, "tier", "Select a valid choice"),
    ({"credits": "many"}, "credits", "Enter a whole number"),
])
def test_the_issue_form_shows_errors_on_the_field_and_issues_nothing(staff_client, change, field, message):
    response = staff_client.post(ADD, {**ISSUE, **change})
    assert response.status_code == 200
    assert message in " ".join(response.context["form"].errors[field])
    assert "secret" not in response.context
    assert not ApiKey.objects.exists() and not AuditLog.objects.exists()


# ------------------------------------------------------------------ editing

def test_editing_sends_only_the_changed_fields_through_update_key(staff_client, make_key):
    key, _ = make_key(credits=5, max_credits=10, owner={"platform_username": "ann"})
    data = edit_form(staff_client.get(change_url(key)))
    data.update(tier="premium", max_credits="100", credits="80", owner_category="vip")
    response = staff_client.post(change_url(key), data)
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.tier, key.credits, key.max_credits, key.owner_category, key.owner_platform_username) == (
        "premium", 80, 100, "vip", "ann")
    entry = AuditLog.objects.get(action="update_key")
    assert entry.actor == "staff alice"
    assert (entry.before["tier"], entry.after["tier"]) == ("free", "premium")
    assert entry.after["owner"]["category"] == "vip"


@pytest.mark.parametrize("change, field, message", [
    ({"credits": "11"}, "credits", "credits (11) may not exceed maxCredits (10)"),
    ({"max_credits": "4"}, "credits", "credits (5) may not exceed maxCredits (4)"),
    ({"rpm": "1001"}, "rpm", "rpm must be between 1 and 1000"),
    ({"rph": "-3"}, "rph", "rph must be between 1 and 10000"),
    ({"credits": "99999999999999999999999"}, "credits", "less than or equal to"),
])
def test_edit_errors_are_shown_on_the_form_and_nothing_changes(staff_client, make_key, change, field, message):
    key, _ = make_key(credits=5, max_credits=10)
    data = {**edit_form(staff_client.get(change_url(key))), **change}
    response = staff_client.post(change_url(key), data)
    assert response.status_code == 200
    assert message in " ".join(response.context["adminform"].form.errors[field])
    key.refresh_from_db()
    assert (key.credits, key.max_credits, key.rpm, key.rph) == (5, 10, 60, 1000)
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_a_rejected_save_shows_the_stored_key_beside_the_form_not_the_unsaved_values(staff_client, make_key):
    key, _ = make_key(tier="free", credits=1000, max_credits=1000)
    data = {**edit_form(staff_client.get(change_url(key))), "credits": "1500", "tier": "premium"}
    response = staff_client.post(change_url(key), data)
    assert response.status_code == 200
    assert "may not exceed maxCredits (1000)" in " ".join(response.context["adminform"].form.errors["credits"])
    page = response.content.decode()
    # The form keeps what staff typed, to correct it; the facts around it are the stored key's.
    assert 'name="credits" value="1500"' in page
    assert "The balance, 1000, is the sum of the ledger" in page and "1500, is the sum" not in page
    assert f"<h2>{key.prefix}… (free)</h2>" in page
    assert "(premium)" not in page
    assert response.context["original"].credits == 1000 and response.context["original"].tier == "free"
    key.refresh_from_db()
    assert (key.tier, key.credits) == ("free", 1000)
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_credits_spent_while_the_page_was_open_are_not_written_back(staff_client, seeded, make_key):
    key, _ = make_key(credits=50, max_credits=100)
    data = edit_form(staff_client.get(change_url(key)))
    # The key keeps working while staff edit its limits.
    metering.charge(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat", amount=10,
                    request_id="spent-meanwhile")
    data["rpm"] = "120"
    assert staff_client.post(change_url(key), data).status_code == 302
    key.refresh_from_db()
    assert (key.credits, key.rpm) == (40, 120)
    assert AuditLog.objects.get(action="update_key").after["credits"] == 40


def test_saving_an_unchanged_form_writes_no_audit_entry(staff_client, make_key):
    key, _ = make_key()
    assert staff_client.post(change_url(key), edit_form(staff_client.get(change_url(key)))).status_code == 302
    assert not AuditLog.objects.filter(action="update_key").exists()


def test_keys_cannot_be_deleted_from_the_ui(staff_client, free_key):
    key, _ = free_key
    assert staff_client.get(reverse("admin:keys_apikey_delete", args=[key.pk])).status_code == 403
    assert "delete_selected" not in staff_client.get(LIST).context["action_form"].fields["action"].choices.__repr__()


# ------------------------------------------------------------------ revoke / reactivate

def test_revoke_and_reactivate_buttons_call_set_active(staff_client, free_key):
    key, _ = free_key
    page = staff_client.get(change_url(key)).content.decode()
    assert reverse("admin:keys_apikey_revoke", args=[key.pk]) in page
    response = staff_client.post(reverse("admin:keys_apikey_revoke", args=[key.pk]))
    assert response.status_code == 302 and response["Location"] == change_url(key)
    assert not ApiKey.objects.get(pk=key.pk).is_active
    assert reverse("admin:keys_apikey_reactivate", args=[key.pk]) in staff_client.get(change_url(key)).content.decode()
    staff_client.post(reverse("admin:keys_apikey_reactivate", args=[key.pk]))
    assert ApiKey.objects.get(pk=key.pk).is_active
    assert list(AuditLog.objects.filter(key=key).order_by("id").values_list("action", "actor")) == [
        ("create_key", "test"), ("revoke_key", "staff alice"), ("reactivate_key", "staff alice")]


def test_revoking_needs_a_post(staff_client, free_key):
    key, _ = free_key
    assert staff_client.get(reverse("admin:keys_apikey_revoke", args=[key.pk])).status_code == 403
    assert ApiKey.objects.get(pk=key.pk).is_active


# ------------------------------------------------------------------ bulk actions

def bulk(client, action, keys, **extra):
    return client.post(LIST, {"action": action, ACTION_CHECKBOX_NAME: [k.pk for k in keys], **extra})


def test_bulk_change_tier_asks_for_the_tier_then_applies_it(staff_client, make_key):
    first, _ = make_key()
    second, _ = make_key()
    untouched, _ = make_key()
    ask = bulk(staff_client, "change_tier", [first, second])
    assert ask.status_code == 200 and "tier" in ask.context["form"].fields
    assert ApiKey.objects.filter(tier="free").count() == 3
    done = bulk(staff_client, "change_tier", [first, second], apply="1", tier="partner")
    assert done.status_code == 302
    assert set(ApiKey.objects.filter(tier="partner").values_list("pk", flat=True)) == {first.pk, second.pk}
    assert ApiKey.objects.get(pk=untouched.pk).tier == "free"
    assert AuditLog.objects.filter(action="update_key", actor="staff alice").count() == 2


def test_bulk_add_credits_stops_at_max_credits(staff_client, make_key):
    roomy, _ = make_key(credits=10, max_credits=100)
    nearly_full, _ = make_key(credits=95, max_credits=100)
    response = bulk(staff_client, "add_credits", [roomy, nearly_full], apply="1", amount="20")
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=roomy.pk).credits == 30
    assert ApiKey.objects.get(pk=nearly_full.pk).credits == 100
    messages = [str(m) for m in response.wsgi_request._messages]
    assert "1 reached their maxCredits" in messages[0]
    entries = AuditLog.objects.filter(action="update_key").order_by("key_id")
    assert [(e.before["credits"], e.after["credits"]) for e in entries] == [(10, 30), (95, 100)]


def test_bulk_add_credits_refuses_a_non_positive_amount(staff_client, make_key):
    key, _ = make_key(credits=10, max_credits=100)
    response = bulk(staff_client, "add_credits", [key], apply="1", amount="0")
    assert response.status_code == 200 and response.context["form"].errors["amount"]
    assert ApiKey.objects.get(pk=key.pk).credits == 10


def test_bulk_refill_sets_credits_to_max_credits(staff_client, make_key):
    low, _ = make_key(credits=1, max_credits=40)
    full, _ = make_key(credits=40, max_credits=40)
    response = bulk(staff_client, "refill_credits", [low, full])
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=low.pk).credits == 40
    assert AuditLog.objects.filter(action="update_key").count() == 1


def test_bulk_revoke_and_reactivate(staff_client, make_key):
    first, _ = make_key()
    second, _ = make_key()
    bulk(staff_client, "revoke_keys", [first, second])
    assert not ApiKey.objects.filter(is_active=True).exists()
    bulk(staff_client, "reactivate_keys", [first])
    assert list(ApiKey.objects.filter(is_active=True).values_list("pk", flat=True)) == [first.pk]
    assert AuditLog.objects.filter(action="revoke_key").count() == 2


# ------------------------------------------------------------------ the key's usage

def test_the_key_page_shows_usage_for_24_hours_30_days_and_recent_requests(staff_client, make_key, record_usage):
    key, _ = make_key()
    other, _ = make_key()
    record_usage(key, "local-chat", ago=timedelta(hours=1), credits=1)
    record_usage(key, "local-chat", ago=timedelta(hours=2), success=False)
    record_usage(key, "local-image", ago=timedelta(days=3), credits=4)
    record_usage(key, "local-chat", ago=timedelta(days=40))  # outside both windows
    record_usage(other, "local-chat", ago=timedelta(hours=1))

    response = staff_client.get(change_url(key))
    usage = response.context["usage"]
    assert usage["totals_24h"] == {"requests": 2, "failed": 1, "credits": 1}
    assert usage["totals_30d"]["requests"] == 3 and usage["totals_30d"]["credits"] == 5
    rows = {row["model"]: row for row in usage["per_model"]}
    assert (rows["local-chat"]["requests_24h"], rows["local-chat"]["requests_30d"]) == (2, 2)
    assert (rows["local-image"]["requests_24h"], rows["local-image"]["requests_30d"]) == (0, 1)
    assert [e.model.model_id for e in usage["recent"]] == ["local-chat", "local-chat", "local-image", "local-chat"]
    assert usage["chart"].total == 3 and len(usage["chart"].bars) == 3
    body = response.content.decode()
    assert 'id="key-usage-per-model"' in body and "<svg" in body
    assert f"?key={key.pk}" in body


def test_the_key_page_costs_the_same_number_of_queries_with_more_usage(staff_client, make_key, record_usage,
                                                                        django_assert_num_queries):
    key, _ = make_key()
    record_usage(key)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        staff_client.get(change_url(key))
    for hours in range(1, 30):
        record_usage(key, "local-image" if hours % 2 else "local-chat", ago=timedelta(hours=hours * 20))
    with django_assert_num_queries(len(few.captured_queries)):
        staff_client.get(change_url(key))


# ------------------------------------------------------------------ audit log

def test_the_audit_log_is_read_only_and_filters_by_key(staff_client, make_key):
    key, _ = make_key()
    other, _ = make_key()
    staff_client.post(reverse("admin:keys_apikey_revoke", args=[key.pk]))
    url = reverse("admin:keys_auditlog_changelist")
    response = staff_client.get(url, {"key": key.pk})
    entries = list(response.context["cl"].result_list)
    assert {e.key_id for e in entries} == {key.pk} and len(entries) == 2
    assert "is_active: True → False" in response.content.decode()
    assert staff_client.get(reverse("admin:keys_auditlog_add")).status_code == 403
    entry = entries[0]
    assert staff_client.post(reverse("admin:keys_auditlog_change", args=[entry.pk]), {"actor": "x"}).status_code == 403
    assert AuditLog.objects.get(pk=entry.pk).actor == entry.actor
    assert AuditLog.objects.filter(key=other).count() == 1


def test_revoking_an_unknown_key_is_a_404(staff_client):
    assert staff_client.post(reverse("admin:keys_apikey_revoke", args=["999"])).status_code == 404
    assert staff_client.post(reverse("admin:keys_apikey_revoke", args=["not-a-number"])).status_code == 404
