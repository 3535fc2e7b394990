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

-- Signatures of earlier releases (without the version argument, or without pages in the result): dropped, since
-- CREATE OR REPLACE cannot change them and each name must stay unique.
DROP FUNCTION IF EXISTS toolkit._search_target(vector, text);
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'toolkit'::regnamespace
            AND p.proname IN ('search_chunks', 'hybrid_search_chunks', 'search_context')
            AND (pg_get_function_identity_arguments(p.oid) NOT LIKE '%query_version integer%'
                OR pg_get_function_result(p.oid) NOT LIKE '%pages integer[]%')
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$$;

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

-- Parses a search's filters (a jsonb object) into typed values and the SQL condition that applies them.
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
DECLARE
    filter_name text;
BEGIN
    clause := '';
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
    f := toolkit._search_filters(filters);
    -- relaxed_order may return rows slightly out of order: the outer query sorts them again. Ties in distance
    -- are broken by chunk id inside the LIMIT too (an incremental sort above the index scan), so which of
    -- several equally distant rows make the k is decided, not left to the scan.
    BEGIN
        RETURN QUERY EXECUTE format(
            'SELECT (row_number() OVER (ORDER BY h.distance, h.chunk_id))::integer,'
            ' CASE %2$L WHEN ''cosine'' THEN 1 - h.distance ELSE -h.distance END, h.distance, h.chunk_id, h.doc_id,'
            ' h.parent_id, h.position, h.start_offset, h.end_offset, h.heading_path, h.text, $4, $11, h.pages'
            ' FROM (SELECT %1$s AS distance, c.chunk_id, c.doc_id, c.parent_id, c.position, c.start_offset,'
            '  c.end_offset, c.heading_path, c.text, c.pages FROM toolkit.%4$I AS c'
            '  WHERE c.tenant = $3 AND NOT c.is_parent%3$s ORDER BY %1$s, c.chunk_id LIMIT $2) AS h'
            ' ORDER BY h.distance, h.chunk_id',
            target.distance_sql, target.distance, f.clause, target.chunk_table)
        USING query_embedding, k, tenant, target.version,
            f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after, f.updated_before, f.labels,
            target.model_alias;
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;
END
$$;

-- Hybrid top-k: full-text and vector candidates fused by reciprocal rank fusion (1 / (rrf_k + rank)), pinned like
-- search_chunks. Full text ranks by BM25 (toolkit.lexical_settings: k1, b) over the chunks holding any of the
-- question's lexemes; toolkit.evaluation.retrieval (the offline evaluation) computes the same ranking with the same arithmetic.
CREATE OR REPLACE FUNCTION toolkit.hybrid_search_chunks(
    query_text text,
    query_embedding vector,
    k integer DEFAULT 10,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    candidates integer DEFAULT NULL,
    rrf_k integer DEFAULT NULL,
    query_version integer DEFAULT NULL
)
RETURNS TABLE (
    rank integer,
    score double precision,
    vector_rank integer,
    text_rank integer,
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
    settings record;
    lexemes text[];
    vector_sql text;
    pool integer;
    fusion integer;
BEGIN
    PERFORM toolkit._check_k(k);
    SELECT * INTO settings FROM toolkit.lexical_settings();
    fusion := coalesce(rrf_k, settings.rrf_k);
    IF fusion < 0 THEN
        RAISE EXCEPTION 'rrf_k must be 0 or more, not %', fusion USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF query_embedding IS NULL AND coalesce(query_text, '') = '' THEN
        RAISE EXCEPTION 'a hybrid search needs a query text, a query embedding or both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    pool := greatest(coalesce(candidates, settings.candidates), k);
    SELECT * INTO target
    FROM toolkit._search_target(query_embedding, hybrid_search_chunks.query_model, query_version);
    f := toolkit._search_filters(filters);
    lexemes := toolkit.query_lexemes(target.text_search_config, query_text);

    IF query_embedding IS NULL THEN
        vector_sql := 'SELECT NULL::text AS chunk_id, NULL::bigint AS r, NULL::float8 AS distance WHERE false';
    ELSE
        vector_sql := format(
            'SELECT h.chunk_id, row_number() OVER (ORDER BY h.distance, h.chunk_id) AS r, h.distance'
            ' FROM (SELECT c.chunk_id, %1$s AS distance FROM toolkit.%3$I AS c'
            '  WHERE c.tenant = $3 AND NOT c.is_parent%2$s'
            '  ORDER BY %1$s, c.chunk_id LIMIT $14) AS h',
            target.distance_sql, f.clause, target.chunk_table);
    END IF;

    -- BM25: N and the mean length (token_count) over the searched chunks; df and tf from the chunks holding a
    -- lexeme (found through the GIN index). Sums run over the lexemes in byte order, as Python sums them.
    BEGIN
        RETURN QUERY EXECUTE format(
            'WITH vector_hits AS MATERIALIZED (%1$s),'
            ' text_stats AS MATERIALIZED (SELECT count(*)::float8 AS n,'
            '  coalesce(sum(c.token_count), 0)::float8 AS total'
            '  FROM toolkit.%3$I AS c WHERE c.tenant = $3 AND NOT c.is_parent%2$s),'
            ' text_matches AS MATERIALIZED (SELECT c.chunk_id, c.token_count, l.lexeme, cardinality(l.positions) AS tf'
            '  FROM toolkit.%3$I AS c CROSS JOIN LATERAL unnest(c.fts) AS l'
            '  WHERE c.tenant = $3 AND NOT c.is_parent AND c.fts @@ $12 AND l.lexeme = ANY ($11)%2$s),'
            ' text_terms AS (SELECT m.lexeme, ln(1 + (s.n - count(*) + 0.5) / (count(*) + 0.5)) AS idf'
            '  FROM text_matches AS m CROSS JOIN text_stats AS s GROUP BY m.lexeme, s.n),'
            ' text_hits AS MATERIALIZED (SELECT t.chunk_id, row_number() OVER (ORDER BY t.weight DESC, t.chunk_id) AS r'
            '  FROM (SELECT m.chunk_id, sum(w.idf * (m.tf * ($16 + 1)) / (m.tf + $16 * (1 - $17 + $17 * m.token_count'
            '    / (s.total / s.n))) ORDER BY m.lexeme COLLATE "C") AS weight'
            '   FROM text_matches AS m INNER JOIN text_terms AS w ON w.lexeme = m.lexeme CROSS JOIN text_stats AS s'
            '   GROUP BY m.chunk_id ORDER BY 2 DESC, 1 LIMIT $14) AS t),'
            ' fused AS (SELECT coalesce(v.chunk_id, t.chunk_id) AS chunk_id, v.r AS vector_rank, t.r AS text_rank,'
            '   v.distance, coalesce(1.0::float8 / ($13 + v.r), 0) + coalesce(1.0::float8 / ($13 + t.r), 0) AS score'
            '  FROM vector_hits AS v FULL JOIN text_hits AS t ON v.chunk_id = t.chunk_id'
            '  ORDER BY 5 DESC, least(v.r, t.r), 1 LIMIT $2)'
            ' SELECT (row_number() OVER (ORDER BY x.score DESC, least(x.vector_rank, x.text_rank), x.chunk_id))::integer,'
            '  x.score, x.vector_rank::integer, x.text_rank::integer, x.distance, c.chunk_id, c.doc_id, c.parent_id,'
            '  c.position, c.start_offset, c.end_offset, c.heading_path, c.text, $4, $15, c.pages'
            ' FROM fused AS x INNER JOIN toolkit.%3$I AS c ON c.tenant = $3 AND c.chunk_id = x.chunk_id'
            ' ORDER BY 1',
            vector_sql, f.clause, target.chunk_table)
        USING query_embedding, k, tenant, target.version,
            f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after, f.updated_before, f.labels,
            lexemes, toolkit._any_lexeme(lexemes), fusion::float8, pool, target.model_alias, settings.k1, settings.b;
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;
END
$$;

-- Small-to-big: searches (vector, or hybrid when query_text is given), then returns each hit's parent
-- ('parent') or its neighbours within N positions ('window:N'); overlapping spans of a document are
-- merged into one context that keeps its best hit's rank and score, so no text is returned twice.
-- Pinned like search_chunks: the hits, parents and windows all come from one version's table.
CREATE OR REPLACE FUNCTION toolkit.search_context(
    query_embedding vector,
    k integer DEFAULT 5,
    expand text DEFAULT 'parent',
    query_text text DEFAULT NULL,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    query_version integer DEFAULT NULL
)
RETURNS TABLE (
    rank integer,
    score double precision,
    doc_id text,
    start_offset integer,
    end_offset integer,
    heading_path text[],
    text text,
    kind text,
    chunk_ids text[],
    version integer,
    model_alias text,
    pages integer[]
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tenant text := toolkit._search_tenant();
    target record;
    mode text;
    window_size integer := 0;
    hits_sql text;
    pieces_sql text;
BEGIN
    PERFORM toolkit._check_k(k);
    IF expand = 'parent' THEN
        mode := 'parent';
    ELSIF expand ~ '^window:[0-9]{1,2}$' THEN
        mode := 'window';
        window_size := split_part(expand, ':', 2)::integer;
    ELSE
        RAISE EXCEPTION 'expand must be parent or window:N (N up to 99), not %', quote_nullable(expand)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Resolved once: the hits and their parents or windows come from the same version's table.
    SELECT * INTO target FROM toolkit._search_target(query_embedding, search_context.query_model, query_version);

    -- Hits sharing a parent or a window collapse into one context: fetch more hits than contexts.
    hits_sql := 'SELECT h.rank, h.score, h.chunk_id, h.doc_id, h.parent_id, h.position, h.start_offset,'
        ' h.end_offset, h.heading_path, h.text, h.version, h.model_alias, h.pages FROM toolkit.'
        || CASE WHEN query_text IS NULL THEN 'search_chunks($1, $8, $5, NULL, $6)'
            ELSE 'hybrid_search_chunks($4, $1, $8, $5, NULL, query_version => $6)' END || ' AS h';

    IF mode = 'parent' THEN
        -- A hit without a (visible) parent stands for itself.
        pieces_sql := format(
            'SELECT h.rank AS hit_rank, h.doc_id, coalesce(p.chunk_id, h.chunk_id) AS piece_id,'
            ' coalesce(p.start_offset, h.start_offset) AS s, coalesce(p.end_offset, h.end_offset) AS e,'
            ' coalesce(p.text, h.text) AS body,'
            ' CASE WHEN p.chunk_id IS NULL THEN ''chunk'' ELSE ''parent'' END AS kind,'
            ' CASE WHEN p.chunk_id IS NULL THEN h.pages ELSE p.pages END AS pages'
            ' FROM hits AS h LEFT JOIN toolkit.%I AS p'
            '  ON p.tenant = $3 AND p.chunk_id = h.parent_id AND p.doc_id = h.doc_id AND p.is_parent',
            target.chunk_table);
    ELSE
        pieces_sql := format(
            'SELECT h.rank AS hit_rank, h.doc_id, w.chunk_id AS piece_id, w.start_offset AS s,'
            ' w.end_offset AS e, w.text AS body, ''window'' AS kind, w.pages'
            ' FROM hits AS h INNER JOIN toolkit.%I AS w'
            '  ON w.tenant = $3 AND w.doc_id = h.doc_id AND NOT w.is_parent'
            '  AND w.position BETWEEN h.position - $7 AND h.position + $7',
            target.chunk_table);
    END IF;

    -- One span per hit; a span that starts before the end of an earlier span of its document joins that
    -- span's group (a context). A context's text is its pieces in order, each adding only what lies past
    -- the text so far (windows and chunks overlap); a gap between pieces becomes one line break.
    BEGIN
        RETURN QUERY EXECUTE format(
            'WITH hits AS MATERIALIZED (%1$s),'
            ' pieces AS MATERIALIZED (%2$s),'
            ' spans AS (SELECT p.hit_rank, p.doc_id, min(p.s) AS s, max(p.e) AS e FROM pieces AS p GROUP BY 1, 2),'
            ' flagged AS (SELECT sp.*, CASE WHEN sp.s < max(sp.e) OVER (PARTITION BY sp.doc_id'
            '   ORDER BY sp.s, sp.e, sp.hit_rank ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END'
            '   AS opens FROM spans AS sp),'
            ' grouped AS (SELECT fl.hit_rank, fl.doc_id, fl.s, fl.e, sum(fl.opens) OVER (PARTITION BY fl.doc_id'
            '   ORDER BY fl.s, fl.e, fl.hit_rank ROWS UNBOUNDED PRECEDING) AS grp FROM flagged AS fl),'
            ' contexts AS ('
            '  SELECT g.doc_id, g.grp, min(g.hit_rank) AS best, min(g.s) AS s, max(g.e) AS e,'
            '   array_agg(h.chunk_id ORDER BY g.hit_rank) AS chunk_ids'
            '  FROM grouped AS g INNER JOIN hits AS h ON h.rank = g.hit_rank GROUP BY 1, 2),'
            ' bodies AS ('
            '  SELECT DISTINCT ON (g.doc_id, g.grp, p.piece_id) g.doc_id, g.grp, p.piece_id, p.s, p.e, p.body, p.kind,'
            '   p.pages'
            '  FROM pieces AS p INNER JOIN grouped AS g ON g.hit_rank = p.hit_rank'
            '  ORDER BY g.doc_id, g.grp, p.piece_id),'
            ' ordered AS ('
            '  SELECT b.*, max(b.e) OVER (PARTITION BY b.doc_id, b.grp ORDER BY b.s, b.e, b.piece_id'
            '   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered FROM bodies AS b),'
            ' stitched AS ('
            '  SELECT o.doc_id, o.grp, string_agg(CASE WHEN o.covered IS NULL THEN o.body'
            '    WHEN o.s > o.covered THEN E''\n'' || o.body WHEN o.e <= o.covered THEN '''''
            '    ELSE substr(o.body, o.covered - o.s + 1) END, '''' ORDER BY o.s, o.e, o.piece_id) AS body,'
            '   CASE WHEN bool_or(o.kind = ''parent'') THEN ''parent'' WHEN bool_or(o.kind = ''window'') THEN ''window'''
            '    ELSE ''chunk'' END AS kind'
            '  FROM ordered AS o GROUP BY 1, 2)'
            ' SELECT (row_number() OVER (ORDER BY x.best))::integer, h.score, x.doc_id, x.s, x.e, h.heading_path,'
            '  st.body, st.kind, x.chunk_ids, h.version, h.model_alias,'
            '  (SELECT array_agg(DISTINCT n ORDER BY n) FROM bodies AS b2 CROSS JOIN LATERAL unnest(b2.pages) AS n'
            '   WHERE b2.doc_id = x.doc_id AND b2.grp = x.grp)'
            ' FROM contexts AS x INNER JOIN stitched AS st ON st.doc_id = x.doc_id AND st.grp = x.grp'
            ' INNER JOIN hits AS h ON h.rank = x.best'
            ' ORDER BY x.best LIMIT $2',
            hits_sql, pieces_sql)
        USING query_embedding, k, tenant, query_text, filters, target.version, window_size,
            least(k * 4, toolkit.search_max_k());
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;
END
$$;

SELECT set_config('search_path', current_setting('toolkit.saved_search_path'), TRUE) AS search_path;
