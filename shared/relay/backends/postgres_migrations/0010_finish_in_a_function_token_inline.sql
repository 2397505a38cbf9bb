-- Version 10 (from 9): a finish is one call of a PL/pgSQL function instead of an UPDATE, and
-- acquire_one draws its token without calling next_token.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- finish: a run's outcome, as the statement it replaces (version 10) wrote it: a top-level UPDATE
-- was planned at every call (the backend prepares nothing, for transaction-mode poolers), which
-- cost the server more than the update itself; PL/pgSQL keeps the plan for the session. No row when
-- the lease was lost (the caller reads the run to say how).
CREATE OR REPLACE FUNCTION {schema}.finish(p_run_id text, p_token bigint, p_ok boolean, p_error text)
RETURNS TABLE (o_state text)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE {schema}.runs SET
        state = CASE WHEN p_ok THEN 'succeeded'
                     WHEN failures + 1 >= max_attempts THEN 'failed'
                     ELSE 'pending' END,
        failures = failures + CASE WHEN p_ok THEN 0 ELSE 1 END,
        error = p_error,
        expires_at = NULL,
        finished_at = CASE WHEN p_ok OR failures + 1 >= max_attempts THEN clock_timestamp() END,
        reason = CASE WHEN p_ok THEN NULL ELSE 'failed' END,
        updated_at = clock_timestamp()
    WHERE run_id = p_run_id AND token = p_token AND state = 'running'
    RETURNING state;
END
$$;

-- acquire_one draws its token by next_token's formula, written out as acquire_many has since
-- version 9: the nested PL/pgSQL call cost more than the index probe it makes. next_token stays.
CREATE OR REPLACE FUNCTION {schema}.acquire_one(
    p_run_id text, p_job text, p_slot timestamptz, p_owner text, p_lease float8,
    p_max_attempts integer, p_overlap boolean, p_stale float8, p_buffer boolean,
    p_version integer, OUT o_outcome text, OUT o_attempt integer, OUT o_token bigint,
    OUT o_version integer
)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_run record;
    v_found boolean;
    v_failures integer := 0;
    v_token bigint;
    v_recorded boolean;
    v_paused boolean;
    v_live boolean;
BEGIN
    SELECT CASE WHEN state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                WHEN state = 'running' AND expires_at > v_now THEN 'held' END
    INTO o_outcome
    FROM {schema}.runs WHERE run_id = p_run_id;
    v_recorded := FOUND;
    IF o_outcome IS NOT NULL THEN
        RETURN;
    END IF;
    -- The job's row held, not written (version 8): the run's row is the one write.
    SELECT token, paused_at IS NOT NULL INTO v_token, v_paused
    FROM {schema}.jobs WHERE name = p_job FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO {schema}.jobs (name, token) VALUES (p_job, 0) ON CONFLICT (name) DO NOTHING;
        SELECT token, paused_at IS NOT NULL INTO v_token, v_paused
        FROM {schema}.jobs WHERE name = p_job FOR UPDATE;
    END IF;
    -- next_token's formula, written out (version 10): the nested PL/pgSQL call cost more than
    -- its index probe.
    v_token := greatest(
        greatest(v_token, (SELECT r.token FROM {schema}.runs AS r WHERE r.job = p_job
                           ORDER BY r.token DESC LIMIT 1)) + 1,
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    v_now := clock_timestamp();
    IF NOT v_recorded AND NOT p_overlap AND NOT p_buffer AND NOT v_paused
       AND (p_stale IS NULL OR extract(epoch FROM v_now - p_slot) <= p_stale) THEN
        INSERT INTO {schema}.runs (run_id, job, slot, state, attempt, failures, max_attempts,
                                   token, owner, expires_at, updated_at, schedule_version)
        VALUES (p_run_id, p_job, p_slot, 'running', 1, 0, p_max_attempts, v_token, p_owner,
                v_now + p_lease * interval '1 second', v_now, p_version)
        ON CONFLICT (run_id) DO NOTHING;
        IF FOUND THEN
            o_outcome := 'won';
            o_attempt := 1;
            o_token := v_token;
            o_version := p_version;
            RETURN;
        END IF;
    END IF;
    SELECT state, expires_at, failures, max_attempts, attempt, reason INTO v_run
    FROM {schema}.runs WHERE run_id = p_run_id FOR UPDATE;
    v_found := FOUND;
    v_now := clock_timestamp();
    v_live := (p_overlap OR p_buffer OR coalesce(v_run.reason = 'buffered', false)) AND EXISTS (
        SELECT 1 FROM {schema}.runs AS o
        WHERE o.job = p_job AND o.state = 'running' AND o.expires_at > v_now
          AND o.run_id <> p_run_id
    );
    IF NOT v_found THEN
        IF p_stale IS NOT NULL AND extract(epoch FROM v_now - p_slot) > p_stale THEN
            o_outcome := 'stale';
        ELSIF v_paused THEN
            o_outcome := 'paused';
        ELSIF v_live AND (p_overlap OR (p_buffer AND EXISTS (
            SELECT 1 FROM {schema}.runs AS w
            WHERE w.job = p_job AND w.state = 'pending' AND w.reason = 'buffered'
        ))) THEN
            o_outcome := 'overlap';
        ELSIF v_live AND p_buffer THEN
            o_outcome := 'buffered';
        ELSE
            o_outcome := 'won';
        END IF;
    ELSIF v_run.state IN ('succeeded', 'failed', 'skipped') THEN
        o_outcome := 'finished';
    ELSIF v_run.state = 'running' AND v_run.expires_at > v_now THEN
        o_outcome := 'held';
    ELSIF v_run.state = 'pending' AND v_run.reason = 'buffered' AND v_live THEN
        o_outcome := 'buffered';
    ELSE
        v_failures := v_run.failures + (v_run.state = 'running')::integer;
        o_outcome := CASE WHEN v_failures >= CASE WHEN v_run.attempt = 0 THEN p_max_attempts
                                                  ELSE v_run.max_attempts END
                          THEN 'exhausted' ELSE 'won' END;
    END IF;

    IF NOT v_found AND o_outcome IN ('stale', 'overlap', 'paused', 'buffered') THEN
        INSERT INTO {schema}.runs (run_id, job, slot, state, reason, max_attempts, finished_at,
                                   updated_at, schedule_version)
        VALUES (p_run_id, p_job, p_slot,
                CASE WHEN o_outcome = 'buffered' THEN 'pending' ELSE 'skipped' END, o_outcome,
                p_max_attempts, CASE WHEN o_outcome = 'buffered' THEN NULL ELSE v_now END, v_now,
                p_version);
    ELSIF o_outcome = 'exhausted' THEN
        UPDATE {schema}.runs SET
            state = 'failed', failures = v_failures, reason = 'max_attempts',
            expires_at = NULL, finished_at = v_now, updated_at = v_now
        WHERE run_id = p_run_id;
    ELSIF o_outcome = 'won' THEN
        o_token := v_token;
        INSERT INTO {schema}.runs AS s (run_id, job, slot, state, attempt, failures, max_attempts,
                                        token, owner, expires_at, updated_at, schedule_version)
        VALUES (p_run_id, p_job, p_slot, 'running', 1, v_failures, p_max_attempts, o_token,
                p_owner, v_now + p_lease * interval '1 second', v_now, p_version)
        ON CONFLICT (run_id) DO UPDATE SET
            state = 'running', attempt = s.attempt + 1, failures = excluded.failures,
            token = excluded.token, owner = excluded.owner, reason = NULL,
            expires_at = excluded.expires_at, started_at = NULL, updated_at = excluded.updated_at,
            max_attempts = CASE WHEN s.attempt = 0 THEN excluded.max_attempts
                                ELSE s.max_attempts END,
            schedule_version = coalesce(s.schedule_version, excluded.schedule_version)
        RETURNING s.attempt, s.schedule_version INTO o_attempt, o_version;
    END IF;
END
$$;
