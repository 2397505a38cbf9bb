-- Version 17 (from 16): an instance records why it is not working although it beats (its ticks
-- failed for longer than a lease, or its store needs a newer Relay), for relay health.
-- A released migration is never edited (see ../postgres_schema.sql to add one).
-- It only adds (docs/upgrade.md): Relay 0.1 goes on writing its heartbeats without the column.

ALTER TABLE {schema}.instances ADD COLUMN IF NOT EXISTS problem text;
