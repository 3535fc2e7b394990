-- Full-text ranking for hybrid search: BM25 over each chunk's tsvector, with the settings it uses. The
-- offline evaluation (toolkit.evaluation.retrieval) asks these functions for lexemes and settings, so it ranks as
-- hybrid_search_chunks does.
SET LOCAL ROLE toolkit_owner;

-- Returns the served retrieval's settings: BM25's k1 and b, the RRF constant and the candidates per list, the hits
-- fetched per passage, a passage's token budget in mean chunks, and the most postings (chunk and lexeme pairs) full
-- text reads to find its candidates (postings_limit; see hybrid_search_chunks). search_passages, the verification and
-- the offline evaluation all read them here.
CREATE OR REPLACE FUNCTION toolkit.retrieval_settings()
RETURNS TABLE (
    k1 double precision,
    b double precision,
    rrf_k integer,
    candidates integer,
    hits_per_passage integer,
    passage_chunks double precision,
    postings_limit integer
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
    -- Full-text candidates from at most 1,000 postings: search time bounded by an index range, not by the corpus
    -- (docs/search.md, "Full text"; docs/benchmarks.md, "Search").
    SELECT 1.2::float8, 0.75::float8, 10, 50, 4, 1.5::float8, 1000;
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
    SELECT format(
        'passages:hybrid:k1=%s:b=%s:rrf_k=%s:candidates=%s:hits_per_passage=%s:passage_chunks=%s:postings_limit=%s',
        s.k1, s.b, s.rrf_k, s.candidates, s.hits_per_passage, s.passage_chunks, s.postings_limit)
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

-- Full-text postings. ts_match_vq (@@) is not leakproof, so under row-level security the planner may not use a
-- GIN index for it and reads every row of the tenant (docs/search.md, "Full text"). Each version ready to serve
-- therefore keeps its own postings, packed as a GIN index packs them, with the chunk table's row-level security:
--   terms_vN: per tenant and label set (access_labels), blocks of the lexicon (part 0, keyed by their first lexeme:
--     a lexeme is in the block with the greatest key at or below it) holding each lexeme, its document frequency
--     (dfs), and the chunks holding it (chunks: the chunk table's ordinal of each, ascending, as an integer offset
--     from the row's base; ends: where each lexeme's run ends), about block_weight entries and postings a block; a
--     lexeme held by more than slice_postings chunks keeps them in slices of its own (part: the slice's first
--     ordinal, also its base), not in its block.
--   term_stats_vN: per tenant and label set, its chunks (N) and their tokens.
-- The term frequencies are not stored: a search reads them from the candidate chunks' own tsvector. Built in bulk
-- when a version becomes ready (a backfill writes none), kept by statement triggers on the chunk table afterwards,
-- which rewrite the blocks and slices a statement's lexemes fall in (writers of one tenant and label set take
-- turns: the set's statistics row is their lock).

-- Returns the bare name of a version's postings table (terms_vN): what the names derived from it start with. A
-- statement names the table itself with toolkit._postings_table below, never with this.
CREATE OR REPLACE FUNCTION toolkit._terms_table(version integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'terms_v' || version::text
$$;

-- Returns the bare name of a version's full-text statistics table (term_stats_vN): what the names derived from it
-- (its index) start with. A statement names the table itself with toolkit._statistics_table below, never with this.
CREATE OR REPLACE FUNCTION toolkit._term_stats_table(version integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'term_stats_v' || version::text
$$;

-- Returns a version's postings table, schema-qualified and quoted (toolkit.terms_vN): the one way every routine, and
-- Python, names it; put into a statement with %s, or cast to regclass.
CREATE OR REPLACE FUNCTION toolkit._postings_table(target integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'toolkit.' || quote_ident(toolkit._terms_table(target))
$$;

-- Returns a version's full-text statistics table, schema-qualified and quoted (toolkit.term_stats_vN): the one way
-- every routine, and Python, names it; put into a statement with %s, or cast to regclass.
CREATE OR REPLACE FUNCTION toolkit._statistics_table(target integer)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'toolkit.' || quote_ident(toolkit._term_stats_table(target))
$$;

-- Grants on a version's postings and statistics: none below the owner. The triggers write them; searches read them
-- through toolkit._read_term_stats and toolkit._read_postings (below), which return the caller's own rows only. A role
-- that could query them directly could EXPLAIN ANALYZE a lexeme lookup and learn from the rows the policies removed
-- whether another tenant's chunks hold a guessed word (issue 39).
CREATE OR REPLACE FUNCTION toolkit._grant_text_postings(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY[toolkit._postings_table(target), toolkit._statistics_table(target)] LOOP
        IF to_regclass(tbl) IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON %s FROM public, toolkit_reader, toolkit_writer, toolkit_deployer', tbl);
        END IF;
    END LOOP;
END
$$;

-- Returns who reads the postings through the functions below, decided as the tables' policies decide it: the
-- tenant (toolkit.current_tenant(): the tenant set, NULL for a login bound to other tenants; it fails closed as every
-- read does) and the principals set.
CREATE OR REPLACE FUNCTION toolkit._postings_caller()
RETURNS TABLE (tenant text, principals text[])
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT toolkit.current_tenant(), toolkit.current_principals();
$$;


-- Returns how postings are packed (see above): the entries and postings a lexicon block holds about (a lexeme 1, each
-- of its chunks 1), and the most postings a lexeme keeps in its block, which is also a slice's size.
CREATE OR REPLACE FUNCTION toolkit._postings_layout()
RETURNS TABLE (block_weight integer, slice_postings integer)
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    -- Measured in docs/benchmarks.md ("Keyword search at the cost of an index"): 2,048 keeps a block's arrays a
    -- few kB compressed (read whole for one lexeme) and the rows few enough that their headers do not count.
    SELECT 2048, 2048;
$$;

-- Returns ordinals (ascending bigints) as the integer offsets a postings row keeps from its base (the first).
CREATE OR REPLACE FUNCTION toolkit._postings_offsets(ordinals bigint[], base bigint)
RETURNS integer[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(SELECT (u.id - base)::integer FROM unnest(ordinals) WITH ORDINALITY AS u (id, n) ORDER BY u.n);
$$;

-- Returns the ordinals a postings row's offsets stand for (see _postings_offsets).
CREATE OR REPLACE FUNCTION toolkit._postings_ordinals(offsets integer[], base bigint)
RETURNS bigint[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(SELECT base + u.o FROM unnest(offsets) WITH ORDINALITY AS u (o, n) ORDER BY u.n);
$$;

-- Returns a statement's text that writes packed postings into a version's terms_vN (terms) from entries: a query
-- of (tenant, access_labels, range, lexeme, df integer, ids bigint[]) rows, one per lexeme of a tenant and label
-- set, ids its chunks' ordinals (any order, no duplicates) or NULL for a lexeme whose slices hold them already (only
-- its df is written, in its block); range: the block the lexeme was in (NULL: none), blocks being cut within a
-- range only, so each lexeme stays in the block with the greatest key at or below it. A lexeme of df 0 is left out.
-- ctes: common table expressions (each followed by a comma) the entries query may use; with them, the rows are
-- written after the one named gone (the deletion of what they replace) has run.
CREATE OR REPLACE FUNCTION toolkit._pack_postings_sql(terms text, entries text, ctes text DEFAULT NULL)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        'WITH %5$s entries AS MATERIALIZED (SELECT e.tenant, e.access_labels, e.range, e.lexeme, e.df, e.ids,'
        '  e.ids IS NULL OR cardinality(e.ids) > %4$s AS long FROM (%2$s) AS e WHERE e.df > 0),'
        ' weighed AS (SELECT e.tenant, e.access_labels, e.range, e.lexeme, e.df,'
        '  CASE WHEN e.long THEN 0 ELSE cardinality(e.ids) END AS stored FROM entries AS e),'
        ' blocked AS (SELECT w.*, (sum(1 + w.stored) OVER (PARTITION BY w.tenant, w.access_labels, w.range'
        '  ORDER BY w.lexeme COLLATE "C") - 1 - w.stored) / %3$s AS block FROM weighed AS w),'
        ' ended AS (SELECT b.*, sum(b.stored) OVER (PARTITION BY b.tenant, b.access_labels, b.range, b.block'
        '  ORDER BY b.lexeme COLLATE "C")::integer AS ends FROM blocked AS b),'
        ' lexicon AS (SELECT x.tenant, x.access_labels, x.range, x.block, min(x.lexeme COLLATE "C") AS lexeme,'
        '  array_agg(x.lexeme ORDER BY x.lexeme COLLATE "C") AS lexemes,'
        '  array_agg(x.df ORDER BY x.lexeme COLLATE "C") AS dfs,'
        '  array_agg(x.ends ORDER BY x.lexeme COLLATE "C") AS ends FROM ended AS x GROUP BY 1, 2, 3, 4),'
        ' held AS (SELECT x.tenant, x.access_labels, x.range, x.block, min(u.id) AS base,'
        '  array_agg(u.id ORDER BY x.lexeme COLLATE "C", u.id) AS chunks'
        '  FROM ended AS x INNER JOIN entries AS e ON e.tenant = x.tenant AND e.access_labels = x.access_labels'
        '   AND e.range IS NOT DISTINCT FROM x.range AND e.lexeme = x.lexeme AND NOT e.long'
        '  CROSS JOIN LATERAL unnest(e.ids) AS u (id) GROUP BY 1, 2, 3, 4),'
        ' sliced AS (SELECT e.tenant, e.access_labels, e.lexeme, (u.n - 1) / %4$s AS slice,'
        '  array_agg(u.id ORDER BY u.id) AS chunks'
        '  FROM entries AS e CROSS JOIN LATERAL (SELECT v.id, row_number() OVER (ORDER BY v.id) AS n'
        '   FROM unnest(e.ids) AS v (id)) AS u WHERE e.long AND e.ids IS NOT NULL GROUP BY 1, 2, 3, 4)'
        ' INSERT INTO %1$s (tenant, access_labels, lexeme, part, lexemes, dfs, ends, base, chunks)'
        ' SELECT l.tenant, l.access_labels, l.lexeme, 0, l.lexemes, l.dfs, l.ends, coalesce(h.base, 0),'
        '  coalesce(toolkit._postings_offsets(h.chunks, h.base), ''{}'')'
        ' FROM lexicon AS l LEFT JOIN held AS h ON h.tenant = l.tenant AND h.access_labels = l.access_labels'
        '  AND h.range IS NOT DISTINCT FROM l.range AND h.block = l.block%6$s'
        ' UNION ALL SELECT s.tenant, s.access_labels, s.lexeme, s.chunks[1], NULL, NULL, NULL, s.chunks[1],'
        '  toolkit._postings_offsets(s.chunks, s.chunks[1])'
        ' FROM sliced AS s%6$s',
        terms, entries, l.block_weight, l.slice_postings, coalesce(ctes, ''),
        CASE WHEN ctes IS NOT NULL THEN ' WHERE (SELECT count(*) FROM gone) >= 0' ELSE '' END)
    FROM toolkit._postings_layout() AS l;
$$;

-- Returns the query of a lexeme's block in a version's terms_vN (terms) for a tenant and label set: the row with
-- the greatest key at or below the lexeme (%s placeholders: the table's alias, the tenant, the label set, the lexeme).
CREATE OR REPLACE FUNCTION toolkit._postings_block_sql(terms text, tenant_sql text, labels_sql text, lexeme_sql text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        'SELECT b.lexeme, b.lexemes, b.dfs, b.ends, b.base, b.chunks FROM %1$s AS b WHERE b.tenant = %2$s'
        ' AND b.access_labels = %3$s AND b.part = 0 AND b.lexeme <= %4$s ORDER BY b.lexeme DESC LIMIT 1',
        terms, tenant_sql, labels_sql, lexeme_sql);
$$;

-- Returns the query of the chunks (ordinals, ascending) holding a lexeme in one tenant and label set, at most
-- max_sql of them (the first by ordinal), from its block or its slices (placeholders as _postings_block_sql's).
CREATE OR REPLACE FUNCTION toolkit._postings_of_sql(
    terms text, tenant_sql text, labels_sql text, lexeme_sql text, max_sql text
)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        '(SELECT p.id FROM (SELECT b.base + unnest(CASE WHEN x.i IS NOT NULL'
        '  THEN b.chunks[coalesce(b.ends[x.i - 1], 0) + 1 : b.ends[x.i]] END) AS id'
        '  FROM (%1$s) AS b CROSS JOIN LATERAL (SELECT array_position(b.lexemes, %5$s) AS i) AS x'
        '  UNION ALL (SELECT sl.base + unnest(sl.chunks) FROM %2$s AS sl WHERE sl.tenant = %3$s'
        '   AND sl.access_labels = %4$s AND sl.lexeme = %5$s AND sl.part > 0 ORDER BY sl.part)) AS p LIMIT %6$s)',
        toolkit._postings_block_sql(terms, tenant_sql, labels_sql, lexeme_sql),
        terms, tenant_sql, labels_sql, lexeme_sql, max_sql);
$$;

-- Returns a version's full-text statistics for the given lexemes ('' for the chunk count and their tokens), summed
-- over the tenant and label sets of the reader (the label sets it holds a principal of; every one: every_label):
-- lexeme, df, tokens. A lexeme no such chunk holds has no row. Raises undefined_table when the tables are gone.
-- Run by the definer functions below only (owner's EXECUTE), which decide every_label by who may call them.
CREATE OR REPLACE FUNCTION toolkit._term_stats_rows(target integer, lexemes text[], every_label boolean)
RETURNS TABLE (lexeme text, df double precision, tokens double precision)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reader record;
BEGIN
    SELECT * INTO reader FROM toolkit._postings_caller();
    IF reader.tenant IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH sets AS MATERIALIZED (SELECT s.tenant, s.access_labels, s.chunks, s.tokens FROM %1$s AS s'
        '  WHERE s.tenant = $1 AND ($3 OR cardinality(s.access_labels) = 0 OR s.access_labels && $4))'
        ' SELECT '''', sum(s.chunks)::float8, sum(s.tokens)::float8 FROM sets AS s'
        ' WHERE '''' = ANY ($2) HAVING sum(s.chunks) > 0'
        ' UNION ALL SELECT q.lexeme, sum(b.dfs[x.i])::float8, 0::float8'
        ' FROM sets AS s CROSS JOIN (SELECT DISTINCT l FROM unnest($2) AS l WHERE l <> '''') AS q (lexeme)'
        ' CROSS JOIN LATERAL (%2$s) AS b CROSS JOIN LATERAL (SELECT array_position(b.lexemes, q.lexeme) AS i) AS x'
        ' WHERE x.i IS NOT NULL GROUP BY q.lexeme',
        toolkit._statistics_table(target),
        toolkit._postings_block_sql(toolkit._postings_table(target), 's.tenant', 's.access_labels', 'q.lexeme'))
    USING reader.tenant, lexemes, every_label, reader.principals;
END
$$;

-- Returns the full-text matches a search scores, in the reader's tenant and the label sets it holds a principal of
-- (every label set: every_label): the candidates (the chunks holding a lexeme of chosen; when chosen is empty, the
-- first max_rows chunks holding rarest, by ordinal), each with its token_count and, for each lexeme of known it
-- holds, the lexeme's count in it (tf, from the chunk's own tsvector). Raises undefined_table when the tables are
-- gone. Run by the definer functions below only (owner's EXECUTE), which decide every_label by who may call them.
CREATE OR REPLACE FUNCTION toolkit._text_match_rows(
    target integer, chosen text[], rarest text, max_rows integer, known text[], every_label boolean
)
RETURNS TABLE (chunk_id text, token_count integer, lexeme text, tf integer)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reader record;
    terms text := toolkit._postings_table(target);
BEGIN
    SELECT * INTO reader FROM toolkit._postings_caller();
    IF reader.tenant IS NULL OR (coalesce(cardinality(chosen), 0) = 0 AND rarest IS NULL) THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH sets AS MATERIALIZED (SELECT s.tenant, s.access_labels FROM %1$s AS s'
        '  WHERE s.tenant = $1 AND ($3 OR cardinality(s.access_labels) = 0 OR s.access_labels && $4)),'
        ' ids AS MATERIALIZED (SELECT DISTINCT p.id FROM sets AS s'
        '  CROSS JOIN (SELECT DISTINCT l FROM unnest(CASE WHEN cardinality($5) > 0 THEN $5 END) AS l) AS q (lexeme)'
        '  CROSS JOIN LATERAL %2$s AS p (id)'
        '  UNION (SELECT r.id FROM sets AS s CROSS JOIN LATERAL %3$s AS r (id)'
        '   WHERE coalesce(cardinality($5), 0) = 0 ORDER BY 1 LIMIT $7))'
        ' SELECT c.chunk_id, c.token_count, l.lexeme, cardinality(l.positions)'
        ' FROM ids AS k INNER JOIN %4$s AS c ON c.tenant = $1 AND c.ordinal = k.id'
        ' CROSS JOIN LATERAL unnest(ts_filter(setweight(c.fts, ''A'', $8), ''{a}'')) AS l'
        ' WHERE c.tenant = $1 AND NOT c.is_parent'
        '  AND ($3 OR cardinality(c.access_labels) = 0 OR c.access_labels && $4)',
        toolkit._statistics_table(target),
        toolkit._postings_of_sql(terms, 's.tenant', 's.access_labels', 'q.lexeme', 'ALL'),
        toolkit._postings_of_sql(terms, 's.tenant', 's.access_labels', '$6', '$7'),
        toolkit._chunk_table(target))
    USING reader.tenant, NULL::text, every_label, reader.principals, chosen, rarest, max_rows, known;
END
$$;

-- Returns a version's full-text statistics of the given lexemes that the caller may read: its tenant's, in the label
-- sets it holds a principal of (see _term_stats_rows). Every role that searches may run it.
-- Definer: no role below the owner may read term_stats_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_term_stats(target integer, lexemes text[])
RETURNS TABLE (lexeme text, df double precision, tokens double precision)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.lexeme, s.df, s.tokens FROM toolkit._term_stats_rows(target, lexemes, false) AS s;
$$;

-- Returns a version's full-text statistics of the given lexemes in the caller's tenant over every label set, as the
-- policies show them to a service role (toolkit._is_service_role: the writer, the owner and definer functions of the
-- owner such as evaluate_version); only the writer and the owner may run it.
-- Definer: no role below the owner may read term_stats_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_term_stats_service(target integer, lexemes text[])
RETURNS TABLE (lexeme text, df double precision, tokens double precision)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.lexeme, s.df, s.tokens FROM toolkit._term_stats_rows(target, lexemes, true) AS s;
$$;

-- Returns the full-text matches a search scores (see _text_match_rows) among the chunks the caller may read: its
-- tenant's, in the label sets it holds a principal of. Every role that searches may run it.
-- Definer: no role below the owner may read terms_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_text_matches(
    target integer, chosen text[], rarest text, max_rows integer, known text[]
)
RETURNS TABLE (chunk_id text, token_count integer, lexeme text, tf integer)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.chunk_id, m.token_count, m.lexeme, m.tf
    FROM toolkit._text_match_rows(target, chosen, rarest, max_rows, known, false) AS m;
$$;

-- Returns the full-text matches a search scores in the caller's tenant over every label set, as the policies show
-- them to a service role (see _read_term_stats_service); only the writer and the owner may run it.
-- Definer: no role below the owner may read terms_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_text_matches_service(
    target integer, chosen text[], rarest text, max_rows integer, known text[]
)
RETURNS TABLE (chunk_id text, token_count integer, lexeme text, tf integer)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.chunk_id, m.token_count, m.lexeme, m.tf
    FROM toolkit._text_match_rows(target, chosen, rarest, max_rows, known, true) AS m;
$$;

-- Returns the function a search reads the full-text statistics through, as the caller: every label set for a service
-- role (toolkit._is_service_role: what the policies show it), else the label sets of its principals.
CREATE OR REPLACE FUNCTION toolkit._read_term_stats_function()
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN toolkit._is_service_role() THEN 'toolkit._read_term_stats_service'
        ELSE 'toolkit._read_term_stats' END;
$$;

-- Returns the function a search reads its full-text matches through, as the caller (see _read_term_stats_function).
CREATE OR REPLACE FUNCTION toolkit._read_text_matches_function()
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN toolkit._is_service_role() THEN 'toolkit._read_text_matches_service'
        ELSE 'toolkit._read_text_matches' END;
$$;

-- (Re)applies the chunk table's row-level security (tenant isolation, access labels) to a version's postings and
-- statistics, and their grants.
CREATE OR REPLACE FUNCTION toolkit._secure_text_postings(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl regclass;
BEGIN
    FOREACH tbl IN ARRAY ARRAY[
        to_regclass(toolkit._postings_table(target)),
        to_regclass(toolkit._statistics_table(target))
    ] LOOP
        IF tbl IS NOT NULL THEN
            PERFORM toolkit._secure_tenant_table(tbl);
            PERFORM toolkit._secure_access_labels(tbl);
        END IF;
    END LOOP;
    PERFORM toolkit._grant_text_postings(target);
END
$$;

-- Removes every postings and statistics row of a tenant from a version (toolkit.erase_tenant, after deleting the
-- tenant's chunks, whose trigger removed their postings already), in the caller's transaction.
CREATE OR REPLACE FUNCTION toolkit._erase_text_postings(target integer, tenant text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regclass(toolkit._postings_table(target)) IS NOT NULL THEN
        EXECUTE format('DELETE FROM %s AS s WHERE s.tenant = $1', toolkit._statistics_table(target)) USING tenant;
        EXECUTE format('DELETE FROM %s AS t WHERE t.tenant = $1', toolkit._postings_table(target)) USING tenant;
    END IF;
END
$$;

-- Keeps a version's postings and statistics (argument: the version) after a statement on its chunk table: the
-- lexemes of rows deleted, inserted or changed (tenant, ordinal, parent flag, labels, tsvector or token count) leave
-- or join the postings. Each tenant and label set's statistics row is updated first, which locks it until the
-- transaction ends (writers of one set take turns; under REPEATABLE READ a writer that would overwrite another's
-- work fails with a serialization error instead); then the slices of lexemes that have them, then the lexicon blocks
-- the statement's lexemes fall in, each rewritten whole.
-- Definer: writes the postings and statistics, which only the owner may write.
CREATE OR REPLACE FUNCTION toolkit._text_postings_trigger()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target integer := TG_ARGV[0]::integer;
    terms text := toolkit._postings_table(target);
    stats text := toolkit._statistics_table(target);
    same text := 'n.tenant = o.tenant AND n.ordinal = o.ordinal AND n.is_parent = o.is_parent'
        ' AND n.access_labels = o.access_labels AND n.token_count = o.token_count AND n.fts = o.fts';
    removed text := 'SELECT NULL::text AS tenant, NULL::text[] AS access_labels, NULL::bigint AS ordinal,'
        ' NULL::integer AS token_count, NULL::tsvector AS fts WHERE false';
    added text := removed;
    changes text;
    lexemes text;
    layout record;
    written bigint;
BEGIN
    SELECT * INTO layout FROM toolkit._postings_layout();
    IF TG_OP = 'DELETE' THEN
        removed := 'SELECT o.tenant, o.access_labels, o.ordinal, o.token_count, o.fts FROM old_rows AS o'
            ' WHERE NOT o.is_parent';
    ELSIF TG_OP = 'INSERT' THEN
        added := 'SELECT n.tenant, n.access_labels, n.ordinal, n.token_count, n.fts FROM new_rows AS n'
            ' WHERE NOT n.is_parent';
    ELSE
        removed := 'SELECT o.tenant, o.access_labels, o.ordinal, o.token_count, o.fts FROM old_rows AS o'
            ' WHERE NOT o.is_parent AND NOT EXISTS (SELECT FROM new_rows AS n WHERE ' || same || ')';
        added := 'SELECT n.tenant, n.access_labels, n.ordinal, n.token_count, n.fts FROM new_rows AS n'
            ' WHERE NOT n.is_parent AND NOT EXISTS (SELECT FROM old_rows AS o WHERE ' || same || ')';
    END IF;
    changes := format('SELECT -1 AS sign, r.* FROM (%s) AS r UNION ALL SELECT 1, r.* FROM (%s) AS r', removed, added);
    -- The statistics, set by set in key order (the sets' lock).
    EXECUTE format(
        'INSERT INTO %1$s AS s (tenant, access_labels, chunks, tokens)'
        ' SELECT c.tenant, c.access_labels, sum(c.sign), sum(c.sign * c.token_count) FROM (%2$s) AS c'
        ' GROUP BY 1, 2 ORDER BY 1, 2'
        ' ON CONFLICT (tenant, access_labels) DO UPDATE'
        ' SET chunks = s.chunks + excluded.chunks, tokens = s.tokens + excluded.tokens', stats, changes);
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written = 0 THEN
        RETURN NULL;
    END IF;
    EXECUTE format('DELETE FROM %s AS s WHERE s.chunks = 0 AND (s.tenant, s.access_labels) IN'
        ' (SELECT c.tenant, c.access_labels FROM (%s) AS c)', stats, changes);
    -- Each (set, lexeme, chunk) once, with its net change (a row updated in place leaves its words where they are).
    lexemes := format(
        'SELECT c.tenant, c.access_labels, l.lexeme, c.ordinal, sum(c.sign)::integer AS sign FROM (%s) AS c'
        ' CROSS JOIN LATERAL unnest(tsvector_to_array(c.fts)) AS l (lexeme) GROUP BY 1, 2, 3, 4'
        ' HAVING sum(c.sign) <> 0', changes);
    -- Slices: each change to the slice its ordinal falls in (the last whose first ordinal is at or below it, else
    -- the first), each slice touched rewritten (split in slice_postings, gone when empty).
    EXECUTE format(
        'WITH ch AS MATERIALIZED (SELECT x.*, coalesce('
        '  (SELECT t.part FROM %1$s AS t WHERE t.tenant = x.tenant AND t.access_labels = x.access_labels'
        '   AND t.lexeme = x.lexeme AND t.part > 0 AND t.part <= x.ordinal ORDER BY t.part DESC LIMIT 1),'
        '  (SELECT t.part FROM %1$s AS t WHERE t.tenant = x.tenant AND t.access_labels = x.access_labels'
        '   AND t.lexeme = x.lexeme AND t.part > 0 ORDER BY t.part LIMIT 1)) AS part FROM (%2$s) AS x),'
        ' touched AS (SELECT c.tenant, c.access_labels, c.lexeme, c.part,'
        '  array_agg(c.ordinal) FILTER (WHERE c.sign > 0) AS added,'
        '  array_agg(c.ordinal) FILTER (WHERE c.sign < 0) AS removed FROM ch AS c WHERE c.part IS NOT NULL'
        '  GROUP BY 1, 2, 3, 4),'
        ' merged AS MATERIALIZED (SELECT t.tenant, t.access_labels, t.lexeme, t.part, ARRAY(SELECT DISTINCT i'
        '  FROM unnest(toolkit._postings_ordinals(s.chunks, s.base) || coalesce(t.added, ''{}''))'
        '  AS i WHERE i <> ALL (coalesce(t.removed, ''{}''))'
        '  ORDER BY i) AS ids FROM touched AS t INNER JOIN %1$s AS s ON s.tenant = t.tenant'
        '  AND s.access_labels = t.access_labels AND s.lexeme = t.lexeme AND s.part = t.part),'
        ' gone AS (DELETE FROM %1$s AS s USING touched AS t WHERE s.tenant = t.tenant'
        '  AND s.access_labels = t.access_labels AND s.lexeme = t.lexeme AND s.part = t.part RETURNING 1),'
        ' sliced AS (SELECT m.tenant, m.access_labels, m.lexeme, m.part, (u.n - 1) / %3$s AS slice,'
        '  array_agg(u.id ORDER BY u.n) AS chunks FROM merged AS m'
        '  CROSS JOIN LATERAL unnest(m.ids) WITH ORDINALITY AS u (id, n) GROUP BY 1, 2, 3, 4, 5)'
        ' INSERT INTO %1$s (tenant, access_labels, lexeme, part, base, chunks)'
        ' SELECT s.tenant, s.access_labels, s.lexeme, s.chunks[1], s.chunks[1],'
        '  toolkit._postings_offsets(s.chunks, s.chunks[1]) FROM sliced AS s'
        ' WHERE (SELECT count(*) FROM gone) >= 0', terms, lexemes, layout.slice_postings);
    -- The lexicon: each block a change's lexeme falls in (else the set's first block) rewritten from its entries
    -- and the changes, repacked within its range; a lexeme that has slices keeps only its df in its block.
    EXECUTE toolkit._pack_postings_sql(terms,
        'SELECT coalesce(o.tenant, r.tenant) AS tenant, coalesce(o.access_labels, r.access_labels) AS access_labels,'
        '  coalesce(o.range, r.block) AS range, coalesce(o.lexeme, r.lexeme) AS lexeme,'
        '  coalesce(o.df, 0) + coalesce(r.df, 0) AS df,'
        '  CASE WHEN o.lexeme IS NOT NULL AND o.ids IS NULL THEN NULL WHEN r.lexeme IS NULL THEN o.ids'
        '   ELSE ARRAY(SELECT DISTINCT i FROM unnest(coalesce(o.ids, ''{}'') || coalesce(r.added, ''{}'')) AS i'
        '    WHERE i <> ALL (coalesce(r.removed, ''{}''))) END AS ids'
        ' FROM old AS o FULL JOIN routed AS r ON r.tenant = o.tenant AND r.access_labels = o.access_labels'
        '  AND r.lexeme = o.lexeme',
        format(
            ' ch AS MATERIALIZED (%2$s),'
            ' keys AS (SELECT c.tenant, c.access_labels, c.lexeme, sum(c.sign)::integer AS df,'
            '  array_agg(c.ordinal) FILTER (WHERE c.sign > 0) AS added,'
            '  array_agg(c.ordinal) FILTER (WHERE c.sign < 0) AS removed FROM ch AS c GROUP BY 1, 2, 3),'
            ' routed AS MATERIALIZED (SELECT k.*, coalesce((SELECT b.lexeme FROM (%3$s) AS b),'
            '  (SELECT b.lexeme FROM %1$s AS b WHERE b.tenant = k.tenant AND b.access_labels = k.access_labels'
            '   AND b.part = 0 ORDER BY b.lexeme LIMIT 1)) AS block FROM keys AS k),'
            ' blocks AS MATERIALIZED (SELECT b.tenant, b.access_labels, b.lexeme,'
            '  b.lexemes || ''{}''::text[] AS lexemes, b.dfs || ''{}''::integer[] AS dfs,'
            '  b.ends || ''{}''::integer[] AS ends, toolkit._postings_ordinals(b.chunks, b.base) AS chunks'
            '  FROM %1$s AS b'
            '  WHERE b.part = 0 AND (b.tenant, b.access_labels, b.lexeme) IN'
            '   (SELECT r.tenant, r.access_labels, r.block FROM routed AS r)),'
            ' old AS (SELECT b.tenant, b.access_labels, b.lexeme AS range, u.lexeme, u.df,'
            '  CASE WHEN u.e > coalesce(b.ends[u.n - 1], 0) THEN b.chunks[coalesce(b.ends[u.n - 1], 0) + 1 : u.e] END'
            '  AS ids FROM blocks AS b CROSS JOIN LATERAL unnest(b.lexemes, b.dfs, b.ends) WITH ORDINALITY'
            '  AS u (lexeme, df, e, n)),'
            ' gone AS (DELETE FROM %1$s AS t USING blocks AS b WHERE t.tenant = b.tenant'
            '  AND t.access_labels = b.access_labels AND t.lexeme = b.lexeme AND t.part = 0 RETURNING 1),',
            terms, lexemes, toolkit._postings_block_sql(terms, 'k.tenant', 'k.access_labels', 'k.lexeme')));
    RETURN NULL;
END
$$;

-- Builds a version's postings and statistics when they are missing, in bulk from the chunk table's rows (one sort,
-- as an index is built), and the triggers that keep them. Run when a version becomes ready (mark_version_ready:
-- a backfill loads none) and, for every version ready to serve, by each upgrade (900-apply.sql).
CREATE OR REPLACE FUNCTION toolkit._create_text_postings(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunks text := toolkit._chunk_table(target);
    terms text := toolkit._postings_table(target);
    stats text := toolkit._statistics_table(target);
BEGIN
    IF to_regclass(chunks) IS NULL THEN
        RETURN;
    END IF;
    IF to_regclass(terms) IS NULL OR to_regclass(stats) IS NULL THEN
        -- Writers wait while the postings are built, so none of their rows is missed.
        PERFORM toolkit._take_lock(chunks::regclass, 'SHARE',
            format('building the full-text postings of version %s', target), '1h');
        EXECUTE format('DROP TABLE IF EXISTS %s, %s', terms, stats);
        EXECUTE format(
            'CREATE TABLE %s ('
            '  tenant text NOT NULL,'
            '  access_labels text[] NOT NULL DEFAULT ''{}'','
            '  lexeme text COLLATE "C" NOT NULL,'
            '  part bigint NOT NULL,'
            '  lexemes text[],'
            '  dfs integer[],'
            '  ends integer[],'
            '  base bigint NOT NULL,'
            '  chunks integer[] NOT NULL'
            ')', terms);
        EXECUTE format(
            'CREATE TABLE %s ('
            '  tenant text NOT NULL,'
            '  access_labels text[] NOT NULL DEFAULT ''{}'','
            '  chunks bigint NOT NULL,'
            '  tokens bigint NOT NULL'
            ')', stats);
        EXECUTE format('COMMENT ON TABLE %s IS %L', terms,
            format('Full-text postings of version %s: per tenant and label set, lexicon blocks (part 0: lexemes,'
                ' their df and their chunks'' ordinals) and the slices of lexemes held by many chunks (part: the'
                ' first ordinal).', target));
        EXECUTE format('COMMENT ON TABLE %s IS %L', stats,
            format('Full-text statistics of version %s: per tenant and label set, its chunks and their tokens.',
                target));
        EXECUTE toolkit._pack_postings_sql(terms, format(
            'SELECT c.tenant, c.access_labels, NULL::text AS range, l.lexeme, count(*)::integer AS df,'
            ' array_agg(c.ordinal) AS ids FROM %s AS c CROSS JOIN LATERAL unnest(tsvector_to_array(c.fts)) AS l (lexeme)'
            ' WHERE NOT c.is_parent GROUP BY 1, 2, 4', chunks));
        EXECUTE format(
            'INSERT INTO %s (tenant, access_labels, chunks, tokens)'
            ' SELECT c.tenant, c.access_labels, count(*), sum(c.token_count) FROM %s AS c'
            ' WHERE NOT c.is_parent GROUP BY 1, 2', stats, chunks);
        -- The indexes built after the rows (a sort, not one insertion per row).
        EXECUTE format('ALTER TABLE %s ADD PRIMARY KEY (tenant, access_labels, lexeme, part)', terms);
        EXECUTE format('CREATE INDEX %I ON %s (tenant, access_labels, lexeme) WHERE part = 0',
            toolkit._terms_table(target) || '_blocks_idx', terms);
        EXECUTE format('ALTER TABLE %s ADD PRIMARY KEY (tenant, access_labels)', stats);
        EXECUTE format('ANALYZE %s', terms);
        EXECUTE format('ANALYZE %s', stats);
        PERFORM toolkit._secure_text_postings(target);
    END IF;
    IF EXISTS (
        SELECT FROM pg_catalog.pg_trigger AS t
        WHERE t.tgrelid = chunks::regclass AND t.tgname = 'text_postings_update'
    ) THEN
        RETURN;
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE TRIGGER text_postings_insert AFTER INSERT ON %s'
        ' REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION toolkit._text_postings_trigger(%s)',
        chunks, target);
    EXECUTE format(
        'CREATE OR REPLACE TRIGGER text_postings_delete AFTER DELETE ON %s'
        ' REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION toolkit._text_postings_trigger(%s)',
        chunks, target);
    EXECUTE format(
        'CREATE OR REPLACE TRIGGER text_postings_update AFTER UPDATE ON %s'
        ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT'
        ' EXECUTE FUNCTION toolkit._text_postings_trigger(%s)', chunks, target);
END
$$;

-- Drops a version's postings and statistics and the triggers that keep them (its chunk table is being dropped, or
-- it goes back to building: a backfill rewrites it, and becoming ready builds them again).
CREATE OR REPLACE FUNCTION toolkit._drop_text_postings(target integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunks regclass := to_regclass(toolkit._chunk_table(target));
    name text;
BEGIN
    IF chunks IS NOT NULL THEN
        FOREACH name IN ARRAY ARRAY['text_postings_insert', 'text_postings_delete', 'text_postings_update'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', name, chunks);
        END LOOP;
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', toolkit._postings_table(target), toolkit._statistics_table(target));
END
$$;
