-- The query log (opt-in, sampled): questions, the version that served them and what it returned, kept for the
-- retention period, so a candidate can be compared with the active version on real questions (toolkit shadow).
-- The questions are personal data: logging is off until an operator sets a sample rate.
SET LOCAL ROLE toolkit_owner;

-- Takes the query log's settings row for the rest of the transaction, for the owner's and the deployer's changes
-- (settings, bounds, pruning). A reader's transaction that logged a question may hold it (it pruned, or counted a
-- skipped question) until that transaction ends: waited for at most 2 s, then refused naming the holder, so that an
-- application's open transaction never hangs toolkit query-log or toolkit status.
-- Invoker: called by the definer functions below, as the owner.
CREATE OR REPLACE FUNCTION toolkit._lock_query_log_settings()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    holder text;
BEGIN
    PERFORM FROM toolkit.query_log_settings AS s FOR UPDATE;
EXCEPTION WHEN lock_not_available THEN
    SELECT string_agg(format('pid %s (login %s)', l.pid, a.usename), ', ') INTO holder
    FROM pg_catalog.pg_locks AS l
    LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'transactionid' AND l.granted AND l.mode = 'ExclusiveLock'
        AND l.transactionid = (SELECT s.xmax FROM toolkit.query_log_settings AS s);
    RAISE EXCEPTION 'the query log''s settings are held by another open transaction (%), which logged a question and '
        'has not ended; nothing was changed', coalesce(holder, 'it ended meanwhile')
        USING ERRCODE = 'lock_not_available',
            HINT = 'Try again when it ends, or end it: SELECT pg_terminate_backend(pid).';
END
$$;

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
    PERFORM toolkit._lock_query_log_settings();
    UPDATE toolkit.query_log_settings AS s
    SET sample_rate = rate, retention = coalesce(keep_for, s.retention),
        changed_at = clock_timestamp();
    RETURN QUERY SELECT s.sample_rate, s.retention FROM toolkit.query_log_settings AS s;
END
$$;

-- The query log's settings, bounds and size: sample rate, retention, logged questions and the oldest one, the row
-- cap and the rate per login, and how many questions the bounds kept out (skipped over the rate, pruned over the cap).
-- Definer: reads the settings and counts every tenant's logged questions.
CREATE OR REPLACE FUNCTION toolkit.query_log_status()
RETURNS TABLE (
    sample_rate double precision,
    retention interval,
    questions bigint,
    oldest timestamptz,
    max_rows bigint,
    max_per_minute integer,
    skipped_over_rate bigint,
    pruned_over_cap bigint,
    last_pruned_at timestamptz
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.sample_rate, s.retention, (SELECT count(*) FROM toolkit.query_log),
        (SELECT min(q.logged_at) FROM toolkit.query_log AS q), s.max_rows, s.max_per_minute, s.skipped_over_rate,
        s.pruned_over_cap, nullif(s.last_pruned_at, '-infinity')
    FROM toolkit.query_log_settings AS s
$$;

-- Sets the query log's bounds: the most questions kept (pruning deletes the oldest beyond it) and the most one login
-- may log per minute (log_query skips the rest); NULL keeps a bound. Returns the settings.
-- Definer: writes the settings table, which only the owner may write.
CREATE OR REPLACE FUNCTION toolkit.set_query_log_bounds(rows_kept bigint DEFAULT NULL, per_minute integer DEFAULT NULL)
RETURNS TABLE (max_rows bigint, max_per_minute integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF rows_kept IS NOT NULL AND NOT (rows_kept BETWEEN 1 AND 1000000000) THEN
        RAISE EXCEPTION 'the query log''s row cap must be from 1 to 1,000,000,000, not %', rows_kept
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF per_minute IS NOT NULL AND NOT (per_minute BETWEEN 1 AND 1000000) THEN
        RAISE EXCEPTION 'the query log''s rate per login must be from 1 to 1,000,000 a minute, not %', per_minute
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolkit._lock_query_log_settings();
    UPDATE toolkit.query_log_settings AS s
    SET max_rows = coalesce(rows_kept, s.max_rows), max_per_minute = coalesce(per_minute, s.max_per_minute),
        changed_at = clock_timestamp();
    RETURN QUERY SELECT s.max_rows, s.max_per_minute FROM toolkit.query_log_settings AS s;
END
$$;

-- Deletes logged questions older than the retention period, then the oldest beyond the row cap; returns how many.
-- Runs from log_query (at most once a minute), from toolkit status, shadow and query-log, and whenever the owner
-- schedules it (pg_cron): with logging off, expired questions are still removed.
-- Definer: deletes every tenant's expired rows.
CREATE OR REPLACE FUNCTION toolkit.prune_query_log()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    expired bigint;
    over_cap bigint := 0;
    cap bigint := (SELECT s.max_rows FROM toolkit.query_log_settings AS s);
    cutoff timestamptz;
BEGIN
    PERFORM toolkit._lock_query_log_settings();  -- one prune at a time, the settings row first
    DELETE FROM toolkit.query_log AS q
    WHERE q.logged_at < clock_timestamp() - (SELECT s.retention FROM toolkit.query_log_settings AS s);
    GET DIAGNOSTICS expired = ROW_COUNT;
    SELECT q.logged_at INTO cutoff FROM toolkit.query_log AS q ORDER BY q.logged_at DESC OFFSET cap LIMIT 1;
    IF cutoff IS NOT NULL THEN
        DELETE FROM toolkit.query_log AS q WHERE q.logged_at <= cutoff;
        GET DIAGNOSTICS over_cap = ROW_COUNT;
    END IF;
    UPDATE toolkit.query_log_settings AS s
    SET last_pruned_at = clock_timestamp(), pruned_over_cap = s.pruned_over_cap + over_cap;
    RETURN expired + over_cap;
END
$$;

-- The longest prefix of value that takes at most max_bytes bytes in the database's encoding, cut between characters
-- (left() counts characters, and a character may take up to 4 bytes).
-- Invoker: pure text arithmetic, called by log_query.
CREATE OR REPLACE FUNCTION toolkit._prefix_within_bytes(value text, max_bytes integer)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := least(char_length(value), max_bytes);
    excess integer;
BEGIN
    value := left(value, n);
    excess := octet_length(value) - max_bytes;
    WHILE excess > 0 LOOP
        -- Dropping ceil(excess / 4) characters drops at least that many bytes and never more than needed + 3.
        n := n - (excess + 3) / 4;
        value := left(value, n);
        excess := octet_length(value) - max_bytes;
    END LOOP;
    RETURN value;
END
$$;

-- The request key as the query log keeps it: unchanged up to 256 bytes; a longer one (toolkit serve accepts 10,000
-- characters) as its leading 180 bytes, '…sha256:' and the SHA-256 of the whole key in hex (at most 254 bytes), so an
-- operator can still find it (hash the key from the access log) without the log holding it whole.
-- Invoker: pure text arithmetic, called by log_query.
CREATE OR REPLACE FUNCTION toolkit._query_log_request_key(request_key text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN octet_length(request_key) <= 256 THEN request_key
        ELSE toolkit._prefix_within_bytes(request_key, 180) || '…sha256:'
            || encode(sha256(convert_to(request_key, 'UTF8')), 'hex')
    END
$$;

-- Takes this login's turn to log, for the rest of the transaction: a transaction-level advisory lock per login
-- (session_user), so that one transaction of a login logs at a time and sees every row the login's others logged.
-- Another transaction of the login holds it from its log_query to its commit, a few milliseconds when it searches
-- in its own transaction: waited for at most 50 ms, so that concurrent searches of one login (toolkit serve's pool)
-- take turns; held longer (a transaction left open after logging), the turn is not taken and the question is
-- skipped: the search goes on. Returns whether the turn was taken.
-- Invoker: called by log_query, as the owner; advisory locks need no privilege.
CREATE OR REPLACE FUNCTION toolkit._take_query_log_turn()
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '50ms'
AS $$
BEGIN
    IF pg_try_advisory_xact_lock(hashtext('toolkit.query_log'), hashtext(session_user)) THEN
        RETURN true;
    END IF;
    BEGIN  -- a subtransaction that writes nothing (no transaction id), only while another transaction has the turn
        PERFORM pg_advisory_xact_lock(hashtext('toolkit.query_log'), hashtext(session_user));
        RETURN true;
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
END
$$;

-- Counts a question log_query skipped (past the rate, or while another transaction of the login logs) without
-- waiting: when another open transaction holds the settings row, or under REPEATABLE READ (where taking a row
-- another transaction changed is a serialization error), it goes uncounted: the counter is a lower bound, and no
-- search waits for, or is failed by, someone else's transaction.
-- Invoker: called by log_query, as the owner.
CREATE OR REPLACE FUNCTION toolkit._count_skipped_question()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN
        UPDATE toolkit.query_log_settings AS s SET skipped_over_rate = s.skipped_over_rate + 1
        WHERE s.singleton IN (SELECT x.singleton FROM toolkit.query_log_settings AS x FOR UPDATE SKIP LOCKED);
    END IF;
END
$$;

-- Logs one served question for the transaction's tenant when logging is on; the caller decides the sample
-- (toolkit.query_log_sample_rate()). Refused (for a caller that passes junk): no served version, k outside search's
-- bounds, results not a JSON array of at most search_max_k() entries of at most 4,096 bytes each, a latency that is
-- not 0 to 86,400,000 ms, a tenant of more than 800 bytes. Bounded, never refused, so that a search is not failed by
-- its log: the question is cut to its leading 4,096 bytes, the results to the leading entries that fit in 4,096
-- bytes, a request key over 256 bytes to toolkit._query_log_request_key's form; a row holds at most 9,500 bytes.
-- The rate per login holds across its sessions and transactions: one transaction of a login logs at a time
-- (_take_query_log_turn) and counts the login's rows of the last minute that are committed or its own; a question
-- sampled while another transaction of the login keeps the turn past 50 ms, inside a REPEATABLE READ or SERIALIZABLE
-- transaction (whose snapshot may miss rows committed since), or past the rate is skipped (false) and counted.
-- Expired and over-cap questions are pruned at most once a minute. On a read-only standby nothing is logged: the
-- question is skipped and counted in the session's toolkit.query_log_skipped setting (the search goes on). Returns
-- whether it was logged. results is [{doc_id, start, end, rank, score}].
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
    settings record;
    v record;
    recent bigint;
BEGIN
    SELECT * INTO settings FROM toolkit.query_log_settings AS s;
    IF tenant IS NULL OR settings.sample_rate = 0 THEN
        RETURN false;
    END IF;
    IF pg_is_in_recovery() THEN
        PERFORM set_config('toolkit.query_log_skipped',
            (coalesce(nullif(current_setting('toolkit.query_log_skipped', true), ''), '0')::bigint + 1)::text, false);
        RETURN false;
    END IF;
    IF question IS NULL OR btrim(question) = '' OR results IS NULL OR jsonb_typeof(results) <> 'array' THEN
        RAISE EXCEPTION 'a logged query needs its question and its results (a JSON array)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(tenant) > 800 THEN  -- the toolkit's tenants are at most 200 characters
        RAISE EXCEPTION 'a logged query''s tenant takes % bytes; the query log keeps tenants of at most 800',
            octet_length(tenant)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM toolkit._check_k(k);
    IF jsonb_array_length(results) > toolkit.search_max_k() THEN
        RAISE EXCEPTION 'a logged query''s results hold % entries; a search returns at most %',
            jsonb_array_length(results), toolkit.search_max_k()
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM jsonb_array_elements(results) AS e WHERE octet_length(e.value::text) > 4096) THEN
        RAISE EXCEPTION 'a logged query''s result entry takes more than 4,096 bytes'
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Log what was served: doc_id, start, end, rank, score.';
    END IF;
    -- A row holds at most 4,096 bytes of results, as text and as stored: the leading entries that fit (about 40 of a
    -- search's hits). An entry takes its text and ', ', or its own jsonb size less its header, its entry in the
    -- array's table (4 bytes) and alignment (up to 3), whichever is more; the array's headers take 8 bytes.
    -- Entries are kept whole: toolkit delete finds the questions to delete by the doc_id they cite.
    IF octet_length(results::text) > 4088 OR pg_column_size(results) > 4096 THEN
        SELECT coalesce(jsonb_agg(x.value ORDER BY x.n), '[]') INTO results
        FROM (
            SELECT e.value, e.n,
                sum(greatest(octet_length(e.value::text) + 2, pg_column_size(e.value) + 4)) OVER (ORDER BY e.n)
                AS running
            FROM jsonb_array_elements(results) WITH ORDINALITY AS e (value, n)
        ) AS x
        WHERE x.running <= 4088;
    END IF;
    IF latency_ms IS NOT NULL AND NOT (latency_ms >= 0 AND latency_ms <= 86400000) THEN
        RAISE EXCEPTION 'a logged query''s latency must be from 0 to 86,400,000 ms, not %', latency_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT x.model_alias, x.state INTO v FROM toolkit.versions AS x WHERE x.version = served_version;
    IF NOT FOUND OR v.state <> ALL (toolkit.version_states('serve')) THEN
        RAISE EXCEPTION 'version % serves no questions (%)', coalesce(served_version::text, 'NULL'),
            coalesce(v.state, 'it does not exist')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Log the version that served the question.';
    END IF;
    -- Counting rows only sees committed ones (and this transaction's): with one logging transaction per login at a
    -- time, and a snapshot per statement, the count is every row the login logged in the last minute.
    IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted') THEN
        PERFORM toolkit._count_skipped_question();
        RETURN false;
    END IF;
    IF NOT toolkit._take_query_log_turn() THEN
        PERFORM toolkit._count_skipped_question();
        RETURN false;
    END IF;
    SELECT count(*) INTO recent FROM (
        SELECT FROM toolkit.query_log AS q
        WHERE q.logged_by = session_user AND q.logged_at > clock_timestamp() - INTERVAL '1 minute'
        LIMIT settings.max_per_minute
    ) AS r;
    IF recent >= settings.max_per_minute THEN
        PERFORM toolkit._count_skipped_question();
        RETURN false;
    END IF;
    INSERT INTO toolkit.query_log AS q (
        tenant, request_key, question, version, model_alias, k, results, latency_ms, logged_by
    )
    VALUES (tenant, toolkit._query_log_request_key(request_key), toolkit._prefix_within_bytes(question, 4096),
        served_version, v.model_alias, k, results, latency_ms, session_user);
    -- One session prunes per minute; the others skip the settings row instead of waiting for it.
    PERFORM FROM toolkit.query_log_settings AS s
    WHERE s.last_pruned_at < clock_timestamp() - INTERVAL '1 minute'
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

-- Logged questions since a time, for replay (toolkit shadow --from-log): tenant, question, served version, results;
-- each distinct (tenant, question) once, at most max_questions of them, a uniform random sample when there are more
-- (a reader who floods the log cannot make the deployer replay all of it).
-- Definer: reads every tenant's logged questions, which only the owner may read directly.
CREATE OR REPLACE FUNCTION toolkit.logged_questions(
    since timestamptz, only_tenant text DEFAULT NULL, max_questions integer DEFAULT 500
)
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
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_questions IS NULL OR max_questions < 1 OR max_questions > 100000 THEN
        RAISE EXCEPTION 'max_questions must be from 1 to 100,000, not %', coalesce(max_questions::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolkit._service_access();  -- a bound login given the deployer role reads no tenant's questions
    RETURN QUERY
    SELECT d.tenant, d.logged_at, d.question, d.version, d.model_alias, d.k, d.results, d.latency_ms
    FROM (
        SELECT DISTINCT ON (q.tenant, q.question) q.*
        FROM toolkit.query_log AS q
        WHERE q.logged_at >= since AND (only_tenant IS NULL OR q.tenant = only_tenant)
        ORDER BY q.tenant, q.question, q.logged_at DESC
    ) AS d
    ORDER BY random()
    LIMIT max_questions;
END
$$;
