-- One search request (release 0006). A search is one value of toolkit.search_request_v1 (built by the function
-- toolkit.search_request, with named arguments), searched by the function toolkit.search, which returns rows of
-- toolkit.search_hit_v1 (passages, chunks and contexts alike). A later option is a field of a new request version
-- (search_request_v2 beside this one), never a new signature of the functions applications call. The types are
-- created once here; the functions are in the idempotent files (017-search-request.sql).
SET LOCAL ROLE toolkit_owner;

DO $$
DECLARE
    vector_type text := format('%I.vector', (
        SELECT n.nspname FROM pg_catalog.pg_extension AS e
        INNER JOIN pg_catalog.pg_namespace AS n ON e.extnamespace = n.oid
        WHERE e.extname = 'vector'
    ));
BEGIN
    -- A downgrade keeps the types (the functions of this release that stay beside the older ones take them): an
    -- upgrade after it finds them.
    IF to_regtype('toolkit.search_request_v1') IS NULL THEN
        EXECUTE format(
            'CREATE TYPE toolkit.search_request_v1 AS ('
            '  query_text text,'
            '  query_embedding %s,'
            '  k integer,'
            '  retrieval text,'
            '  expand text,'
            '  filters jsonb,'
            '  model text,'
            '  version integer,'
            '  max_tokens integer,'
            '  min_score double precision,'
            '  diversity double precision,'
            '  ef_search integer,'
            '  candidates integer,'
            '  rrf_k integer'
            ')', vector_type);
    END IF;
    IF to_regtype('toolkit.search_hit_v1') IS NULL THEN
        CREATE TYPE toolkit.search_hit_v1 AS (
            rank integer,
            kind text,
            score double precision,
            similarity double precision,
            distance double precision,
            vector_rank integer,
            text_rank integer,
            doc_id text,
            start_offset integer,
            end_offset integer,
            heading_path text [],
            text text,
            tokens integer,
            chunk_id text,
            chunk_ids text [],
            hit_ranks integer [],
            parent_id text,
            "position" integer,  -- noqa: RF06
            version integer,
            model_alias text,
            pages integer []
        );
    END IF;
    -- What the stages of one search pass each other, as one value ($1 of every statement a search runs): the request
    -- checked and resolved (version, table, filters parsed, full-text statistics read once).
    IF to_regtype('toolkit._search_plan_v1') IS NULL THEN
        EXECUTE format(
            'CREATE TYPE toolkit._search_plan_v1 AS ('
            '  query_embedding %s,'
            '  query_text text,'
            '  k integer,'
            '  tenant text,'
            '  version integer,'
            '  model_alias text,'
            '  hits integer,'
            '  fused integer,'
            '  pool integer,'
            '  rrf_k double precision,'
            '  min_score double precision,'
            '  diversity double precision,'
            '  doc_ids text[],'
            '  doc_id_prefixes text[],'
            '  heading_prefix text[],'
            '  updated_after timestamptz,'
            '  updated_before timestamptz,'
            '  labels text[],'
            '  lexemes text[],'
            '  text_n double precision,'
            '  mean_tokens double precision,'
            '  known text[],'
            '  known_df double precision[],'
            '  chosen text[],'
            '  rarest text,'
            '  postings_limit integer,'
            '  k1 double precision,'
            '  b double precision,'
            '  window_size integer'
            ')', vector_type);
    END IF;
END
$$;

-- Each chunk keeps the whitespace that precedes it in its document (back to the previous other character), so a
-- search decides whether two hits touch and stitches a passage's text from its chunks, never reading the document.
-- Existing rows get it from their documents (NULL when that whitespace is 4,096 characters or longer, or the document
-- is gone: a search then reads the document, as before). The version's triggers are held meanwhile: the postings do
-- not change, and neither does what a verification measured.
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_catalog.pg_class AS c
        WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^chunks_v[0-9]+$'
        ORDER BY c.relname
    LOOP
        EXECUTE format('ALTER TABLE toolkit.%I ADD COLUMN IF NOT EXISTS gap_before text', tbl);
        EXECUTE format('ALTER TABLE toolkit.%I DISABLE TRIGGER USER', tbl);
        EXECUTE format(
            'UPDATE toolkit.%I AS c SET gap_before = (SELECT CASE WHEN length(g.gap) < 4096 THEN g.gap END'
            '  FROM (SELECT substring(substr(d.raw_text, greatest(c.start_offset - 4096, 0) + 1,'
            '   least(c.start_offset, 4096)) FROM %L) AS gap) AS g)'
            ' FROM toolkit.documents AS d'
            ' WHERE d.tenant = c.tenant AND d.doc_id = c.doc_id AND c.gap_before IS NULL',
            tbl, E'[ \\t\\n\\r\\f\\v]*$');
        EXECUTE format('ALTER TABLE toolkit.%I ENABLE TRIGGER USER', tbl);
    END LOOP;
END
$$;
