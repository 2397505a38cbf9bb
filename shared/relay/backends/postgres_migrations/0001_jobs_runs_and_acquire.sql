-- Version 1 (from nothing): the jobs and runs tables, acquire_many, acquire_one and skip.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- Names and run ids sort bytewise (COLLATE "C"): locale-aware comparisons cost far more, and the
-- order only has to be the same for everyone (locks are taken in it).
CREATE TABLE {schema}.jobs (
    name  text COLLATE "C" PRIMARY KEY,
    token bigint NOT NULL               -- the last fencing token handed out for this job
);

CREATE TABLE {schema}.runs (
    run_id       text COLLATE "C" PRIMARY KEY,
    job          text COLLATE "C" NOT NULL,
    slot         timestamptz NOT NULL,
    state        text NOT NULL CHECK (state IN ('running', 'pending', 'succeeded', 'failed', 'skipped')),
    attempt      integer NOT NULL DEFAULT 0,
    failures     integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 1,
    token        bigint NOT NULL DEFAULT 0,
    owner        text,
    reason       text,
    error        text,
    expires_at   timestamptz,
    started_at   timestamptz,
    finished_at  timestamptz,
    updated_at   timestamptz NOT NULL
);

CREATE INDEX runs_job_slot ON {schema}.runs (job, slot);
-- Only open runs: the overlap check and the sweep read this small index, however long the history.
-- expires_at stays out of every index, so a heartbeat is a HOT update.
CREATE INDEX runs_open ON {schema}.runs (job) WHERE state IN ('running', 'pending');

-- acquire_many: decide a batch of runs (parallel arrays, one element per request) in one call.
-- Requests are taken in rounds: round k holds the k-th request of each job, so a round has at most
-- one request per job and is decided by one set-based statement; later rounds see earlier ones.
-- The mirror of relay.lease_rules.decide: keep both in step.
CREATE FUNCTION {schema}.acquire_many(
    p_run_ids text[], p_jobs text[], p_slots timestamptz[], p_owners text[], p_leases float8[],
    p_max_attempts integer[], p_overlap boolean[], p_stale float8[]
) RETURNS TABLE (o_index bigint, o_outcome text, o_attempt integer, o_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_rounds integer;
    v_now timestamptz := clock_timestamp();
    v_settled text[];
    v_jobs text[];
BEGIN
    -- Settled without a lock: a finished run never changes, and a lease live at v_now was held at
    -- that instant. When instances tick a moment apart, the later ones stop here and write nothing.
    SELECT array_agg(
               CASE WHEN s.state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                    WHEN s.state = 'running' AND s.expires_at > v_now THEN 'held'
               END ORDER BY r.idx)
    INTO v_settled
    FROM unnest(p_run_ids) WITH ORDINALITY AS r (run_id, idx)
    LEFT JOIN {schema}.runs AS s ON s.run_id = r.run_id;
    RETURN QUERY
    SELECT r.idx, r.outcome, NULL::integer, NULL::bigint
    FROM unnest(v_settled) WITH ORDINALITY AS r (outcome, idx)
    WHERE r.outcome IS NOT NULL;
    SELECT array_agg(DISTINCT r.job COLLATE "C" ORDER BY r.job COLLATE "C") INTO v_jobs
    FROM unnest(p_jobs, v_settled) AS r (job, settled)
    WHERE r.settled IS NULL;
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;
    -- Every write that creates a run holds its job's row, so acquires of one job take turns: the
    -- overlap check and the token counter see each other. Locked in name order: no deadlocks.
    INSERT INTO {schema}.jobs (name, token)
        SELECT j, 0 FROM unnest(v_jobs) AS j
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE name = j)
        ORDER BY j COLLATE "C"
        ON CONFLICT (name) DO NOTHING;
    PERFORM 1 FROM {schema}.jobs WHERE name = ANY (v_jobs) ORDER BY name FOR UPDATE;
    v_now := clock_timestamp();  -- read once the jobs are held, so steps are ordered by it
    -- Heartbeats, finishes and hand-overs change runs without a job lock: hold the runs a decision
    -- may overwrite (pending, or expired at v_now). Any other run can then only stay live at v_now,
    -- finish, or turn pending, which nobody but a holder of the job's row can change again.
    PERFORM 1 FROM {schema}.runs
    WHERE run_id = ANY (p_run_ids)
      AND (state = 'pending' OR (state = 'running' AND NOT coalesce(expires_at > v_now, false)))
    ORDER BY run_id FOR UPDATE;
    SELECT max(n) INTO v_rounds
    FROM (SELECT count(*) AS n FROM unnest(p_jobs, v_settled) AS r (job, settled)
          WHERE r.settled IS NULL GROUP BY r.job) AS c;
    FOR v_round IN 1..coalesce(v_rounds, 0) LOOP
        RETURN QUERY
        WITH req AS (
            SELECT * FROM (
                SELECT r.*, row_number() OVER (PARTITION BY r.job COLLATE "C" ORDER BY r.idx) AS rnd
                FROM unnest(p_run_ids, p_jobs, p_slots, p_owners, p_leases, p_max_attempts,
                            p_overlap, p_stale, v_settled)
                     WITH ORDINALITY AS r (run_id, job, slot, owner, lease, max_attempts,
                                           overlap_skip, stale_after, settled, idx)
                WHERE r.settled IS NULL
            ) AS numbered
            WHERE rnd = v_round
        ), decided AS (
            SELECT q.*,
                CASE
                    WHEN s.run_id IS NULL THEN
                        CASE
                            WHEN q.stale_after IS NOT NULL
                                 AND extract(epoch FROM v_now - q.slot) > q.stale_after THEN 'stale'
                            WHEN q.overlap_skip AND EXISTS (
                                SELECT 1 FROM {schema}.runs AS o
                                WHERE o.job = q.job AND o.state = 'running'
                                  AND o.expires_at > v_now AND o.run_id <> q.run_id
                            ) THEN 'overlap'
                            ELSE 'won'
                        END
                    WHEN s.state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                    WHEN s.state = 'running' AND s.expires_at > v_now THEN 'held'
                    -- An expired lease: its runner stopped heartbeating, its attempt failed.
                    WHEN s.failures + (s.state = 'running')::integer >= s.max_attempts THEN 'exhausted'
                    ELSE 'won'
                END AS outcome,
                coalesce(s.failures + (s.state = 'running')::integer, 0) AS failures,
                coalesce(s.attempt, 0) + 1 AS attempt  -- exact: the run is locked or brand new
            FROM req AS q LEFT JOIN {schema}.runs AS s ON s.run_id = q.run_id
        ), tokens AS (
            -- No CTE is joined with another below: the planner cannot guess their sizes, and a
            -- nested loop over two of them would make a large batch quadratic.
            UPDATE {schema}.jobs AS j SET token = j.token + 1
            FROM decided AS d
            WHERE d.outcome = 'won' AND j.name = d.job
            RETURNING d.idx, d.run_id, d.job, d.slot, d.owner, d.lease, d.max_attempts,
                      d.failures, d.attempt, j.token
        ), leased AS (
            INSERT INTO {schema}.runs AS s (run_id, job, slot, state, attempt, failures,
                                            max_attempts, token, owner, expires_at, updated_at)
            SELECT t.run_id, t.job, t.slot, 'running', t.attempt, t.failures, t.max_attempts,
                   t.token, t.owner, v_now + t.lease * interval '1 second', v_now
            FROM tokens AS t
            ON CONFLICT (run_id) DO UPDATE SET
                state = 'running', attempt = excluded.attempt, failures = excluded.failures,
                token = excluded.token, owner = excluded.owner, reason = NULL,
                expires_at = excluded.expires_at, started_at = NULL,
                updated_at = excluded.updated_at
        ), skipped AS (
            INSERT INTO {schema}.runs (run_id, job, slot, state, reason, finished_at, updated_at)
            SELECT d.run_id, d.job, d.slot, 'skipped', d.outcome, v_now, v_now
            FROM decided AS d WHERE d.outcome IN ('stale', 'overlap')
            ON CONFLICT (run_id) DO NOTHING
        ), exhausted AS (
            UPDATE {schema}.runs AS s SET
                state = 'failed', failures = d.failures, reason = 'max_attempts',
                expires_at = NULL, finished_at = v_now, updated_at = v_now
            FROM decided AS d
            WHERE d.outcome = 'exhausted' AND s.run_id = d.run_id
        )
        SELECT t.idx, 'won', t.attempt, t.token FROM tokens AS t
        UNION ALL
        SELECT d.idx, d.outcome, NULL, NULL FROM decided AS d WHERE d.outcome <> 'won';
    END LOOP;
END
$$;

-- acquire_one: the same decision for one request, written step by step: a few index lookups,
-- so a single acquire costs little more than the insert it makes. Keep it in step with
-- acquire_many and relay.lease_rules.decide (tests/backends/test_postgres.py compares them).
CREATE FUNCTION {schema}.acquire_one(
    p_run_id text, p_job text, p_slot timestamptz, p_owner text, p_lease float8,
    p_max_attempts integer, p_overlap boolean, p_stale float8,
    OUT o_outcome text, OUT o_attempt integer, OUT o_token bigint
)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_run record;
    v_found boolean;
    v_failures integer := 0;
    v_token bigint;
BEGIN
    -- Settled without a lock or a write: a finished run never changes, a lease live now is held.
    SELECT CASE WHEN state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                WHEN state = 'running' AND expires_at > v_now THEN 'held' END
    INTO o_outcome
    FROM {schema}.runs WHERE run_id = p_run_id;
    IF o_outcome IS NOT NULL THEN
        RETURN;
    END IF;
    -- Hold the job's row and draw its next token in one write, so acquires of one job take turns.
    -- A token the decision does not use is skipped: tokens only have to grow.
    UPDATE {schema}.jobs SET token = token + 1 WHERE name = p_job RETURNING token INTO v_token;
    IF NOT FOUND THEN
        INSERT INTO {schema}.jobs AS j (name, token) VALUES (p_job, 1)
        ON CONFLICT (name) DO UPDATE SET token = j.token + 1
        RETURNING token INTO v_token;
    END IF;
    SELECT state, expires_at, failures, max_attempts INTO v_run
    FROM {schema}.runs WHERE run_id = p_run_id FOR UPDATE;
    v_found := FOUND;
    v_now := clock_timestamp();  -- read once the locks are held, so steps are ordered by it
    IF NOT v_found THEN
        IF p_stale IS NOT NULL AND extract(epoch FROM v_now - p_slot) > p_stale THEN
            o_outcome := 'stale';
        ELSIF p_overlap AND EXISTS (
            SELECT 1 FROM {schema}.runs AS o
            WHERE o.job = p_job AND o.state = 'running' AND o.expires_at > v_now
              AND o.run_id <> p_run_id
        ) THEN
            o_outcome := 'overlap';
        ELSE
            o_outcome := 'won';
        END IF;
    ELSIF v_run.state IN ('succeeded', 'failed', 'skipped') THEN
        o_outcome := 'finished';
    ELSIF v_run.state = 'running' AND v_run.expires_at > v_now THEN
        o_outcome := 'held';
    ELSE
        -- An expired lease: its runner stopped heartbeating, its attempt failed.
        v_failures := v_run.failures + (v_run.state = 'running')::integer;
        o_outcome := CASE WHEN v_failures >= v_run.max_attempts THEN 'exhausted' ELSE 'won' END;
    END IF;

    IF o_outcome IN ('stale', 'overlap') THEN
        INSERT INTO {schema}.runs (run_id, job, slot, state, reason, finished_at, updated_at)
        VALUES (p_run_id, p_job, p_slot, 'skipped', o_outcome, v_now, v_now);
    ELSIF o_outcome = 'exhausted' THEN
        UPDATE {schema}.runs SET
            state = 'failed', failures = v_failures, reason = 'max_attempts',
            expires_at = NULL, finished_at = v_now, updated_at = v_now
        WHERE run_id = p_run_id;
    ELSIF o_outcome = 'won' THEN
        o_token := v_token;
        INSERT INTO {schema}.runs AS s (run_id, job, slot, state, attempt, failures, max_attempts,
                                        token, owner, expires_at, updated_at)
        VALUES (p_run_id, p_job, p_slot, 'running', 1, v_failures, p_max_attempts, o_token,
                p_owner, v_now + p_lease * interval '1 second', v_now)
        ON CONFLICT (run_id) DO UPDATE SET
            state = 'running', attempt = s.attempt + 1, failures = excluded.failures,
            token = excluded.token, owner = excluded.owner, reason = NULL,
            expires_at = excluded.expires_at, started_at = NULL, updated_at = excluded.updated_at
        RETURNING s.attempt INTO o_attempt;
    END IF;
END
$$;

-- skip: record a run skipped unless it has a record. Holds the job's row like acquire_many, so a
-- skip never lands between an acquire's read and its write.
CREATE FUNCTION {schema}.skip(p_run_id text, p_job text, p_slot timestamptz, p_reason text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.jobs (name, token) VALUES (p_job, 0) ON CONFLICT (name) DO NOTHING;
    PERFORM 1 FROM {schema}.jobs WHERE name = p_job FOR UPDATE;
    INSERT INTO {schema}.runs (run_id, job, slot, state, reason, finished_at, updated_at)
    VALUES (p_run_id, p_job, p_slot, 'skipped', p_reason, clock_timestamp(), clock_timestamp())
    ON CONFLICT (run_id) DO NOTHING;
    RETURN FOUND;
END
$$;
