-- The active_chunks view and the cutover functions that swap it: activate, rollback, retire.
SET LOCAL ROLE toolkit_owner;

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
        body := 'SELECT NULL::integer AS version, NULL::text AS model_alias, NULL::text AS chunker_version,'
            ' NULL::text AS tenant, NULL::text AS chunk_id, NULL::text AS doc_id, NULL::text AS parent_id,'
            ' NULL::boolean AS is_parent, NULL::integer AS position, NULL::integer AS start_offset,'
            ' NULL::integer AS end_offset, NULL::text[] AS heading_path, NULL::text AS context,'
            ' NULL::text AS text, NULL::text AS content_hash, NULL::integer AS token_count,'
            ' NULL::text[] AS access_labels, NULL::timestamptz AS updated_at,'
            ' NULL::' || toolkit._vector_schema() || '.vector AS embedding, NULL::tsvector AS fts WHERE false';
    ELSE
        SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = target;
        storage := v.storage;
        description := format('Active version %s: model %s, chunker %s.', v.version, v.model_alias, v.chunker_version);
        body := format(
            'SELECT %s::integer AS version, %L::text AS model_alias, %L::text AS chunker_version,'
            ' c.tenant, c.chunk_id, c.doc_id, c.parent_id, c.is_parent, c.position, c.start_offset,'
            ' c.end_offset, c.heading_path, c.context, c.text, c.content_hash, c.token_count,'
            ' c.access_labels, c.updated_at, c.embedding::%s.%s AS embedding, c.fts'
            ' FROM toolkit.%I AS c',
            v.version, v.model_alias, v.chunker_version, toolkit._vector_schema(), v.storage,
            toolkit._version_table(v.version));
    END IF;

    SELECT t.typname INTO existing
    FROM pg_catalog.pg_attribute AS a
    INNER JOIN pg_catalog.pg_type AS t ON a.atttypid = t.oid
    WHERE a.attrelid = to_regclass('toolkit.active_chunks') AND a.attname = 'embedding';
    IF existing IS NOT NULL AND existing <> storage THEN
        DROP VIEW toolkit.active_chunks;
    END IF;

    -- CREATE OR REPLACE VIEW replaces the WITH options too: security_invoker must be restated every time,
    -- or the view silently returns to owner rights and bypasses row-level security.
    EXECUTE 'CREATE OR REPLACE VIEW toolkit.active_chunks WITH (security_invoker = true) AS ' || body;
    REVOKE ALL ON toolkit.active_chunks FROM public;
    GRANT SELECT ON toolkit.active_chunks TO toolkit_reader, toolkit_writer;
    EXECUTE format('COMMENT ON VIEW toolkit.active_chunks IS %L', description);
END
$$;

-- Makes a version active: the gate (a passing verification newer than its last change) unless forced.
-- The previous active version becomes standby. Returns the cutover id.
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
BEGIN
    -- One cutover at a time; readers are only blocked by the view swap itself.
    PERFORM pg_advisory_xact_lock(hashtext('toolkit.cutover'));
    SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = target FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', target
            USING ERRCODE = 'undefined_object', HINT = 'Run toolkit status to list the versions.';
    END IF;
    IF v.state = 'active' THEN
        RAISE EXCEPTION 'version % is already active', target
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'Nothing to do.';
    END IF;

    SELECT e.evaluation_id INTO passing_evaluation
    FROM toolkit.evaluations AS e
    WHERE e.version = target AND e.passed AND e.created_at >= v.content_changed_at
    ORDER BY e.created_at DESC
    LIMIT 1;

    IF v.state NOT IN ('ready', 'verified', 'standby') THEN
        RAISE EXCEPTION 'version % is % and cannot be activated, even with force', target, v.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'A version must be fully embedded and indexed (ready) first: toolkit backfill --resume.';
    END IF;
    -- The gate: verified (or a standby version going back live) with a passing evaluation newer than
    -- the version's last change of contents.
    IF NOT force AND (v.state NOT IN ('verified', 'standby') OR passing_evaluation IS NULL) THEN
        RAISE EXCEPTION 'version % has no passing verification newer than its last change (state %)',
            target, v.state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run toolkit verify for it, or cut over with --force (recorded in the audit log).';
    END IF;
    PERFORM toolkit._require_valid_index(target);

    SELECT x.version INTO previous FROM toolkit.versions AS x WHERE x.state = 'active' FOR UPDATE;
    IF previous IS NOT NULL THEN
        PERFORM toolkit._set_version_state(previous, 'standby');
    END IF;
    PERFORM toolkit._set_version_state(target, 'active');
    PERFORM toolkit._replace_active_view(target);

    INSERT INTO toolkit.cutovers AS c (action, from_version, to_version, forced, evaluation_id, reason)
    VALUES ('activate', previous, target, force, passing_evaluation, reason)
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- Returns to the version that the current active one replaced (which must still be standby).
-- The version rolled back from becomes ready: it needs a new verification (or force) to go live again.
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
    new_id bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('toolkit.cutover'));
    SELECT x.version INTO current_version FROM toolkit.versions AS x WHERE x.state = 'active' FOR UPDATE;
    IF current_version IS NULL THEN
        RAISE EXCEPTION 'no version is active, so there is nothing to roll back'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT c.from_version INTO previous
    FROM toolkit.cutovers AS c
    WHERE c.to_version = current_version AND c.action IN ('activate', 'rollback')
    ORDER BY c.cutover_id DESC
    LIMIT 1;
    IF previous IS NULL OR NOT EXISTS (
        SELECT FROM toolkit.versions AS x WHERE x.version = previous AND x.state = 'standby'
    ) THEN
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

-- Retires a version that is not active: its chunk table is dropped, its registry row kept.
CREATE OR REPLACE FUNCTION toolkit.retire_version(target integer, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('toolkit.cutover'));
    -- Ingest writes to every live version under the shared form of this lock: none is mid-write here.
    PERFORM pg_advisory_xact_lock(hashtext('toolkit.version-set'));
    IF (SELECT x.state FROM toolkit.versions AS x WHERE x.version = target FOR UPDATE) = 'active' THEN
        RAISE EXCEPTION 'version % is active and cannot be retired', target
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Cut over to another version first; the previous one becomes standby.';
    END IF;
    PERFORM toolkit._set_version_state(target, 'retired');
    EXECUTE format('DROP TABLE IF EXISTS toolkit.%I', toolkit._version_table(target));
    INSERT INTO toolkit.cutovers AS c (action, from_version, reason)
    VALUES ('retire', target, reason)
    RETURNING c.cutover_id INTO new_id;
    RETURN new_id;
END
$$;

-- Returns the active version number, or NULL.
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

-- One row per version: model, chunker, state, rows, pending rows, index validity, last evaluation.
CREATE OR REPLACE FUNCTION toolkit.version_status()
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
    state_changed_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
BEGIN
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
        index_valid := NULL;
        IF v.state <> 'retired' THEN
            EXECUTE format(
                'SELECT count(*), count(*) FILTER (WHERE embedding IS NULL AND NOT is_parent) FROM toolkit.%I',
                toolkit._version_table(v.version)) INTO total_rows, pending_rows;
            index_valid := toolkit.version_index_valid(v.version);
        END IF;
        SELECT e.passed, e.created_at INTO last_evaluation_passed, last_evaluated_at
        FROM toolkit.evaluations AS e WHERE e.version = v.version ORDER BY e.evaluation_id DESC LIMIT 1;
        IF NOT FOUND THEN
            last_evaluation_passed := NULL;
            last_evaluated_at := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Keep active_chunks pointing at the active version (or at no rows) after every upgrade.
DO $$
BEGIN
    PERFORM toolkit._replace_active_view(toolkit.active_version());
END
$$;
