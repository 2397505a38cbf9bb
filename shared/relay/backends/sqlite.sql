-- Relay's SQLite schema, version 2. Times are milliseconds on the host's clock. No semicolons in comments: statements are split on them.
CREATE TABLE relay_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE relay_runs (
    run_id       TEXT PRIMARY KEY,
    job          TEXT NOT NULL,
    slot_ms      INTEGER NOT NULL,
    state        TEXT NOT NULL,       -- running, pending, succeeded, failed, skipped, or counter
    attempt      INTEGER NOT NULL DEFAULT 0,
    failures     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 1,
    token        INTEGER NOT NULL DEFAULT 0,
    owner        TEXT,
    reason       TEXT,
    error        TEXT,
    expires_ms   INTEGER,
    started_ms   INTEGER,
    finished_ms  INTEGER,
    updated_ms   INTEGER NOT NULL
) WITHOUT ROWID;            -- clustered by run id: one b-tree fewer to write per step
-- A job's runs need no index of their own: run ids are 'job@<slot>', so they are one key range.
-- Each job also has one row that is not a run: its fencing-token counter, state 'counter', whose
-- token is the last one handed out for the job. Its key, '<job>@~', sorts just after the job's
-- newest runs ('~' follows every digit), so a lease writes the counter on the page it writes the
-- new run to, and a table of counters would be one more page to write per lease.
-- Only live runs (for overlap and takeover) are indexed: finished runs leave this index.
CREATE INDEX relay_runs_live ON relay_runs (job, expires_ms)
    WHERE state IN ('running', 'pending');
INSERT INTO relay_meta (key, value) VALUES ('schema_version', '2')
