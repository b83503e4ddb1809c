"""On PostgreSQL, the usage rollups are kept by one trigger run per statement instead of one per row.

The row trigger (0002) ran two upserts for each usage row: a grouped settlement of n requests
(gateway.metering) paid 2n of them, each with its executor start-up. The statement trigger reads
the statement's new rows from their transition table and upserts each hourly and daily rollup row
they touch once, with the sums of its rows: two upserts a statement whatever its size, the same
totals. Rows loaded in bulk (INSERT … SELECT, COPY) are counted the same way, at a fraction of the
cost. The rows are upserted in the order of their unique keys (model and hour; model, key and day),
every hourly row before any daily one, so that two statements lock the rollups in one order.

SQLite has no statement triggers: its row trigger (0002) stays. Measured in docs/performance.md.
"""
from importlib import import_module

from django.db import migrations

# The row trigger's migration: its table and column names, its update of a rollup row, and its trigger to go back to.
_rows = import_module("models_catalog.migrations.0002_usage_rollup_triggers")
_SUMS = ("count(*), count(*) FILTER (WHERE success), count(*) FILTER (WHERE NOT success), sum(input_tokens), "
         "sum(output_tokens), sum(credits_charged), sum(latency_ms)")

POSTGRES_PER_STATEMENT = f"""
CREATE OR REPLACE FUNCTION models_catalog_usage_rollups() RETURNS trigger AS $$
BEGIN
  INSERT INTO {_rows.HOURLY} (model_id, hour, {_rows.COUNTERS})
  SELECT model_id, hour, {_SUMS} FROM (
    SELECT *, date_trunc('hour', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour FROM inserted_usage
  ) AS rows GROUP BY model_id, hour ORDER BY model_id, hour
  ON CONFLICT (model_id, hour) DO UPDATE SET {_rows.bump(_rows.HOURLY)};
  INSERT INTO {_rows.DAILY} (key_id, model_id, day, {_rows.COUNTERS})
  SELECT key_id, model_id, day, {_SUMS} FROM (
    SELECT *, (created_at AT TIME ZONE 'UTC')::date AS day FROM inserted_usage
  ) AS rows GROUP BY model_id, key_id, day ORDER BY model_id, key_id, day
  ON CONFLICT (key_id, model_id, day) DO UPDATE SET {_rows.bump(_rows.DAILY)};
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS usage_rollups ON models_catalog_usageevent;
CREATE TRIGGER usage_rollups AFTER INSERT ON models_catalog_usageevent
  REFERENCING NEW TABLE AS inserted_usage
  FOR EACH STATEMENT EXECUTE FUNCTION models_catalog_usage_rollups();
"""


def per_statement(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(POSTGRES_PER_STATEMENT)


def per_row(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER usage_rollups ON models_catalog_usageevent; {_rows.POSTGRES_CREATE}")


class Migration(migrations.Migration):
    dependencies = [("models_catalog", "0008_fewer_indexes")]

    operations = [migrations.RunPython(per_statement, per_row)]
