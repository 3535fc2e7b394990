-- The query log (opt-in, sampled): questions, the version that served them and what it returned, kept for the
-- retention period, so a candidate can be compared with the active version on real questions (toolkit shadow).
-- The questions are personal data: logging is off until an operator sets a sample rate.
SET LOCAL ROLE toolkit_owner;

-- Sets the share of questions logged (0 turns logging off) and how long they are kept; returns the settings.
-- Definer: writes the settings table, which only the owner may write.
CREATE OR REPLACE FUNCTION toolkit.set_query_log(rate double precision, keep_for interval DEFAULT NULL)
RETURNS TABLE (sample_rate double precision, retention interval)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF rate IS NULL OR NOT (rate >= 0 AND rate <= 1) THEN
        RAISE EXCEPTION 'the sample rate must be between 0 and 1, not %', coalesce(rate::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'For example 0.1 logs one question in ten.';
    END IF;
    IF keep_for IS NOT NULL AND keep_for <= INTERVAL '0' THEN
        RAISE EXCEPTION 'the retention must be longer than zero, not %', keep_for
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE toolkit.query_log_settings AS s
    SET sample_rate = rate, retention = coalesce(keep_for, s.retention),
        changed_at = clock_timestamp();
    RETURN QUERY SELECT s.sample_rate, s.retention FROM toolkit.query_log_settings AS s;
END
$$;

-- The query log's settings and size: sample rate, retention, logged questions and the oldest one.
-- Definer: reads the settings and counts every tenant's logged questions.
CREATE OR REPLACE FUNCTION toolkit.query_log_status()
RETURNS TABLE (sample_rate double precision, retention interval, questions bigint, oldest timestamptz)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.sample_rate, s.retention, (SELECT count(*) FROM toolkit.query_log),
        (SELECT min(q.logged_at) FROM toolkit.query_log AS q)
    FROM toolkit.query_log_settings AS s
$$;

-- Deletes logged questions older than the retention period; returns how many.
-- Definer: deletes every tenant's expired rows.
CREATE OR REPLACE FUNCTION toolkit.prune_query_log()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    DELETE FROM toolkit.query_log AS q
    WHERE q.logged_at < clock_timestamp() - (SELECT s.retention FROM toolkit.query_log_settings AS s);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    UPDATE toolkit.query_log_settings SET last_pruned_at = clock_timestamp();
    RETURN deleted;
END
$$;

-- Logs one served question for the transaction's tenant when logging is on, and (at most hourly) prunes expired
-- ones; the caller decides the sample (toolkit.query_log_sample_rate()). Returns whether it was logged.
-- results is [{doc_id, start, end, rank, score}]. On a read-only hot standby nothing can be written: the question is
-- skipped, counted in the session's toolkit.query_log_skipped setting, and the search goes on (returns false).
-- Definer: an application may append to the log but never read or change it.
CREATE OR REPLACE FUNCTION toolkit.log_query(
    question text,
    served_version integer,
    k integer,
    results jsonb,
    latency_ms double precision DEFAULT NULL,
    request_key text DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tenant text := toolkit.current_tenant();
    alias text;
BEGIN
    IF tenant IS NULL OR (SELECT s.sample_rate FROM toolkit.query_log_settings AS s) = 0 THEN
        RETURN false;
    END IF;
    IF pg_is_in_recovery() THEN
        PERFORM set_config('toolkit.query_log_skipped',
            (coalesce(nullif(current_setting('toolkit.query_log_skipped', true), ''), '0')::bigint + 1)::text, false);
        RETURN false;
    END IF;
    IF question IS NULL OR question = '' OR results IS NULL OR jsonb_typeof(results) <> 'array' THEN
        RAISE EXCEPTION 'a logged query needs its question and its results (a JSON array)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT v.model_alias INTO alias FROM toolkit.versions AS v WHERE v.version = served_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', served_version USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO toolkit.query_log AS q (tenant, request_key, question, version, model_alias, k, results, latency_ms)
    VALUES (tenant, request_key, left(question, 10000), served_version, alias, k, results, latency_ms);
    -- One session prunes per hour; the others skip the settings row instead of waiting for it.
    PERFORM FROM toolkit.query_log_settings AS s
    WHERE s.last_pruned_at < clock_timestamp() - INTERVAL '1 hour'
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        PERFORM toolkit.prune_query_log();
    END IF;
    RETURN true;
END
$$;

-- The share of questions to log (0: logging is off), for the caller to sample by.
-- Definer: an application may not read the settings table.
CREATE OR REPLACE FUNCTION toolkit.query_log_sample_rate()
RETURNS double precision
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.sample_rate FROM toolkit.query_log_settings AS s
$$;

-- Logged questions since a time, for replay (toolkit shadow --from-log): tenant, question, served version, results.
-- Definer: reads every tenant's logged questions, which only the owner may read directly.
CREATE OR REPLACE FUNCTION toolkit.logged_questions(since timestamptz, only_tenant text DEFAULT NULL)
RETURNS TABLE (
    tenant text,
    logged_at timestamptz,
    question text,
    version integer,
    model_alias text,
    k integer,
    results jsonb,
    latency_ms double precision
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.tenant, q.logged_at, q.question, q.version, q.model_alias, q.k, q.results, q.latency_ms
    FROM toolkit.query_log AS q
    WHERE q.logged_at >= since AND (only_tenant IS NULL OR q.tenant = only_tenant)
    ORDER BY q.logged_at, q.tenant, q.query_id
$$;
