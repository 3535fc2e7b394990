-- Locks the toolkit serializes on. Each is a table lock on a private table (toolkit.version_set_lock,
-- toolkit.cutover_lock, toolkit.migration_lock), a chunk table, or document rows, taken by the toolkit's own
-- functions; no reader can take or hold one. Every wait is bounded by a lock timeout, and a timeout names who holds
-- the lock.
SET LOCAL ROLE toolkit_owner;

-- Describes the sessions other than this one that hold a lock on a relation: pid, role, and since when.
-- Definer: reads pg_stat_activity as the owner, which may see when other roles' transactions began.
CREATE OR REPLACE FUNCTION toolkit._lock_holders(target regclass)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
        string_agg(
            format('pid %s (role %s, %s)', h.pid, coalesce(h.usename::text, 'unknown'),
                CASE WHEN h.xact_start IS NULL THEN h.mode || ' held'
                    ELSE format('%s held by a transaction open since %s, %s s ago', h.mode,
                        to_char(h.xact_start, 'YYYY-MM-DD HH24:MI:SS TZ'),
                        round(extract(EPOCH FROM clock_timestamp() - h.xact_start)::numeric, 1))
                END),
            '; ' ORDER BY h.xact_start NULLS LAST, h.pid),
        'a session that has just ended')
    FROM (
        SELECT DISTINCT ON (l.pid) l.pid, l.mode, a.usename, a.xact_start
        FROM pg_catalog.pg_locks AS l
        LEFT JOIN pg_catalog.pg_stat_activity AS a ON l.pid = a.pid
        WHERE l.locktype = 'relation' AND l.relation = target AND l.granted AND l.pid <> pg_backend_pid()
        ORDER BY l.pid, l.mode
    ) AS h
$$;

-- Takes a table lock within a lock timeout, or raises lock_not_available (55P03) naming who holds it.
-- The lock lasts until the end of the transaction.
CREATE OR REPLACE FUNCTION toolkit._take_lock(target regclass, lock_mode text, purpose text, timeout text DEFAULT '10s')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved text := current_setting('lock_timeout');
BEGIN
    IF lock_mode NOT IN ('ACCESS SHARE', 'ROW SHARE', 'ROW EXCLUSIVE', 'SHARE UPDATE EXCLUSIVE', 'SHARE',
        'SHARE ROW EXCLUSIVE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE') THEN
        RAISE EXCEPTION 'unknown lock mode %', quote_literal(lock_mode) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', timeout, true);
    BEGIN
        EXECUTE format('LOCK TABLE %s IN %s MODE', target, lock_mode);
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION '% waited % for its lock on % and gave up: held by %',
            purpose, timeout, target, toolkit._lock_holders(target)
            USING ERRCODE = 'lock_not_available',
                  HINT = 'Retry when that transaction has finished (or end it: SELECT pg_terminate_backend(pid)).';
    END;
    PERFORM set_config('lock_timeout', saved, true);
END
$$;

-- Takes the version-set lock: shared while rows are written to every live version (ingest, backfill), exclusive
-- while a version is created or retired, so a write never misses a version created meanwhile.
-- Definer: the lock table is private, so no reader (nor any other role) can hold this lock.
CREATE OR REPLACE FUNCTION toolkit.lock_version_set(exclusive boolean DEFAULT FALSE, timeout text DEFAULT '30s')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM toolkit._take_lock(
        'toolkit.version_set_lock', CASE WHEN exclusive THEN 'EXCLUSIVE' ELSE 'SHARE' END,
        CASE WHEN exclusive THEN 'creating or retiring a version' ELSE 'writing chunks to the live versions' END,
        timeout);
END
$$;

-- Takes the cutover lock: one activation, rollback, retirement or canary change at a time.
CREATE OR REPLACE FUNCTION toolkit._lock_cutover(purpose text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM toolkit._take_lock('toolkit.cutover_lock', 'EXCLUSIVE', purpose, '10s');
END
$$;

-- Locks documents' rows (in a fixed order): FOR UPDATE while a document and its chunks are rewritten (ingest),
-- FOR SHARE while its chunks are written for a new version (backfill); returns the documents found.
CREATE OR REPLACE FUNCTION toolkit.lock_documents(
    tenant text, doc_ids text[], exclusive boolean DEFAULT TRUE, timeout text DEFAULT '30s'
)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved text := current_setting('lock_timeout');
    found integer;
BEGIN
    PERFORM set_config('lock_timeout', timeout, true);
    BEGIN
        IF exclusive THEN
            PERFORM FROM toolkit.documents AS d
            WHERE d.tenant = lock_documents.tenant AND d.doc_id = ANY (doc_ids)
            ORDER BY d.doc_id FOR UPDATE;
        ELSE
            PERFORM FROM toolkit.documents AS d
            WHERE d.tenant = lock_documents.tenant AND d.doc_id = ANY (doc_ids)
            ORDER BY d.doc_id FOR SHARE;
        END IF;
        GET DIAGNOSTICS found = ROW_COUNT;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'writing documents of tenant % waited % for their rows and gave up: written by %',
            quote_literal(tenant), timeout, toolkit._lock_holders('toolkit.documents')
            USING ERRCODE = 'lock_not_available',
                  HINT = 'Another ingest or backfill is writing the same documents; retry when it has finished.';
    END;
    PERFORM set_config('lock_timeout', saved, true);
    RETURN found;
END
$$;
