-- Versions: creating chunks_vN tables, their HNSW index and security, and the state machine.
SET LOCAL ROLE toolkit_owner;

-- Returns the bare name of a version's chunk table (chunks_vN): what the names derived from it (its indexes) start
-- with. A statement names the table itself with toolkit._chunk_table below, never with this.
CREATE OR REPLACE FUNCTION toolkit._version_table(version integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'chunks_v' || version::text
$$;

-- Returns a version's chunk table, schema-qualified and quoted (toolkit.chunks_vN): the one way every routine, and
-- Python (toolkit.live_versions().chunk_table, a version's row), names it; put into a statement with %s, or cast
-- to regclass.
CREATE OR REPLACE FUNCTION toolkit._chunk_table(target integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'toolkit.' || quote_ident(toolkit._version_table(target))
$$;

-- Returns the schema that holds the vector extension's types and operator classes (quoted).
CREATE OR REPLACE FUNCTION toolkit._vector_schema()
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT quote_ident(n.nspname)
    FROM pg_catalog.pg_extension AS e
    INNER JOIN pg_catalog.pg_namespace AS n ON e.extnamespace = n.oid
    WHERE e.extname = 'vector'
$$;

-- Returns the states from which a version may take part in an action: the one list that SQL's routines and the
-- CLI's version lookup both ask (live: not retired; serve: complete and indexed; activate, canary, shadow, verify,
-- retire: what the routine of that name accepts; activate-unforced: what it accepts without force;
-- verification-counts: where a passing verification still counts, toolkit.version_evaluation_current;
-- retire-by-age: what toolkit retire picks by age, never a version awaiting verification or cutover).
CREATE OR REPLACE FUNCTION toolkit.version_states(action text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    states text[];
BEGIN
    states := CASE action
        WHEN 'live' THEN ARRAY['building', 'ready', 'verified', 'active', 'standby']
        WHEN 'serve' THEN ARRAY['ready', 'verified', 'active', 'standby']
        WHEN 'verify' THEN ARRAY['ready', 'verified', 'active', 'standby']
        WHEN 'activate' THEN ARRAY['ready', 'verified', 'standby']
        WHEN 'activate-unforced' THEN ARRAY['verified', 'standby']
        WHEN 'shadow' THEN ARRAY['ready', 'verified', 'standby']
        WHEN 'canary' THEN ARRAY['ready', 'verified']
        WHEN 'retire' THEN ARRAY['building', 'ready', 'verified', 'standby']
        WHEN 'verification-counts' THEN ARRAY['verified', 'active', 'standby']
        WHEN 'retire-by-age' THEN ARRAY['building', 'standby']
    END;
    IF states IS NULL THEN
        RAISE EXCEPTION 'no version action is called %', quote_nullable(action)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Name one of live, serve, verify, activate, activate-unforced, shadow, canary, retire, '
                      'verification-counts, retire-by-age.';
    END IF;
    RETURN states;
END
$$;

-- Moves a version to a new state, refusing moves that version_transitions does not list.
CREATE OR REPLACE FUNCTION toolkit._set_version_state(target integer, new_state text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_state text;
BEGIN
    SELECT v.state INTO old_state FROM toolkit.versions AS v WHERE v.version = target FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', target
            USING ERRCODE = 'undefined_object', HINT = 'Run toolkit status to list the versions.';
    END IF;
    IF old_state = new_state THEN
        RETURN;
    END IF;
    IF NOT EXISTS (
        SELECT FROM toolkit.version_transitions AS t
        WHERE t.from_state = old_state AND t.to_state = new_state
    ) THEN
        RAISE EXCEPTION 'version % cannot move from % to %', target, old_state, new_state
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The legal moves are listed in toolkit.version_transitions.';
    END IF;
    UPDATE toolkit.versions
    SET state = new_state, state_changed_at = clock_timestamp()
    WHERE version = target;
END
$$;

-- (Re)applies row-level security, policies and grants to one version's chunk table, and records which definition
-- of this function did it (an upgrade that does not change it then leaves the table alone).
CREATE OR REPLACE FUNCTION toolkit._secure_version_table(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl regclass := toolkit._chunk_table(target)::regclass;
BEGIN
    PERFORM toolkit._secure_tenant_table(tbl);
    PERFORM toolkit._secure_access_labels(tbl);
    PERFORM toolkit._grant_version_table(target);
    -- Any change to the rows, by any path (ingest, backfill, a direct UPDATE by the writer), makes the version's
    -- verification stale: the trigger records it in the registry, which no role below the owner can switch off.
    EXECUTE format('DROP TRIGGER IF EXISTS version_rows_changed ON %s', tbl);
    EXECUTE format(
        'CREATE TRIGGER version_rows_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s'
        ' FOR EACH STATEMENT EXECUTE FUNCTION toolkit._version_rows_changed(%L)', tbl, target);
    PERFORM toolkit._secure_text_postings(target);
    UPDATE toolkit.versions SET secured_with = toolkit._version_security_definition() WHERE version = target;
END
$$;

-- Grants on one version's chunk table: read for the reader and the deployer, rows for the writer. Re-run by the
-- grants file on every upgrade (it revokes everything first).
CREATE OR REPLACE FUNCTION toolkit._grant_version_table(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl regclass := toolkit._chunk_table(target)::regclass;
BEGIN
    EXECUTE format('REVOKE ALL ON %s FROM public', tbl);
    EXECUTE format('GRANT SELECT ON %s TO toolkit_reader, toolkit_deployer', tbl);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO toolkit_writer', tbl);
    PERFORM toolkit._grant_text_postings(target);
END
$$;

-- Trigger (per statement, on every chunk table; its argument is the version): records that the version's rows
-- changed, so a verification made before no longer counts (a verified version goes back to ready). A building
-- version has none to lose: its writes leave the registry row alone, and mark_version_ready records the change.
-- Definer: records the change in toolkit.versions, which the writer may not write directly.
CREATE OR REPLACE FUNCTION toolkit._version_rows_changed()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target integer := tg_argv[0]::integer;
BEGIN
    IF (SELECT v.state FROM toolkit.versions AS v WHERE v.version = target) IS DISTINCT FROM 'building' THEN
        PERFORM toolkit.touch_version(target);
    END IF;
    RETURN NULL;
END
$$;

-- Waits (within a lock timeout) for the transactions that changed a version's rows and have not committed yet, so
-- a verification that starts now sees their rows, or is older than their change; raises naming them otherwise.
-- The lock is taken in a subtransaction that is rolled back at once: nothing is held afterwards.
CREATE OR REPLACE FUNCTION toolkit._await_version_changes(target integer, timeout text DEFAULT '10s')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    BEGIN
        PERFORM set_config('lock_timeout', timeout, true);
        PERFORM FROM toolkit.versions AS v WHERE v.version = target FOR SHARE;
        RAISE EXCEPTION 'released' USING ERRCODE = 'TKW00';
    EXCEPTION
        WHEN SQLSTATE 'TKW00' THEN
            NULL;
        WHEN lock_not_available THEN
            RAISE EXCEPTION 'version % has changes to its rows that have not been committed for %: %', target, timeout,
                toolkit._lock_holders('toolkit.versions')
                USING ERRCODE = 'lock_not_available',
                      HINT = 'A verification must see every change it vouches for: retry when that transaction ends.';
    END;
END
$$;

-- Identifies the current definition of the chunk tables' security (a hash of the functions that apply it).
CREATE OR REPLACE FUNCTION toolkit._version_security_definition()
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT md5(string_agg(p.prosrc, E'\n' ORDER BY p.proname))
    FROM pg_catalog.pg_proc AS p
    WHERE p.pronamespace = 'toolkit'::regnamespace
        AND p.proname IN (
            '_secure_tenant_table', '_secure_access_labels', '_secure_version_table', 'current_tenant',
            'current_principals', '_secure_text_postings'
        )
$$;

-- Creates a version for a model and chunker, and its chunks_vN table; returns the version number.
-- Definer: creates a table in schema toolkit (the writer has no DDL rights) and takes the private version-set lock.
CREATE OR REPLACE FUNCTION toolkit.create_version(
    model_alias text,
    chunker_spec text,
    chunker_version text,
    storage text DEFAULT 'vector',
    dimensions integer DEFAULT NULL,
    hnsw_m integer DEFAULT 16,
    hnsw_ef_construction integer DEFAULT 64,
    text_search_config regconfig DEFAULT 'english'
)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m record;
    dims integer;
    new_version integer;
    tbl text;
BEGIN
    SELECT * INTO m FROM toolkit.models AS x WHERE x.alias = create_version.model_alias;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no model is registered under the alias %', quote_literal(model_alias)
            USING ERRCODE = 'undefined_object', HINT = 'Register it first with toolkit model add.';
    END IF;
    IF storage IS NULL OR storage NOT IN ('vector', 'halfvec') THEN
        RAISE EXCEPTION 'storage must be vector or halfvec, not %', quote_nullable(storage)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    dims := coalesce(dimensions, m.dimensions);
    IF dims > m.dimensions OR dims < 1 THEN
        RAISE EXCEPTION 'model % has % dimensions; % cannot be stored', m.alias, m.dimensions, dims
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF dims < m.dimensions AND NOT m.supports_shortening THEN
        RAISE EXCEPTION 'model % is not declared to support shortened embeddings', m.alias
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Only models trained for it (Matryoshka-style) may be truncated; store all dimensions.';
    END IF;
    IF (storage = 'vector' AND dims > 2000) OR (storage = 'halfvec' AND dims > 4000) THEN
        RAISE EXCEPTION 'an HNSW index on % holds at most % dimensions, not %',
            storage, CASE storage WHEN 'vector' THEN 2000 ELSE 4000 END, dims
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use halfvec storage (up to 4,000 dimensions) or a shortened embedding.';
    END IF;

    -- Ingest writes to every live version under the shared form of this lock, and re-reads the set of
    -- live versions inside it: a new version is never missed by a concurrent ingest.
    PERFORM toolkit.lock_version_set(true);
    INSERT INTO toolkit.versions AS v (
        model_alias, chunker_spec, chunker_version, storage, dimensions, distance,
        hnsw_m, hnsw_ef_construction, text_search_config
    )
    VALUES (
        m.alias, chunker_spec, chunker_version, storage, dims, m.distance,
        hnsw_m, hnsw_ef_construction, text_search_config
    )
    RETURNING v.version INTO new_version;

    tbl := toolkit._chunk_table(new_version);
    EXECUTE format(
        'CREATE TABLE %s ('
        '  tenant text NOT NULL,'
        '  chunk_id text NOT NULL,'
        '  doc_id text NOT NULL,'
        '  parent_id text,'
        '  is_parent boolean NOT NULL DEFAULT false,'
        '  position integer NOT NULL,'
        '  start_offset integer NOT NULL,'
        '  end_offset integer NOT NULL,'
        '  heading_path text[] NOT NULL DEFAULT ''{}'','
        '  context text NOT NULL DEFAULT '''','
        '  text text NOT NULL,'
        '  content_hash text NOT NULL,'
        '  token_count integer NOT NULL,'
        '  access_labels text[] NOT NULL DEFAULT ''{}'','
        '  updated_at timestamptz NOT NULL DEFAULT now(),'
        '  embedding %s.%s(%s),'
        '  fts tsvector GENERATED ALWAYS AS (to_tsvector(%L::regconfig, context || '' '' || text)) STORED,'
        '  pages integer[],'
        '  gap_before text,'
        '  PRIMARY KEY (tenant, chunk_id),'
        '  CHECK (start_offset >= 0 AND end_offset >= start_offset)'
        ')', tbl, toolkit._vector_schema(), storage, dims, text_search_config::text);
    -- pgvector's types default to out-of-line (TOAST) storage; a vector that fits comfortably in a page is
    -- kept in the row instead, which measured ~3x faster for exact scans and faster HNSW builds at 384 dims.
    IF (CASE storage WHEN 'vector' THEN 4 ELSE 2 END) * dims <= 6000 THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN embedding SET STORAGE PLAIN', tbl);
    END IF;
    -- A row past the 2 kB TOAST threshold (a 384-dimension one with its tsvector already is) has its widest
    -- values compressed, then moved out of line. A tsvector barely compresses (none of 96k was kept compressed
    -- in bench/ingest.py): store it out of line without trying (binary COPY 1-4% faster in 4 paired runs).
    EXECUTE format('ALTER TABLE %s ALTER COLUMN fts SET STORAGE EXTERNAL', tbl);
    EXECUTE format('CREATE INDEX %I ON %s (tenant, doc_id)', toolkit._version_table(new_version) || '_doc_idx', tbl);
    -- No GIN index over fts: no search can use one under row-level security (@@ is not leakproof), so a search
    -- reads the version's own postings (011-lexical.sql), which are built when the version becomes ready.
    -- The backfill work queue: rows still waiting for an embedding, claimed shortest first, so a batch holds
    -- texts of similar length (a transformer pads every text of a batch to its longest).
    EXECUTE format(
        'CREATE INDEX %I ON %s (token_count, tenant, chunk_id) WHERE embedding IS NULL AND NOT is_parent',
        toolkit._version_table(new_version) || '_pending_idx', tbl);
    EXECUTE format('COMMENT ON TABLE %s IS %L', tbl,
        format('Chunks of version %s: model %s, chunker %s, %s(%s).',
            new_version, m.alias, chunker_version, storage, dims));
    -- No full-text postings while it is building: a backfill loads the rows alone, and mark_version_ready builds
    -- the postings from them in bulk (as the HNSW index is built after the load), then triggers keep them.
    PERFORM toolkit._secure_version_table(new_version);
    RETURN new_version;
END
$$;

-- Returns the operator class for a version's HNSW index (storage type and distance).
CREATE OR REPLACE FUNCTION toolkit._version_opclass(storage text, distance text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT storage || CASE distance WHEN 'cosine' THEN '_cosine_ops' WHEN 'l2' THEN '_l2_ops' ELSE '_ip_ops' END
$$;

-- Creates the HNSW index of a version if it is missing (build it after a bulk load: it is faster).
-- Definer: builds an index on a table the writer does not own.
CREATE OR REPLACE FUNCTION toolkit.create_version_index(target integer)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    idx text;
BEGIN
    SELECT * INTO v FROM toolkit.versions AS x WHERE x.version = target;
    IF NOT FOUND OR v.state = 'retired' THEN
        RAISE EXCEPTION 'version % does not exist or is retired', target USING ERRCODE = 'undefined_object';
    END IF;
    idx := toolkit._version_table(target) || '_embedding_idx';
    -- SHARE ROW EXCLUSIVE conflicts with itself: two backfills finishing together build the index once (writes
    -- wait either way: CREATE INDEX takes SHARE).
    PERFORM toolkit._take_lock(toolkit._chunk_table(target)::regclass,
        'SHARE ROW EXCLUSIVE', format('building the HNSW index of version %s', target), '1h');
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON %s USING hnsw (embedding %s.%s) WITH (m = %s, ef_construction = %s)',
        idx, toolkit._chunk_table(target), toolkit._vector_schema(), toolkit._version_opclass(v.storage, v.distance),
        v.hnsw_m, v.hnsw_ef_construction);
    RETURN idx;
END
$$;

-- True when the version's HNSW index exists and is valid.
CREATE OR REPLACE FUNCTION toolkit.version_index_valid(target integer)
RETURNS boolean
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(bool_and(i.indisvalid AND i.indisready), false)
    FROM pg_catalog.pg_index AS i
    INNER JOIN pg_catalog.pg_class AS c ON i.indexrelid = c.oid
    INNER JOIN pg_catalog.pg_am AS am ON c.relam = am.oid
    WHERE i.indrelid = to_regclass(toolkit._chunk_table(target))
        AND am.amname = 'hnsw'
$$;

-- Raises unless the version's HNSW index exists and is valid (before it is marked ready or goes live).
CREATE OR REPLACE FUNCTION toolkit._require_valid_index(target integer)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT toolkit.version_index_valid(target) THEN
        RAISE EXCEPTION 'version % has no valid HNSW index', target
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Build it with SELECT toolkit.create_version_index(version).';
    END IF;
END
$$;

-- Counts the rows of a version still waiting for an embedding (parents are never embedded).
-- Definer: counts every tenant's rows (the caller may see one tenant only).
CREATE OR REPLACE FUNCTION toolkit.version_pending_rows(target integer)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pending bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM %s WHERE embedding IS NULL AND NOT is_parent',
        toolkit._chunk_table(target)) INTO pending;
    RETURN pending;
END
$$;

-- The backfill's work queue, as a condition on d (a toolkit.documents row): the document has no rows in the
-- version yet, or a row still without an embedding (left by a backfill of an older toolkit, which wrote rows
-- first and embedded them later). A backfill writes each document's rows whole, in one transaction.
CREATE OR REPLACE FUNCTION toolkit._pending_document_condition(target integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        '(NOT EXISTS (SELECT FROM %1$s AS c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id)'
        ' OR (d.tenant, d.doc_id) IN (SELECT p.tenant, p.doc_id FROM %1$s AS p'
        ' WHERE p.embedding IS NULL AND NOT p.is_parent))',
        toolkit._chunk_table(target))
$$;

-- Counts the documents a backfill of the version still has to write, and the bytes of their raw text.
CREATE OR REPLACE FUNCTION toolkit.version_pending_documents(
    target integer, OUT documents bigint, OUT bytes bigint
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format(
        'SELECT count(*), coalesce(sum(octet_length(d.raw_text)), 0) FROM toolkit.documents AS d WHERE %s',
        toolkit._pending_document_condition(target)) INTO documents, bytes;
END
$$;

-- Claims, for the caller's transaction, up to max_documents pending documents after (after_tenant,
-- after_doc_id) in key order, skipping those another transaction holds (FOR UPDATE SKIP LOCKED: two backfills
-- never take the same document, and ingest, which updates a document's row, waits for the claim). Returns
-- each claimed document with its text while it is still pending in a snapshot taken after the lock (a writer
-- may have finished it between the scan and the lock: then raw_text is NULL), and whether rows of an older
-- backfill must be rewritten, and where a PDF's pages start.
CREATE OR REPLACE FUNCTION toolkit.claim_pending_documents(
    target integer, after_tenant text, after_doc_id text, max_documents integer
)
RETURNS TABLE (tenant text, doc_id text, raw_text text, access_labels text[], rewrite boolean, pages jsonb)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tenants text [];
    doc_ids text [];
    condition text := toolkit._pending_document_condition(target);
BEGIN
    EXECUTE format(
        'SELECT array_agg(k.tenant ORDER BY k.tenant, k.doc_id), array_agg(k.doc_id ORDER BY k.tenant, k.doc_id)'
        ' FROM (SELECT d.tenant, d.doc_id FROM toolkit.documents AS d'
        ' WHERE (d.tenant, d.doc_id) > ($1, $2) AND %s'
        ' ORDER BY d.tenant, d.doc_id LIMIT $3 FOR UPDATE OF d SKIP LOCKED) AS k', condition)
        INTO tenants, doc_ids USING after_tenant, after_doc_id, max_documents;
    IF tenants IS NULL THEN
        RETURN;
    END IF;
    -- A new statement, so a new snapshot: what committed before the locks were taken is seen now.
    RETURN QUERY EXECUTE format(
        'SELECT d.tenant, d.doc_id, CASE WHEN %1$s THEN d.raw_text END, d.access_labels,'
        ' EXISTS (SELECT FROM %2$s AS c WHERE c.tenant = d.tenant AND c.doc_id = d.doc_id),'
        ' d.metadata -> ''pages'''
        ' FROM unnest($1, $2) AS k (tenant, doc_id)'
        ' INNER JOIN toolkit.documents AS d ON d.tenant = k.tenant AND d.doc_id = k.doc_id'
        ' ORDER BY d.tenant, d.doc_id', condition, toolkit._chunk_table(target))
        USING tenants, doc_ids;
END
$$;

-- building -> ready: every row embedded and the HNSW index valid.
-- Definer: changes a version's state and the live_chunks view, which the writer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.mark_version_ready(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pending bigint;
    current_state text;
BEGIN
    SELECT v.state INTO current_state FROM toolkit.versions AS v WHERE v.version = target;
    IF current_state IS DISTINCT FROM 'building' AND current_state IS DISTINCT FROM 'ready' THEN
        RAISE EXCEPTION 'version % is %, not building: it cannot be marked ready', target,
            coalesce(current_state, 'unknown')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- SHARE ROW EXCLUSIVE waits for every transaction still writing rows to the table (a backfill's chunk batch may
    -- write rows without embeddings) and keeps new ones out until this transaction ends; two backfills finishing
    -- together take turns here (the mode conflicts with itself), before either locks the version's row, so the
    -- first can create the postings' triggers (which take this mode) without waiting for the second.
    PERFORM toolkit._take_lock(toolkit._chunk_table(target)::regclass, 'SHARE ROW EXCLUSIVE',
        format('marking version %s ready', target));
    PERFORM 1 FROM toolkit.versions AS v WHERE v.version = target FOR UPDATE;
    pending := toolkit.version_pending_rows(target);
    IF pending > 0 THEN
        RAISE EXCEPTION 'version % still has % rows without an embedding', target, pending
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Finish the backfill first: toolkit backfill --resume.';
    END IF;
    PERFORM toolkit._require_valid_index(target);
    -- Its rows were written while it was building (when the trigger leaves the registry alone): that is a change.
    UPDATE toolkit.versions SET content_changed_at = clock_timestamp() WHERE version = target AND state = 'building';
    -- The full-text postings and statistics, built from the rows now in one pass (as the HNSW index was), then kept
    -- by triggers; a version ready before (marked again) keeps its own.
    PERFORM toolkit._create_text_postings(target);
    PERFORM toolkit._set_version_state(target, 'ready');
    -- A ready version can be searched (pinned): it joins toolkit.live_chunks (retrying briefly: never queue readers).
    PERFORM toolkit._replace_live_view_patiently();
END
$$;

-- ready -> building, when a version must be backfilled again.
-- Definer: changes a version's state and the live_chunks view, which the writer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.mark_version_building(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The canary would silently stop (a building version is not served) while its share stayed recorded.
    IF EXISTS (SELECT FROM toolkit.traffic_split AS s WHERE s.candidate = target) THEN
        RAISE EXCEPTION 'version % serves a canary and cannot go back to building', target
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The deployer ends the canary first: toolkit canary --off (or toolkit rollback).';
    END IF;
    PERFORM toolkit._set_version_state(target, 'building');
    -- Its rows are rewritten now: the full-text postings go, and are built again when it is ready.
    PERFORM toolkit._drop_text_postings(target);
    PERFORM toolkit._replace_live_view_patiently();
END
$$;

-- Records that a version's contents changed: a verification older than this no longer counts (the trigger on every
-- chunk table calls it; ingest calls it too). A running canary of the version is audited as now unverified.
-- Definer: records the change in toolkit.versions, which the writer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.touch_version(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    canary record;
BEGIN
    UPDATE toolkit.versions SET content_changed_at = clock_timestamp() WHERE version = target;
    IF (SELECT v.state FROM toolkit.versions AS v WHERE v.version = target) = 'verified' THEN
        PERFORM toolkit._set_version_state(target, 'ready');
        -- A canary keeps serving the changed rows: its verification no longer vouches for them, which the audit
        -- log records (once per verification) and status shows.
        SELECT * INTO canary FROM toolkit.traffic_split AS s WHERE s.candidate = target;
        IF FOUND THEN
            INSERT INTO toolkit.cutovers (action, from_version, to_version, forced, evaluation_id, reason, details)
            VALUES ('canary', (SELECT x.version FROM toolkit.versions AS x WHERE x.state = 'active'), target, false,
                canary.evaluation_id, 'the candidate''s rows changed under the canary',
                jsonb_build_object('percent', canary.percent, 'tenants', to_jsonb(canary.tenants),
                    'verification', 'stale', 'changed_by', session_user::text));
        END IF;
    END IF;
END
$$;

-- The versions that receive writes (every state but retired), oldest first, with their chunk tables (quoted):
-- ingest writes each document to all.
CREATE OR REPLACE FUNCTION toolkit.live_versions()
RETURNS TABLE (
    version integer,
    model_alias text,
    chunker_spec text,
    chunker_version text,
    storage text,
    dimensions integer,
    chunk_table text
)
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT v.version, v.model_alias, v.chunker_spec, v.chunker_version, v.storage, v.dimensions,
        toolkit._chunk_table(v.version)
    FROM toolkit.versions AS v
    WHERE v.state = ANY (toolkit.version_states('live'))
    ORDER BY v.version
$$;

-- Whether ingest leaves a version's new rows without embeddings, for its backfill to embed: a building version of a
-- priced model (a backfill stopped by --max-cost must not keep being embedded into, at the model's price, by every
-- ingest; the backfill that resumes it embeds them under its own budget). Served versions are always embedded.
-- Definer: reads the model's price, which an application may not read.
CREATE OR REPLACE FUNCTION toolkit.embedding_deferred(target integer)
RETURNS boolean
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((
        SELECT v.state = 'building' AND m.price_per_million_tokens > 0
        FROM toolkit.versions AS v
        INNER JOIN toolkit.models AS m ON v.model_alias = m.alias
        WHERE v.version = target
    ), false)
$$;
