-- Search: vector top-k with filters, hybrid (full text + vector, RRF), small-to-big, each pinned to the version
-- its query was embedded for (read from that version's own table, so a cutover in between changes nothing) and
-- refusing vectors that cannot belong to it. The search functions are SECURITY INVOKER: row-level security applies
-- to the caller; they search the transaction's tenant.
SET LOCAL ROLE toolkit_owner;

-- Signatures name pgvector's type unqualified: resolve it in the extension's schema, wherever that is,
-- for this file only (restored at the end). Bodies qualify every pgvector name.
SELECT
    set_config('toolkit.saved_search_path', current_setting('search_path'), TRUE) AS saved,
    set_config('search_path', toolkit._vector_schema() || ', pg_catalog', TRUE) AS search_path;
-- Load pgvector's library so its settings are defined: only a superuser may name a setting of a library
-- not loaded yet (a placeholder) in a function's SET clause, as the search functions do.
SELECT vector_dims('[1]'::vector) AS library_loaded;

-- Returns the version a search reads and how to rank it. A search is pinned to the version (or the model alias) its
-- query was embedded for and reads that version's own table while the version is servable (ready, verified, active
-- or standby), whatever a cutover does meanwhile; an unpinned search reads the active version. Refuses a query vector
-- that cannot belong to the version: TK002 (retry: re-read serving_model, embed again) for a pinned search whose
-- version is no longer servable or whose dimensions differ, TK001 for an unpinned one.
-- Definer: reads the versions table, which an application may not read.
CREATE OR REPLACE FUNCTION toolkit._search_target(query_embedding vector, declared_model text, declared_version integer)
RETURNS TABLE (
    version integer,
    model_alias text,
    distance text,
    text_search_config regconfig,
    chunk_table text,
    distance_sql text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v record;
    query_dimensions integer;
    retry text := 'Re-read SELECT * FROM toolkit.serving_model(), embed the question with that model and search again.';
BEGIN
    IF declared_version IS NOT NULL THEN
        SELECT x.version, x.model_alias, x.storage, x.distance, x.dimensions, x.text_search_config, x.state INTO v
        FROM toolkit.versions AS x
        WHERE x.version = declared_version;
        IF NOT FOUND OR v.state <> ALL (toolkit._servable_states()) THEN
            RAISE EXCEPTION 'version % cannot be searched: it is %', declared_version,
                coalesce(v.state, 'unknown')
                USING ERRCODE = 'TK002', HINT = retry;
        END IF;
        IF declared_model IS NOT NULL AND declared_model <> v.model_alias THEN
            RAISE EXCEPTION 'the query was embedded with model %, but version % stores model %',
                quote_literal(declared_model), v.version, quote_literal(v.model_alias)
                USING ERRCODE = 'TK001', HINT = retry;
        END IF;
    ELSIF declared_model IS NOT NULL THEN
        -- A model alias pins the servable version of that model: the active one, else the canary candidate, else
        -- the newest standby, ready or verified one.
        SELECT x.version, x.model_alias, x.storage, x.distance, x.dimensions, x.text_search_config, x.state INTO v
        FROM toolkit.versions AS x
        LEFT JOIN toolkit.traffic_split AS s ON x.version = s.candidate
        WHERE x.model_alias = declared_model AND x.state = ANY (toolkit._servable_states())
        ORDER BY x.state = 'active' DESC, s.candidate IS NOT NULL DESC, x.state = 'standby' DESC, x.version DESC
        LIMIT 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no version of model % can be searched', quote_literal(declared_model)
                USING ERRCODE = 'TK002', HINT = retry;
        END IF;
    ELSE
        SELECT x.version, x.model_alias, x.storage, x.distance, x.dimensions, x.text_search_config, x.state INTO v
        FROM toolkit.versions AS x
        WHERE x.state = 'active';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no version is active, so there is nothing to search'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Activate a version first (toolkit cutover).';
        END IF;
    END IF;
    IF query_embedding IS NOT NULL THEN
        EXECUTE format('SELECT %s.vector_dims($1)', toolkit._vector_schema()) INTO query_dimensions
        USING query_embedding;
        IF query_dimensions <> v.dimensions THEN
            -- TK001 / TK002 are the toolkit's own SQLSTATEs: Python raises ModelMismatchError /
            -- VersionUnavailableError for them.
            RAISE EXCEPTION 'the query vector has % dimensions, but version % (model %) stores %',
                query_dimensions, v.version, quote_literal(v.model_alias), v.dimensions
                USING ERRCODE = CASE WHEN declared_version IS NULL AND declared_model IS NULL THEN 'TK001'
                    ELSE 'TK002' END,
                      HINT = retry;
        END IF;
    END IF;
    -- The distance expression as the version's HNSW index is defined, so the planner can use it.
    RETURN QUERY SELECT v.version, v.model_alias, v.distance, v.text_search_config, toolkit._version_table(v.version),
        format('c.embedding OPERATOR(%1$s.%2$s) $1::%1$s.%3$s', toolkit._vector_schema(),
            toolkit._distance_operator(v.distance), v.storage);
END
$$;

-- The pgvector operator of a distance: cosine <=>, l2 <->, inner_product <#>.
CREATE OR REPLACE FUNCTION toolkit._distance_operator(distance text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' WHEN 'inner_product' THEN '<#>' END
$$;

-- The largest k a search returns (the same for every search function).
CREATE OR REPLACE FUNCTION toolkit.search_max_k()
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 1000
$$;

-- Refuses a k outside 1 .. search_max_k().
CREATE OR REPLACE FUNCTION toolkit._check_k(k integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF k IS NULL OR k < 1 OR k > toolkit.search_max_k() THEN
        RAISE EXCEPTION 'k must be between 1 and %, not %', toolkit.search_max_k(), coalesce(k::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- Raised when a pinned version's table was dropped (retired) while the search waited for it.
CREATE OR REPLACE FUNCTION toolkit._version_gone(version integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'version % was retired while the search waited for it', version
        USING ERRCODE = 'TK002',
              HINT = 'Re-read SELECT * FROM toolkit.serving_model(), embed the question with that model and search again.';
END
$$;

-- Returns the tenant set for the transaction, or refuses to search without one.
CREATE OR REPLACE FUNCTION toolkit._search_tenant()
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- The tenant as set, not as row-level security allows it: a login bound to other tenants then gets no rows
    -- (the policies hide them) rather than an error telling it which tenants exist.
    tenant text := nullif(current_setting('toolkit.tenant', true), '');
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'no tenant is set for this transaction, so there is nothing to search'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Call SELECT toolkit.set_tenant(''your-tenant'') in the same transaction first.';
    END IF;
    RETURN tenant;
END
$$;

-- Returns a jsonb filter value (a string or an array of strings) as a text array; refuses anything else.
CREATE OR REPLACE FUNCTION toolkit._search_filter_texts(value jsonb, filter_name text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR jsonb_typeof(value) = 'null' THEN
        RETURN NULL;
    ELSIF jsonb_typeof(value) = 'string' THEN
        RETURN ARRAY[value #>> '{}'];
    ELSIF jsonb_typeof(value) = 'array'
        AND NOT EXISTS (SELECT FROM jsonb_array_elements(value) AS e WHERE jsonb_typeof(e) <> 'string') THEN
        RETURN ARRAY(SELECT jsonb_array_elements_text(value));
    END IF;
    RAISE EXCEPTION 'the search filter % must be a string or an array of strings, not %', filter_name, value
        USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- Parses a search's filters (a jsonb object) into typed values (NULL: not filtered). Each search writes its own
-- conditions statically, `($n IS NULL OR ...)`, so an unset filter folds away when the statement is planned.
CREATE OR REPLACE FUNCTION toolkit._search_filter_values(
    filters jsonb,
    OUT doc_ids text[],
    OUT doc_id_prefixes text[],
    OUT heading_prefix text[],
    OUT updated_after timestamptz,
    OUT updated_before timestamptz,
    OUT labels text[]
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    filter_name text;
BEGIN
    IF filters IS NULL OR jsonb_typeof(filters) = 'null' THEN
        RETURN;
    END IF;
    IF jsonb_typeof(filters) <> 'object' THEN
        RAISE EXCEPTION 'the search filters must be a JSON object, not %', filters
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'For example {"doc_id": ["a.md", "b.md"], "updated_after": "2026-01-01"}.';
    END IF;
    FOR filter_name IN SELECT jsonb_object_keys(filters) LOOP
        IF filter_name NOT IN (
            'doc_id', 'doc_id_prefix', 'heading_prefix', 'updated_after', 'updated_before', 'labels'
        ) THEN
            RAISE EXCEPTION 'unknown search filter %', quote_literal(filter_name)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The filters are doc_id, doc_id_prefix, heading_prefix, updated_after, '
                          'updated_before and labels.';
        END IF;
    END LOOP;

    doc_ids := toolkit._search_filter_texts(filters -> 'doc_id', 'doc_id');
    doc_id_prefixes := toolkit._search_filter_texts(filters -> 'doc_id_prefix', 'doc_id_prefix');
    heading_prefix := toolkit._search_filter_texts(filters -> 'heading_prefix', 'heading_prefix');
    labels := toolkit._search_filter_texts(filters -> 'labels', 'labels');
    -- A malformed timestamp raises invalid_datetime_format (22007) naming the bad value.
    updated_after := (filters ->> 'updated_after')::timestamptz;
    updated_before := (filters ->> 'updated_before')::timestamptz;

END
$$;

-- The release 0004 form (values and the condition text, numbered $5 .. $10), kept unchanged for a search of that
-- release still running when an upgrade commits (its body asks for the condition); this release's searches call
-- _search_filter_values, which parses the filters for both.
CREATE OR REPLACE FUNCTION toolkit._search_filters(
    filters jsonb,
    OUT doc_ids text[],
    OUT doc_id_prefixes text[],
    OUT heading_prefix text[],
    OUT updated_after timestamptz,
    OUT updated_before timestamptz,
    OUT labels text[],
    OUT clause text
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT v.doc_ids, v.doc_id_prefixes, v.heading_prefix, v.updated_after, v.updated_before, v.labels
    INTO doc_ids, doc_id_prefixes, heading_prefix, updated_after, updated_before, labels
    FROM toolkit._search_filter_values(filters) AS v;
    clause := '';

    -- The parameter numbers are those every search function passes to EXECUTE ... USING.
    IF doc_ids IS NOT NULL THEN
        clause := clause || ' AND c.doc_id = ANY ($5)';
    END IF;
    IF doc_id_prefixes IS NOT NULL THEN
        clause := clause || ' AND EXISTS (SELECT FROM unnest($6) AS p (prefix) WHERE starts_with(c.doc_id, p.prefix))';
    END IF;
    IF heading_prefix IS NOT NULL THEN
        clause := clause || ' AND c.heading_path[1:cardinality($7)] = $7';
    END IF;
    IF updated_after IS NOT NULL THEN
        clause := clause || ' AND c.updated_at >= $8';
    END IF;
    IF updated_before IS NOT NULL THEN
        clause := clause || ' AND c.updated_at < $9';
    END IF;
    IF labels IS NOT NULL THEN
        clause := clause || ' AND c.access_labels && $10';
    END IF;
END
$$;

-- Vector top-k for the transaction's tenant, with optional filters (jsonb), pinned to query_version (or to the
-- servable version of query_model; unpinned: the active version). Iterative index scans keep going until k rows
-- pass the filters and row-level security.
CREATE OR REPLACE FUNCTION toolkit.search_chunks(
    query_embedding vector,
    k integer DEFAULT 10,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    query_version integer DEFAULT NULL
)
RETURNS TABLE (
    rank integer,
    score double precision,
    distance double precision,
    chunk_id text,
    doc_id text,
    parent_id text,
    "position" integer,  -- noqa: RF06
    start_offset integer,
    end_offset integer,
    heading_path text[],
    text text,
    version integer,
    model_alias text,
    pages integer[]
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET "hnsw.iterative_scan" = relaxed_order
AS $$
DECLARE
    tenant text := toolkit._search_tenant();
    target record;
    f record;
BEGIN
    IF query_embedding IS NULL THEN
        RAISE EXCEPTION 'the query embedding is NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM toolkit._check_k(k);
    SELECT * INTO target FROM toolkit._search_target(query_embedding, search_chunks.query_model, query_version);
    f := toolkit._search_filter_values(filters);
    -- relaxed_order may return rows slightly out of order: the outer query sorts them again. Ties in distance
    -- are broken by chunk id inside the LIMIT too (an incremental sort above the index scan), so which of
    -- several equally distant rows make the k is decided, not left to the scan.
    BEGIN
        RETURN QUERY EXECUTE format(
            'SELECT (row_number() OVER (ORDER BY h.distance, h.chunk_id))::integer,'
            ' CASE %2$L WHEN ''cosine'' THEN 1 - h.distance ELSE -h.distance END, h.distance, h.chunk_id, h.doc_id,'
            ' h.parent_id, h.position, h.start_offset, h.end_offset, h.heading_path, h.text, $4, $11, h.pages'
            ' FROM (SELECT %1$s AS distance, c.chunk_id, c.doc_id, c.parent_id, c.position, c.start_offset,'
            '  c.end_offset, c.heading_path, c.text, c.pages FROM toolkit.%3$I AS c'
            '  WHERE c.tenant = $3 AND NOT c.is_parent'
            '   AND ($5::text[] IS NULL OR c.doc_id = ANY ($5))'
            '   AND ($6::text[] IS NULL'
            '    OR EXISTS (SELECT FROM unnest($6) AS p (prefix) WHERE starts_with(c.doc_id, p.prefix)))'
            '   AND ($7::text[] IS NULL OR c.heading_path[1:cardinality($7)] = $7)'
            '   AND ($8::timestamptz IS NULL OR c.updated_at >= $8)'
            '   AND ($9::timestamptz IS NULL OR c.updated_at < $9)'
            '   AND ($10::text[] IS NULL OR c.access_labels && $10)'
            '  ORDER BY %1$s, c.chunk_id LIMIT $2) AS h'
            ' ORDER BY h.distance, h.chunk_id',
            target.distance_sql, target.distance, target.chunk_table)
        USING query_embedding, k, tenant, target.version,
            f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after, f.updated_before, f.labels,
            target.model_alias;
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;
END
$$;

SELECT set_config('search_path', current_setting('toolkit.saved_search_path'), TRUE) AS search_path;
