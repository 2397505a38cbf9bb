-- Version 18 (from 17): an instance declares the definition of each job it decides (a hash and
-- its readable form, as JSON), so that one definition decides every slot during a rollout
-- (relay.definitions). A released migration is never edited (see ../postgres_schema.sql to add
-- one). It only adds (docs/upgrade.md): Relay 0.1 goes on writing its heartbeats without the column.

ALTER TABLE {schema}.instances ADD COLUMN IF NOT EXISTS definitions text;
