-- Version 2 (from 1): acquire_one leases a new run in one insert.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- acquire_one leases a run nobody had recorded with one insert, without reading it again first.
CREATE OR REPLACE FUNCTION {schema}.acquire_one(
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
    v_recorded boolean;
BEGIN
    -- Settled without a lock or a write: a finished run never changes, a lease live now is held.
    SELECT CASE WHEN state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                WHEN state = 'running' AND expires_at > v_now THEN 'held' END
    INTO o_outcome
    FROM {schema}.runs WHERE run_id = p_run_id;
    v_recorded := FOUND;
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
    -- The common case in one insert: a run nobody had recorded, with no rule to check. If another
    -- instance recorded it while this one waited for the job's row, the insert does nothing and
    -- the full decision below reads what that instance wrote.
    v_now := clock_timestamp();
    IF NOT v_recorded AND NOT p_overlap
       AND (p_stale IS NULL OR extract(epoch FROM v_now - p_slot) <= p_stale) THEN
        INSERT INTO {schema}.runs (run_id, job, slot, state, attempt, failures, max_attempts,
                                   token, owner, expires_at, updated_at)
        VALUES (p_run_id, p_job, p_slot, 'running', 1, 0, p_max_attempts, v_token, p_owner,
                v_now + p_lease * interval '1 second', v_now)
        ON CONFLICT (run_id) DO NOTHING;
        IF FOUND THEN
            o_outcome := 'won';
            o_attempt := 1;
            o_token := v_token;
            RETURN;
        END IF;
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
