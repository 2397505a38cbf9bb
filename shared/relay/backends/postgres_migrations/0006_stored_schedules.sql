-- Version 6 (from 5): stored schedules, their history, and the tasks an instance allows.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- Stored schedules (relay.backends._sql_schedules): one row per schedule, its definition as JSON
-- text (NULL once removed), its version and the store-wide revision of its last change; one
-- history row per version. meta's schedule_revision is the revision: every change bumps it first,
-- so its row lock orders the changes and they commit in revision order. Times are milliseconds
-- since the epoch on the server's clock. Instances record the tasks they allow.
CREATE TABLE IF NOT EXISTS {schema}.schedules (
    name       text COLLATE "C" PRIMARY KEY,
    definition text,
    version    integer NOT NULL,
    revision   bigint NOT NULL,
    updated_ms bigint NOT NULL,
    updated_by text NOT NULL,
    created_ms bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS schedules_revision ON {schema}.schedules (revision);
CREATE TABLE IF NOT EXISTS {schema}.schedule_history (
    name    text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    at_ms   bigint NOT NULL,
    by_whom text NOT NULL,
    action  text NOT NULL,
    changes text NOT NULL,
    PRIMARY KEY (name, version)
);
INSERT INTO {schema}.meta (key, value) VALUES ('schedule_revision', '0')
ON CONFLICT (key) DO NOTHING;
ALTER TABLE {schema}.instances ADD COLUMN IF NOT EXISTS tasks text;
