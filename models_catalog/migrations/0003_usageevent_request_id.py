"""UsageEvent.request_id: the request's X-Request-ID, shown with the staff key page's recent requests.

Added with one ALTER TABLE on both databases. Django's own AddField would rebuild the
SQLite table for a column with a default, which drops the rollup trigger of migration
0002 and copies every usage row; an added column with a constant default is instant on
PostgreSQL and SQLite alike, and leaves the trigger alone. PostgreSQL then drops the
default, as Django would (the model supplies ""); SQLite cannot drop one, and keeps it.
"""
from django.db import migrations, models

TABLE = "models_catalog_usageevent"
ADD = f"ALTER TABLE {TABLE} ADD COLUMN request_id varchar(128) NOT NULL DEFAULT ''"
DROP_DEFAULT = f"ALTER TABLE {TABLE} ALTER COLUMN request_id DROP DEFAULT"
REMOVE = f"ALTER TABLE {TABLE} DROP COLUMN request_id"


def add_column(apps, schema_editor):
    schema_editor.execute(ADD)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_DEFAULT)


def remove_column(apps, schema_editor):
    schema_editor.execute(REMOVE)


class Migration(migrations.Migration):
    dependencies = [("models_catalog", "0002_usage_rollup_triggers")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="usageevent",
                    name="request_id",
                    field=models.CharField(blank=True, default="", help_text="X-Request-ID of the request, "
                                           "copied from its ledger charge row.", max_length=128),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, remove_column)],
        ),
    ]
