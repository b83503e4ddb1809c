"""Charging and refunding credits.

A charge is one conditional UPDATE: the WHERE clause ``credits >= amount`` is
evaluated by the database under the row lock, so two concurrent requests can
never both spend the last credit, whatever the number of workers or hosts.
RETURNING hands back the new balance in the same statement (PostgreSQL, and
SQLite since 3.35), so a charge is a single round trip.
"""
from django.db import connection
from django.utils import timezone

from keys.models import ApiKey
from utils_app.db import one_writer_at_a_time
from utils_app.errors import InsufficientCredits

_TABLE = ApiKey._meta.db_table


def charge(key: ApiKey, amount: int) -> int:
    """Take ``amount`` credits from the key; returns the balance left. Raises 402 when short."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with one_writer_at_a_time(connection), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET credits = credits - %s, last_used_at = %s "
            f"WHERE id = %s AND credits >= %s RETURNING credits",
            [amount, now, key.pk, amount],
        )
        row = cursor.fetchone()
    if row is None:
        raise InsufficientCredits(
            f"This request costs {amount} credit(s) and the key has {key.credits}.")
    key.credits = row[0]
    return row[0]


def refund(key: ApiKey, amount: int) -> int:
    """Give back a charge whose upstream call failed; returns the new balance."""
    if amount <= 0:
        return key.credits
    with one_writer_at_a_time(connection), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {_TABLE} SET credits = credits + %s WHERE id = %s RETURNING credits",
                       [amount, key.pk])
        row = cursor.fetchone()
    key.credits = row[0] if row else key.credits + amount
    return key.credits
