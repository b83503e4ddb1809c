import pytest

from keys.models import ApiKey
from tests.conftest import bearer

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.probe_urls")]


def assert_error(response, status, code, type_="authentication_error"):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == type_
    assert set(error) == {"message", "type", "param", "code"}


def test_a_valid_key_is_accepted(client, free_key):
    key, secret = free_key
    response = client.get("/probe/key", **bearer(secret))
    assert response.status_code == 200
    assert response.json() == {"prefix": key.prefix}


def test_a_missing_header_is_missing_api_key(client):
    response = client.get("/probe/key")
    assert_error(response, 401, "missing_api_key")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer ", "sk-abc", "Bearer a b"])
def test_a_malformed_header_is_missing_api_key(client, header):
    assert_error(client.get("/probe/key", HTTP_AUTHORIZATION=header), 401, "missing_api_key")


@pytest.mark.parametrize("secret", ["sk-unknown-key-000000000000000000000000", "not-a-key", "sk-" + "x" * 300])
def test_an_unknown_key_is_invalid_api_key(client, free_key, secret):
    assert_error(client.get("/probe/key", **bearer(secret)), 401, "invalid_api_key")


def test_a_revoked_key_is_invalid_api_key(client, free_key):
    key, secret = free_key
    ApiKey.objects.filter(pk=key.pk).update(is_active=False)
    assert_error(client.get("/probe/key", **bearer(secret)), 401, "invalid_api_key")


def test_the_lookup_is_one_query_then_none_while_the_key_is_cached(client, free_key, django_assert_num_queries):
    _, secret = free_key
    with django_assert_num_queries(1):
        assert client.get("/probe/key", **bearer(secret)).status_code == 200
    with django_assert_num_queries(0):
        assert client.get("/probe/key", **bearer(secret)).status_code == 200


def test_the_cache_builds_the_complete_key_as_the_orm_would(free_key):
    from keys.auth_cache import key_with_digest

    key, secret = free_key
    ApiKey.objects.filter(pk=key.pk).update(owner_category="bots")
    expected = ApiKey.objects.get(pk=key.pk)
    key_with_digest(expected.digest)
    found = key_with_digest(expected.digest)  # from the cache this time
    assert found == expected and found is not key_with_digest(expected.digest)
    assert {field.attname: getattr(found, field.attname) for field in ApiKey._meta.concrete_fields} == {
        field.attname: getattr(expected, field.attname) for field in ApiKey._meta.concrete_fields}
    assert found.owner_category == "bots"
    assert key_with_digest("0" * 64) is None
    # The instance itself, not only its fields: what Model.from_db would have made.
    orm_built = ApiKey.from_db(found._state.db, [field.attname for field in ApiKey._meta.concrete_fields],
                               [getattr(expected, field.attname) for field in ApiKey._meta.concrete_fields])
    assert {**vars(found), "_state": None, "cached_row": None} == {**vars(orm_built), "_state": None,
                                                                  "cached_row": None}
    assert (found._state.adding, found._state.db) == (False, "default") and found._state.fields_cache == {}
    found.name = "renamed"
    found.save(update_fields=["name"])
    assert ApiKey.objects.get(pk=key.pk).name == "renamed"


def test_a_cached_key_sends_the_model_signals_once_a_receiver_listens(free_key):
    from django.db.models.signals import post_init

    from keys.auth_cache import key_with_digest

    key, _ = free_key
    key_with_digest(key.digest)
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=ApiKey)
    try:
        found = key_with_digest(key.digest)  # from the cache
    finally:
        post_init.disconnect(receiver, sender=ApiKey)
    assert seen == [found] and found.cached_row is not None


def test_a_cached_key_is_read_again_after_its_seconds(free_key, settings, clock):
    from keys import auth_cache

    key, _ = free_key
    settings.KEY_CACHE_SECONDS = 1.0
    assert auth_cache.key_with_digest(key.digest).rpm == 60
    ApiKey.objects.filter(pk=key.pk).update(rpm=5)  # another instance changes the key
    clock.advance(0.5)
    assert auth_cache.key_with_digest(key.digest).rpm == 60
    clock.advance(0.6)
    assert auth_cache.key_with_digest(key.digest).rpm == 5


def test_a_change_made_through_the_services_applies_at_once_in_this_process(client, free_key):
    from keys.services import set_active

    key, secret = free_key
    assert client.get("/probe/key", **bearer(secret)).status_code == 200
    set_active(key=key, active=False, actor="test")
    assert_error(client.get("/probe/key", **bearer(secret)), 401, "invalid_api_key")


def test_an_ordinary_key_is_refused_on_admin_operations(client, free_key):
    _, secret = free_key
    assert_error(client.get("/probe/admin", **bearer(secret)), 401, "admin_required")


def test_an_admin_key_passes_admin_operations(client, admin_key):
    _, secret = admin_key
    assert client.get("/probe/admin", **bearer(secret)).status_code == 200


def test_admin_operations_without_a_key_are_missing_api_key(client):
    assert_error(client.get("/probe/admin"), 401, "missing_api_key")
