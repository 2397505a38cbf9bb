-- Version 10 (from 9): a finish is one call of a PL/pgSQL function instead of an UPDATE.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- The backend prepares no statement (a transaction-mode pooler may hand each one to another
-- server connection), so the finish's UPDATE was planned at every call: on the four indexes of
-- runs, more of the server's time than the update itself. A PL/pgSQL function's plan is kept for
-- the session; the statement and its rules are the same.
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
