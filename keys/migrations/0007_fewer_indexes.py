"""Indexes on the keys that no query uses, dropped: the metering statements open every index of the table.

Each charge and settlement updates its key row (a heap-only update: no index entry is written),
but PostgreSQL still opens and locks every index of the keys table for each statement that
updates it. Of its eleven indexes, seven served no query of the product:

- the digest is only ever matched by equality (a request's authentication), so its unique
  constraint keeps one index, without the pattern-matching copy PostgreSQL gets beside a
  ``unique=True`` text column;
- the owner's columns are not filtered on by any operation, and the staff search over them is
  case-insensitive (UPPER(...) LIKE), which a plain index cannot serve.

The prefix keeps both of its indexes: ``reconcile --prefix`` and the usage search match a prefix.
The unique constraint is added before the old one is dropped, in one transaction on PostgreSQL.
Measured in docs/performance.md.
"""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('keys', '0006_ledger_settlement_hot'),
    ]

    operations = [
        migrations.AddConstraint(
            model_name='apikey',
            constraint=models.UniqueConstraint(fields=('digest',), name='apikey_digest_unique'),
        ),
        migrations.AlterField(
            model_name='apikey',
            name='digest',
            field=models.CharField(editable=False, max_length=64),
        ),
        migrations.AlterField(
            model_name='apikey',
            name='owner_category',
            field=models.CharField(blank=True, max_length=120),
        ),
        migrations.AlterField(
            model_name='apikey',
            name='owner_platform_id',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AlterField(
            model_name='apikey',
            name='owner_platform_username',
            field=models.CharField(blank=True, max_length=120),
        ),
    ]
