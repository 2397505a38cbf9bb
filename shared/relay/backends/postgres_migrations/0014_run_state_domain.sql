-- Version 14 (from 13): runs.state takes its states from a domain instead of a CHECK on the
-- table; the rule is unchanged.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- The table's CHECK was read back from its stored text and prepared again at every statement
-- writing a run (an acquire, a heartbeat, a finish); a domain's check is prepared once per session.
-- The column becomes the domain before the domain has its check, so the table is not rewritten;
-- adding the check then reads every row once. A schema that has the domain already (these steps
-- run again over it) is left as it is.
DO $$
BEGIN
    CREATE DOMAIN {schema}.run_state AS text;
    ALTER TABLE {schema}.runs ALTER COLUMN state TYPE {schema}.run_state;
    ALTER TABLE {schema}.runs DROP CONSTRAINT runs_state_check;
    ALTER DOMAIN {schema}.run_state ADD CONSTRAINT run_state_check
        CHECK (VALUE IN ('running', 'pending', 'succeeded', 'failed', 'skipped'));
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$$;

-- finish returns the state as text, as its result type says.
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
    RETURNING state::text;
END
$$;
