-- Serving: which version a request's question is embedded for and served from (the active version, or the canary
-- candidate for a share of request keys and for whole tenants), and the canary itself.
SET LOCAL ROLE toolkit_owner;

-- The bucket (0 .. 9999) of a request key: a stable hash, so one key always falls in the same bucket, and raising
-- a canary's share only adds buckets (keys move from the active version to the candidate, never back).
CREATE OR REPLACE FUNCTION toolkit.traffic_bucket(request_key text)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ((hashtextextended(request_key, 0) & 9223372036854775807) % 10000)::integer
$$;

-- Returns the version and model a request must embed its question with, then search (pinned to that version):
-- the canary candidate when the transaction's tenant is one of the canary's tenants or the request key falls in
-- its share, else the active version. Without a request key the tenant is the key. No row: nothing is active.
-- Definer: reads the versions, models and traffic split, which an application may not read.
CREATE OR REPLACE FUNCTION toolkit.serving_model(request_key text DEFAULT NULL)
RETURNS TABLE (
    version integer,
    model_alias text,
    provider text,
    model_name text,
    revision text,
    dimensions integer,
    distance text,
    storage text,
    chunker_version text,
    query_prefix text,
    serving text
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH chosen AS (
        SELECT
            coalesce(
                CASE
                    WHEN toolkit.current_tenant() = ANY (s.tenants) THEN s.candidate
                    WHEN coalesce(request_key, toolkit.current_tenant()) IS NOT NULL
                        AND toolkit.traffic_bucket(coalesce(request_key, toolkit.current_tenant())) < s.percent * 100
                        THEN s.candidate
                END,
                a.version
            ) AS version
        FROM (SELECT x.version FROM toolkit.versions AS x WHERE x.state = 'active') AS a
        FULL JOIN (
            SELECT t.candidate, t.percent, t.tenants
            FROM toolkit.traffic_split AS t
            INNER JOIN toolkit.versions AS c ON t.candidate = c.version AND c.state = ANY (toolkit._servable_states())
        ) AS s ON TRUE
    )
    SELECT v.version, m.alias, m.provider, m.model_name, m.revision, v.dimensions, v.distance, v.storage,
        v.chunker_version, m.query_prefix, CASE v.state WHEN 'active' THEN 'active' ELSE 'canary' END
    FROM chosen
    INNER JOIN toolkit.versions AS v ON chosen.version = v.version
    INNER JOIN toolkit.models AS m ON v.model_alias = m.alias
$$;

-- Starts or changes the canary: percent of request keys (0 to 100) and the listed tenants are served by the
-- candidate, which must be ready or verified, with a passing verification newer than its last change unless forced.
-- percent 0 with no tenants ends it. Audited in toolkit.cutovers (action canary). Returns the cutover id.
-- Definer: writes the traffic split and the audit log, which the deployer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.set_canary(
    candidate integer,
    percent numeric,
    tenants text[] DEFAULT '{}',
    force boolean DEFAULT FALSE,
    reason text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    active integer;
    passing bigint;
    previous record;
    wanted text[] := ARRAY(SELECT DISTINCT t FROM unnest(coalesce(tenants, '{}'::text[])) AS t ORDER BY t);
    new_id bigint;
BEGIN
    PERFORM toolkit._lock_cutover(format('changing the canary of version %s', candidate));
    IF percent IS NULL OR percent = 'NaN'::numeric OR percent < 0 OR percent > 100 THEN
        RAISE EXCEPTION 'the canary share must be a percentage from 0 to 100, not %', coalesce(percent::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF round(percent, 2) <> percent THEN
        RAISE EXCEPTION 'the canary share % has more than two decimals', percent
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Give it to 0.01% (one request key in 10,000).';
    END IF;
    IF EXISTS (SELECT FROM unnest(wanted) AS t WHERE t IS NULL OR t = '') THEN
        RAISE EXCEPTION 'a canary tenant must be a non-empty name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = candidate FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', candidate
            USING ERRCODE = 'undefined_object', HINT = 'Run toolkit status to list the versions.';
    END IF;
    SELECT x.version INTO active FROM toolkit.versions AS x WHERE x.state = 'active';
    SELECT * INTO previous FROM toolkit.traffic_split AS s FOR UPDATE;
    IF percent = 0 AND cardinality(wanted) = 0 THEN
        IF previous IS NULL OR previous.candidate <> candidate THEN
            RAISE EXCEPTION 'version % serves no canary', candidate
                USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Nothing to stop.';
        END IF;
        DELETE FROM toolkit.traffic_split;
    ELSE
        IF active IS NULL THEN
            RAISE EXCEPTION 'no version is active: a canary needs one to share the traffic with'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Cut over to a first version (toolkit cutover), then start the canary.';
        END IF;
        IF v.state <> ALL (toolkit.version_states('canary')) THEN
            RAISE EXCEPTION 'version % is % and cannot serve a canary', candidate, v.state
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = CASE v.state WHEN 'active' THEN 'It already serves every request.'
                          ELSE 'A candidate must be fully embedded and indexed (ready) and verified.' END;
        END IF;
        passing := CASE WHEN toolkit.version_evaluation_current(candidate) THEN toolkit._passing_evaluation(candidate) END;
        IF NOT force AND passing IS NULL THEN
            RAISE EXCEPTION 'version % has no passing verification newer than its last change', candidate
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Run toolkit verify for it, or start the canary with --force (recorded in the audit log).';
        END IF;
        IF previous IS NOT NULL AND previous.candidate <> candidate THEN
            RAISE EXCEPTION 'version % already serves a canary', previous.candidate
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'End it first (toolkit canary --off) or promote it (toolkit cutover).';
        END IF;
        INSERT INTO toolkit.traffic_split AS s (candidate, percent, tenants, evaluation_id, forced)
        VALUES (candidate, percent, wanted, passing, force AND passing IS NULL)
        ON CONFLICT (singleton) DO UPDATE
        SET percent = excluded.percent, tenants = excluded.tenants, evaluation_id = excluded.evaluation_id,
            forced = excluded.forced, changed_at = clock_timestamp();
    END IF;
    INSERT INTO toolkit.cutovers AS c (action, from_version, to_version, forced, evaluation_id, reason, details)
    VALUES ('canary', active, candidate, force AND passing IS NULL, passing, reason,
        jsonb_build_object('percent', percent, 'tenants', to_jsonb(wanted),
            'was', CASE WHEN previous IS NULL THEN NULL
                ELSE jsonb_build_object('percent', previous.percent, 'tenants', previous.tenants) END))
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- The canary, if one runs: candidate, share, tenants, since when, and the evaluation that allowed it.
-- Definer: reads the traffic split, which only the deployer and the owner may read.
CREATE OR REPLACE FUNCTION toolkit.canary_status()
RETURNS TABLE (
    candidate integer,
    model_alias text,
    percent numeric,
    tenants text[],
    forced boolean,
    evaluation_id bigint,
    started_at timestamptz,
    changed_at timestamptz
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.candidate, v.model_alias, s.percent, s.tenants, s.forced, s.evaluation_id, s.started_at, s.changed_at
    FROM toolkit.traffic_split AS s
    INNER JOIN toolkit.versions AS v ON s.candidate = v.version
$$;

-- The model a given version's questions must be embedded with (serving_model's columns; serving is the version's
-- state): for a search pinned to a version the caller already knows.
-- Definer: an application may not read the versions table.
CREATE OR REPLACE FUNCTION toolkit.version_model(target integer)
RETURNS TABLE (
    version integer,
    model_alias text,
    provider text,
    model_name text,
    revision text,
    dimensions integer,
    distance text,
    storage text,
    chunker_version text,
    query_prefix text,
    serving text
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.version, m.alias, m.provider, m.model_name, m.revision, v.dimensions, v.distance, v.storage,
        v.chunker_version, m.query_prefix, v.state
    FROM toolkit.versions AS v
    INNER JOIN toolkit.models AS m ON v.model_alias = m.alias
    WHERE v.version = target
$$;
