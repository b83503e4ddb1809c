"""UsageEvent's own key and model indexes go: usage_key_time and usage_model_time lead with the same columns.

Each index less is one write less per metered request. The indexes are dropped by name
rather than by altering the fields, which on SQLite would rebuild the table and lose
the usage rollup triggers (0002) with it.
"""
import django.db.models.deletion
from django.db import migrations, models

TABLE = "models_catalog_usageevent"
INDEXES = {"key_id": "models_catalog_usageevent_key_id_d86d430a",
           "model_id": "models_catalog_usageevent_model_id_8c7fd357"}


class Migration(migrations.Migration):

    dependencies = [
        ('keys', '0002_ledger'),
        ('models_catalog', '0003_usageevent_request_id'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f"DROP INDEX IF EXISTS {name}", reverse_sql=f"CREATE INDEX {name} ON {TABLE} ({column})")
                for column, name in INDEXES.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='usageevent',
                    name='key',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name='usage_events', to='keys.apikey'),
                ),
                migrations.AlterField(
                    model_name='usageevent',
                    name='model',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT,
                                            related_name='usage_events', to='models_catalog.aimodel'),
                ),
            ],
        ),
    ]
