import re

import pytest
from django.core.management import call_command
from django.db import connection

from keys.models import ApiKey, AuditLog, digest_secret

pytestmark = pytest.mark.django_db


def dump_database() -> str:
    """Every value of every table as text, to search for things that must not be stored."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_a_new_secret_has_the_contract_shape(make_key):
    _, secret = make_key()
    assert re.fullmatch(r"sk-[A-Za-z0-9_-]{32,}", secret)


def test_only_the_digest_and_a_short_prefix_are_stored(make_key):
    key, secret = make_key()
    key.refresh_from_db()
    assert key.digest == digest_secret(secret)
    assert secret.startswith(key.prefix) and len(key.prefix) <= 12
    assert secret not in dump_database()
    assert secret[len(key.prefix):] not in dump_database()


def test_issue_key_prints_the_secret_alone_on_the_last_line(capsys):
    call_command("issue_key", "--tier", "premium", "--credits", "50", "--max-credits", "80", "--rpm", "10",
                 "--rph", "100", "--owner-id", "42", "--owner-username", "ada", "--admin")
    secret = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"sk-[A-Za-z0-9_-]{32,}", secret)
    key = ApiKey.objects.by_secret(secret).get()
    assert (key.tier, key.credits, key.max_credits, key.rpm, key.rph, key.is_admin) == ("premium", 50, 80, 10, 100, True)
    assert key.owner["platform_id"] == "42" and key.owner["platform_username"] == "ada"
    assert secret not in dump_database()
    assert AuditLog.objects.filter(action="create_key", key=key).exists()


@pytest.mark.parametrize("args, message", [
    (["--tier", "gold"], "invalid choice"),
    (["--tier", "free", "--rpm", "0"], "rpm"),
    (["--tier", "free", "--rph", "10001"], "rph"),
    (["--tier", "free", "--credits", "10", "--max-credits", "5"], "maxCredits"),
    (["--tier", "free", "--credits", "-1"], "credits"),
])
def test_issue_key_refuses_bad_values(args, message):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=message):
        call_command("issue_key", *args)
    assert ApiKey.objects.count() == 0


def test_refill_credits_sets_active_keys_to_their_ceiling(make_key, capsys):
    spent, _ = make_key(credits=3, max_credits=50)
    full, _ = make_key(credits=50, max_credits=50)
    revoked, _ = make_key(credits=1, max_credits=50)
    ApiKey.objects.filter(pk=revoked.pk).update(is_active=False)

    call_command("refill_credits", "--dry-run")
    assert "would refill 1 key" in capsys.readouterr().out
    spent.refresh_from_db()
    assert spent.credits == 3

    call_command("refill_credits")
    assert "refilled 1 key" in capsys.readouterr().out
    assert [k.credits for k in ApiKey.objects.order_by("pk")] == [50, 50, 1]
    call_command("refill_credits")
    assert "refilled 0 key" in capsys.readouterr().out


def test_the_database_refuses_negative_credits(make_key):
    from django.db import IntegrityError, transaction

    key, _ = make_key(credits=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(credits=-1)
