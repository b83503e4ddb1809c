"""Usage rows record the cached part of the prompt.

On SQLite, Django adds a NOT NULL column with a default by rebuilding the table, which would
lose the usage rollup triggers (0002) with it; SQLite's own ALTER TABLE ADD COLUMN keeps them.
PostgreSQL adds the column in place either way.
"""
from django.db import migrations, models

TABLE = "models_catalog_usageevent"


def _field():
    field = models.PositiveIntegerField(default=0)
    field.set_attributes_from_name("cached_tokens")
    return field


def add_column(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f'ALTER TABLE {TABLE} ADD COLUMN "cached_tokens" integer unsigned NOT NULL DEFAULT 0 '
                              f'CHECK ("cached_tokens" >= 0)')
    else:
        schema_editor.add_field(apps.get_model("models_catalog", "UsageEvent"), _field())


def drop_column(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f'ALTER TABLE {TABLE} DROP COLUMN "cached_tokens"')
    else:
        schema_editor.remove_field(apps.get_model("models_catalog", "UsageEvent"), _field())


class Migration(migrations.Migration):

    dependencies = [
        ('models_catalog', '0005_deployments'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name='usageevent',
                    name='cached_tokens',
                    field=models.PositiveIntegerField(default=0),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, drop_column)],
        ),
    ]
