"""Database triggers that keep the usage rollups in step with every UsageEvent insert.

Doing it in the database means the request path sends one INSERT and the
rollups are updated atomically with it: no extra round trips, no drift, and
rows loaded in bulk (benchmarks, imports) are counted the same way.
"""
from django.db import migrations

COUNTERS = "requests, completed, failed, input_tokens, output_tokens, credits, latency_ms_total"
_VALUES = ("1, CASE WHEN NEW.success THEN 1 ELSE 0 END, CASE WHEN NEW.success THEN 0 ELSE 1 END, "
           "NEW.input_tokens, NEW.output_tokens, NEW.credits_charged, NEW.latency_ms")


def bump(table):
    return ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in COUNTERS.split(", "))


HOURLY = "models_catalog_modelhourlyusage"
DAILY = "models_catalog_keydailyusage"

SQLITE_CREATE = f"""
CREATE TRIGGER usage_rollups AFTER INSERT ON models_catalog_usageevent
BEGIN
  INSERT INTO {HOURLY} (model_id, hour, {COUNTERS})
  VALUES (NEW.model_id, strftime('%Y-%m-%d %H:00:00', NEW.created_at), {_VALUES})
  ON CONFLICT (model_id, hour) DO UPDATE SET {bump(HOURLY)};
  INSERT INTO {DAILY} (key_id, model_id, day, {COUNTERS})
  VALUES (NEW.key_id, NEW.model_id, date(NEW.created_at), {_VALUES})
  ON CONFLICT (key_id, model_id, day) DO UPDATE SET {bump(DAILY)};
END;
"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS usage_rollups;"

POSTGRES_CREATE = f"""
CREATE OR REPLACE FUNCTION models_catalog_usage_rollups() RETURNS trigger AS $$
BEGIN
  INSERT INTO {HOURLY} (model_id, hour, {COUNTERS})
  VALUES (NEW.model_id, date_trunc('hour', NEW.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', {_VALUES})
  ON CONFLICT (model_id, hour) DO UPDATE SET {bump(HOURLY)};
  INSERT INTO {DAILY} (key_id, model_id, day, {COUNTERS})
  VALUES (NEW.key_id, NEW.model_id, (NEW.created_at AT TIME ZONE 'UTC')::date, {_VALUES})
  ON CONFLICT (key_id, model_id, day) DO UPDATE SET {bump(DAILY)};
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER usage_rollups AFTER INSERT ON models_catalog_usageevent
  FOR EACH ROW EXECUTE FUNCTION models_catalog_usage_rollups();
"""
POSTGRES_DROP = """
DROP TRIGGER IF EXISTS usage_rollups ON models_catalog_usageevent;
DROP FUNCTION IF EXISTS models_catalog_usage_rollups();
"""


def _run(sql_by_vendor):
    def apply(apps, schema_editor):
        sql = sql_by_vendor.get(schema_editor.connection.vendor)
        if sql is None:
            raise RuntimeError(f"usage rollups need SQLite or PostgreSQL, not {schema_editor.connection.vendor}")
        # A trigger body holds semicolons, so it goes to the database as one statement
        # through a plain cursor (no parameter substitution of the % signs).
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(sql)
    return apply


class Migration(migrations.Migration):
    dependencies = [("models_catalog", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_CREATE, "postgresql": POSTGRES_CREATE}),
            _run({"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}),
        ),
    ]
