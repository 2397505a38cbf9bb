-- Relay's SQLite schema, version 2. Times are milliseconds on the host's clock. No semicolons in comments: statements are split on them.
CREATE TABLE relay_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE relay_runs (
    run_id       TEXT PRIMARY KEY,
    job          TEXT NOT NULL,
    slot_ms      INTEGER NOT NULL,
    state        TEXT NOT NULL,       -- running, pending, succeeded, failed, skipped, or job
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
    updated_ms   INTEGER NOT NULL,
    live         INTEGER              -- on a job row: how many of the job's runs are live
) WITHOUT ROWID;            -- clustered by run id: one b-tree fewer to write per step
-- A job's runs need no index of their own: run ids are 'job@<slot>', so they are one key range.
-- Each job also has one row that is not a run, its job row, with state 'job': token holds the last
-- fencing token handed out for the job, and live how many of its runs are running or pending.
-- Its key, '<job>@~', sorts just after the job's newest runs ('~' follows every digit), so the
-- steps of a recent run write the job row on the page they write the run to: a lease or a finish
-- dirties one page. An index of live runs would be a second page for both.
-- Live runs are found from the job rows: those with live above zero, then that many running or
-- pending runs from the newest back. Only the job rows are indexed, and an entry is written once.
CREATE INDEX relay_job_rows ON relay_runs (job) WHERE state = 'job';
INSERT INTO relay_meta (key, value) VALUES ('schema_version', '2')
