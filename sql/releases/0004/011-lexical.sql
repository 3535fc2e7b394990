-- Full-text ranking for hybrid search: BM25 over each chunk's tsvector, with the settings it uses. The
-- offline evaluation (toolkit.evaluation.retrieval) asks these functions for lexemes and settings, so it ranks as
-- hybrid_search_chunks does.
SET LOCAL ROLE toolkit_owner;

-- Returns the lexical defaults: BM25's k1 and b, the RRF constant and the candidates per list.
CREATE OR REPLACE FUNCTION toolkit.lexical_settings()
RETURNS TABLE (k1 double precision, b double precision, rrf_k integer, candidates integer)
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Measured in docs/evaluation.md (bench/quality.py --lexical-study): k1 1.2 and b 0.75, BM25's usual
    -- constants, were best or within a question of it; rrf_k 10 fused best on both labelled sets (60, the usual
    -- constant, lost 4.7 and 6.8 points of span recall); 100 candidates per list gained nothing over 50.
    SELECT 1.2::float8, 0.75::float8, 10, 50;
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
