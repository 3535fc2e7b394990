-- Search, continued: hybrid (full text + vector, fused by reciprocal rank) and small-to-big contexts, pinned like
-- search_chunks (005-search.sql, whose helpers they share) and SECURITY INVOKER like it. After 011-lexical.sql,
-- whose BM25 settings and lexeme functions hybrid ranking uses.
SET LOCAL ROLE toolkit_owner;

-- Signatures name pgvector's type unqualified, as in 005-search.sql: resolved in the extension's schema for this
-- file only (restored at the end).
SELECT
    set_config('toolkit.saved_search_path', current_setting('search_path'), TRUE) AS saved,
    set_config('search_path', toolkit._vector_schema() || ', pg_catalog', TRUE) AS search_path;

-- Hybrid top-k: full-text and vector candidates fused by reciprocal rank fusion (1 / (rrf_k + rank)), pinned like
-- search_chunks. Full text ranks by BM25 (toolkit.retrieval_settings: k1, b) the candidates found through the
-- version's postings (terms_vN, 011-lexical.sql) within postings_limit: the question's lexemes rarest first (document
-- frequency, then byte order) while their postings together stay within the limit, all chunks holding one of them;
-- when even the rarest has more, its first postings_limit chunks by chunk id. A candidate's score sums over all the
-- question's lexemes. N, the mean length and df are the tenant's (term_stats_vN, over the rows the caller may read;
-- not narrowed by the filters, which narrow the candidates). toolkit.evaluation.retrieval (the offline evaluation)
-- computes the same ranking with the same arithmetic. min_score (a cosine similarity of the query embedding to the
-- chunk's, NULL: none) drops the fused hits below it from the k (it never brings in others); diversity (MMR lambda,
-- 0: off) takes the k from the _mmr_candidates(k) best fused hits in MMR order, relevance being the same cosine
-- similarity (rank: that order; score: each hit's fused score).
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
    candidates_sql text;
    pool integer;
    fusion integer;
    text_n float8 := 0;
    text_total float8 := 0;
    known text[] := '{}';
    known_df float8[] := '{}';
    chosen text[] := '{}';
    chosen_postings float8 := 0;
    rarest text;
    i integer;
    fetch_count integer := k;
    ranked_sql text;
BEGIN
    PERFORM toolkit._check_k(k);
    IF min_score IS NOT NULL OR diversity IS DISTINCT FROM 0 THEN  -- the defaults need no check
        PERFORM toolkit._check_search_options(min_score, diversity, query_embedding IS NOT NULL);
    END IF;
    SELECT * INTO settings FROM toolkit.retrieval_settings();
    fusion := coalesce(rrf_k, settings.rrf_k);
    IF fusion < 0 THEN
        RAISE EXCEPTION 'rrf_k must be 0 or more, not %', fusion USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF query_embedding IS NULL AND coalesce(query_text, '') = '' THEN
        RAISE EXCEPTION 'a hybrid search needs a query text, a query embedding or both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    pool := greatest(coalesce(candidates, settings.candidates), k);
    IF diversity > 0 THEN
        -- MMR chooses among more fused hits than k, and each list must offer them.
        fetch_count := toolkit._mmr_candidates(k);
        pool := greatest(pool, fetch_count);
    END IF;
    SELECT * INTO target
    FROM toolkit._search_target(query_embedding, hybrid_search_chunks.query_model, query_version);
    f := toolkit._search_filter_values(filters);
    lexemes := toolkit.query_lexemes(target.text_search_config, query_text);

    -- Full text: the tenant's statistics (N, total tokens and each lexeme's df: sums of term_stats_vN's rows the
    -- caller may read, found through its (tenant, lexeme) index), then the candidates' postings. Both are read
    -- through the definer functions that apply the tables' policies (no role below the owner may query them).
    IF cardinality(lexemes) > 0 THEN
        BEGIN
            EXECUTE format(
                'SELECT coalesce(sum(s.df) FILTER (WHERE s.lexeme = %1$L), 0),'
                ' coalesce(sum(s.tokens) FILTER (WHERE s.lexeme = %1$L), 0),'
                ' coalesce(array_agg(s.lexeme ORDER BY s.df, s.lexeme COLLATE "C")'
                '  FILTER (WHERE s.lexeme <> %1$L AND s.df > 0), %2$L),'
                ' coalesce(array_agg(s.df ORDER BY s.df, s.lexeme COLLATE "C")'
                '  FILTER (WHERE s.lexeme <> %1$L AND s.df > 0), %2$L)'
                ' FROM %3$s($1, $2) AS s', '', '{}', toolkit._read_term_stats_function())
            INTO text_n, text_total, known, known_df
            USING target.version, lexemes || ''::text;
        EXCEPTION WHEN undefined_table THEN
            PERFORM toolkit._version_gone(target.version);
        END;
    END IF;
    -- Rarest first, while the postings read stay within the limit; else the rarest lexeme's first chunks.
    FOR i IN 1 .. cardinality(known) LOOP
        EXIT WHEN chosen_postings + known_df[i] > settings.postings_limit;
        chosen := chosen || known[i];
        chosen_postings := chosen_postings + known_df[i];
    END LOOP;
    IF cardinality(chosen) > 0 THEN
        candidates_sql := format('SELECT DISTINCT t.chunk_id FROM %s($4, $18) AS t', toolkit._read_postings_function());
    ELSIF cardinality(known) > 0 THEN
        rarest := known[1];
        candidates_sql := format('SELECT t.chunk_id FROM %s($4, ARRAY[$19], NULL, $20) AS t',
            toolkit._read_postings_function());
    ELSE
        candidates_sql := 'SELECT NULL::text AS chunk_id WHERE false';
    END IF;

    IF query_embedding IS NULL THEN
        vector_sql := 'SELECT NULL::text AS chunk_id, NULL::bigint AS r, NULL::float8 AS distance WHERE false';
    ELSE
        vector_sql := format(
            'SELECT h.chunk_id, row_number() OVER (ORDER BY h.distance, h.chunk_id) AS r, h.distance'
            ' FROM (SELECT c.chunk_id, %1$s AS distance FROM %2$s AS c'
            '  WHERE c.tenant = $3 AND NOT c.is_parent AND %3$s'
            '  ORDER BY %1$s, c.chunk_id LIMIT $14) AS h',
            target.distance_sql, target.chunk_table, toolkit._search_filter_condition());
    END IF;

    -- BM25 of each candidate (narrowed by the filters on its chunk row) over all the question's lexemes: tf and dl
    -- (token_count) from the postings' index alone, one scan for every (lexeme, candidate) key. Sums run over the
    -- lexemes in byte order, as Python sums them.
    ranked_sql := format(
            'WITH vector_hits AS MATERIALIZED (%1$s),'
            ' text_candidates AS MATERIALIZED (%4$s),'
            ' text_rows AS MATERIALIZED (%6$s),'
            ' text_matches AS MATERIALIZED (SELECT t.chunk_id, t.token_count, t.lexeme, t.tf'
            '  FROM %5$s($4, $23, ARRAY(SELECT r.chunk_id FROM text_rows AS r)) AS t),'
            ' text_terms AS (SELECT u.lexeme, ln(1 + ($21 - u.df + 0.5) / (u.df + 0.5)) AS idf'
            '  FROM unnest($23::text[], $24::float8[]) AS u (lexeme, df)),'
            ' text_hits AS MATERIALIZED (SELECT t.chunk_id, row_number() OVER (ORDER BY t.weight DESC, t.chunk_id) AS r'
            '  FROM (SELECT m.chunk_id, sum(w.idf * (m.tf * ($16 + 1)) / (m.tf + $16 * (1 - $17 + $17 * m.token_count'
            '    / $22)) ORDER BY m.lexeme COLLATE "C") AS weight'
            '   FROM text_matches AS m INNER JOIN text_terms AS w ON w.lexeme = m.lexeme'
            '   GROUP BY m.chunk_id ORDER BY 2 DESC, 1 LIMIT $14) AS t),'
            ' fused AS (SELECT coalesce(v.chunk_id, t.chunk_id) AS chunk_id, v.r AS vector_rank, t.r AS text_rank,'
            '   v.distance, coalesce(1.0::float8 / ($13 + v.r), 0) + coalesce(1.0::float8 / ($13 + t.r), 0) AS score'
            '  FROM vector_hits AS v FULL JOIN text_hits AS t ON v.chunk_id = t.chunk_id'
            '  ORDER BY 5 DESC, least(v.r, t.r), 1 LIMIT $25)'
            ' SELECT (row_number() OVER (ORDER BY x.score DESC, least(x.vector_rank, x.text_rank), x.chunk_id))::integer,'
            '  x.score, x.vector_rank::integer, x.text_rank::integer, x.distance, c.chunk_id, c.doc_id, c.parent_id,'
            '  c.position, c.start_offset, c.end_offset, c.heading_path, c.text, $4, $15, c.pages%8$s'
            ' FROM fused AS x INNER JOIN %3$s AS c ON c.tenant = $3 AND c.chunk_id = x.chunk_id'
            ' WHERE ($26::float8 IS NULL OR %7$s >= $26)'
            ' ORDER BY 1',
            vector_sql, NULL, target.chunk_table, candidates_sql, toolkit._read_postings_function(),
            -- Unfiltered, the candidates stand; filtered, each is checked on its chunk row.
            CASE WHEN num_nonnulls(f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after,
                    f.updated_before, f.labels) = 0 THEN 'SELECT k.chunk_id FROM text_candidates AS k'
                ELSE format('SELECT c.chunk_id FROM text_candidates AS k INNER JOIN %s AS c'
                    ' ON c.tenant = $3 AND c.chunk_id = k.chunk_id WHERE NOT c.is_parent AND %s', target.chunk_table,
                    toolkit._search_filter_condition()) END,
            -- The cosine similarity to the query (min_score, MMR's relevance), computed only when an option asks.
            CASE WHEN min_score IS NULL AND diversity = 0 THEN 'NULL::float8'
                ELSE toolkit._search_cosine_sql(target.distance_sql, 'c.embedding') END,
            CASE WHEN diversity > 0 THEN ', ' || toolkit._search_cosine_sql(target.distance_sql, 'c.embedding')
                || ', c.embedding' ELSE '' END);
    IF diversity > 0 THEN
        ranked_sql := format(
            'WITH r (rank, score, vector_rank, text_rank, distance, chunk_id, doc_id, parent_id, "position",'
            '  start_offset, end_offset, heading_path, text, version, model_alias, pages, similarity, embedding)'
            '  AS MATERIALIZED (%1$s),'
            ' picked AS (SELECT o.i, o.n FROM unnest(toolkit._mmr_order('
            '  ARRAY(SELECT x.similarity FROM r AS x ORDER BY x.rank),'
            '  ARRAY(SELECT %2$s FROM r AS a CROSS JOIN r AS b ORDER BY a.rank, b.rank),'
            '  $2, $27)) WITH ORDINALITY AS o (i, n))'
            ' SELECT o.n::integer, r.score, r.vector_rank, r.text_rank, r.distance, r.chunk_id, r.doc_id, r.parent_id,'
            '  r."position", r.start_offset, r.end_offset, r.heading_path, r.text, r.version, r.model_alias, r.pages'
            ' FROM picked AS o INNER JOIN r ON r.rank = o.i'
            ' ORDER BY o.n',
            ranked_sql, toolkit._search_cosine_sql(target.distance_sql, 'a.embedding', 'b.embedding'));
    END IF;

    BEGIN
        RETURN QUERY EXECUTE ranked_sql
        USING query_embedding, k, tenant, target.version,
            f.doc_ids, f.doc_id_prefixes, f.heading_prefix, f.updated_after, f.updated_before, f.labels,
            lexemes, NULL::tsquery, fusion::float8, pool, target.model_alias, settings.k1, settings.b,
            chosen, rarest, settings.postings_limit, text_n,
            -- The mean length (1 when there is none, as in Python), computed here: a plan folds constants, and
            -- 0 / 0 would fail even when no row is scored.
            CASE WHEN text_n > 0 AND text_total > 0 THEN text_total / text_n ELSE 1 END, known, known_df,
            fetch_count, min_score, diversity;
        IF NOT FOUND AND f.heading_prefix IS NOT NULL THEN
            PERFORM toolkit._heading_filter_unmatchable(target.version, target.chunk_table, tenant);
        END IF;
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
            ' FROM hits AS h LEFT JOIN %s AS p'
            '  ON p.tenant = $3 AND p.chunk_id = h.parent_id AND p.doc_id = h.doc_id AND p.is_parent',
            target.chunk_table);
    ELSE
        pieces_sql := format(
            'SELECT h.rank AS hit_rank, h.doc_id, w.chunk_id AS piece_id, w.start_offset AS s,'
            ' w.end_offset AS e, w.text AS body, ''window'' AS kind, w.pages'
            ' FROM hits AS h INNER JOIN %s AS w'
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

-- Whether two spans of a document touch: they overlap, or only whitespace lies between them in the document's text.
-- The document is read under the caller's row-level security; one that cannot be read touches nothing.
CREATE OR REPLACE FUNCTION toolkit._spans_touch(
    tenant text, doc_id text, start_a integer, end_a integer, start_b integer, end_b integer
)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gap_start integer;
    gap_end integer;
    blank boolean;
BEGIN
    IF (start_a, end_a) <= (start_b, end_b) THEN
        gap_start := end_a;
        gap_end := start_b;
    ELSE
        gap_start := end_b;
        gap_end := start_a;
    END IF;
    IF gap_end <= gap_start THEN
        RETURN true;
    END IF;
    -- ASCII whitespace only (space, tab, line feed, carriage return, form feed, vertical tab), as Python's
    -- toolkit.evaluation.retrieval.touches checks it.
    SELECT substr(d.raw_text, gap_start + 1, gap_end - gap_start) ~ E'^[ \\t\\n\\r\\f\\v]*$' INTO blank
    FROM toolkit.documents AS d
    WHERE d.tenant = _spans_touch.tenant AND d.doc_id = _spans_touch.doc_id;
    RETURN coalesce(blank, false);
END
$$;

-- The tokens of a passage made of several chunks: its length in characters at the members' own tokens per
-- character (sum of their token counts over the sum of their lengths), rounded up. One chunk: its token count.
CREATE OR REPLACE FUNCTION toolkit._passage_tokens(
    span_chars integer, member_tokens bigint, member_chars bigint
)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN member_chars <= 0 THEN member_tokens::integer
        ELSE ((span_chars::bigint * member_tokens + member_chars - 1) / member_chars)::integer END;
$$;

-- The served retrieval. Hybrid hits of one version (hybrid_search_chunks: hits_per_passage x k of them, pinned,
-- filtered, under row-level security) assembled into at most k passages within a token budget: a hit that overlaps
-- or touches (only whitespace between) passages of its document joins them, so no text is handed over twice; a hit
-- that would take the total past the budget is skipped and the next one tried; once k passages are open, later hits
-- only extend them. The budget is max_tokens, or k x passage_chunks x the tenant's mean chunk tokens
-- (retrieval_settings). A passage's text is cut from its document's raw text (its chunks' own text when the
-- document cannot be read); it keeps its best hit's score and heading path, its chunks and their hit ranks, and
-- the union of their pages. toolkit.evaluation.retrieval.assemble does the same offline (tests/test_retrieval_sql.py).
-- min_score and diversity go to the hits (hybrid_search_chunks): a passage is made of hits whose cosine similarity
-- to the query is at least min_score, and with diversity > 0 the hits are taken in MMR order.
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
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    search_tenant text := toolkit._search_tenant();
    settings record;
    target record;
    budget integer;
    total integer := 0;
    hit record;
    -- Open passages, best first: {doc, s, e, tokens, member_tokens, member_chars, best, members: [hits]}.
    open_passages jsonb := '[]';
    p jsonb;
    i integer;
    joined integer[];
    merged jsonb;
    new_tokens integer;
    new_total integer;
    member jsonb;
    body text;
    covered integer;
BEGIN
    PERFORM toolkit._check_k(k);
    IF min_score IS NOT NULL OR diversity IS DISTINCT FROM 0 THEN  -- the defaults need no check
        PERFORM toolkit._check_search_options(min_score, diversity, query_embedding IS NOT NULL);
    END IF;
    IF max_tokens IS NOT NULL AND max_tokens < 1 THEN
        RAISE EXCEPTION 'max_tokens must be 1 or more, not %', max_tokens USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO settings FROM toolkit.retrieval_settings();
    SELECT * INTO target FROM toolkit._search_target(query_embedding, search_passages.query_model, query_version);
    budget := max_tokens;
    IF budget IS NULL THEN
        BEGIN
            -- The mean chunk tokens from the version's full-text statistics (the rows the caller may read).
            EXECUTE format(
                'SELECT ceil($2 * $3 * coalesce(sum(s.tokens) / nullif(sum(s.df), 0), 0))::integer'
                ' FROM %s($1, ARRAY[%L]) AS s', toolkit._read_term_stats_function(), '')
            INTO budget USING target.version, k, settings.passage_chunks;
        EXCEPTION WHEN undefined_table THEN
            PERFORM toolkit._version_gone(target.version);
        END;
    END IF;

    BEGIN
        FOR hit IN EXECUTE format(
            'SELECT h.rank, h.score, h.chunk_id, h.doc_id, h.start_offset AS s, h.end_offset AS e, h.heading_path,'
            ' h.text, h.pages, c.token_count'
            ' FROM toolkit.hybrid_search_chunks($1, $2, $3, $4, query_version => $5, min_score => $7,'
            '  diversity => $8) AS h'
            ' INNER JOIN %s AS c ON c.tenant = $6 AND c.chunk_id = h.chunk_id'
            ' ORDER BY h.rank', target.chunk_table)
            USING query_text, query_embedding, least(k * settings.hits_per_passage, toolkit.search_max_k()), filters,
                target.version, search_tenant, min_score, diversity
        LOOP
            joined := '{}';
            FOR i IN 0 .. jsonb_array_length(open_passages) - 1 LOOP
                p := open_passages -> i;
                IF p ->> 'doc' = hit.doc_id AND toolkit._spans_touch(search_tenant, hit.doc_id, (p ->> 's')::integer,
                    (p ->> 'e')::integer, hit.s, hit.e)
                THEN
                    joined := joined || i;
                END IF;
            END LOOP;
            member := jsonb_build_object('id', hit.chunk_id, 'rank', hit.rank, 's', hit.s, 'e', hit.e,
                'text', hit.text, 'pages', to_jsonb(coalesce(hit.pages, '{}')), 'score', hit.score,
                'heading', to_jsonb(coalesce(hit.heading_path, '{}')));
            IF cardinality(joined) > 0 THEN
                merged := jsonb_build_object('doc', hit.doc_id, 's', hit.s, 'e', hit.e,
                    'member_tokens', hit.token_count, 'member_chars', hit.e - hit.s, 'best', hit.rank,
                    'members', '[]'::jsonb);
                new_total := total;
                FOREACH i IN ARRAY joined LOOP
                    p := open_passages -> i;
                    merged := merged || jsonb_build_object(
                        's', least((merged ->> 's')::integer, (p ->> 's')::integer),
                        'e', greatest((merged ->> 'e')::integer, (p ->> 'e')::integer),
                        'member_tokens', (merged ->> 'member_tokens')::bigint + (p ->> 'member_tokens')::bigint,
                        'member_chars', (merged ->> 'member_chars')::bigint + (p ->> 'member_chars')::bigint,
                        'best', least((merged ->> 'best')::integer, (p ->> 'best')::integer),
                        'members', (merged -> 'members') || (p -> 'members'));
                    new_total := new_total - (p ->> 'tokens')::integer;
                END LOOP;
                new_tokens := toolkit._passage_tokens((merged ->> 'e')::integer - (merged ->> 's')::integer,
                    (merged ->> 'member_tokens')::bigint, (merged ->> 'member_chars')::bigint);
                new_total := new_total + new_tokens;
                IF new_total > budget THEN
                    CONTINUE;
                END IF;
                merged := jsonb_set(merged, '{members}', (merged -> 'members') || jsonb_build_array(member))
                    || jsonb_build_object('tokens', new_tokens);
                SELECT coalesce(jsonb_agg(x.value ORDER BY (x.value ->> 'best')::integer), '[]') INTO open_passages
                FROM (
                    SELECT o.value FROM jsonb_array_elements(open_passages) WITH ORDINALITY AS o (value, n)
                    WHERE (o.n - 1)::integer <> ALL (joined)
                    UNION ALL
                    SELECT merged
                ) AS x;
                total := new_total;
                CONTINUE;
            END IF;
            IF jsonb_array_length(open_passages) >= k OR total + hit.token_count > budget THEN
                CONTINUE;
            END IF;
            open_passages := open_passages || jsonb_build_array(jsonb_build_object('doc', hit.doc_id, 's', hit.s,
                'e', hit.e, 'tokens', hit.token_count, 'member_tokens', hit.token_count, 'member_chars', hit.e - hit.s,
                'best', hit.rank, 'members', jsonb_build_array(member)));
            total := total + hit.token_count;
        END LOOP;
    EXCEPTION WHEN undefined_table THEN
        PERFORM toolkit._version_gone(target.version);
    END;

    FOR i IN 0 .. jsonb_array_length(open_passages) - 1 LOOP
        p := open_passages -> i;
        SELECT substr(d.raw_text, (p ->> 's')::integer + 1, (p ->> 'e')::integer - (p ->> 's')::integer) INTO body
        FROM toolkit.documents AS d
        WHERE d.tenant = search_tenant AND d.doc_id = p ->> 'doc';
        IF body IS NULL THEN
            -- The document cannot be read: its chunks in order, each adding only what lies past the text so far.
            body := '';
            covered := NULL;
            FOR member IN
                SELECT m.value FROM jsonb_array_elements(p -> 'members') AS m
                ORDER BY (m.value ->> 's')::integer, (m.value ->> 'e')::integer, m.value ->> 'id'
            LOOP
                IF covered IS NULL OR (member ->> 's')::integer >= covered THEN
                    body := body || CASE WHEN covered IS NULL OR (member ->> 's')::integer = covered THEN ''
                        ELSE E'\n' END || (member ->> 'text');
                ELSIF (member ->> 'e')::integer > covered THEN
                    body := body || substr(member ->> 'text', covered - (member ->> 's')::integer + 1);
                END IF;
                covered := greatest(coalesce(covered, 0), (member ->> 'e')::integer);
            END LOOP;
        END IF;
        rank := i + 1;
        SELECT (m.value ->> 'score')::float8, ARRAY(SELECT jsonb_array_elements_text(m.value -> 'heading'))
        INTO score, heading_path
        FROM jsonb_array_elements(p -> 'members') AS m
        ORDER BY (m.value ->> 'rank')::integer
        LIMIT 1;
        doc_id := p ->> 'doc';
        start_offset := (p ->> 's')::integer;
        end_offset := (p ->> 'e')::integer;
        text := body;
        tokens := (p ->> 'tokens')::integer;
        SELECT array_agg(m.value ->> 'id' ORDER BY (m.value ->> 'rank')::integer),
            array_agg((m.value ->> 'rank')::integer ORDER BY (m.value ->> 'rank')::integer)
        INTO chunk_ids, hit_ranks
        FROM jsonb_array_elements(p -> 'members') AS m;
        SELECT array_agg(DISTINCT n.page::integer ORDER BY n.page::integer) INTO pages
        FROM jsonb_array_elements(p -> 'members') AS m
        CROSS JOIN LATERAL jsonb_array_elements_text(m.value -> 'pages') AS n (page);
        version := target.version;
        model_alias := target.model_alias;
        RETURN NEXT;
    END LOOP;
END
$$;

SELECT set_config('search_path', current_setting('toolkit.saved_search_path'), TRUE) AS search_path;
