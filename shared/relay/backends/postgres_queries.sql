-- The statements of relay.backends.postgres, one per "-- name:" section. {schema} is replaced by the
-- quoted schema name once; %s / %(name)s are psycopg parameters. Each is one round trip in
-- autocommit: no session state survives a statement, so a transaction-mode pooler is fine.

-- name: acquire_many
SELECT o_index, o_outcome, o_attempt, o_token
FROM {schema}.acquire_many(%b::text[], %b::text[], %b::timestamptz[], %b::text[], %b::float8[],
                           %b::integer[], %b::boolean[], %b::float8[])

-- name: acquire_one
SELECT o_outcome, o_attempt, o_token
FROM {schema}.acquire_one(%s, %s, %s, %s, %s::float8, %s::integer, %s::boolean, %s::float8)

-- name: start
UPDATE {schema}.runs SET
    owner = %(owner)s,
    started_at = coalesce(started_at, clock_timestamp()),
    expires_at = clock_timestamp() + %(lease)s::float8 * interval '1 second',
    updated_at = clock_timestamp()
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'
  AND (started_at IS NULL OR owner = %(owner)s)
RETURNING job, slot, attempt

-- name: heartbeat
-- This transaction alone commits without waiting for the disk (set_config(..., true) lasts until
-- it ends): a renewal lost in a crash only shortens a lease, which the next heartbeat renews or a
-- takeover fences, so a busy disk cannot stall heartbeats past their lease.
UPDATE {schema}.runs SET
    expires_at = clock_timestamp() + %(lease)s::float8 * interval '1 second',
    updated_at = clock_timestamp()
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'
  AND set_config('synchronous_commit', 'off', true) = 'off'

-- name: finish
UPDATE {schema}.runs SET
    state = CASE WHEN %(ok)s THEN 'succeeded'
                 WHEN failures + 1 >= max_attempts THEN 'failed'
                 ELSE 'pending' END,
    failures = failures + CASE WHEN %(ok)s THEN 0 ELSE 1 END,
    error = %(error)s,
    expires_at = NULL,
    finished_at = CASE WHEN %(ok)s OR failures + 1 >= max_attempts THEN clock_timestamp() END,
    reason = CASE WHEN %(ok)s THEN NULL ELSE 'failed' END,
    updated_at = clock_timestamp()
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'
RETURNING state

-- name: release
UPDATE {schema}.runs SET
    state = 'pending', reason = 'released', expires_at = NULL, updated_at = clock_timestamp()
WHERE run_id = %(run_id)s AND token = %(token)s AND state = 'running'

-- name: lost
SELECT state, token, owner, started_at FROM {schema}.runs WHERE run_id = %s

-- name: skip_many
SELECT r.idx, {schema}.skip(r.run_id, r.job, r.slot, %s)
FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) WITH ORDINALITY AS r (run_id, job, slot, idx)
ORDER BY r.idx

-- name: last_slots
SELECT name, (SELECT max(slot) FROM {schema}.runs WHERE job = name)
FROM unnest(%s::text[]) AS name

-- name: reclaimable
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error
FROM {schema}.runs
WHERE state IN ('pending', 'running')
  AND (state = 'pending' OR expires_at <= clock_timestamp())
ORDER BY slot
LIMIT %s

-- name: runs_of_job
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error
FROM {schema}.runs WHERE job = %s ORDER BY slot DESC, run_id LIMIT %s

-- name: runs
SELECT run_id, job, slot, state, attempt, failures, token, owner, reason, expires_at,
       started_at, finished_at, error
FROM {schema}.runs ORDER BY slot DESC, run_id LIMIT %s

-- name: now
SELECT clock_timestamp()

-- name: record_instance
-- An instance's heartbeat, on the server's clock; expired records of any instance go on the way.
WITH gone AS (DELETE FROM {schema}.instances WHERE expires_at <= clock_timestamp())
INSERT INTO {schema}.instances
    (owner, role, host, pid, started_at, version, beat_interval, beat_at, expires_at)
VALUES (%(owner)s, %(role)s, %(host)s, %(pid)s, %(started_at)s, %(version)s, %(interval)s,
        clock_timestamp(), clock_timestamp() + %(ttl)s::float8 * interval '1 second')
ON CONFLICT (owner) DO UPDATE SET
    role = excluded.role, host = excluded.host, pid = excluded.pid,
    started_at = excluded.started_at, version = excluded.version,
    beat_interval = excluded.beat_interval, beat_at = excluded.beat_at,
    expires_at = excluded.expires_at

-- name: instances
SELECT owner, role, host, pid, started_at, version, beat_interval, beat_at, expires_at
FROM {schema}.instances WHERE expires_at > clock_timestamp() ORDER BY role, owner
