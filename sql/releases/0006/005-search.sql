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
-- that cannot belong to the version (or to any: all zeros, 22023): TK002 (retry: re-read serving_model, embed again) for a pinned search whose
-- version is no longer servable or whose dimensions differ, TK001 for an unpinned one. chunk_table is
-- toolkit._chunk_table's (qualified and quoted: a statement takes it with %s).
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
    query_norm double precision;
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
        EXECUTE format('SELECT %1$s.vector_dims($1), %1$s.vector_norm($1)', toolkit._vector_schema())
        INTO query_dimensions, query_norm
        USING query_embedding;
        -- pgvector refuses NaN and infinite values in a vector (22000); an all-zero one it takes, and every cosine
        -- distance to it would be NaN.
        IF query_norm = 0 THEN
            RAISE EXCEPTION 'the query vector is all zeros, so it has no direction to search by'
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Embed the question with the version''s model (toolkit.serving_model()) and search with that.';
        END IF;
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
    RETURN QUERY SELECT v.version, v.model_alias, v.distance, v.text_search_config, toolkit._chunk_table(v.version),
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

-- Parses a search's filters (a jsonb object) into typed values (NULL: not filtered). Every search applies them through
-- toolkit._search_filter_condition(), `($n IS NULL OR ...)`, so an unset filter folds away when the statement is
-- planned.
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
    wanted jsonb;
    metadata_key text;
    metadata_value jsonb;
    matched text[];
    search_tenant text;
    pairs text[];
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
            'doc_id', 'doc_id_prefix', 'heading_prefix', 'updated_after', 'updated_before', 'labels', 'metadata'
        ) THEN
            RAISE EXCEPTION 'unknown search filter %', quote_literal(filter_name)
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'The filters are doc_id, doc_id_prefix, heading_prefix, updated_after, '
                          'updated_before, labels and metadata.';
        END IF;
    END LOOP;

    doc_ids := toolkit._search_filter_texts(filters -> 'doc_id', 'doc_id');
    doc_id_prefixes := toolkit._search_filter_texts(filters -> 'doc_id_prefix', 'doc_id_prefix');
    heading_prefix := toolkit._search_filter_texts(filters -> 'heading_prefix', 'heading_prefix');
    labels := toolkit._search_filter_texts(filters -> 'labels', 'labels');
    -- A malformed timestamp raises invalid_datetime_format (22007) naming the bad value.
    updated_after := (filters ->> 'updated_after')::timestamptz;
    updated_before := (filters ->> 'updated_before')::timestamptz;

    -- metadata: {"key": value, ...}, each a top-level key of documents.metadata equal to a JSON scalar, or to one of
    -- a non-empty list of scalars (IN); all the keys must hold. The documents matching it narrow doc_id: every search
    -- applies the filters through that one condition. Found as the caller (row-level security applies) through
    -- toolkit.document_metadata_keys' primary key (a document has one value a key, so it matches one pair of each
    -- key: the documents matching as many distinct pairs as there are keys), then checked on the documents
    -- themselves (@> for a scalar; for a list, the document's value is one of its elements).
    wanted := filters -> 'metadata';
    IF wanted IS NOT NULL AND jsonb_typeof(wanted) <> 'null' THEN
        IF jsonb_typeof(wanted) <> 'object' THEN
            RAISE EXCEPTION 'the search filter metadata must be a JSON object of top-level keys and values, not %',
                wanted
                USING ERRCODE = 'invalid_parameter_value', HINT = 'For example {"metadata": {"lang": "en"}}.';
        END IF;
        FOR metadata_key, metadata_value IN SELECT e.key, e.value FROM jsonb_each(wanted) AS e LOOP
            IF metadata_key = '' THEN
                RAISE EXCEPTION 'a metadata filter needs a key: the empty key names nothing'
                    USING ERRCODE = 'invalid_parameter_value', HINT = 'For example {"metadata": {"lang": "en"}}.';
            END IF;
            IF jsonb_typeof(metadata_value) = 'object' OR (jsonb_typeof(metadata_value) = 'array' AND (
                jsonb_array_length(metadata_value) = 0 OR EXISTS (
                    SELECT FROM jsonb_array_elements(metadata_value) AS v (value)
                    WHERE jsonb_typeof(v.value) IN ('object', 'array')
                )
            )) THEN
                RAISE EXCEPTION 'the metadata filter % compares a top-level key with one value (a string, a number, '
                    'true, false or null) or a non-empty list of them (any of), not with %', quote_literal(metadata_key),
                    metadata_value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        IF wanted <> '{}' THEN
            search_tenant := toolkit._search_tenant();
            pairs := ARRAY(
                SELECT DISTINCT toolkit._metadata_key_value(e.key, v.value)
                FROM jsonb_each(wanted) AS e
                CROSS JOIN LATERAL jsonb_array_elements(
                    CASE WHEN jsonb_typeof(e.value) = 'array' THEN e.value ELSE jsonb_build_array(e.value) END
                ) AS v (value)
            );
            matched := ARRAY(
                SELECT d.doc_id FROM toolkit.documents AS d
                WHERE d.tenant = search_tenant AND d.doc_id IN (
                    SELECT m.doc_id FROM toolkit.document_metadata_keys AS m
                    WHERE m.tenant = search_tenant AND m.key_value = ANY (pairs)
                    GROUP BY m.doc_id HAVING count(*) = (SELECT count(*) FROM jsonb_object_keys(wanted))
                ) AND NOT EXISTS (
                    SELECT FROM jsonb_each(wanted) AS e
                    WHERE NOT CASE
                        WHEN jsonb_typeof(e.value) = 'array'
                            THEN d.metadata ? e.key AND e.value @> jsonb_build_array(d.metadata -> e.key)
                        ELSE d.metadata @> jsonb_build_object(e.key, e.value)
                    END
                )
                ORDER BY d.doc_id
            );
            doc_ids := CASE WHEN doc_ids IS NULL THEN matched
                ELSE ARRAY(SELECT x.id FROM unnest(doc_ids) AS x (id) WHERE x.id = ANY (matched)) END;
        END IF;
    END IF;
END
$$;

-- The release 0005 form of the search filters' condition (over the values passed as $5 .. $10), kept unchanged for a
-- search of that release still running when an upgrade commits (its body asks for it); this release's searches use
-- toolkit._search_stage_filters (017-search-request.sql), over the plan's named fields.
CREATE OR REPLACE FUNCTION toolkit._search_filter_condition()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '($5::text[] IS NULL OR c.doc_id = ANY ($5))'
        ' AND ($6::text[] IS NULL'
        '  OR EXISTS (SELECT FROM unnest($6) AS p (prefix) WHERE starts_with(c.doc_id, p.prefix)))'
        ' AND ($7::text[] IS NULL OR c.heading_path[1:cardinality($7)] = $7)'
        ' AND ($8::timestamptz IS NULL OR c.updated_at >= $8)'
        ' AND ($9::timestamptz IS NULL OR c.updated_at < $9)'
        ' AND ($10::text[] IS NULL OR c.access_labels && $10)'
$$;

-- Refuses a score threshold or a diversity a search cannot use. min_score is a cosine similarity of the question's
-- embedding to a chunk's (-1 .. 1, NULL: none); diversity is MMR's lambda (0 .. 1, 0: off). Both compare
-- embeddings, so they need the query's.
CREATE OR REPLACE FUNCTION toolkit._check_search_options(
    min_score double precision, diversity double precision, has_embedding boolean
)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF min_score IS NOT NULL AND NOT (min_score BETWEEN -1 AND 1) THEN
        RAISE EXCEPTION 'min_score is a cosine similarity, from -1 to 1, not %', min_score
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Leave it NULL for no threshold.';
    END IF;
    IF diversity IS NULL OR NOT (diversity BETWEEN 0 AND 1) THEN
        RAISE EXCEPTION 'diversity (MMR lambda) must be from 0 (off) to 1, not %', coalesce(diversity::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT has_embedding AND (min_score IS NOT NULL OR diversity > 0) THEN
        RAISE EXCEPTION 'min_score and diversity compare the question''s embedding with the chunks'', '
            'but the search has no query embedding'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Pass the query embedding too.';
    END IF;
END
$$;

-- How many candidates MMR (diversity > 0) chooses the k hits from: 4 x k, at least 20, at most search_max_k().
CREATE OR REPLACE FUNCTION toolkit._mmr_candidates(k integer)
RETURNS integer
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT least(greatest(4 * k, 20), toolkit.search_max_k())
$$;

-- Maximal marginal relevance: the order in which to take up to k of n candidates (their 1-based positions).
-- relevance[i] is candidate i's cosine similarity to the question; similarity holds the n x n cosine similarities
-- between candidates, row by row (similarity[(i - 1) * n + j]). Each step takes the candidate with the largest
-- (1 - diversity) x relevance - diversity x (its largest similarity to those already taken); ties go to the earlier
-- candidate (the search's own order). diversity 0 keeps the order of relevance.
CREATE OR REPLACE FUNCTION toolkit._mmr_order(
    relevance double precision[], similarity double precision[], k integer, diversity double precision
)
RETURNS integer[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := coalesce(cardinality(relevance), 0);
    closest double precision[] := array_fill(NULL::double precision, ARRAY[greatest(n, 1)]);
    taken boolean[] := array_fill(false, ARRAY[greatest(n, 1)]);
    chosen integer[] := '{}';
    best integer;
    best_value double precision;
    candidate_value double precision;
    i integer;
BEGIN
    IF n > 0 AND cardinality(similarity) <> n * n THEN
        RAISE EXCEPTION 'MMR needs % similarities for % candidates, not %', n * n, n, cardinality(similarity)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WHILE cardinality(chosen) < least(k, n) LOOP
        best := NULL;
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN taken[i];
            -- A candidate without an embedding (a row a backfill has still to embed, found by full text) has no
            -- relevance to compare: it ranks as the least relevant, never as NULL (which would beat every other).
            candidate_value := (1 - diversity) * coalesce(relevance[i], -1) - diversity * coalesce(closest[i], 0);
            IF best IS NULL OR candidate_value > best_value THEN
                best := i;
                best_value := candidate_value;
            END IF;
        END LOOP;
        chosen := chosen || best;
        taken[best] := true;
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN taken[i];
            closest[i] := greatest(closest[i], similarity[(best - 1) * n + i]);
        END LOOP;
    END LOOP;
    RETURN chosen;
END
$$;

-- Called by a search with a heading_prefix filter that found nothing: when none of the tenant's chunks in the
-- version has a heading path (its chunker records none: fixed, sentence, recursive, semantic…), the filter could
-- never match, and an empty answer would hide the mistake; raise, naming the version and its chunker. Asked only
-- after an empty filtered search, so no other search pays for it. chunk_table is _search_target's (the cast to
-- regclass refuses anything that is not a table's name).
CREATE OR REPLACE FUNCTION toolkit._heading_filter_unmatchable(version integer, chunk_table text, tenant text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    any_heading boolean;
BEGIN
    EXECUTE format(
        'SELECT EXISTS (SELECT FROM %s AS c WHERE c.tenant = $1 AND cardinality(c.heading_path) > 0)',
        chunk_table::regclass)
    INTO any_heading USING tenant;
    IF NOT any_heading THEN
        RAISE EXCEPTION 'version % (chunker %) stores no heading paths for tenant %, so heading_prefix matches nothing',
            version, (SELECT m.chunker_version FROM toolkit.version_model(version) AS m), quote_literal(tenant)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Search without heading_prefix, or search a version built with a chunker that records '
                      'headings (markdown, html, code).';
    END IF;
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

-- The SQL of a cosine similarity between `left_side` and `right_side` (the query vector $1 as the version stores
-- it when NULL), with the pgvector operator schema of a version's distance expression (_search_target.distance_sql).
-- min_score and diversity compare embeddings by cosine whatever distance the version ranks by.
CREATE OR REPLACE FUNCTION toolkit._search_cosine_sql(distance_sql text, left_side text, right_side text DEFAULT NULL)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('(1 - (%s OPERATOR(%s.<=>) %s))', left_side,
        substring(distance_sql FROM 'OPERATOR\((.*)\.[^.]+\)'),
        coalesce(right_side, substring(distance_sql FROM '(\$1::.*)$')))
$$;

SELECT set_config('search_path', current_setting('toolkit.saved_search_path'), TRUE) AS search_path;
