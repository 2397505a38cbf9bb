-- Relay's SQLite schema, version 1. Times are milliseconds on the host's clock. No semicolons in comments: statements are split on them.
CREATE TABLE IF NOT EXISTS relay_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS relay_jobs (
    name  TEXT PRIMARY KEY,
    token INTEGER NOT NULL            -- the last fencing token handed out for this job
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS relay_runs (
    run_id       TEXT PRIMARY KEY,
    job          TEXT NOT NULL,
    slot_ms      INTEGER NOT NULL,
    state        TEXT NOT NULL,       -- running, pending, succeeded, failed, skipped
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
-- Only live runs (for overlap and takeover) are indexed: finished runs leave this index.
CREATE INDEX IF NOT EXISTS relay_runs_live ON relay_runs (job, expires_ms)
    WHERE state IN ('running', 'pending');
