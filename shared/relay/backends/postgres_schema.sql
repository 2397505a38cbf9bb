-- Relay's PostgreSQL schema as it is today: what a fresh install runs, read top to bottom.
-- {schema} is replaced by the quoted schema name (URL option ?schema=). The migrator
-- (relay.backends._postgres_schema) creates {schema}.meta (key, value) first and records the
-- version there; an install at an older version runs postgres_migrations/ from its version on.
--
-- To add version N: add postgres_migrations/000N_<what_it_changes>.sql, which brings version N-1
-- to N (never edit a released migration), and make the same change here, in place: a column in
-- its table, a function's new body instead of the old one. tests/backends/test_postgres_schema.py
-- holds the two equal: a fresh install and an install migrated from each earlier version must end
-- with the same tables, columns, indexes, constraints, functions (bodies and comments inside them
-- included) and triggers.
--
-- Times are timestamptz on the server's clock, which alone decides expiry. Names and run ids sort
-- bytewise (COLLATE "C"): locale-aware comparisons cost far more, and the order only has to be the
-- same for everyone (locks are taken in it).

-- jobs: one row per job, a floor for its fencing tokens, and what the control plane keeps of it:
-- the definition its schedulers registered (spec) and, while it is paused, when, by whom and why.
-- Every write that creates a run holds its job's row (a row lock, not a write), so acquires of one
-- job take turns; a pause or resume takes the same row, so it lands between two acquires, never
-- inside one.
CREATE TABLE {schema}.jobs (
    name          text COLLATE "C" PRIMARY KEY,
    token         bigint NOT NULL,      -- tokens of this job are above it (see next_token)
    spec          text,
    paused_at     timestamptz,
    paused_by     text,
    paused_reason text
);

-- run_state: the states a run may be in. A domain, not a CHECK on runs (version 14): a table's
-- CHECK is read back from its stored text and prepared again at every statement that writes a
-- row, a domain's check once per session (the type cache). The same rule, for less per write.
CREATE DOMAIN {schema}.run_state AS text CONSTRAINT run_state_check
    CHECK (VALUE IN ('running', 'pending', 'succeeded', 'failed', 'skipped'));

-- runs: one row per run, keyed by its run id (job@slot). A run never leased (attempt 0: manual,
-- backfilled, resumed, buffered) takes the max_attempts of the request that first leases it.
CREATE TABLE {schema}.runs (
    run_id       text COLLATE "C" PRIMARY KEY,
    job          text COLLATE "C" NOT NULL,
    slot         timestamptz NOT NULL,
    state        {schema}.run_state NOT NULL,
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
    updated_at   timestamptz NOT NULL,
    -- the stored schedule's version the run was first leased with (NULL for code jobs)
    schedule_version integer
);

CREATE INDEX runs_job_slot ON {schema}.runs (job, slot);
-- The job's last token is its runs' highest (next_token): one index probe, so an acquire writes
-- the run's row alone. A heartbeat or a finish never changes a token: they stay HOT updates.
CREATE INDEX runs_job_token ON {schema}.runs (job, token);
-- Only open runs: the overlap check and the sweep read this small index, however long the history.
-- expires_at stays out of every index, so a heartbeat is a HOT update.
CREATE INDEX runs_open ON {schema}.runs (job) WHERE state IN ('running', 'pending');

-- instances: each instance's own heartbeat (relay instances, relay health): one row per owner,
-- upserted every few seconds, deleted once expired.
CREATE TABLE {schema}.instances (
    owner         text COLLATE "C" PRIMARY KEY,
    role          text NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL,   -- the instance's own clock
    version       text NOT NULL,          -- Relay's version
    beat_interval float8 NOT NULL,        -- seconds between its beats
    beat_at       timestamptz NOT NULL,   -- the server's clock, as every time below
    expires_at    timestamptz NOT NULL,
    tasks         text,                   -- the tasks the instance allows
    problem       text,                   -- why it is not working, though it beats (0.2)
    definitions   text                    -- the job definitions it declares, as JSON (0.2)
);

-- Stored schedules (relay.backends._sql_schedules): one row per schedule, its definition as JSON
-- text (NULL once removed), its version and the store-wide revision of its last change; one
-- history row per version. meta's schedule_revision is the revision: every change bumps it first,
-- so its row lock orders the changes and they commit in revision order. Times are milliseconds
-- since the epoch on the server's clock.
CREATE TABLE {schema}.schedules (
    name       text COLLATE "C" PRIMARY KEY,
    definition text,
    version    integer NOT NULL,
    revision   bigint NOT NULL,
    updated_ms bigint NOT NULL,
    updated_by text NOT NULL,
    created_ms bigint NOT NULL
);
CREATE UNIQUE INDEX schedules_revision ON {schema}.schedules (revision);
-- Removed schedules by when they were removed, for retention (relay.backends._sql_schedules prune).
CREATE INDEX schedules_removed ON {schema}.schedules (updated_ms) WHERE definition IS NULL;
CREATE TABLE {schema}.schedule_history (
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

-- floor_token: tokens stay at or above the server's clock in microseconds, so a server that lost
-- its last commits (restored from a backup, failed over to a replica that was behind, or run with
-- synchronous_commit or fsync off) never hands a token out twice: the counter went back with the
-- lost commits, the clock did not. A clock that goes back only leaves the counter growing by one.
-- Tokens are drawn by next_token's formula, which applies the same floor; this trigger floors
-- what is still written to jobs.token (a counter set back, a token column written by hand or by
-- version 7).
CREATE FUNCTION {schema}.floor_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.token > 0 AND (TG_OP = 'INSERT' OR NEW.token > OLD.token) THEN
        NEW.token := greatest(NEW.token,
                              (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER floor_token BEFORE INSERT OR UPDATE OF token ON {schema}.jobs
FOR EACH ROW EXECUTE FUNCTION {schema}.floor_token();

-- next_token: the job's next fencing token, max(last token of the job + 1, the clock in
-- microseconds) (relay.contract). The last token is the highest of the job's runs (runs_job_token)
-- and of jobs.token (a floor kept from before version 8; prune never deletes a job's run with the
-- highest token). The caller holds the job's row, so draws of one job take turns and each sees the
-- run the one before it wrote: acquires write the run's row and nothing else.
CREATE FUNCTION {schema}.next_token(p_job text, p_floor bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    -- PL/pgSQL, not SQL: its plan is kept for the session, a SQL function's is made every call.
    -- ORDER BY … LIMIT 1, not max(): a plan kept from while the table was small must still read
    -- one index entry, not all of the job's.
    RETURN greatest(
        greatest(p_floor, (SELECT r.token FROM {schema}.runs AS r WHERE r.job = p_job
                           ORDER BY r.token DESC LIMIT 1)) + 1,
        (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
END
$$;

-- acquire_many: decide a batch of runs (parallel arrays, one element per request) in one call.
-- The mirror of relay.lease_rules.decide: keep both in step (one rule table checks both functions
-- against it: tests/contract/test_lease_rules_contract.py).
-- 1. Settled without a lock: a finished run never changes, and a lease live at v_now was held at
--    that instant. When instances tick a moment apart, the later ones stop here and write nothing.
-- 2. The jobs' rows are held in name order (no deadlocks), and v_now is read again once they are,
--    so steps are ordered by it. Heartbeats, finishes and hand-overs change runs without a job
--    lock: the runs a decision may overwrite (pending, or expired at v_now) are held too. Any other
--    run can then only stay live at v_now, finish, or turn pending, which nobody but a holder of
--    the job's row can change again. An instance that finds the first row taken (another is
--    deciding the same tick) waits for that row alone and reads the runs again first, so one that
--    lost the tick takes no more locks (version 11); only one that waited reads them again once it
--    holds every row (version 12). It lets the row it waited on go at once, so those that lost a
--    tick read side by side (version 15).
-- 3. Requests are taken in rounds: round k holds the k-th request of each job, so a round has at
--    most one request per job and is decided by one set-based statement; later rounds see earlier
--    ones. A batch with one request per job (a tick) is one round. No CTE is joined with another: the planner cannot guess their sizes, and a nested loop
--    over two of them would make a large batch quadratic. Before the rounds, the runs the first
--    round would win as new (no record at the last read, no rule to check) are inserted at once,
--    without ON CONFLICT; if one was recorded since, that insert is undone and the rounds decide
--    them all (version 15).
-- The rules: a paused job's new runs are skipped ('paused'); with buffer_one (p_buffer), a run
-- overlapping a live one waits pending ('buffered') unless one already waits, and a waiting run is
-- leased once no other run of its job is live; an expired lease means its runner stopped
-- heartbeating, its attempt failed ('exhausted' once failures reach max_attempts).
-- A stored schedule's run keeps the version it was first leased with (p_versions in, o_version
-- out): a takeover or a retry keeps the record's own.
-- Its body stands as migration 0015 wrote it, acquire_one's as 0010 did (the catalog test compares
-- bodies to the letter): their notes "see version 1" point at the steps above.
CREATE FUNCTION {schema}.acquire_many(
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

-- acquire_one: the same decision for one request, written step by step: a few index lookups, so a
-- single acquire costs little more than the insert it makes. It holds the job's row (locked, not
-- written) and draws its next token (as next_token does; a token the decision does not use is
-- skipped: tokens only have to grow). The common case is one insert: a run nobody had recorded,
-- with no rule to check; if another instance recorded it while this one waited for the job's row,
-- the insert does nothing and the full decision reads what that instance wrote. Keep it in step
-- with acquire_many.
CREATE FUNCTION {schema}.acquire_one(
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

-- finish: a run's outcome, as the statement it replaces (version 10) wrote it: a top-level UPDATE
-- was planned at every call (the backend prepares nothing, for transaction-mode poolers), which
-- cost the server more than the update itself; PL/pgSQL keeps the plan for the session. No row when
-- the lease was lost (the caller reads the run to say how). state::text: the column is a
-- run_state (version 14), the result text.
CREATE FUNCTION {schema}.finish(p_run_id text, p_token bigint, p_ok boolean, p_error text)
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
    RETURNING state::text;
END
$$;

-- start: the runner takes a won run over, as the statement it replaces did: a
-- top-level UPDATE was planned at every call (the backend prepares nothing, for transaction-mode
-- poolers); PL/pgSQL keeps the plan for the session, as for finish (version 10). No row when the
-- lease was lost or another owner started the run (the caller reads the run to say how).
CREATE FUNCTION {schema}.start(p_run_id text, p_token bigint, p_owner text, p_lease float8)
RETURNS TABLE (o_job text, o_slot timestamptz, o_attempt integer, o_version integer)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE {schema}.runs SET
        owner = p_owner,
        started_at = coalesce(started_at, clock_timestamp()),
        expires_at = clock_timestamp() + p_lease * interval '1 second',
        updated_at = clock_timestamp()
    WHERE run_id = p_run_id AND token = p_token AND state = 'running'
      AND (started_at IS NULL OR owner = p_owner)
    RETURNING job, slot, attempt, schedule_version;
END
$$;

-- heartbeat: extend a held lease, as the statement it replaces did: a top-level UPDATE was
-- planned at every call (the backend prepares nothing, for transaction-mode poolers); PL/pgSQL
-- keeps the plan for the session, as for start (version 13) and finish (version 10). False when
-- the lease was lost (the caller reads the run to say how). Its transaction alone commits without
-- waiting for the disk (set_config(..., true) lasts until the transaction ends, not the call): a
-- renewal lost in a crash only shortens a lease, which the next heartbeat renews or a takeover
-- fences, so a busy disk cannot stall heartbeats past their lease.
CREATE FUNCTION {schema}.heartbeat(p_run_id text, p_token bigint, p_lease float8)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE {schema}.runs SET
        expires_at = clock_timestamp() + p_lease * interval '1 second',
        updated_at = clock_timestamp()
    WHERE run_id = p_run_id AND token = p_token AND state = 'running';
    RETURN FOUND;
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
