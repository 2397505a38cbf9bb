-- Version 15 (from 14): acquire_many inserts the runs it finds new in one plain insert.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- Measured on one acquire_many of 10,000 new runs (docs/performance.md): the rounds' statement
-- probed each run's primary key twice more (once to lock it, once to decide it) after the first
-- read had found no record, carried every request through four materialized CTEs, and inserted
-- with ON CONFLICT, whose speculative insertion costs the server about a third more than a plain
-- insert. Now the first read also says which runs have no record; those the first round would
-- win as new (no rule to check) are inserted at once by a plain insert, and only the rest are
-- locked and decided in rounds. A run recorded since the read (a trigger or a backfill, which
-- insert without the job's row) fails that insert, which is undone, and the rounds decide every
-- run as before. An instance that waited for another's tick lets the row it waited on go at
-- once (it took it only to wait), so the instances that lost the tick read the runs again side by
-- side instead of one after the other. The rules are unchanged.

CREATE OR REPLACE FUNCTION {schema}.acquire_many(
    p_run_ids text[], p_jobs text[], p_slots timestamptz[], p_owners text[], p_leases float8[],
    p_max_attempts integer[], p_overlap boolean[], p_stale float8[], p_buffer boolean[],
    p_versions integer[]
) RETURNS TABLE (o_index bigint, o_outcome text, o_attempt integer, o_token bigint,
                o_version integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_rounds integer;
    v_rnd bigint[];
    v_waited boolean := false;
    v_now timestamptz := clock_timestamp();
    v_settled text[];
    v_again text[];
    v_jobs text[];
    v_paused text[];
    v_floorless boolean;
    v_absent boolean[];
    v_new boolean[];
    v_won bigint[];
    v_tokens bigint[];
    v_undecided bigint;
BEGIN
    -- Settled without a lock (see version 1). Below, as in version 5 but for the version.
    -- One index probe per request (version 9): a join could hash the whole table of runs, whose
    -- history only grows (LIMIT keeps the lateral subquery a probe). Version 15: the same probe
    -- says which runs have no record (v_absent).
    SELECT array_agg(s.settled ORDER BY r.idx), array_agg(s.run_id IS NULL ORDER BY r.idx)
    INTO v_settled, v_absent
    FROM unnest(p_run_ids) WITH ORDINALITY AS r (run_id, idx)
    LEFT JOIN LATERAL (
        SELECT s.run_id,
               CASE WHEN s.state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                    WHEN s.state = 'running' AND s.expires_at > v_now THEN 'held' END AS settled
        FROM {schema}.runs AS s WHERE s.run_id = r.run_id LIMIT 1
    ) AS s ON true;
    RETURN QUERY
    SELECT r.idx, r.outcome, NULL::integer, NULL::bigint, NULL::integer
    FROM unnest(v_settled) WITH ORDINALITY AS r (outcome, idx)
    WHERE r.outcome IS NOT NULL;
    SELECT array_agg(DISTINCT r.job COLLATE "C" ORDER BY r.job COLLATE "C") INTO v_jobs
    FROM unnest(p_jobs, v_settled) AS r (job, settled)
    WHERE r.settled IS NULL;
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO {schema}.jobs (name, token)
        SELECT j, 0 FROM unnest(v_jobs) AS j
        WHERE NOT EXISTS (SELECT 1 FROM {schema}.jobs WHERE name = j)
        ORDER BY j COLLATE "C"
        ON CONFLICT (name) DO NOTHING;
    -- Version 11: another instance holding the first of these jobs' rows is deciding the same
    -- tick. Wait for it on that one row, then read the runs again before taking the others: an
    -- instance that lost the tick finds every run settled and takes no more locks.
    PERFORM 1 FROM {schema}.jobs WHERE name = v_jobs[1] FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Version 15: and let the row go once it is had (a lock taken in a block that fails is
        -- released), so that the instances that lost a tick read the runs again side by side, not
        -- one after the other. If a run is left undecided, the row is taken again with the others.
        BEGIN
            PERFORM 1 FROM {schema}.jobs WHERE name = v_jobs[1] FOR UPDATE;
            RAISE SQLSTATE 'RL001';
        EXCEPTION WHEN SQLSTATE 'RL001' THEN
            NULL;
        END;
        v_waited := true;
        v_now := clock_timestamp();
        SELECT array_agg(coalesce(r.settled, s.settled) ORDER BY r.idx),
               array_agg(s.run_id IS NULL ORDER BY r.idx)
        INTO v_again, v_absent
        FROM unnest(p_run_ids, v_settled) WITH ORDINALITY AS r (run_id, settled, idx)
        LEFT JOIN LATERAL (
            SELECT s.run_id,
                   CASE WHEN s.state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                        WHEN s.state = 'running' AND s.expires_at > v_now THEN 'held' END AS settled
            FROM {schema}.runs AS s WHERE r.settled IS NULL AND s.run_id = r.run_id LIMIT 1
        ) AS s ON true;
        RETURN QUERY
        SELECT r.idx, r.outcome, NULL::integer, NULL::bigint, NULL::integer
        FROM unnest(v_again, v_settled) WITH ORDINALITY AS r (outcome, before, idx)
        WHERE r.outcome IS NOT NULL AND r.before IS NULL;
        v_settled := v_again;
        SELECT array_agg(DISTINCT r.job COLLATE "C" ORDER BY r.job COLLATE "C") INTO v_jobs
        FROM unnest(p_jobs, v_settled) AS r (job, settled)
        WHERE r.settled IS NULL;
        IF v_jobs IS NULL THEN
            RETURN;
        END IF;
    END IF;
    -- Held in name order, as in version 1; a pause or resume takes the same row, so it lands
    -- between two acquires, never inside one.
    -- Version 12: and whether any of them keeps a token floor (a job from before version 8).
    SELECT coalesce(array_agg(l.name) FILTER (WHERE l.paused_at IS NOT NULL), ARRAY[]::text[]),
           bool_and(l.token = 0)
    INTO v_paused, v_floorless
    FROM (SELECT name, paused_at, token FROM {schema}.jobs WHERE name = ANY (v_jobs)
          ORDER BY name FOR UPDATE) AS l;
    v_now := clock_timestamp();
    -- Settled again (version 9): an instance that waited above for another's locks finds what that
    -- one wrote; a run it finds finished or live is decided as the rounds would decide it, so
    -- racing instances each write nothing once the first has won the tick. Version 12: only after
    -- a wait; the rounds read every run afresh and decide it by the same rules anyway (version 15:
    -- and the insert of the runs read as new fails if one was recorded since).
    IF v_waited THEN
        SELECT array_agg(coalesce(r.settled, s.settled) ORDER BY r.idx),
               array_agg(s.run_id IS NULL ORDER BY r.idx)
        INTO v_again, v_absent
        FROM unnest(p_run_ids, v_settled) WITH ORDINALITY AS r (run_id, settled, idx)
        LEFT JOIN LATERAL (
            SELECT s.run_id,
                   CASE WHEN s.state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                        WHEN s.state = 'running' AND s.expires_at > v_now THEN 'held' END AS settled
            FROM {schema}.runs AS s WHERE r.settled IS NULL AND s.run_id = r.run_id LIMIT 1
        ) AS s ON true;
        RETURN QUERY
        SELECT r.idx, r.outcome, NULL::integer, NULL::bigint, NULL::integer
        FROM unnest(v_again, v_settled) WITH ORDINALITY AS r (outcome, before, idx)
        WHERE r.outcome IS NOT NULL AND r.before IS NULL;
        v_settled := v_again;
    END IF;
    -- Version 12: a batch with one request per job (a tick) is one round, numbered without a
    -- sort; v_jobs holds the jobs of exactly the undecided requests unless the runs were read
    -- again after a wait.
    SELECT count(*) INTO v_undecided FROM unnest(v_settled) AS r (settled) WHERE r.settled IS NULL;
    v_rounds := v_undecided;
    IF v_waited OR v_rounds > cardinality(v_jobs) THEN
        SELECT max(n.rnd), array_agg(n.rnd ORDER BY n.idx) INTO v_rounds, v_rnd
        FROM (SELECT r.idx, CASE WHEN r.settled IS NULL THEN row_number() OVER (
                        PARTITION BY r.job COLLATE "C", r.settled IS NULL ORDER BY r.idx) END AS rnd
              FROM unnest(p_jobs, v_settled) WITH ORDINALITY AS r (job, settled, idx)) AS n;
    ELSIF v_rounds > 0 THEN
        v_rounds := 1;
    END IF;
    -- Version 15: the common case first, in one plain insert. A run with no record at the last
    -- read, in the first round, without overlap or buffer_one, of a job not paused, not stale, is
    -- won at attempt 1 whatever else the job has (the rounds' rules for a new run). A trigger or a
    -- backfill may have recorded it since (they insert without the job's row): the insert then
    -- fails, is undone, and the rounds decide these runs too. ON CONFLICT would cost the server
    -- more for every run; the results are kept until the insert is done, as a row returned stays.
    BEGIN
        WITH won AS (
            SELECT r.idx, r.run_id, r.job, r.slot, r.owner, r.lease, r.max_attempts,
                   r.schedule_version,
                   greatest(
                       greatest(CASE WHEN v_floorless THEN 0 ELSE (
                                    SELECT j.token FROM {schema}.jobs AS j WHERE j.name = r.job)
                                END,
                                (SELECT t.token FROM {schema}.runs AS t
                                 WHERE t.job = r.job ORDER BY t.token DESC LIMIT 1)) + 1,
                       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS token
            FROM unnest(p_run_ids, p_jobs, p_slots, p_owners, p_leases, p_max_attempts,
                        p_overlap, p_stale, p_buffer, p_versions, v_settled, v_rnd, v_absent)
                 WITH ORDINALITY AS r (run_id, job, slot, owner, lease, max_attempts,
                                       overlap_skip, stale_after, buffer_one,
                                       schedule_version, settled, rnd, absent, idx)
            WHERE r.settled IS NULL AND r.absent AND coalesce(r.rnd, 1) = 1
              AND NOT r.overlap_skip AND NOT r.buffer_one AND r.job <> ALL (v_paused)
              AND NOT coalesce(extract(epoch FROM v_now - r.slot) > r.stale_after, false)
        ), created AS (
            INSERT INTO {schema}.runs (run_id, job, slot, state, attempt, failures, max_attempts,
                                       token, owner, expires_at, updated_at, schedule_version)
            SELECT w.run_id, w.job, w.slot, 'running', 1, 0, w.max_attempts, w.token, w.owner,
                   v_now + w.lease * interval '1 second', v_now, w.schedule_version
            FROM won AS w
        )
        SELECT array_agg(w.idx), array_agg(w.token) INTO v_won, v_tokens FROM won AS w;
    EXCEPTION WHEN unique_violation THEN
        v_won := NULL;
        v_tokens := NULL;
    END;
    RETURN QUERY
    SELECT w.idx, 'won', 1, w.token, p_versions[w.idx]
    FROM unnest(v_won, v_tokens) AS w (idx, token);
    IF coalesce(cardinality(v_won), 0) = v_undecided THEN
        RETURN;
    END IF;
    -- Which requests the insert decided, for the rounds to leave out.
    SELECT array_agg(w.idx IS NOT NULL ORDER BY r.idx) INTO v_new
    FROM generate_subscripts(p_run_ids, 1) AS r (idx)
    LEFT JOIN unnest(v_won) AS w (idx) ON w.idx = r.idx;
    -- The runs a decision may overwrite (see version 1).
    PERFORM 1 FROM {schema}.runs
    WHERE run_id = ANY (ARRAY(
              SELECT r.run_id FROM unnest(p_run_ids, v_settled, v_new) AS r (run_id, settled, new)
              WHERE r.settled IS NULL AND NOT r.new))
      AND (state = 'pending' OR (state = 'running' AND NOT coalesce(expires_at > v_now, false)))
    ORDER BY run_id FOR UPDATE;
    FOR v_round IN 1..coalesce(v_rounds, 0) LOOP
        RETURN QUERY
        WITH req AS (
            SELECT r.*
            FROM unnest(p_run_ids, p_jobs, p_slots, p_owners, p_leases, p_max_attempts,
                        p_overlap, p_stale, p_buffer, p_versions, v_settled, v_rnd, v_new)
                 WITH ORDINALITY AS r (run_id, job, slot, owner, lease, max_attempts,
                                       overlap_skip, stale_after, buffer_one,
                                       schedule_version, settled, rnd, new, idx)
            WHERE r.settled IS NULL AND NOT r.new AND coalesce(r.rnd, 1) = v_round
        ), looked AS (
            SELECT q.*, s.run_id AS s_run_id, s.state AS s_state, s.expires_at AS s_expires,
                   s.failures AS s_failures, s.max_attempts AS s_max, s.attempt AS s_attempt,
                   s.reason AS s_reason, s.schedule_version AS s_version,
                   -- Read only where a rule may use them (CASE evaluates lazily).
                   CASE WHEN q.overlap_skip OR q.buffer_one OR s.reason = 'buffered' THEN EXISTS (
                       SELECT 1 FROM {schema}.runs AS o
                       WHERE o.job = q.job AND o.state = 'running'
                         AND o.expires_at > v_now AND o.run_id <> q.run_id
                   ) ELSE false END AS other_live,
                   CASE WHEN q.buffer_one THEN EXISTS (
                       SELECT 1 FROM {schema}.runs AS w
                       WHERE w.job = q.job AND w.state = 'pending' AND w.reason = 'buffered'
                   ) ELSE false END AS waiting
            FROM req AS q LEFT JOIN {schema}.runs AS s ON s.run_id = q.run_id
        ), decided AS (
            SELECT l.idx, l.run_id, l.job, l.slot, l.owner, l.lease, l.max_attempts, l.schedule_version,
                -- A won run's version, as leased below writes it (version 8: read here, so that
                -- the result joins no CTE with another). A run that may be leased is new or was
                -- locked above; one created since is a triggered or backfilled run, without one.
                coalesce(l.s_version, l.schedule_version) AS won_version,
                CASE
                    WHEN l.s_run_id IS NULL THEN
                        CASE
                            WHEN l.stale_after IS NOT NULL
                                 AND extract(epoch FROM v_now - l.slot) > l.stale_after THEN 'stale'
                            WHEN l.job = ANY (v_paused) THEN 'paused'
                            WHEN l.other_live AND (l.overlap_skip OR (l.buffer_one AND l.waiting))
                                THEN 'overlap'
                            WHEN l.other_live AND l.buffer_one THEN 'buffered'
                            ELSE 'won'
                        END
                    WHEN l.s_state IN ('succeeded', 'failed', 'skipped') THEN 'finished'
                    WHEN l.s_state = 'running' AND l.s_expires > v_now THEN 'held'
                    WHEN l.s_state = 'pending' AND l.s_reason = 'buffered' AND l.other_live
                        THEN 'buffered'
                    WHEN l.s_failures + (l.s_state = 'running')::integer
                         >= CASE WHEN l.s_attempt = 0 THEN l.max_attempts ELSE l.s_max END
                        THEN 'exhausted'
                    ELSE 'won'
                END AS outcome,
                l.s_run_id IS NULL AS is_new,
                coalesce(l.s_failures + (l.s_state = 'running')::integer, 0) AS failures,
                coalesce(l.s_attempt, 0) + 1 AS attempt
            FROM looked AS l
        ), tokens AS (
            -- Drawn without writing the job's row (version 8), as next_token draws it; written
            -- out here (version 9): a PL/pgSQL call per run cost more than the index probe. The
            -- job's row is read only when a job of the batch keeps a floor (version 12).
            SELECT d.idx, d.run_id, d.job, d.slot, d.owner, d.lease, d.max_attempts,
                   d.failures, d.attempt,
                   greatest(
                       greatest(CASE WHEN v_floorless THEN 0 ELSE (
                                    SELECT j.token FROM {schema}.jobs AS j WHERE j.name = d.job)
                                END,
                                (SELECT r.token FROM {schema}.runs AS r
                                 WHERE r.job = d.job ORDER BY r.token DESC LIMIT 1)) + 1,
                       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS token,
                   d.schedule_version, d.won_version
            FROM decided AS d
            WHERE d.outcome = 'won'
        ), leased AS (
            INSERT INTO {schema}.runs AS s (run_id, job, slot, state, attempt, failures,
                                            max_attempts, token, owner, expires_at, updated_at,
                                            schedule_version)
            SELECT t.run_id, t.job, t.slot, 'running', t.attempt, t.failures, t.max_attempts,
                   t.token, t.owner, v_now + t.lease * interval '1 second', v_now,
                   t.schedule_version
            FROM tokens AS t
            ON CONFLICT (run_id) DO UPDATE SET
                state = 'running', attempt = excluded.attempt, failures = excluded.failures,
                token = excluded.token, owner = excluded.owner, reason = NULL,
                expires_at = excluded.expires_at, started_at = NULL,
                updated_at = excluded.updated_at,
                max_attempts = CASE WHEN s.attempt = 0 THEN excluded.max_attempts
                                    ELSE s.max_attempts END,
                -- A takeover or a retry keeps the version of the run's first lease.
                schedule_version = coalesce(s.schedule_version, excluded.schedule_version)
        ), skipped AS (
            INSERT INTO {schema}.runs (run_id, job, slot, state, reason, max_attempts,
                                       finished_at, updated_at, schedule_version)
            SELECT d.run_id, d.job, d.slot,
                   CASE WHEN d.outcome = 'buffered' THEN 'pending' ELSE 'skipped' END,
                   d.outcome, d.max_attempts,
                   CASE WHEN d.outcome = 'buffered' THEN NULL ELSE v_now END, v_now,
                   d.schedule_version
            FROM decided AS d
            WHERE d.is_new AND d.outcome IN ('stale', 'overlap', 'paused', 'buffered')
            ON CONFLICT (run_id) DO NOTHING
        ), exhausted AS (
            UPDATE {schema}.runs AS s SET
                state = 'failed', failures = d.failures, reason = 'max_attempts',
                expires_at = NULL, finished_at = v_now, updated_at = v_now
            FROM decided AS d
            WHERE d.outcome = 'exhausted' AND s.run_id = d.run_id
        )
        SELECT t.idx, 'won', t.attempt, t.token, t.won_version FROM tokens AS t
        UNION ALL
        SELECT d.idx, d.outcome, NULL, NULL, NULL FROM decided AS d WHERE d.outcome <> 'won';
    END LOOP;
END
$$;
