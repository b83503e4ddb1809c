"""The rollups' foreign-key indexes that their unique constraints already cover, dropped.

The usage table's trigger upserts the hourly and daily rollup rows of what it inserts, and each upsert
opens every index of its table (and writes an entry in each when the row is new). The hourly rollup's index on
its model and the daily rollup's on its key are the first column of the table's unique constraint
(model, hour) and (key, model, day), which serves every lookup by that column alike. Measured in
docs/performance.md.
"""
import django.db.models.deletion
from django.db import migrations, models

_DROPPED = (("models_catalog_keydailyusage_key_id_9e9fafa2", "models_catalog_keydailyusage", "key_id"),
            ("models_catalog_modelhourlyusage_model_id_cc336659", "models_catalog_modelhourlyusage", "model_id"))


class Migration(migrations.Migration):

    dependencies = [
        ('models_catalog', '0007_deployment_disabled_by_hand'),
    ]

    # The indexes are dropped by name: on SQLite, altering the field would rebuild the rollup table, which
    # the usage table's trigger names. Django names a foreign key's index alike on both databases.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='keydailyusage',
                    name='key',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='daily_usage', to='keys.apikey'),
                ),
                migrations.AlterField(
                    model_name='modelhourlyusage',
                    name='model',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='hourly_usage', to='models_catalog.aimodel'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f"DROP INDEX {index}", f"CREATE INDEX {index} ON {table} ({column})")
                for index, table, column in _DROPPED
            ],
        ),
    ]
