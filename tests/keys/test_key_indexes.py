"""The keys table keeps only the indexes its queries read: every metering statement opens each of them."""
import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def _indexes(table):
    """The column lists the table is indexed on (primary key and unique constraints included)."""
    with connection.cursor() as cursor:
        return {tuple(index["columns"]) for index in connection.introspection.get_constraints(cursor, table).values()
                if index["index"] or index["unique"] or index["primary_key"]}


def test_a_key_is_found_by_its_digest_through_one_unique_index_and_by_its_prefix(vendor):
    indexes = _indexes("keys_apikey")
    assert indexes >= {("id",), ("digest",), ("prefix",)}
    assert not indexes & {("owner_platform_id",), ("owner_platform_username",), ("owner_category",)}
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'keys_apikey' ORDER BY indexname")
            names = [name for (name,) in cursor.fetchall()]
        # The digest's pattern-matching copy is gone; the prefix keeps its own (reconcile --prefix).
        assert len(names) == 4, names
        assert sum(name.endswith("_like") for name in names) == 1


def test_the_rollups_have_no_index_their_unique_constraint_already_covers():
    for table, covered in (("models_catalog_modelhourlyusage", ("model_id",)),
                           ("models_catalog_keydailyusage", ("key_id",))):
        assert covered not in _indexes(table)


def test_two_keys_cannot_share_a_digest(make_key):
    from django.db import IntegrityError, transaction

    from keys.models import ApiKey

    key, _ = make_key()
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=make_key()[0].pk).update(digest=key.digest)
