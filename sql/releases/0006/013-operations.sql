-- Operations: the rollback window (a setting SQL enforces when a version is retired) and what connected standbys
-- have replayed (so retire can wait for them).
SET LOCAL ROLE toolkit_owner;

-- The rollback window: how long after a cutover the version it replaced stays protected from retire.
-- Definer: the settings table is the owner's alone.
CREATE OR REPLACE FUNCTION toolkit.rollback_window()
RETURNS interval
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.rollback_window FROM toolkit.settings AS s
$$;

-- Sets the rollback window (zero or more); returns it. Only the owner (the DBA) may run it.
CREATE OR REPLACE FUNCTION toolkit.set_rollback_window(new_window interval)
RETURNS interval
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF new_window IS NULL OR new_window < INTERVAL '0' THEN
        RAISE EXCEPTION 'the rollback window must be zero or more, not %', quote_nullable(new_window)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'For example 7 days, 12 hours or 0.';
    END IF;
    UPDATE toolkit.settings AS s
    SET rollback_window = new_window, changed_at = clock_timestamp(), changed_by = session_user;
    RETURN new_window;
END
$$;

-- The version retire keeps unless forced: the rollback target (the standby a rollback returns to) while its
-- standby time is inside the rollback window; with when the window ends for it. No row: none is protected.
-- Definer: asks toolkit._rollback_target(), a helper only the owner runs.
CREATE OR REPLACE FUNCTION toolkit.protected_standby()
RETURNS TABLE (version integer, standby_since timestamptz, protected_until timestamptz)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT x.version, x.state_changed_at, x.state_changed_at + toolkit.rollback_window()
    FROM toolkit.versions AS x
    WHERE x.version = toolkit._rollback_target()
        AND x.state_changed_at + toolkit.rollback_window() > clock_timestamp()
$$;

-- Why retire_version would refuse to retire a version now (no row: it would not), as one message and hint: the one
-- rule for retire_version itself and for toolkit retire's dry run.
-- Definer: reads the canary split, which only the owner reads.
CREATE OR REPLACE FUNCTION toolkit.retire_refusal(target integer, force boolean DEFAULT FALSE)
RETURNS TABLE (message text, hint text)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('version %s is active and cannot be retired', target),
        'Cut over to another version first; the previous one becomes standby.'
    FROM toolkit.versions AS x WHERE x.version = target AND x.state = 'active'
    UNION ALL
    SELECT format('version %s serves a canary and cannot be retired', target),
        'End the canary first: toolkit canary --off (or toolkit rollback).'
    FROM toolkit.traffic_split AS s WHERE s.candidate = target
    UNION ALL
    SELECT format('version %s is the rollback target, inside the rollback window of %s until %s', target,
            toolkit.rollback_window(), to_char(p.protected_until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"')),
        'toolkit rollback returns to it until then; retire it later, or now with --force.'
    FROM toolkit.protected_standby() AS p WHERE p.version = target AND NOT coalesce(force, FALSE)
    LIMIT 1
$$;

-- The standbys streaming from this server: what each has replayed and whether that reaches ``wal_position`` (a
-- position of this server's WAL, e.g. taken before a retire). Empty on a server without standbys; replayed is NULL
-- when the owner may not see it (no pg_read_all_stats).
-- Definer: pg_stat_replication shows positions only to superusers and members of pg_read_all_stats.
CREATE OR REPLACE FUNCTION toolkit.standby_replay(wal_position pg_lsn)
RETURNS TABLE (standby text, client text, state text, replayed pg_lsn, caught_up boolean, replay_lag interval)
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.application_name::text, coalesce(host(r.client_addr), 'local socket'), r.state, r.replay_lsn,
        r.replay_lsn >= wal_position, r.replay_lag
    FROM pg_stat_replication AS r
    ORDER BY 1, 2
$$;

-- How far each live version is behind the documents (what the active version serves from): the documents a
-- backfill has still to write into it (toolkit._pending_document_condition, the backfill's own work queue: no rows
-- in the version yet, or rows still without an embedding), the chunks without an embedding, and since when the
-- oldest of those documents has waited. Ingest writes a changed document into every live version in one
-- transaction (dual-write), so a version only falls behind by what its backfill has not reached.
-- caught_up: nothing pending. A retired version is not listed. SELECT * FROM toolkit.version_lag() WHERE NOT caught_up.
-- Definer: counts every tenant's documents and chunk rows, as toolkit.version_status() does.
CREATE OR REPLACE FUNCTION toolkit.version_lag()
RETURNS TABLE (
    version integer,
    state text,
    active_version integer,
    documents bigint,
    documents_behind bigint,
    documents_not_chunked bigint,
    rows_not_embedded bigint,
    oldest_pending_since timestamptz,
    caught_up boolean
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
BEGIN
    SELECT x.version INTO active_version FROM toolkit.versions AS x WHERE x.state = 'active';
    SELECT count(*) INTO documents FROM toolkit.documents;
    FOR v IN SELECT x.version, x.state FROM toolkit.versions AS x WHERE x.state <> 'retired' ORDER BY x.version LOOP
        version := v.version;
        state := v.state;
        EXECUTE format(
            'SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT FROM %1$s AS c'
            ' WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id)), min(d.updated_at)'
            ' FROM toolkit.documents AS d WHERE %2$s',
            toolkit._chunk_table(v.version), toolkit._pending_document_condition(v.version))
            INTO documents_behind, documents_not_chunked, oldest_pending_since;
        EXECUTE format('SELECT count(*) FROM %s WHERE embedding IS NULL AND NOT is_parent',
            toolkit._chunk_table(v.version)) INTO rows_not_embedded;
        caught_up := documents_behind = 0 AND rows_not_embedded = 0;
        RETURN NEXT;
    END LOOP;
END
$$;
