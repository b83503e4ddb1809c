"""The settlement's UPDATE made HOT on PostgreSQL.

A charge's settlement writes its status, and ledger_pending_time's condition named the status,
so every settlement wrote new entries in all three of the ledger's indexes and could never be a
heap-only update. The index goes; the sweeper finds pending charges above SweepMark by the primary
key instead (gateway.sweeper.settle_stale). On PostgreSQL the ledger's pages keep a tenth free, so
the settled row version fits on the page of the charge it replaces. Measured in docs/performance.md.
"""
from django.db import migrations, models


def leave_room_on_each_page(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE keys_ledgerentry SET (fillfactor = 90)")


def fill_pages_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE keys_ledgerentry RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ('keys', '0005_ledger_deployment'),
    ]

    operations = [
        migrations.CreateModel(
            name='SweepMark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('ledger_id', models.BigIntegerField(default=0)),
            ],
            options={
                'verbose_name': 'ledger sweep mark',
            },
        ),
        migrations.RemoveIndex(
            model_name='ledgerentry',
            name='ledger_pending_time',
        ),
        migrations.RunPython(leave_room_on_each_page, fill_pages_again, elidable=False),
    ]
