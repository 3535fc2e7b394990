-- Search, one request: toolkit.search(toolkit.search_request(...)) is the one entry point of every retrieval
-- (passages, hybrid, vector; small-to-big contexts of the last two), built from named stages, each a function that
-- returns one piece of the statement: the version resolved and the request checked once (toolkit.search), vector
-- hits, text hits, fusion, filters, the hits' rows with their cosine similarity and min_score, MMR, then contexts
-- or passages. Every statement a search runs takes one parameter, $1: the plan (toolkit._search_plan_v1), whose
-- fields the stages name (($1).tenant, ($1).pool...); the plan is a constant of the statement, so an unset filter
-- folds away when it is planned. search_chunks, hybrid_search_chunks, search_context and search_passages are thin
-- wrappers over it, for the applications that call them. Pinned and SECURITY INVOKER like every search: row-level
-- security applies to the caller; the transaction's tenant is searched. After 005-search.sql (the version and
-- filter helpers), 011-lexical.sql (postings and statistics) and 016-metadata-filters.sql.
SET LOCAL ROLE toolkit_owner;

-- Signatures name pgvector's type unqualified, as in 005-search.sql: resolved in the extension's schema for this
-- file only (restored at the end). Bodies qualify every pgvector name.
SELECT
    set_config('toolkit.saved_search_path', current_setting('search_path'), TRUE) AS saved,
    set_config('search_path', toolkit._vector_schema() || ', pg_catalog', TRUE) AS search_path;
SELECT vector_dims('[1]'::vector) AS library_loaded;

-- A search request: every option of a search, named. Omitted ones take their defaults: k 5; retrieval passages (vector
-- with expand); filters none; the version: the one query_model / version pins, else the active one.
CREATE OR REPLACE FUNCTION toolkit.search_request(
    query_text text DEFAULT NULL,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 5,
    retrieval text DEFAULT NULL,
    expand text DEFAULT NULL,
    filters jsonb DEFAULT '{}',
    model text DEFAULT NULL,
    version integer DEFAULT NULL,
    max_tokens integer DEFAULT NULL,
    min_score double precision DEFAULT NULL,
    diversity double precision DEFAULT 0,
    ef_search integer DEFAULT NULL,
    candidates integer DEFAULT NULL,
    rrf_k integer DEFAULT NULL
)
RETURNS toolkit.search_request_v1
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ROW(query_text, query_embedding, k, retrieval, expand, filters, model, version, max_tokens, min_score,
        diversity, ef_search, candidates, rrf_k)::toolkit.search_request_v1
$$;

-- Stage: the search filters as one condition on a version's chunk row `c`, over the plan's parsed filter values
-- (toolkit._search_filter_values). `(value IS NULL OR ...)`: an unset filter folds away.
CREATE OR REPLACE FUNCTION toolkit._search_stage_filters()
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '(($1).doc_ids IS NULL OR c.doc_id = ANY (($1).doc_ids))'
        ' AND (($1).doc_id_prefixes IS NULL OR EXISTS (SELECT FROM unnest(($1).doc_id_prefixes) AS p (prefix)'
        '  WHERE starts_with(c.doc_id, p.prefix)))'
        ' AND (($1).heading_prefix IS NULL OR c.heading_path[1:cardinality(($1).heading_prefix)] = ($1).heading_prefix)'
        ' AND (($1).updated_after IS NULL OR c.updated_at >= ($1).updated_after)'
        ' AND (($1).updated_before IS NULL OR c.updated_at < ($1).updated_before)'
        ' AND (($1).labels IS NULL OR c.access_labels && ($1).labels)'
$$;

-- Stage: vector hits, (chunk_id, r, distance): the ($1).pool nearest child chunks that pass the filters, by the
-- version's distance (`distance_sql`, as its HNSW index is defined, so the index answers; iterative scans keep going
-- until enough rows pass the filters and row-level security). Ties in distance are broken by chunk id inside the
-- LIMIT too. None without a query embedding.
CREATE OR REPLACE FUNCTION toolkit._search_stage_vector_hits(chunk_table text, distance_sql text, has_embedding boolean)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN NOT has_embedding
        THEN 'SELECT NULL::text AS chunk_id, NULL::bigint AS r, NULL::float8 AS distance WHERE false'
        ELSE format(
            'SELECT h.chunk_id, row_number() OVER (ORDER BY h.distance, h.chunk_id) AS r, h.distance'
            ' FROM (SELECT c.chunk_id, %1$s AS distance FROM %2$s AS c'
            '  WHERE c.tenant = ($1).tenant AND NOT c.is_parent AND %3$s'
            '  ORDER BY %1$s, c.chunk_id LIMIT ($1).pool) AS h',
            distance_sql, chunk_table, toolkit._search_stage_filters())
    END
$$;

-- Stage: text hits, (chunk_id, r): BM25 (k1, b of toolkit.retrieval_settings) of the candidates found through the
-- version's postings, the ($1).pool best. The candidates: the chunks holding one of the question's lexemes chosen
-- rarest first while their postings stay within postings_limit (($1).chosen); when even the rarest has more, its
-- first postings_limit chunks by chunk id (($1).rarest). A candidate's score sums over all the question's known
-- lexemes (($1).known, their df ($1).known_df), tf and dl from the postings' index alone; N (($1).text_n), the
-- mean length and df are the tenant's (term_stats_vN over the rows the caller may read; not narrowed by the filters,
-- which narrow the candidates on their chunk rows). Sums run over the lexemes in byte order, as Python's offline
-- evaluation (toolkit.evaluation.retrieval) sums them. None without lexemes.
CREATE OR REPLACE FUNCTION toolkit._search_stage_text_hits(chunk_table text, filtered boolean, candidates text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN candidates IS NULL
        THEN 'SELECT NULL::text AS chunk_id, NULL::bigint AS r WHERE false'
        ELSE format(
            'WITH text_candidates AS MATERIALIZED (%1$s),'
            ' text_rows AS MATERIALIZED (%2$s),'
            ' text_matches AS MATERIALIZED (SELECT t.chunk_id, t.token_count, t.lexeme, t.tf'
            '  FROM %3$s(($1).version, ($1).known, ARRAY(SELECT r.chunk_id FROM text_rows AS r)) AS t),'
            ' text_terms AS (SELECT u.lexeme, ln(1 + (($1).text_n - u.df + 0.5) / (u.df + 0.5)) AS idf'
            '  FROM unnest(($1).known, ($1).known_df) AS u (lexeme, df))'
            ' SELECT t.chunk_id, row_number() OVER (ORDER BY t.weight DESC, t.chunk_id) AS r'
            ' FROM (SELECT m.chunk_id, sum(w.idf * (m.tf * (($1).k1 + 1)) / (m.tf + ($1).k1 * (1 - ($1).b'
            '   + ($1).b * m.token_count / ($1).mean_tokens)) ORDER BY m.lexeme COLLATE "C") AS weight'
            '  FROM text_matches AS m INNER JOIN text_terms AS w ON w.lexeme = m.lexeme'
            '  GROUP BY m.chunk_id ORDER BY 2 DESC, 1 LIMIT ($1).pool) AS t',
            candidates,
            -- Unfiltered, the candidates stand; filtered, each is checked on its chunk row.
            CASE WHEN NOT filtered THEN 'SELECT k.chunk_id FROM text_candidates AS k'
                ELSE format('SELECT c.chunk_id FROM text_candidates AS k INNER JOIN %s AS c'
                    ' ON c.tenant = ($1).tenant AND c.chunk_id = k.chunk_id WHERE NOT c.is_parent AND %s',
                    chunk_table, toolkit._search_stage_filters()) END,
            toolkit._read_postings_function())
    END
$$;

-- Stage: fusion, (chunk_id, vector_rank, text_rank, distance, score) of the ($1).fused best. Hybrid: reciprocal rank
-- fusion, 1 / (rrf_k + rank) summed over the lists a chunk is in, ties to the better single rank, then the chunk id.
-- Vector: the vector hits alone, scored by similarity (cosine: 1 - distance; the others: -distance).
CREATE OR REPLACE FUNCTION toolkit._search_stage_fusion(retrieval text, vector_hits text, text_hits text, distance text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN retrieval = 'vector'
        THEN format(
            'SELECT v.chunk_id, v.r AS vector_rank, NULL::bigint AS text_rank, v.distance,'
            ' CASE %2$L WHEN ''cosine'' THEN 1 - v.distance ELSE -v.distance END AS score'
            ' FROM (%1$s) AS v ORDER BY v.r LIMIT ($1).fused', vector_hits, distance)
        ELSE format(
            'SELECT coalesce(v.chunk_id, t.chunk_id) AS chunk_id, v.r AS vector_rank, t.r AS text_rank, v.distance,'
            ' coalesce(1.0::float8 / (($1).rrf_k + v.r), 0) + coalesce(1.0::float8 / (($1).rrf_k + t.r), 0) AS score'
            ' FROM (%1$s) AS v FULL JOIN (%2$s) AS t ON v.chunk_id = t.chunk_id'
            ' ORDER BY 5 DESC, least(v.r, t.r), 1 LIMIT ($1).fused', vector_hits, text_hits)
    END
$$;

-- Stage: the hits' rows. Each fused hit joined to its chunk row, with its cosine similarity to the question (what
-- min_score filters on, whatever distance the version ranks by; NULL without a query embedding or for a row still to
-- be embedded), the hits below ($1).min_score dropped (it never brings in others), ranked by score (ties: the better
-- single rank, then the chunk id). Columns: rank, score, similarity, distance, vector_rank, text_rank, the chunk's
-- columns, token_count, gap_before, and the embedding when MMR needs it.
CREATE OR REPLACE FUNCTION toolkit._search_stage_rows(
    fused text, chunk_table text, cosine_sql text, with_embedding boolean
)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        'SELECT (row_number() OVER (ORDER BY y.score DESC, least(y.vector_rank, y.text_rank), y.chunk_id))::integer'
        '  AS rank, y.*'
        ' FROM (SELECT x.score, %3$s AS similarity, x.distance, x.vector_rank::integer AS vector_rank,'
        '  x.text_rank::integer AS text_rank, c.chunk_id, c.doc_id, c.parent_id, c.position, c.start_offset,'
        '  c.end_offset, c.heading_path, c.text, c.pages, c.token_count, c.gap_before%4$s'
        '  FROM (%1$s) AS x INNER JOIN %2$s AS c ON c.tenant = ($1).tenant AND c.chunk_id = x.chunk_id) AS y'
        ' WHERE ($1).min_score IS NULL OR y.similarity >= ($1).min_score',
        fused, chunk_table, coalesce(cosine_sql, 'NULL::float8'),
        CASE WHEN with_embedding THEN ', c.embedding' ELSE '' END)
$$;

-- Stage: maximal marginal relevance (($1).diversity > 0): the hits' rows re-ranked in toolkit._mmr_order's order,
-- relevance being each hit's similarity; ($1).hits of them (the hits' rows hold _mmr_candidates(hits)).
CREATE OR REPLACE FUNCTION toolkit._search_stage_mmr(hit_rows text, pair_cosine_sql text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        'WITH r AS MATERIALIZED (%1$s),'
        ' picked AS (SELECT o.i, o.n FROM unnest(toolkit._mmr_order('
        '  ARRAY(SELECT x.similarity FROM r AS x ORDER BY x.rank),'
        '  ARRAY(SELECT %2$s FROM r AS a CROSS JOIN r AS b ORDER BY a.rank, b.rank),'
        '  ($1).hits, ($1).diversity)) WITH ORDINALITY AS o (i, n))'
        ' SELECT o.n::integer AS rank, r.score, r.similarity, r.distance, r.vector_rank, r.text_rank, r.chunk_id,'
        '  r.doc_id, r.parent_id, r.position, r.start_offset, r.end_offset, r.heading_path, r.text, r.pages,'
        '  r.token_count, r.gap_before'
        ' FROM picked AS o INNER JOIN r ON r.rank = o.i',
        hit_rows, pair_cosine_sql)
$$;

-- Stage: chunks, as the search's rows (kind chunk), best first.
CREATE OR REPLACE FUNCTION toolkit._search_stage_chunks(hits text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
        'SELECT h.rank, ''chunk''::text, h.score, h.similarity, h.distance, h.vector_rank, h.text_rank, h.doc_id,'
        ' h.start_offset, h.end_offset, h.heading_path, h.text, h.token_count, h.chunk_id, ARRAY[h.chunk_id],'
        ' ARRAY[h.rank], h.parent_id, h.position, ($1).version, ($1).model_alias, h.pages'
        ' FROM (%s) AS h ORDER BY h.rank', hits)
$$;

-- Stage: small-to-big contexts. Each hit's parent (expand parent: a hit without a visible parent stands for itself)
-- or its neighbours within ($1).window_size positions (window:N); one span per hit, and a span that starts before
-- the end of an earlier span of its document joins that span's group (a context), which keeps its best hit's rank,
-- score and heading path, the largest similarity of its hits, and at most ($1).k contexts. A context's text is its
-- pieces in order, each adding only what lies past the text so far (windows and chunks overlap); a gap between
-- pieces becomes one line break.
CREATE OR REPLACE FUNCTION toolkit._search_stage_contexts(hits text, chunk_table text, mode text)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format(
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
        '   array_agg(h.chunk_id ORDER BY g.hit_rank) AS chunk_ids, array_agg(g.hit_rank ORDER BY g.hit_rank) AS ranks,'
        '   max(h.similarity) AS similarity'
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
        ' SELECT (row_number() OVER (ORDER BY x.best))::integer, st.kind, h.score, x.similarity, h.distance,'
        '  h.vector_rank, h.text_rank, x.doc_id, x.s, x.e, h.heading_path, st.body, NULL::integer, NULL::text,'
        '  x.chunk_ids, x.ranks, h.parent_id, h.position, ($1).version, ($1).model_alias,'
        '  (SELECT array_agg(DISTINCT n ORDER BY n) FROM bodies AS b2 CROSS JOIN LATERAL unnest(b2.pages) AS n'
        '   WHERE b2.doc_id = x.doc_id AND b2.grp = x.grp)'
        ' FROM contexts AS x INNER JOIN stitched AS st ON st.doc_id = x.doc_id AND st.grp = x.grp'
        ' INNER JOIN hits AS h ON h.rank = x.best'
        ' ORDER BY x.best LIMIT ($1).k',
        hits,
        CASE WHEN mode = 'parent' THEN format(
            'SELECT h.rank AS hit_rank, h.doc_id, coalesce(p.chunk_id, h.chunk_id) AS piece_id,'
            ' coalesce(p.start_offset, h.start_offset) AS s, coalesce(p.end_offset, h.end_offset) AS e,'
            ' coalesce(p.text, h.text) AS body,'
            ' CASE WHEN p.chunk_id IS NULL THEN ''chunk'' ELSE ''parent'' END AS kind,'
            ' CASE WHEN p.chunk_id IS NULL THEN h.pages ELSE p.pages END AS pages'
            ' FROM hits AS h LEFT JOIN %s AS p'
            '  ON p.tenant = ($1).tenant AND p.chunk_id = h.parent_id AND p.doc_id = h.doc_id AND p.is_parent',
            chunk_table)
        ELSE format(
            'SELECT h.rank AS hit_rank, h.doc_id, w.chunk_id AS piece_id, w.start_offset AS s,'
            ' w.end_offset AS e, w.text AS body, ''window'' AS kind, w.pages'
            ' FROM hits AS h INNER JOIN %s AS w'
            '  ON w.tenant = ($1).tenant AND w.doc_id = h.doc_id AND NOT w.is_parent'
            '  AND w.position BETWEEN h.position - ($1).window_size AND h.position + ($1).window_size',
            chunk_table) END)
$$;

-- Stage: passages. The hits (best first) assembled into at most ($1).k passages within `budget` tokens: a hit that
-- overlaps or touches (only whitespace between) a passage of its document joins it, so no text is handed over twice;
-- a hit that would take the total past the budget is skipped and the next one tried; once k passages are open, later
-- hits only extend them. Whether two spans touch is decided from the chunks' own gap_before (the whitespace before a
-- chunk in its document), and a passage's text is stitched from its chunks and those gaps: the document is read only
-- for rows written before chunks kept their gap (gap_before NULL), as toolkit._spans_touch reads it. A passage keeps
-- its best hit's rank order, score and heading path, the largest similarity of its hits, its chunks and their hit
-- ranks (best first) and the union of their pages; its tokens are toolkit._passage_tokens of its members.
-- toolkit.evaluation.retrieval.assemble does the same offline (tests/test_retrieval_sql.py). Each hit is compared
-- with the open passages of its document only: the cost grows with the hits, not with their square.
CREATE OR REPLACE FUNCTION toolkit._search_stage_passages(plan toolkit._search_plan_v1, hits text, budget integer)
RETURNS SETOF toolkit.search_hit_v1
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hit record;
    -- Open passages (slots 1 .. n; a slot merged into another points there: into[slot]).
    n integer := 0;
    open_count integer := 0;
    total integer := 0;
    p_doc text[] := '{}';
    p_s integer[] := '{}';
    p_e integer[] := '{}';
    p_gap text[] := '{}';  -- gap_before of the passage's first member
    p_tokens integer[] := '{}';
    p_member_tokens bigint[] := '{}';
    p_member_chars bigint[] := '{}';
    p_best integer[] := '{}';
    into_slot integer[] := '{}';
    -- The slots of each document's open passages.
    doc_slots jsonb := '{}';
    slots integer[];
    -- The members: each hit taken, with the slot it joined.
    members toolkit.search_hit_v1[] := '{}';
    member_slot integer[] := '{}';
    member_gap text[] := '{}';
    joined integer[];
    j integer;
    s integer;
    e integer;
    gap text;
    member_tokens bigint;
    member_chars bigint;
    new_tokens integer;
    new_total integer;
    best integer;
BEGIN
    FOR hit IN EXECUTE hits USING plan LOOP
        joined := '{}';
        slots := ARRAY(SELECT jsonb_array_elements_text(doc_slots -> hit.doc_id)::integer);
        FOREACH j IN ARRAY slots LOOP
            IF hit.start_offset <= p_e[j] AND p_s[j] <= hit.end_offset
                OR (p_e[j] < hit.start_offset AND CASE WHEN hit.gap_before IS NULL
                    THEN toolkit._spans_touch(plan.tenant, hit.doc_id, p_s[j], p_e[j], hit.start_offset, hit.end_offset)
                    ELSE hit.start_offset - p_e[j] <= length(hit.gap_before) END)
                OR (hit.end_offset < p_s[j] AND CASE WHEN p_gap[j] IS NULL
                    THEN toolkit._spans_touch(plan.tenant, hit.doc_id, p_s[j], p_e[j], hit.start_offset, hit.end_offset)
                    ELSE p_s[j] - hit.end_offset <= length(p_gap[j]) END)
            THEN
                joined := joined || j;
            END IF;
        END LOOP;
        IF cardinality(joined) > 0 THEN
            s := hit.start_offset;
            e := hit.end_offset;
            gap := hit.gap_before;
            member_tokens := hit.token_count;
            member_chars := hit.end_offset - hit.start_offset;
            best := hit.rank;
            new_total := total;
            FOREACH j IN ARRAY joined LOOP
                IF p_s[j] < s THEN
                    s := p_s[j];
                    gap := p_gap[j];
                END IF;
                e := greatest(e, p_e[j]);
                member_tokens := member_tokens + p_member_tokens[j];
                member_chars := member_chars + p_member_chars[j];
                best := least(best, p_best[j]);
                new_total := new_total - p_tokens[j];
            END LOOP;
            new_tokens := toolkit._passage_tokens(e - s, member_tokens, member_chars);
            new_total := new_total + new_tokens;
            CONTINUE WHEN new_total > budget;
            -- The joined passages become one, in a new slot.
            n := n + 1;
            p_doc[n] := hit.doc_id;
            p_s[n] := s;
            p_e[n] := e;
            p_gap[n] := gap;
            p_tokens[n] := new_tokens;
            p_member_tokens[n] := member_tokens;
            p_member_chars[n] := member_chars;
            p_best[n] := best;
            into_slot[n] := NULL;
            FOREACH j IN ARRAY joined LOOP
                into_slot[j] := n;
            END LOOP;
            open_count := open_count - cardinality(joined) + 1;
            doc_slots := jsonb_set(doc_slots, ARRAY[hit.doc_id], to_jsonb(ARRAY(
                SELECT x FROM unnest(slots) AS x WHERE x <> ALL (joined)
            ) || n));
            total := new_total;
        ELSE
            CONTINUE WHEN open_count >= plan.k OR total + hit.token_count > budget;
            n := n + 1;
            p_doc[n] := hit.doc_id;
            p_s[n] := hit.start_offset;
            p_e[n] := hit.end_offset;
            p_gap[n] := hit.gap_before;
            p_tokens[n] := hit.token_count;
            p_member_tokens[n] := hit.token_count;
            p_member_chars[n] := hit.end_offset - hit.start_offset;
            p_best[n] := hit.rank;
            into_slot[n] := NULL;
            open_count := open_count + 1;
            doc_slots := jsonb_set(doc_slots, ARRAY[hit.doc_id], to_jsonb(slots || n));
            total := total + hit.token_count;
        END IF;
        members := members || ROW(hit.rank, 'chunk', hit.score, hit.similarity, hit.distance, hit.vector_rank,
            hit.text_rank, hit.doc_id, hit.start_offset, hit.end_offset, hit.heading_path, hit.text, hit.token_count,
            hit.chunk_id, NULL, NULL, hit.parent_id, hit."position", plan.version, plan.model_alias,
            hit.pages)::toolkit.search_hit_v1;
        member_slot := member_slot || n;
        member_gap := member_gap || hit.gap_before;
    END LOOP;

    -- Each member's passage: the slot it joined, followed through later merges.
    FOR j IN 1 .. cardinality(member_slot) LOOP
        WHILE into_slot[member_slot[j]] IS NOT NULL LOOP
            member_slot[j] := into_slot[member_slot[j]];
        END LOOP;
    END LOOP;

    -- The passages, best first: each member adds what lies past the text so far (the gap before it, then its text).
    RETURN QUERY
    WITH m AS (
        SELECT v.slot, v.gap, u.*
        FROM unnest(members) WITH ORDINALITY AS u
        INNER JOIN unnest(member_slot, member_gap) WITH ORDINALITY AS v (slot, gap, i) ON v.i = u.ordinality
    ),
    ordered AS (
        SELECT m.*, max(m.end_offset) OVER (PARTITION BY m.slot ORDER BY m.start_offset, m.end_offset, m.chunk_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
        FROM m
    ),
    passages AS (
        SELECT o.slot,
            string_agg(CASE WHEN o.covered IS NULL THEN o.text
                WHEN o.start_offset >= o.covered
                    THEN coalesce(right(o.gap, o.start_offset - o.covered), E'\n') || o.text
                WHEN o.end_offset <= o.covered THEN ''
                ELSE substr(o.text, o.covered - o.start_offset + 1) END, ''
                ORDER BY o.start_offset, o.end_offset, o.chunk_id) AS body,
            bool_and(o.covered IS NULL OR o.start_offset <= o.covered
                OR coalesce(length(o.gap) >= o.start_offset - o.covered, false)) AS complete,
            max(o.similarity) AS similarity,
            min(o.rank) AS best,
            array_agg(o.chunk_id ORDER BY o.rank) AS chunk_ids,
            array_agg(o.rank ORDER BY o.rank) AS hit_ranks
        FROM ordered AS o
        GROUP BY o.slot
    )
    SELECT (row_number() OVER (ORDER BY x.best))::integer, 'passage'::text, b.score, x.similarity,
        NULL::float8, NULL::integer, NULL::integer, p_doc[x.slot], p_s[x.slot], p_e[x.slot],
        coalesce(b.heading_path, '{}'), CASE WHEN x.complete THEN x.body ELSE coalesce((
            SELECT substr(d.raw_text, p_s[x.slot] + 1, p_e[x.slot] - p_s[x.slot]) FROM toolkit.documents AS d
            WHERE d.tenant = plan.tenant AND d.doc_id = p_doc[x.slot]
        ), x.body) END,
        p_tokens[x.slot], NULL::text, x.chunk_ids, x.hit_ranks, NULL::text, NULL::integer, plan.version,
        plan.model_alias,
        (SELECT array_agg(DISTINCT g.page ORDER BY g.page) FROM m AS y CROSS JOIN LATERAL unnest(y.pages) AS g (page)
            WHERE y.slot = x.slot)
    FROM passages AS x
    INNER JOIN m AS b ON b.slot = x.slot AND b.rank = x.best
    ORDER BY x.best;
END
$$;

-- One search. Checks the request (SQLSTATE 22023 and a sentence for what cannot be searched), resolves its version
-- once (toolkit._search_target: pinned by version or model, else the active one; a query vector of other
-- dimensions, all zeros or not finite refused), parses the filters, reads the full-text statistics once, then runs
-- the stages: vector hits and text hits, fusion, the hits' rows (similarity, min_score), MMR, then chunks, contexts
-- (expand) or passages. Returns toolkit.search_hit_v1 rows, best first: `score` ranks (fused, or the similarity for
-- the vector retrieval), `similarity` is the cosine similarity to the question that min_score filters on (a
-- passage's or context's: the largest of its hits'). ef_search sets hnsw.ef_search for the rest of the transaction.
CREATE OR REPLACE FUNCTION toolkit.search(request toolkit.search_request_v1)
RETURNS SETOF toolkit.search_hit_v1
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET "hnsw.iterative_scan" = relaxed_order
AS $$
DECLARE
    plan toolkit._search_plan_v1;
    retrieval text := coalesce(request.retrieval, CASE WHEN request.expand IS NULL THEN 'passages' ELSE 'vector' END);
    has_embedding boolean := request.query_embedding IS NOT NULL;
    has_text boolean := coalesce(request.query_text, '') <> '';
    target record;
    f record;
    settings record;
    mode text;
    distance_sql text;
    query_sql text;
    cosine_sql text;
    text_total float8 := 0;
    chosen_postings float8 := 0;
    candidates_sql text;
    hits_sql text;
    budget integer;
    found_any boolean := false;
    i integer;
BEGIN
    -- The request.
    PERFORM toolkit._check_k(request.k);
    IF retrieval IS DISTINCT FROM 'passages' AND retrieval IS DISTINCT FROM 'hybrid'
        AND retrieval IS DISTINCT FROM 'vector' THEN
        RAISE EXCEPTION 'the retrieval % is not passages, hybrid or vector', quote_nullable(request.retrieval)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Leave it NULL for passages, the served retrieval.';
    END IF;
    IF request.expand IS NOT NULL THEN
        IF request.expand = 'parent' THEN
            mode := 'parent';
        ELSIF request.expand ~ '^window:[0-9]{1,2}$' THEN
            mode := 'window';
            plan.window_size := split_part(request.expand, ':', 2)::integer;
        ELSE
            RAISE EXCEPTION 'expand must be parent or window:N (N up to 99), not %', quote_nullable(request.expand)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF retrieval = 'passages' THEN
            RAISE EXCEPTION 'expand returns the parents or windows of chunk hits, not passages'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Ask for the vector or hybrid retrieval with it.';
        END IF;
        IF request.min_score IS NOT NULL OR coalesce(request.diversity, 0) <> 0 THEN
            RAISE EXCEPTION 'min_score and diversity choose among hits; expand returns their parents or windows'
                USING ERRCODE = 'invalid_parameter_value', HINT = 'Use one or the other.';
        END IF;
    END IF;
    IF request.max_tokens IS NOT NULL AND (retrieval <> 'passages' OR request.max_tokens < 1) THEN
        RAISE EXCEPTION 'max_tokens is the passages'' token budget, 1 or more, not % for the % retrieval',
            request.max_tokens, retrieval
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF request.min_score IS NOT NULL OR request.diversity IS DISTINCT FROM 0 THEN  -- the defaults need no check
        PERFORM toolkit._check_search_options(request.min_score, request.diversity, has_embedding);
    END IF;
    IF retrieval = 'vector' AND NOT has_embedding THEN
        RAISE EXCEPTION 'the vector retrieval needs the query embedding' USING ERRCODE = 'invalid_parameter_value';
    ELSIF NOT has_embedding AND NOT has_text THEN
        RAISE EXCEPTION 'a search needs a query text, a query embedding or both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF request.ef_search IS NOT NULL THEN
        IF request.ef_search NOT BETWEEN 1 AND 1000 THEN
            RAISE EXCEPTION 'ef_search must be from 1 to 1000, not %', request.ef_search
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM set_config('hnsw.ef_search', request.ef_search::text, true);
    END IF;

    -- Resolved once: the version, its table and distance, the filters, the settings.
    plan.tenant := toolkit._search_tenant();
    SELECT * INTO target FROM toolkit._search_target(request.query_embedding, request.model, request.version);
    f := toolkit._search_filter_values(request.filters);
    plan.query_embedding := request.query_embedding;
    plan.query_text := CASE WHEN retrieval <> 'vector' THEN request.query_text END;
    plan.k := request.k;
    plan.version := target.version;
    plan.model_alias := target.model_alias;
    plan.min_score := request.min_score;
    plan.diversity := coalesce(request.diversity, 0);
    plan.doc_ids := f.doc_ids;
    plan.doc_id_prefixes := f.doc_id_prefixes;
    plan.heading_prefix := f.heading_prefix;
    plan.updated_after := f.updated_after;
    plan.updated_before := f.updated_before;
    plan.labels := f.labels;
    IF retrieval <> 'vector' THEN  -- the full-text and fusion settings
        SELECT * INTO settings FROM toolkit.retrieval_settings();
        plan.rrf_k := coalesce(request.rrf_k, settings.rrf_k);
        IF plan.rrf_k < 0 THEN
            RAISE EXCEPTION 'rrf_k must be 0 or more, not %', plan.rrf_k USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    -- How many hits the last stage takes: k (vector, hybrid), hits_per_passage x k (passages), 4 x k (contexts: hits
    -- sharing a parent or a window collapse into one); fused: MMR chooses them among _mmr_candidates of them; pool:
    -- each list (vector, text) offers at least settings.candidates for the fusion.
    plan.hits := request.k;
    IF retrieval = 'passages' THEN
        plan.hits := least(request.k * settings.hits_per_passage, toolkit.search_max_k());
    ELSIF mode IS NOT NULL THEN
        plan.hits := least(request.k * 4, toolkit.search_max_k());
    END IF;
    plan.fused := CASE WHEN plan.diversity > 0 THEN toolkit._mmr_candidates(plan.hits) ELSE plan.hits END;
    plan.pool := plan.fused;
    IF retrieval <> 'vector' THEN
        plan.pool := greatest(coalesce(request.candidates, settings.candidates), plan.fused);
    END IF;
    -- The distance as the version's HNSW index is defined (so the index answers), over the plan's query vector.
    distance_sql := replace(target.distance_sql, '$1::', '($1).query_embedding::');
    query_sql := substring(distance_sql FROM '(\(\$1\)\.query_embedding::.*)$');
    IF has_embedding THEN
        cosine_sql := toolkit._search_cosine_sql(distance_sql, 'c.embedding', query_sql);
    END IF;

    BEGIN
        -- Full text: the tenant's statistics (N, total tokens and each lexeme's df: sums of term_stats_vN's rows the
        -- caller may read), read once; the budget's mean chunk tokens come from the same row ('').
        IF retrieval <> 'vector' THEN
            plan.lexemes := CASE WHEN has_text
                THEN toolkit.query_lexemes(target.text_search_config, request.query_text) ELSE '{}' END;
            EXECUTE format(
                'SELECT coalesce(sum(s.df) FILTER (WHERE s.lexeme = %1$L), 0),'
                ' coalesce(sum(s.tokens) FILTER (WHERE s.lexeme = %1$L), 0),'
                ' coalesce(array_agg(s.lexeme ORDER BY s.df, s.lexeme COLLATE "C")'
                '  FILTER (WHERE s.lexeme <> %1$L AND s.df > 0), %2$L),'
                ' coalesce(array_agg(s.df ORDER BY s.df, s.lexeme COLLATE "C")'
                '  FILTER (WHERE s.lexeme <> %1$L AND s.df > 0), %2$L)'
                ' FROM %3$s($1, $2) AS s', '', '{}', toolkit._read_term_stats_function())
            INTO plan.text_n, text_total, plan.known, plan.known_df
            USING target.version, plan.lexemes || ''::text;
            -- The mean length (1 when there is none, as in Python), computed here: a plan folds constants, and
            -- 0 / 0 would fail even when no row is scored.
            plan.mean_tokens := CASE WHEN plan.text_n > 0 AND text_total > 0 THEN text_total / plan.text_n ELSE 1 END;
            plan.k1 := settings.k1;
            plan.b := settings.b;
            plan.postings_limit := settings.postings_limit;
            -- Rarest first, while the postings read stay within the limit; else the rarest lexeme's first chunks.
            plan.chosen := '{}';
            FOR i IN 1 .. coalesce(cardinality(plan.known), 0) LOOP
                EXIT WHEN chosen_postings + plan.known_df[i] > settings.postings_limit;
                plan.chosen := plan.chosen || plan.known[i];
                chosen_postings := chosen_postings + plan.known_df[i];
            END LOOP;
            IF cardinality(plan.chosen) > 0 THEN
                candidates_sql := format('SELECT DISTINCT t.chunk_id FROM %s(($1).version, ($1).chosen) AS t',
                    toolkit._read_postings_function());
            ELSIF cardinality(plan.known) > 0 THEN
                plan.rarest := plan.known[1];
                candidates_sql := format(
                    'SELECT t.chunk_id FROM %s(($1).version, ARRAY[($1).rarest], NULL, ($1).postings_limit) AS t',
                    toolkit._read_postings_function());
            END IF;
            IF retrieval = 'passages' THEN
                budget := coalesce(request.max_tokens,
                    ceil(request.k * settings.passage_chunks * CASE WHEN plan.text_n > 0 THEN text_total / plan.text_n
                        ELSE 0 END)::integer);
            END IF;
        END IF;

        -- The hits.
        hits_sql := toolkit._search_stage_rows(
            toolkit._search_stage_fusion(retrieval,
                toolkit._search_stage_vector_hits(target.chunk_table, distance_sql, has_embedding),
                toolkit._search_stage_text_hits(target.chunk_table,
                    num_nonnulls(f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after, f.updated_before,
                        f.labels) > 0, candidates_sql),
                target.distance),
            target.chunk_table, cosine_sql, plan.diversity > 0);
        IF plan.diversity > 0 THEN
            hits_sql := toolkit._search_stage_mmr(hits_sql,
                toolkit._search_cosine_sql(distance_sql, 'a.embedding', 'b.embedding'));
        ELSE
            hits_sql := format('SELECT * FROM (%s) AS r WHERE r.rank <= ($1).hits', hits_sql);
        END IF;

        IF mode IS NOT NULL THEN
            RETURN QUERY EXECUTE toolkit._search_stage_contexts(hits_sql, target.chunk_table, mode) USING plan;
        ELSIF retrieval = 'passages' THEN
            RETURN QUERY SELECT * FROM toolkit._search_stage_passages(plan, hits_sql, budget);
        ELSE
            RETURN QUERY EXECUTE toolkit._search_stage_chunks(hits_sql) USING plan;
        END IF;
        found_any := FOUND;
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;
    IF NOT found_any AND f.heading_prefix IS NOT NULL THEN
        PERFORM toolkit._heading_filter_unmatchable(target.version, target.chunk_table, plan.tenant);
    END IF;
END
$$;

-- The earlier entry points, each a thin wrapper over toolkit.search with its own arguments and result columns (the
-- contract of docs/sql.md): new applications call toolkit.search(toolkit.search_request(...)).

-- Vector top-k (toolkit.search, retrieval vector).
CREATE OR REPLACE FUNCTION toolkit.search_chunks(
    query_embedding vector,
    k integer DEFAULT 10,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    query_version integer DEFAULT NULL,
    min_score double precision DEFAULT NULL,
    diversity double precision DEFAULT 0
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
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT h.rank, h.score, h.distance, h.chunk_id, h.doc_id, h.parent_id, h."position", h.start_offset, h.end_offset,
        h.heading_path, h.text, h.version, h.model_alias, h.pages
    FROM toolkit.search(toolkit.search_request(
        query_embedding => $1, k => $2, retrieval => 'vector', filters => $3, model => $4, version => $5,
        min_score => $6, diversity => $7
    )) AS h
$$;

-- Hybrid top-k (toolkit.search, retrieval hybrid).
CREATE OR REPLACE FUNCTION toolkit.hybrid_search_chunks(
    query_text text,
    query_embedding vector,
    k integer DEFAULT 10,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    candidates integer DEFAULT NULL,
    rrf_k integer DEFAULT NULL,
    query_version integer DEFAULT NULL,
    min_score double precision DEFAULT NULL,
    diversity double precision DEFAULT 0
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
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT h.rank, h.score, h.vector_rank, h.text_rank, h.distance, h.chunk_id, h.doc_id, h.parent_id, h."position",
        h.start_offset, h.end_offset, h.heading_path, h.text, h.version, h.model_alias, h.pages
    FROM toolkit.search(toolkit.search_request(
        query_text => $1, query_embedding => $2, k => $3, retrieval => 'hybrid', filters => $4, model => $5,
        candidates => $6, rrf_k => $7, version => $8, min_score => $9, diversity => $10
    )) AS h
$$;

-- Small-to-big (toolkit.search with expand): hybrid hits when query_text is given, else vector hits.
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
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT h.rank, h.score, h.doc_id, h.start_offset, h.end_offset, h.heading_path, h.text, h.kind, h.chunk_ids,
        h.version, h.model_alias, h.pages
    FROM toolkit.search(toolkit.search_request(
        query_text => $4, query_embedding => $1, k => $2,
        retrieval => CASE WHEN $4 IS NULL THEN 'vector' ELSE 'hybrid' END, expand => coalesce($3, ''), filters => $5,
        model => $6, version => $7
    )) AS h
$$;

-- The served retrieval (toolkit.search, retrieval passages).
CREATE OR REPLACE FUNCTION toolkit.search_passages(
    query_text text,
    query_embedding vector,
    k integer DEFAULT 5,
    filters jsonb DEFAULT '{}',
    query_model text DEFAULT NULL,
    query_version integer DEFAULT NULL,
    max_tokens integer DEFAULT NULL,
    min_score double precision DEFAULT NULL,
    diversity double precision DEFAULT 0
)
RETURNS TABLE (
    rank integer,
    score double precision,
    doc_id text,
    start_offset integer,
    end_offset integer,
    heading_path text[],
    text text,
    tokens integer,
    chunk_ids text[],
    hit_ranks integer[],
    version integer,
    model_alias text,
    pages integer[]
)
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT h.rank, h.score, h.doc_id, h.start_offset, h.end_offset, h.heading_path, h.text, h.tokens, h.chunk_ids,
        h.hit_ranks, h.version, h.model_alias, h.pages
    FROM toolkit.search(toolkit.search_request(
        query_text => $1, query_embedding => $2, k => $3, retrieval => 'passages', filters => $4, model => $5,
        version => $6, max_tokens => $7, min_score => $8, diversity => $9
    )) AS h
$$;

SELECT set_config('search_path', current_setting('toolkit.saved_search_path'), TRUE) AS search_path;
