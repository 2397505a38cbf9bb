-- The statements of relay.backends.postgres, one per "-- name:" section. {schema} is replaced by the
-- quoted schema name once; %s / %(name)s are psycopg parameters. Each is one round trip in
-- autocommit: no session state survives a statement, so a transaction-mode pooler is fine.

-- name: acquire_many
SELECT o_index, o_outcome, o_attempt, o_token, o_version
FROM {schema}.acquire_many(%b::text[], %b::text[], %b::timestamptz[], %b::text[], %b::float8[],
                           %b::integer[], %b::boolean[], %b::float8[], %b::boolean[],
                           %b::integer[])

-- name: acquire_many_as
-- acquire_many with each argument as relay.backends.postgres._many_arguments passes it: an array
-- as above, one value repeated for every request (array_fill), or one text split at chr(31)
-- (string_to_array), whichever costs the client least to encode.
SELECT o_index, o_outcome, o_attempt, o_token, o_version
FROM {schema}.acquire_many({args})

-- name: acquire_one
SELECT o_outcome, o_attempt, o_token, o_version
FROM {schema}.acquire_one(%s, %s, %s, %s, %s::float8, %s::integer, %s::boolean, %s::float8,
                          %s::boolean, %s::integer)

-- name: start
-- No row when the lease was lost or another owner started the run (see lost).
SELECT o_job, o_slot, o_attempt, o_version
FROM {schema}.start(%(run_id)s, %(token)s::bigint, %(owner)s::text, %(lease)s::float8)

-- name: heartbeat
-- False when the lease was lost (see lost). It commits without waiting for the disk (see the
-- function).
SELECT {schema}.heartbeat(%(run_id)s, %(token)s::bigint, %(lease)s::float8)

-- name: heartbeat_many
-- heartbeat for several runs in one statement (parallel arrays: run id, token, lease). The runs
-- are locked first, in run_id order (the order acquire_many locks runs in); a run whose token or
-- state no longer matches (checked again once locked) is left out: it was lost. A PL/pgSQL
-- function would keep the plan, but it cost more than this statement's planning (measured for
-- version 16): custom plans were made at every call all the same, a generic one chose worse.
UPDATE {schema}.runs AS s SET
    expires_at = clock_timestamp() + due.lease * interval '1 second',
    updated_at = clock_timestamp()
FROM (
    SELECT r.run_id, h.token, h.lease
    FROM {schema}.runs AS r
    JOIN unnest(%s::text[], %s::bigint[], %s::float8[]) AS h (run_id, token, lease)
      ON r.run_id = h.run_id AND r.token = h.token
    WHERE r.state = 'running'
    ORDER BY r.run_id
    FOR UPDATE OF r
) AS due
WHERE s.run_id = due.run_id
  AND set_config('synchronous_commit', 'off', true) = 'off'
RETURNING s.run_id, due.token

-- name: finish
-- No row when the lease was lost (see finished_again).
SELECT o_state
FROM {schema}.finish(%(run_id)s, %(token)s::bigint, %(ok)s::boolean, %(error)s::text)

-- name: finished_again
-- What a finish by this token recorded, if one did: the same finish sent again changes nothing.
SELECT state, reason FROM {schema}.runs
WHERE run_id = %(run_id)s AND token = %(token)s AND state <> 'running'

-- name: release
-- A run not started yet gives its attempt back: the next lease has the same attempt number.
UPDATE {schema}.runs SET
    state = 'pending', reason = 'released', expires_at = NULL, updated_at = clock_timestamp(),
    attempt = attempt - (started_at IS NULL)::integer
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'

-- name: lost
SELECT state, token, owner, started_at FROM {schema}.runs WHERE run_id = %s

-- name: skip_many
SELECT r.idx, {schema}.skip(r.run_id, r.job, r.slot, %s)
FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) WITH ORDINALITY AS r (run_id, job, slot, idx)
ORDER BY r.idx

-- name: last_slots
-- Slot runs only: a slot run's id, 'job@<digits>…', sorts before 'job@:', a manual run's after.
SELECT name, (SELECT max(slot) FROM {schema}.runs WHERE job = name AND run_id < name || '@:')
FROM unnest(%s::text[]) AS name

-- name: reclaimable
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error, schedule_version
FROM {schema}.runs
WHERE state IN ('pending', 'running')
  AND (state = 'pending' OR expires_at <= clock_timestamp())
ORDER BY slot
LIMIT %s

-- name: runs_of_job
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error, schedule_version
FROM {schema}.runs WHERE job = %s ORDER BY slot DESC, run_id LIMIT %s

-- name: runs
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error, schedule_version
FROM {schema}.runs ORDER BY slot DESC, run_id LIMIT %s

-- name: now
SELECT clock_timestamp()

-- name: register_jobs
INSERT INTO {schema}.jobs AS j (name, token, spec)
SELECT name, 0, spec FROM unnest(%s::text[], %s::text[]) AS r (name, spec)
ORDER BY name
ON CONFLICT (name) DO UPDATE SET spec = excluded.spec

-- name: job_names
SELECT name FROM {schema}.jobs ORDER BY name

-- name: jobs
SELECT name, spec, paused_at, paused_by, paused_reason FROM {schema}.jobs ORDER BY name

-- name: job_page
SELECT name, spec, paused_at, paused_by, paused_reason FROM {schema}.jobs
WHERE name > %(after)s AND name >= %(prefix)s AND name < %(below)s ORDER BY name LIMIT %(limit)s

-- name: job_infos
SELECT name, spec, paused_at, paused_by, paused_reason FROM {schema}.jobs
WHERE name = ANY(%(names)s) ORDER BY name

-- name: pause
INSERT INTO {schema}.jobs AS j (name, token, paused_at, paused_by, paused_reason)
VALUES (%(job)s, 0, clock_timestamp(), %(by)s, %(reason)s)
ON CONFLICT (name) DO UPDATE SET
    paused_at = excluded.paused_at, paused_by = excluded.paused_by,
    paused_reason = excluded.paused_reason
WHERE j.paused_at IS NULL
RETURNING 1

-- name: resume
-- The job's row first (data-modifying CTEs always run), so no acquire decides in between.
WITH resumed AS (
    UPDATE {schema}.jobs SET paused_at = NULL, paused_by = NULL, paused_reason = NULL
    WHERE name = %(job)s RETURNING name
)
UPDATE {schema}.runs SET
    state = 'pending', reason = 'resumed', attempt = 0, finished_at = NULL,
    updated_at = clock_timestamp()
WHERE job = %(job)s AND %(catch_up)s::float8 IS NOT NULL
  AND slot >= clock_timestamp() - %(catch_up)s::float8 * interval '1 second'
  AND state = 'skipped' AND reason = 'paused'
RETURNING run_id

-- name: trigger
INSERT INTO {schema}.runs (run_id, job, slot, state, reason, updated_at)
SELECT %(run_id)s, %(job)s, %(slot)s,
       CASE WHEN busy THEN 'skipped' ELSE 'pending' END,
       CASE WHEN busy THEN 'overlap' ELSE 'manual' END, clock_timestamp()
FROM (SELECT %(overlap_skip)s AND EXISTS (
          SELECT 1 FROM {schema}.runs AS o
          WHERE o.job = %(job)s AND o.state = 'running' AND o.expires_at > clock_timestamp()
      ) AS busy) AS b
ON CONFLICT (run_id) DO NOTHING

-- name: run
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error, schedule_version
FROM {schema}.runs WHERE run_id = %s

-- name: backfill
INSERT INTO {schema}.runs (run_id, job, slot, state, reason, updated_at)
SELECT r.run_id, %s, r.slot, 'pending', %s, clock_timestamp()
FROM unnest(%s::text[], %s::timestamptz[]) AS r (run_id, slot)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id

-- name: prune
-- Per job, its oldest runs through the (job, slot) index; never a live run, nor the job's latest
-- slot run (catch-up reads it), nor the run holding its highest token (next_token reads it).
DELETE FROM {schema}.runs WHERE run_id IN (
    SELECT o.run_id
    FROM {schema}.jobs AS j
    CROSS JOIN LATERAL (
        SELECT r.run_id FROM {schema}.runs AS r
        WHERE r.job = j.name
          AND r.slot < clock_timestamp() - %(older_than)s::float8 * interval '1 second'
          AND r.finished_at < clock_timestamp() - %(older_than)s::float8 * interval '1 second'
          AND r.state IN ('succeeded', 'failed', 'skipped')
          AND r.slot < (SELECT max(m.slot) FROM {schema}.runs AS m
                        WHERE m.job = j.name AND m.run_id < j.name || '@:')
          AND (r.token = 0 OR r.token < (SELECT max(t.token) FROM {schema}.runs AS t
                                         WHERE t.job = j.name))
        ORDER BY r.slot LIMIT %(limit)s
    ) AS o
    LIMIT %(limit)s
)
-- name: record_instance
-- An instance's heartbeat, on the server's clock; expired records of any instance go on the way.
WITH gone AS (DELETE FROM {schema}.instances WHERE expires_at <= clock_timestamp())
INSERT INTO {schema}.instances
    (owner, role, host, pid, started_at, version, beat_interval, beat_at, expires_at, tasks,
     problem, definitions)
VALUES (%(owner)s, %(role)s, %(host)s, %(pid)s, %(started_at)s, %(version)s, %(interval)s,
        clock_timestamp(), clock_timestamp() + %(ttl)s::float8 * interval '1 second', %(tasks)s,
        %(problem)s, %(definitions)s)
ON CONFLICT (owner) DO UPDATE SET
    role = excluded.role, host = excluded.host, pid = excluded.pid,
    started_at = excluded.started_at, version = excluded.version,
    beat_interval = excluded.beat_interval, beat_at = excluded.beat_at,
    expires_at = excluded.expires_at, tasks = excluded.tasks, problem = excluded.problem,
    definitions = excluded.definitions

-- name: instances
SELECT owner, role, host, pid, started_at, version, beat_interval, beat_at, expires_at, tasks,
       problem, definitions
FROM {schema}.instances WHERE expires_at > clock_timestamp() ORDER BY role, owner

-- name: durability
-- What relay doctor judges beside the replication facts (relay.backends._postgres_replication).
SELECT current_setting('server_version'), current_setting('fsync')

-- name: job_history
-- Per job: its newest slot runs (a walk of runs_job_slot from the newest, stopped early)
-- and its latest success, slot or manual run; first column 'r' (recent) or 's' (success).
SELECT h.* FROM unnest(%s::text[]) AS name CROSS JOIN LATERAL (
    (SELECT 'r', run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
            started_at, finished_at, error, schedule_version
     FROM {schema}.runs WHERE job = name AND run_id < name || '@:'
     ORDER BY slot DESC, run_id LIMIT %s)
    UNION ALL
    (SELECT 's', run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
            started_at, finished_at, error, schedule_version
     FROM {schema}.runs WHERE job = name AND state = 'succeeded'
     ORDER BY slot DESC LIMIT 1)
) AS h

-- name: mark_once
-- Keys 'once:…' hold their expiry (ms since the epoch, store's clock); expired ones go first.
WITH expired AS (
    DELETE FROM {schema}.meta
    WHERE key >= 'once:' AND key < 'once;'
      AND value::bigint <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint
)
INSERT INTO {schema}.meta (key, value)
VALUES ('once:' || %(key)s,
        ((extract(epoch FROM clock_timestamp()) + %(ttl)s::float8) * 1000)::bigint::text)
ON CONFLICT (key) DO NOTHING
RETURNING key
