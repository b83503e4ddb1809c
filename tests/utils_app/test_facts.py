import pytest
from django.contrib import admin

from utils_app.models import TOPICS, Fact

pytestmark = pytest.mark.django_db


def error_of(response):
    assert response.status_code == 400, response.content
    body = response.json()
    assert set(body) == {"error"}
    return body["error"]


def test_the_data_migration_ships_at_least_150_distinct_facts_on_every_topic():
    assert Fact.objects.count() >= 150
    assert Fact.objects.values("text").distinct().count() == Fact.objects.count()
    assert set(Fact.objects.values_list("topic", flat=True)) == set(TOPICS)
    assert not Fact.objects.filter(enabled=False).exists()


def test_one_fact_by_default(client, django_assert_num_queries):
    with django_assert_num_queries(1):
        response = client.get("/utils/facts")
    assert response.status_code == 200
    facts = response.json()["facts"]
    assert len(facts) == 1
    assert Fact.objects.filter(text=facts[0]).exists()


@pytest.mark.parametrize("count", [1, 2, 37, 100])
def test_count_facts_come_back_all_distinct(client, count):
    facts = client.get("/utils/facts", {"count": count}).json()["facts"]
    assert len(facts) == count
    assert len(set(facts)) == count
    assert Fact.objects.filter(text__in=facts).count() == count


def test_the_order_is_random(client):
    draws = {tuple(client.get("/utils/facts", {"count": 5}).json()["facts"]) for _ in range(5)}
    assert len(draws) > 1


@pytest.mark.parametrize("raw", ["0", "101", "-1", "abc", "2.5", "2.0", "1e9", "", " 3", "3 ", "+3",
                                 "99999999999999999999999", "٣"])
def test_any_other_count_is_a_400_naming_count(client, raw):
    error = error_of(client.get("/utils/facts", {"count": raw}))
    assert error["param"] == "count"
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_value"
    assert "1 to 100" in error["message"]


def test_disabled_facts_are_never_served(client):
    keep = list(Fact.objects.order_by("id").values_list("id", flat=True)[:3])
    Fact.objects.exclude(id__in=keep).update(enabled=False)
    facts = client.get("/utils/facts", {"count": 10}).json()["facts"]
    assert sorted(facts) == sorted(Fact.objects.filter(id__in=keep).values_list("text", flat=True))


def test_staff_edit_facts_in_the_admin(admin_client):
    assert admin.site.is_registered(Fact)
    fact = Fact.objects.order_by("id").first()
    response = admin_client.post(f"/admin/utils_app/fact/{fact.pk}/change/", {
        "text": "Edited: " + fact.text, "topic": fact.topic, "enabled": ""})
    assert response.status_code == 302, response.content
    fact.refresh_from_db()
    assert fact.text.startswith("Edited: ") and fact.enabled is False
