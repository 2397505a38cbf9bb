-- Version 3 (from 2): the floor_token trigger on jobs.
-- A released migration is never edited (see ../postgres_schema.sql to add one).

-- Tokens stay at or above the server's clock in microseconds, so a server that lost its last
-- commits (restored from a backup, failed over to a replica that was behind, or run with
-- synchronous_commit or fsync off) never hands a token out twice: the counter went back with the
-- lost commits, the clock did not. A clock that goes back only leaves the counter growing by one.
-- One trigger floors every token drawn, whichever function draws it. Safe to run again.
CREATE OR REPLACE FUNCTION {schema}.floor_token() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.token > 0 AND (TG_OP = 'INSERT' OR NEW.token > OLD.token) THEN
        NEW.token := greatest(NEW.token,
                              (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS floor_token ON {schema}.jobs;
CREATE TRIGGER floor_token BEFORE INSERT OR UPDATE OF token ON {schema}.jobs
FOR EACH ROW EXECUTE FUNCTION {schema}.floor_token();
