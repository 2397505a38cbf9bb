-- Version 16 (from 15): a heartbeat of one run is one call of a PL/pgSQL function instead of an
-- UPDATE.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- heartbeat: extend a held lease, as the statement it replaces did: a top-level UPDATE was
-- planned at every call (the backend prepares nothing, for transaction-mode poolers); PL/pgSQL
-- keeps the plan for the session, as for start (version 13) and finish (version 10). False when
-- the lease was lost (the caller reads the run to say how). Its transaction alone commits without
-- waiting for the disk (set_config(..., true) lasts until the transaction ends, not the call): a
-- renewal lost in a crash only shortens a lease, which the next heartbeat renews or a takeover
-- fences, so a busy disk cannot stall heartbeats past their lease.
CREATE OR REPLACE FUNCTION {schema}.heartbeat(p_run_id text, p_token bigint, p_lease float8)
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
