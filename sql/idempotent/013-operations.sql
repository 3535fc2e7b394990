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
