-- Full-text ranking for hybrid search: BM25 over each chunk's tsvector, with the settings it uses. The
-- offline evaluation (toolkit.evaluation.retrieval) asks these functions for lexemes and settings, so it ranks as
-- hybrid_search_chunks does.
SET LOCAL ROLE toolkit_owner;

-- Returns the served retrieval's settings: BM25's k1 and b, the RRF constant and the candidates per list, the hits
-- fetched per passage and a passage's token budget in mean chunks. search_passages, the verification and the
-- offline evaluation all read them here.
CREATE OR REPLACE FUNCTION toolkit.retrieval_settings()
RETURNS TABLE (
    k1 double precision,
    b double precision,
    rrf_k integer,
    candidates integer,
    hits_per_passage integer,
    passage_chunks double precision
)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Measured in docs/evaluation.md (bench/quality.py --lexical-study): k1 1.2 and b 0.75, BM25's usual
    -- constants, were best or within a question of it; rrf_k 10 fused best on both labelled sets (60, the usual
    -- constant, lost 4.7 and 6.8 points of span recall); 100 candidates per list gained nothing over 50. Passages:
    -- 4 hits fetched per passage and a budget of k x 1.5 mean chunks (docs/evaluation.md, "Served passages").
    SELECT 1.2::float8, 0.75::float8, 10, 50, 4, 1.5::float8;
$$;

-- Returns the lexical defaults (retrieval_settings' first four columns), for callers of earlier releases.
CREATE OR REPLACE FUNCTION toolkit.lexical_settings()
RETURNS TABLE (k1 double precision, b double precision, rrf_k integer, candidates integer)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.k1, s.b, s.rrf_k, s.candidates FROM toolkit.retrieval_settings() AS s;
$$;

-- Names the retrieval applications get by default (search_passages with retrieval_settings()): a verification
-- records it, and one recorded with another retrieval no longer lets a version go live.
CREATE OR REPLACE FUNCTION toolkit.served_retrieval()
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('passages:hybrid:k1=%s:b=%s:rrf_k=%s:candidates=%s:hits_per_passage=%s:passage_chunks=%s',
        s.k1, s.b, s.rrf_k, s.candidates, s.hits_per_passage, s.passage_chunks)
    FROM toolkit.retrieval_settings() AS s;
$$;

-- Returns the text a chunk's full-text index is built from (the fts column of every chunks_vN).
CREATE OR REPLACE FUNCTION toolkit.chunk_search_text(context text, body text)
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT context || ' ' || body;
$$;

-- Returns a question's distinct lexemes, sorted (stop words removed, stemmed by the configuration).
CREATE OR REPLACE FUNCTION toolkit.query_lexemes(config regconfig, query_text text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(l.lexeme ORDER BY l.lexeme COLLATE "C"), '{}')
    FROM unnest(to_tsvector(config, coalesce(query_text, ''))) AS l;
$$;

-- Returns a tsquery matching any of the lexemes (each quoted, so no lexeme is read as an operator).
CREATE OR REPLACE FUNCTION toolkit._any_lexeme(lexemes text[])
RETURNS tsquery
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(
        string_agg('''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery,
        ''::tsquery
    )
    FROM unnest(lexemes) AS l;
$$;
