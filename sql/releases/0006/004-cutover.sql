-- The active_chunks and live_chunks views, and the cutover functions: activate, rollback, retire.
SET LOCAL ROLE toolkit_owner;

-- The select list a chunk view reads from a version's table (alias c): every column but the embedding's.
CREATE OR REPLACE FUNCTION toolkit._chunk_view_columns()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'c.tenant, c.chunk_id, c.doc_id, c.parent_id, c.is_parent, c.position, c.start_offset, c.end_offset,'
        ' c.heading_path, c.context, c.text, c.content_hash, c.token_count, c.access_labels, c.updated_at'
$$;

-- The same columns, typed and empty: the body of a chunk view when no version qualifies.
CREATE OR REPLACE FUNCTION toolkit._chunk_view_nulls()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'NULL::text AS tenant, NULL::text AS chunk_id, NULL::text AS doc_id, NULL::text AS parent_id,'
        ' NULL::boolean AS is_parent, NULL::integer AS position, NULL::integer AS start_offset,'
        ' NULL::integer AS end_offset, NULL::text[] AS heading_path, NULL::text AS context, NULL::text AS text,'
        ' NULL::text AS content_hash, NULL::integer AS token_count, NULL::text[] AS access_labels,'
        ' NULL::timestamptz AS updated_at'
$$;

-- Creates or replaces a chunk view unless its definition is unchanged (the definition's hash is kept in the view's
-- comment): an upgrade or a repeated call then takes no lock, so readers are never queued behind it.
CREATE OR REPLACE FUNCTION toolkit._define_chunk_view(view_name text, body text, description text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    signature text := md5(body);
    existing regclass := to_regclass(format('toolkit.%I', view_name));
BEGIN
    IF existing IS NOT NULL AND obj_description(existing, 'pg_class') LIKE '%[definition ' || signature || ']' THEN
        RETURN false;
    END IF;
    -- CREATE OR REPLACE VIEW replaces the WITH options too: security_invoker must be restated every time, or the
    -- view silently returns to owner rights and bypasses row-level security.
    EXECUTE format('CREATE OR REPLACE VIEW toolkit.%I WITH (security_invoker = true) AS %s', view_name, body);
    EXECUTE format('REVOKE ALL ON toolkit.%I FROM public', view_name);
    EXECUTE format('GRANT SELECT ON toolkit.%I TO toolkit_reader, toolkit_writer, toolkit_deployer', view_name);
    EXECUTE format('COMMENT ON VIEW toolkit.%I IS %L', view_name, description || ' [definition ' || signature || ']');
    RETURN true;
END
$$;

-- Points toolkit.active_chunks at a version's table (or at no rows when target is NULL).
-- The embedding column is exposed without dimensions, so a swap across dimensions keeps the view's
-- OID and the planner still uses the version's HNSW index. Only a change of storage type
-- (vector <-> halfvec) has to drop and recreate the view, in the same transaction.
CREATE OR REPLACE FUNCTION toolkit._replace_active_view(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    body text;
    storage text := 'vector';
    existing text;
    description text := 'No version is active yet.';
BEGIN
    IF target IS NULL THEN
        body := 'SELECT NULL::integer AS version, NULL::text AS model_alias, NULL::text AS chunker_version, '
            || toolkit._chunk_view_nulls() || ', NULL::' || toolkit._vector_schema() || '.vector AS embedding,'
            ' NULL::tsvector AS fts, NULL::integer[] AS pages WHERE false';
    ELSE
        SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = target;
        storage := v.storage;
        description := format('Active version %s: model %s, chunker %s.', v.version, v.model_alias, v.chunker_version);
        body := format(
            'SELECT %s::integer AS version, %L::text AS model_alias, %L::text AS chunker_version, %s,'
            ' c.embedding::%s.%s AS embedding, c.fts, c.pages FROM %s AS c',
            v.version, v.model_alias, v.chunker_version, toolkit._chunk_view_columns(), toolkit._vector_schema(),
            v.storage, toolkit._chunk_table(v.version));
    END IF;

    SELECT t.typname INTO existing
    FROM pg_catalog.pg_attribute AS a
    INNER JOIN pg_catalog.pg_type AS t ON a.atttypid = t.oid
    WHERE a.attrelid = to_regclass('toolkit.active_chunks') AND a.attname = 'embedding';
    IF existing IS NOT NULL AND existing <> storage THEN
        DROP VIEW toolkit.active_chunks;
    END IF;
    PERFORM toolkit._define_chunk_view('active_chunks', body, description);
END
$$;

-- States whose table is complete and indexed, so a query embedded for the version can be served from it.
CREATE OR REPLACE FUNCTION toolkit._servable_states()
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT toolkit.version_states('serve')
$$;

-- Rebuilds toolkit.live_chunks: every servable version's rows with a constant version column, so that
-- WHERE version = N (a constant or a parameter) reads only that version's table, through its HNSW index.
-- Vector versions expose embedding, halfvec versions embedding_halfvec (the other column is NULL).
CREATE OR REPLACE FUNCTION toolkit._replace_live_view()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    vs text := toolkit._vector_schema();
    body text;
    listed text;
BEGIN
    SELECT string_agg(format(
            'SELECT %s::integer AS version, %L::text AS model_alias, %L::text AS chunker_version, %s, %s AS embedding,'
            ' %s AS embedding_halfvec, c.fts, c.pages FROM %s AS c',
            v.version, v.model_alias, v.chunker_version, toolkit._chunk_view_columns(),
            CASE v.storage WHEN 'vector' THEN format('c.embedding::%s.vector', vs) ELSE format('NULL::%s.vector', vs) END,
            CASE v.storage WHEN 'halfvec' THEN format('c.embedding::%s.halfvec', vs)
                ELSE format('NULL::%s.halfvec', vs) END,
            toolkit._chunk_table(v.version)), ' UNION ALL ' ORDER BY v.version),
        string_agg(v.version::text, ', ' ORDER BY v.version)
    INTO body, listed
    FROM toolkit.versions AS v
    WHERE v.state = ANY (toolkit._servable_states());
    IF body IS NULL THEN
        body := 'SELECT NULL::integer AS version, NULL::text AS model_alias, NULL::text AS chunker_version, '
            || toolkit._chunk_view_nulls() || format(', NULL::%1$s.vector AS embedding,'
                ' NULL::%1$s.halfvec AS embedding_halfvec, NULL::tsvector AS fts, NULL::integer[] AS pages'
                ' WHERE false', vs);
    END IF;
    PERFORM toolkit._define_chunk_view('live_chunks', body,
        'Every servable version (' || coalesce(listed, 'none yet') || '); filter on version.');
END
$$;

-- The passing evaluation that lets a version go live: the newest passing one made after its last change, with the
-- retrieval applications get (served_retrieval: a verification of another retrieval measured something else).
CREATE OR REPLACE FUNCTION toolkit._passing_evaluation(target integer)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- plpgsql: served_retrieval() is defined later (011-lexical.sql), and a SQL function's body is checked when made.
    RETURN (
        SELECT e.evaluation_id
        FROM toolkit.evaluations AS e
        INNER JOIN toolkit.versions AS v ON e.version = v.version
        WHERE e.version = target AND e.passed AND e.created_at >= v.content_changed_at
            AND e.gate ->> 'retrieval' IS NOT DISTINCT FROM toolkit.served_retrieval()
        ORDER BY e.created_at DESC
        LIMIT 1
    );
END
$$;

-- Whether a version's verification currently counts: it is verified, active or standby, and its newest passing
-- evaluation is newer than its last change of contents. The one rule that status, cutover and canary ask.
-- Definer: reads toolkit.evaluations, which the writer may not read.
CREATE OR REPLACE FUNCTION toolkit.version_evaluation_current(target integer)
RETURNS boolean
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((
        SELECT v.state = ANY (toolkit.version_states('verification-counts'))
            AND toolkit._passing_evaluation(v.version) IS NOT NULL
        FROM toolkit.versions AS v WHERE v.version = target
    ), false)
$$;

-- Rebuilds toolkit.live_chunks like _replace_live_view, but waits for the view's lock only briefly and retries
-- (as cutover does): a reader holding the view stalls this call, never the readers queued behind it. Gives up after
-- the attempts, naming the holder.
CREATE OR REPLACE FUNCTION toolkit._replace_live_view_patiently(
    lock_timeout_ms integer DEFAULT 100, attempts integer DEFAULT 60
)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved text := current_setting('lock_timeout');
BEGIN
    FOR attempt IN 1 .. attempts LOOP
        BEGIN
            PERFORM set_config('lock_timeout', lock_timeout_ms || 'ms', true);
            LOCK TABLE toolkit.live_chunks IN ACCESS EXCLUSIVE MODE;
            PERFORM set_config('lock_timeout', saved, true);
            PERFORM toolkit._replace_live_view();
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            -- The subtransaction is rolled back: the queued request is gone, readers go on while this one sleeps.
            PERFORM pg_sleep(least(0.02 * 2 ^ least(attempt, 10), 0.5));
        END;
    END LOOP;
    RAISE EXCEPTION 'changing toolkit.live_chunks found it held in % attempts of % ms: held by %', attempts,
        lock_timeout_ms, toolkit._lock_holders('toolkit.live_chunks')
        USING ERRCODE = 'lock_not_available',
              HINT = 'A reader keeps a transaction open on toolkit.live_chunks: retry when it ends (keep reads short).';
END
$$;

-- Makes a version active: the gate (a passing verification newer than its last change) unless forced.
-- The previous active version becomes standby; a canary of this version ends (it is promoted). Returns the cutover id.
-- Definer: changes the registry and the view, which the deployer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.activate_version(target integer, force boolean DEFAULT FALSE, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    previous integer;
    passing_evaluation bigint;
    new_id bigint;
    canary jsonb;
BEGIN
    PERFORM toolkit._lock_cutover(format('activating version %s', target));
    SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = target FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', target
            USING ERRCODE = 'undefined_object', HINT = 'Run toolkit status to list the versions.';
    END IF;
    IF v.state = 'active' THEN
        RAISE EXCEPTION 'version % is already active', target
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Nothing to do.';
    END IF;
    passing_evaluation := toolkit._passing_evaluation(target);
    IF v.state <> ALL (toolkit.version_states('activate')) THEN
        RAISE EXCEPTION 'version % is % and cannot be activated, even with force', target, v.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A version must be fully embedded and indexed (ready) first: toolkit backfill --resume.';
    END IF;
    -- The gate: verified (or a standby version going back live) with a passing evaluation newer than
    -- the version's last change of contents.
    IF NOT force AND (v.state <> ALL (toolkit.version_states('activate-unforced'))
        OR NOT toolkit.version_evaluation_current(target)) THEN
        RAISE EXCEPTION 'version % has no passing verification newer than its last change (state %)', target, v.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = CASE WHEN passing_evaluation IS NOT NULL AND v.state = 'ready'
                      THEN 'It passed one, but went back to ready since (a rollback): that one no longer counts. '
                      ELSE '' END
                      || 'Run toolkit verify for it, or cut over with --force (recorded in the audit log).';
    END IF;
    PERFORM toolkit._require_valid_index(target);

    SELECT x.version INTO previous FROM toolkit.versions AS x WHERE x.state = 'active' FOR UPDATE;
    IF previous IS NOT NULL THEN
        PERFORM toolkit._set_version_state(previous, 'standby');
    END IF;
    PERFORM toolkit._set_version_state(target, 'active');
    PERFORM toolkit._replace_active_view(target);
    DELETE FROM toolkit.traffic_split AS s WHERE s.candidate = target
    RETURNING jsonb_build_object('canary_promoted', jsonb_build_object('percent', s.percent, 'tenants', s.tenants))
    INTO canary;

    INSERT INTO toolkit.cutovers AS c (action, from_version, to_version, forced, evaluation_id, reason, details)
    VALUES ('activate', previous, target, force, passing_evaluation, reason, coalesce(canary, '{}'))
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- Ends a canary if one runs (all traffic back to the active version); otherwise returns to the version that the
-- current active one replaced (which must still be standby), and the version rolled back from becomes ready: it
-- needs a new verification (or force) to go live again.
-- Definer: changes the registry and the view, which the deployer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.rollback_version(reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_version integer;
    previous integer;
    candidate integer;
    was jsonb;
    new_id bigint;
BEGIN
    PERFORM toolkit._lock_cutover('rolling back');
    SELECT x.version INTO current_version FROM toolkit.versions AS x WHERE x.state = 'active' FOR UPDATE;
    DELETE FROM toolkit.traffic_split AS s
    RETURNING s.candidate, jsonb_build_object('percent', s.percent, 'tenants', s.tenants) INTO candidate, was;
    IF candidate IS NOT NULL THEN
        INSERT INTO toolkit.cutovers AS c (action, from_version, to_version, reason, details)
        VALUES ('canary', candidate, current_version, reason,
            jsonb_build_object('percent', 0, 'tenants', '[]'::jsonb, 'ended', 'rollback', 'was', was))
        RETURNING c.cutover_id INTO new_id;
        RETURN new_id;
    END IF;
    IF current_version IS NULL THEN
        RAISE EXCEPTION 'no version is active, so there is nothing to roll back'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    previous := toolkit._rollback_target();
    IF previous IS NULL THEN
        RAISE EXCEPTION 'version % replaced no version that is still on standby', current_version
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Activate another verified version instead (toolkit cutover).';
    END IF;
    PERFORM toolkit._set_version_state(current_version, 'ready');
    PERFORM toolkit._set_version_state(previous, 'active');
    PERFORM toolkit._replace_active_view(previous);
    INSERT INTO toolkit.cutovers AS c (action, from_version, to_version, reason)
    VALUES ('rollback', current_version, previous, reason)
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- The standby version a rollback would return to (the one the active version replaced), or NULL.
CREATE OR REPLACE FUNCTION toolkit._rollback_target()
RETURNS integer
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT x.version
    FROM (
        SELECT c.from_version
        FROM toolkit.cutovers AS c
        INNER JOIN toolkit.versions AS a ON c.to_version = a.version AND a.state = 'active'
        WHERE c.action IN ('activate', 'rollback')
        ORDER BY c.cutover_id DESC
        LIMIT 1
    ) AS last
    INNER JOIN toolkit.versions AS x ON last.from_version = x.version AND x.state = 'standby'
$$;

-- Retires a version that is neither active nor a canary candidate: its chunk table is dropped, its registry row kept.
-- The rollback target inside the rollback window (toolkit.protected_standby()) needs force.
-- Definer: drops a table the deployer does not own.
CREATE OR REPLACE FUNCTION toolkit.retire_version(target integer, reason text DEFAULT NULL, force boolean DEFAULT FALSE)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    refusal text;
    refusal_hint text;
    protected boolean;
BEGIN
    PERFORM toolkit._lock_cutover(format('retiring version %s', target));
    -- Ingest writes to every live version under the shared form of this lock: none is mid-write here.
    PERFORM toolkit.lock_version_set(true);
    PERFORM FROM toolkit.versions AS x WHERE x.version = target FOR UPDATE;
    SELECT r.message, r.hint INTO refusal, refusal_hint FROM toolkit.retire_refusal(target, force) AS r;
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION '%', refusal USING ERRCODE = 'object_not_in_prerequisite_state', HINT = refusal_hint;
    END IF;
    protected := EXISTS (SELECT FROM toolkit.protected_standby() AS p WHERE p.version = target);
    PERFORM toolkit._set_version_state(target, 'retired');
    PERFORM toolkit._replace_live_view();
    EXECUTE format('DROP TABLE IF EXISTS %s', toolkit._chunk_table(target));
    PERFORM toolkit._drop_text_postings(target);
    INSERT INTO toolkit.cutovers AS c (action, from_version, reason, forced)
    VALUES ('retire', target, reason, protected)
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- Versions that toolkit retire --older-than would drop: standby and abandoned building versions whose state is older
-- than the window, except a building version whose rows were written within it (a backfill still running), a canary
-- candidate and the rollback target inside the rollback window. Ready and verified versions (awaiting verification
-- or a cutover) are never chosen by age: retire names them with --version.
-- Definer: reads every tenant's rows of the chunk tables (a deployer sees one tenant at a time).
CREATE OR REPLACE FUNCTION toolkit.retire_candidates(older_than interval)
RETURNS TABLE (version integer, state text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    recent boolean;
BEGIN
    IF older_than IS NULL OR older_than < INTERVAL '0' THEN
        RAISE EXCEPTION 'the rollback window must be zero or more, not %', quote_nullable(older_than)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v IN
        SELECT x.version, x.state FROM toolkit.versions AS x
        WHERE x.state = ANY (toolkit.version_states('retire-by-age'))
            AND x.state_changed_at < clock_timestamp() - older_than
            AND NOT EXISTS (SELECT FROM toolkit.traffic_split AS s WHERE s.candidate = x.version)
            AND NOT EXISTS (SELECT FROM toolkit.protected_standby() AS p WHERE p.version = x.version)
        ORDER BY x.version
    LOOP
        IF v.state = 'building' THEN
            EXECUTE format('SELECT max(updated_at) >= clock_timestamp() - $1 FROM %s',
                toolkit._chunk_table(v.version)) INTO recent USING older_than;
            CONTINUE WHEN recent;
        END IF;
        version := v.version;
        state := v.state;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Returns the active version number, or NULL.
-- Definer: an application may not read the versions table.
CREATE OR REPLACE FUNCTION toolkit.active_version()
RETURNS integer
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT x.version FROM toolkit.versions AS x WHERE x.state = 'active'
$$;

-- Returns the active version's model, so an application can check it embeds queries the same way.
-- Definer: an application may not read the versions table.
CREATE OR REPLACE FUNCTION toolkit.active_model()
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
    query_prefix text
)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.version, m.alias, m.provider, m.model_name, m.revision, v.dimensions, v.distance,
        v.storage, v.chunker_version, m.query_prefix
    FROM toolkit.versions AS v
    INNER JOIN toolkit.models AS m ON v.model_alias = m.alias
    WHERE v.state = 'active'
$$;

-- What a version's last verification is worth for a cutover, in one word: '-' (never evaluated), 'failed',
-- 'current' (a cutover accepts it), 'rolled back' (it passed and the contents did not change, but a rollback took the
-- version off the air after it: a roll forward needs a new verification or force) or 'stale' (it passed, but the
-- contents changed since). The word toolkit status shows; the rules are the cutover's own.
-- Definer: reads toolkit.evaluations and toolkit.cutovers, which the writer may not read.
CREATE OR REPLACE FUNCTION toolkit.version_verification(target integer)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN last.passed IS NULL THEN '-'
        WHEN NOT last.passed THEN 'failed'
        WHEN toolkit.version_evaluation_current(target) THEN 'current'
        WHEN EXISTS (
            SELECT FROM toolkit.cutovers AS c
            INNER JOIN toolkit.evaluations AS e ON e.evaluation_id = toolkit._passing_evaluation(target)
            WHERE c.action = 'rollback' AND c.from_version = target AND c.happened_at >= e.created_at
        ) THEN 'rolled back'
        ELSE 'stale'
    END
    FROM (SELECT NULL::boolean AS none) AS always
    LEFT JOIN LATERAL (
        SELECT e.passed FROM toolkit.evaluations AS e WHERE e.version = target ORDER BY e.evaluation_id DESC LIMIT 1
    ) AS last ON true
$$;

-- version_status is dropped first: CREATE OR REPLACE cannot add the verification column to a function the database
-- already has (the grants file, applied after this one, grants it again).
DROP FUNCTION IF EXISTS toolkit.version_status();

-- One row per version: model, chunker, state, what it serves, rows, pending rows and documents, documents and
-- tenants, index validity, the last evaluation (and whether it still counts for a cutover, and in one word:
-- toolkit.version_verification).
-- Definer: counts every tenant's rows of the chunk tables.
CREATE FUNCTION toolkit.version_status()
RETURNS TABLE (
    version integer,
    model_alias text,
    chunker_version text,
    storage text,
    dimensions integer,
    state text,
    total_rows bigint,
    pending_rows bigint,
    index_valid boolean,
    last_evaluation_passed boolean,
    last_evaluated_at timestamptz,
    created_at timestamptz,
    state_changed_at timestamptz,
    serving text,
    documents bigint,
    tenants bigint,
    last_recall double precision,
    evaluation_current boolean,
    rollback_target boolean,
    pending_documents bigint,
    verification text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    candidate integer;
    canary_percent numeric;
    canary_tenants text[];
    target integer := toolkit._rollback_target();
BEGIN
    SELECT s.candidate, s.percent, s.tenants INTO candidate, canary_percent, canary_tenants FROM toolkit.traffic_split AS s;
    FOR v IN SELECT * FROM toolkit.versions AS x ORDER BY x.version LOOP
        version := v.version;
        model_alias := v.model_alias;
        chunker_version := v.chunker_version;
        storage := v.storage;
        dimensions := v.dimensions;
        state := v.state;
        created_at := v.created_at;
        state_changed_at := v.state_changed_at;
        total_rows := NULL;
        pending_rows := NULL;
        pending_documents := NULL;
        documents := NULL;
        tenants := NULL;
        index_valid := NULL;
        IF v.state <> 'retired' THEN
            -- A backfill writes a document's rows once, embedded: what it has still to do is documents.
            SELECT p.documents INTO pending_documents FROM toolkit.version_pending_documents(v.version) AS p;
            EXECUTE format(
                'SELECT count(*), count(*) FILTER (WHERE embedding IS NULL AND NOT is_parent),'
                ' count(DISTINCT (tenant, doc_id)), count(DISTINCT tenant) FROM %s',
                toolkit._chunk_table(v.version)) INTO total_rows, pending_rows, documents, tenants;
            index_valid := toolkit.version_index_valid(v.version);
        END IF;
        serving := CASE
            WHEN v.state = 'active' THEN 'active'
            WHEN candidate = v.version THEN format('canary %s%%', trim_scale(canary_percent))
                || CASE WHEN cardinality(canary_tenants) > 0 THEN ' + tenants ' || array_to_string(canary_tenants, ',')
                    ELSE '' END
            WHEN v.version = target THEN 'rollback target'
            ELSE ''
        END;
        rollback_target := v.version = target;
        SELECT e.passed, e.created_at, (e.metrics -> 'candidate' ->> 'recall')::double precision
        INTO last_evaluation_passed, last_evaluated_at, last_recall
        FROM toolkit.evaluations AS e WHERE e.version = v.version ORDER BY e.evaluation_id DESC LIMIT 1;
        IF NOT FOUND THEN
            last_evaluation_passed := NULL;
            last_evaluated_at := NULL;
            last_recall := NULL;
        END IF;
        evaluation_current := toolkit.version_evaluation_current(v.version);
        verification := toolkit.version_verification(v.version);
        RETURN NEXT;
    END LOOP;
END
$$;
