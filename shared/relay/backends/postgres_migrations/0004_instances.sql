-- Version 4 (from 3): the instances table.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- Each instance's own heartbeat (relay instances, relay health): one row per owner, upserted every
-- few seconds, deleted once expired.
CREATE TABLE IF NOT EXISTS {schema}.instances (
    owner         text COLLATE "C" PRIMARY KEY,
    role          text NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL,   -- the instance's own clock
    version       text NOT NULL,          -- Relay's version
    beat_interval float8 NOT NULL,        -- seconds between its beats
    beat_at       timestamptz NOT NULL,   -- the server's clock, as every time below
    expires_at    timestamptz NOT NULL
);
