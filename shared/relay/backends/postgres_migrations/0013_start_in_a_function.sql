-- Version 13 (from 12): a start is one call of a PL/pgSQL function instead of an UPDATE.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- start: the runner takes a won run over, as the statement it replaces did: a
-- top-level UPDATE was planned at every call (the backend prepares nothing, for transaction-mode
-- poolers); PL/pgSQL keeps the plan for the session, as for finish (version 10). No row when the
-- lease was lost or another owner started the run (the caller reads the run to say how).
CREATE OR REPLACE FUNCTION {schema}.start(p_run_id text, p_token bigint, p_owner text,
                                          p_lease float8)
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
