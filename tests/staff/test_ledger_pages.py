"""The ledger in the staff UI: a key's recent rows and whether it reconciles, and the full list."""
import pytest
from django.urls import reverse

from gateway import metering
from keys.models import ApiKey, LedgerEntry
from keys.services import update_key
from models_catalog.models import AiModel

pytestmark = pytest.mark.django_db


def key_page(staff_client, key):
    return staff_client.get(reverse("admin:keys_apikey_change", args=[key.pk]))


def test_a_key_page_shows_its_recent_ledger_rows_and_that_it_reconciles(staff_client, seeded, make_key):
    key, _ = make_key(credits=20, max_credits=30)
    update_key(key=key, changes={"credits": 25}, actor="staff carol")
    entry = metering.charge(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat",
                            amount=2, request_id="req-on-page")
    response = key_page(staff_client, key)
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="ledger-reconciles"' in page and "1 charge(s) pending" in page
    rows = response.context["ledger"].recent
    assert [(row.kind, row.amount) for row in rows] == [("charge", -2), ("adjustment", 5), ("grant", 20)]
    assert "req-on-page" in page and "staff carol" in page
    assert f"{reverse('admin:keys_ledgerentry_changelist')}?key={key.pk}" in page
    metering.refund(entry=entry)
    assert 'id="ledger-reconciles"' in key_page(staff_client, key).content.decode()


def test_a_key_whose_balance_was_changed_behind_the_ledger_is_flagged(staff_client, make_key):
    key, _ = make_key(credits=20, max_credits=30)
    ApiKey.objects.filter(pk=key.pk).update(credits=17)
    page = key_page(staff_client, key).content.decode()
    assert 'id="ledger-mismatch"' in page
    assert "the ledger sums to 20" in page


def test_the_ledger_list_is_read_only_and_filters_by_key(staff_client, make_key):
    key, _ = make_key(credits=5)
    other, _ = make_key(credits=7)
    url = reverse("admin:keys_ledgerentry_changelist")
    response = staff_client.get(f"{url}?key={key.pk}")
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == list(LedgerEntry.objects.filter(key=key))
    entry = LedgerEntry.objects.get(key=other)
    change = staff_client.post(reverse("admin:keys_ledgerentry_change", args=[entry.pk]), {"amount": 1000})
    assert change.status_code in (302, 403)
    entry.refresh_from_db()
    assert entry.amount == 7
    assert staff_client.get(reverse("admin:keys_ledgerentry_add")).status_code == 403


def test_the_dashboard_shows_the_charges_in_flight(staff_client, seeded, make_key):
    key, _ = make_key(credits=20)
    metering.charge(key=key, model=AiModel.objects.get(model_id="local-chat"), operation="chat", amount=3,
                    request_id="in-flight")
    response = staff_client.get(reverse("admin:models_catalog_dashboard"))
    assert response.context["d"]["pending"]["count"] == 1
    assert response.context["d"]["pending"]["credits"] == 3
    assert 'id="pending-charges"' in response.content.decode()
