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
-- therefore keeps its lexemes in a postings table, terms_vN (tenant, lexeme, chunk_id; with the lexeme's count tf,
-- the chunk's token_count and access labels included in the key's index, so searches read the index alone), whose
-- btree answers "which chunks hold this lexeme" with text equality, which is leakproof; and the statistics BM25 needs in
-- term_stats_vN: per tenant, label set and lexeme the chunks holding it (df), and under the lexeme '' the chunk count
-- (in df) and their tokens. Both carry the chunk table's row-level security. A version being built has neither:
-- they are built from its rows in bulk when it becomes ready, then triggers on the chunk table keep them.

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

-- Returns a version's full-text statistics for the given lexemes ('' for the chunk count and their tokens), summed
-- over the rows of the reader's tenant in the label sets it holds a principal of (every label set: every_label):
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
        'SELECT s.lexeme, sum(s.df)::float8, sum(s.tokens)::float8 FROM %s AS s'
        ' WHERE s.tenant = $1 AND s.lexeme = ANY ($2)'
        '  AND ($3 OR cardinality(s.access_labels) = 0 OR s.access_labels && $4)'
        ' GROUP BY s.lexeme HAVING sum(s.df) <> 0 OR sum(s.tokens) <> 0', toolkit._statistics_table(target))
    USING reader.tenant, lexemes, every_label, reader.principals;
END
$$;

-- Returns a version's postings (lexeme, chunk id, tf, the chunk's token_count) of the given lexemes in the reader's
-- tenant and the label sets it holds a principal of (every label set: every_label): of the given chunks only
-- (chunk_ids NULL: any); with max_rows, the first max_rows in the key's order (lexeme, then chunk id: an index range,
-- however many chunks hold the lexeme). Raises undefined_table when the tables are gone.
-- Run by the definer functions below only (owner's EXECUTE), which decide every_label by who may call them.
CREATE OR REPLACE FUNCTION toolkit._postings_rows(
    target integer, lexemes text[], chunk_ids text[], max_rows integer, every_label boolean
)
RETURNS TABLE (lexeme text, chunk_id text, tf integer, token_count integer)
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
        'SELECT t.lexeme, t.chunk_id, t.tf, t.token_count FROM %s AS t'
        ' WHERE t.tenant = $1 AND t.lexeme = ANY ($2)'
        '  AND ($3 OR cardinality(t.access_labels) = 0 OR t.access_labels && $4)%s%s',
        toolkit._postings_table(target),
        CASE WHEN chunk_ids IS NULL THEN '' ELSE ' AND t.chunk_id = ANY ($5)' END,
        CASE WHEN max_rows IS NULL THEN '' ELSE ' ORDER BY t.lexeme, t.chunk_id LIMIT $6' END)
    USING reader.tenant, lexemes, every_label, reader.principals, chunk_ids, max_rows;
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

-- Returns a version's postings of the given lexemes that the caller may read: its tenant's, in the label sets it
-- holds a principal of (see _postings_rows for chunk_ids and max_rows). Every role that searches may run it.
-- Definer: no role below the owner may read terms_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_postings(
    target integer, lexemes text[], chunk_ids text[] DEFAULT NULL, max_rows integer DEFAULT NULL
)
RETURNS TABLE (lexeme text, chunk_id text, tf integer, token_count integer)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.lexeme, p.chunk_id, p.tf, p.token_count
    FROM toolkit._postings_rows(target, lexemes, chunk_ids, max_rows, false) AS p;
$$;

-- Returns a version's postings of the given lexemes in the caller's tenant over every label set, as the policies show
-- them to a service role (see _read_term_stats_service); only the writer and the owner may run it.
-- Definer: no role below the owner may read terms_vN (see _grant_text_postings); this applies its policies.
CREATE OR REPLACE FUNCTION toolkit._read_postings_service(
    target integer, lexemes text[], chunk_ids text[] DEFAULT NULL, max_rows integer DEFAULT NULL
)
RETURNS TABLE (lexeme text, chunk_id text, tf integer, token_count integer)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.lexeme, p.chunk_id, p.tf, p.token_count
    FROM toolkit._postings_rows(target, lexemes, chunk_ids, max_rows, true) AS p;
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

-- Returns the function a search reads the full-text postings through, as the caller (see _read_term_stats_function).
CREATE OR REPLACE FUNCTION toolkit._read_postings_function()
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN toolkit._is_service_role() THEN 'toolkit._read_postings_service'
        ELSE 'toolkit._read_postings' END;
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

-- Folds the statistics' delta rows into one row per tenant, label set and lexeme: every key (keys NULL), or the keys
-- of the rows in the given tenants, label sets (as text) and lexemes. A key whose rows sum to nothing is left with
-- no row. Rows that other transactions are still adding are left for a later fold. Returns false, doing nothing, when
-- another transaction is folding (it holds the table's SHARE UPDATE EXCLUSIVE lock, which writers of deltas and
-- readers do not conflict with) or the transaction is not READ COMMITTED (a snapshot older than the lock could miss
-- another fold's work).
CREATE OR REPLACE FUNCTION toolkit._fold_term_stats(
    target integer, tenants text[] DEFAULT NULL, label_sets text[] DEFAULT NULL, lexemes text[] DEFAULT NULL
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', toolkit._statistics_table(target));
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    PERFORM toolkit._merge_term_stats(target, tenants, label_sets, lexemes);
    RETURN true;
END
$$;

-- The fold itself (see _fold_term_stats), for a caller that holds the statistics' SHARE UPDATE EXCLUSIVE lock: the
-- rows of each key it can see become one row with their sums, or none when they sum to nothing.
CREATE OR REPLACE FUNCTION toolkit._merge_term_stats(
    target integer, tenants text[], label_sets text[], lexemes text[]
)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    stats text := toolkit._statistics_table(target);
BEGIN
    IF tenants IS NULL THEN
        EXECUTE format(
            'WITH gone AS (DELETE FROM %1$s AS s RETURNING s.*)'
            ' INSERT INTO %1$s (tenant, access_labels, lexeme, df, tokens)'
            ' SELECT g.tenant, g.access_labels, g.lexeme, sum(g.df), sum(g.tokens) FROM gone AS g'
            ' GROUP BY 1, 2, 3 HAVING sum(g.df) <> 0 OR sum(g.tokens) <> 0', stats);
    ELSE
        EXECUTE format(
            'WITH keys AS (SELECT DISTINCT k.tenant, k.labels::text[] AS labels, k.lexeme'
            '  FROM unnest($1, $2, $3) AS k (tenant, labels, lexeme)),'
            ' gone AS (DELETE FROM %1$s AS s USING keys AS k'
            '  WHERE s.tenant = k.tenant AND s.lexeme = k.lexeme AND s.access_labels = k.labels RETURNING s.*)'
            ' INSERT INTO %1$s (tenant, access_labels, lexeme, df, tokens)'
            ' SELECT g.tenant, g.access_labels, g.lexeme, sum(g.df), sum(g.tokens) FROM gone AS g'
            ' GROUP BY 1, 2, 3 HAVING sum(g.df) <> 0 OR sum(g.tokens) <> 0', stats)
            USING tenants, label_sets, lexemes;
    END IF;
END
$$;

-- Nets out the statistics of chunks just deleted (toolkit.delete_documents): the keys of one tenant, label sets (as
-- text) and lexemes are folded now, in the caller's transaction, waiting for a fold in progress, so no key keeps
-- rows (a +1 and its -1) that exist only because of a deleted document. In REPEATABLE READ or SERIALIZABLE a fold
-- another transaction committed after this one's snapshot makes it fail with a serialization error (retry), never
-- fold wrongly.
CREATE OR REPLACE FUNCTION toolkit._net_term_stats(target integer, tenant text, label_sets text[], lexemes text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- (A version being built has no postings: nothing to net out.)
    IF cardinality(lexemes) > 0 AND to_regclass(toolkit._statistics_table(target)) IS NOT NULL THEN
        PERFORM toolkit._take_lock(toolkit._statistics_table(target)::regclass, 'SHARE UPDATE EXCLUSIVE',
            format('netting out the full-text statistics of version %s', target), '30s');
        PERFORM toolkit._merge_term_stats(
            target, array_fill(tenant, ARRAY[cardinality(lexemes)]), label_sets, lexemes);
    END IF;
END
$$;

-- Removes every postings and statistics row of a tenant from a version (toolkit.erase_tenant, after deleting the
-- tenant's chunks), in the caller's transaction, after a fold in progress: nothing of the tenant is left, not even
-- keys whose rows sum to nothing. Rows a writer of the tenant has not committed yet stay, with their chunks.
CREATE OR REPLACE FUNCTION toolkit._erase_text_postings(target integer, tenant text)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regclass(toolkit._statistics_table(target)) IS NULL THEN
        RETURN;  -- a version being built has no postings
    END IF;
    PERFORM toolkit._take_lock(toolkit._statistics_table(target)::regclass, 'SHARE UPDATE EXCLUSIVE',
        format('erasing a tenant from the full-text statistics of version %s', target), '30s');
    EXECUTE format('DELETE FROM %s AS s WHERE s.tenant = $1', toolkit._statistics_table(target)) USING tenant;
    EXECUTE format('DELETE FROM %s AS t WHERE t.tenant = $1', toolkit._postings_table(target)) USING tenant;
END
$$;

-- Keeps a version's postings and statistics (argument: the version) after a statement on its chunk table: the
-- lexemes of rows deleted, inserted or changed (tenant, chunk id, parent flag, labels, tsvector or token count) leave
-- or join the postings; the statistics get one delta row per key (appended, never updated, so concurrent writers of
-- the same lexeme do not wait for each other), folded now and then when no other transaction is folding. Postings
-- are written in key order (neighbouring keys share index pages).
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
    same text := 'n.tenant = o.tenant AND n.chunk_id = o.chunk_id AND n.is_parent = o.is_parent'
        ' AND n.access_labels = o.access_labels AND n.token_count = o.token_count AND n.fts = o.fts';
    removed text := 'SELECT NULL::text AS tenant, NULL::text AS chunk_id, NULL::text[] AS access_labels,'
        ' NULL::integer AS token_count, NULL::tsvector AS fts WHERE false';
    added text := removed;
    keys record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        removed := 'SELECT o.tenant, o.chunk_id, o.access_labels, o.token_count, o.fts FROM old_rows AS o'
            ' WHERE NOT o.is_parent';
    ELSIF TG_OP = 'INSERT' THEN
        added := 'SELECT n.tenant, n.chunk_id, n.access_labels, n.token_count, n.fts FROM new_rows AS n'
            ' WHERE NOT n.is_parent';
    ELSE
        removed := 'SELECT o.tenant, o.chunk_id, o.access_labels, o.token_count, o.fts FROM old_rows AS o'
            ' WHERE NOT o.is_parent AND NOT EXISTS (SELECT FROM new_rows AS n WHERE ' || same || ')';
        added := 'SELECT n.tenant, n.chunk_id, n.access_labels, n.token_count, n.fts FROM new_rows AS n'
            ' WHERE NOT n.is_parent AND NOT EXISTS (SELECT FROM old_rows AS o WHERE ' || same || ')';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format(
            'DELETE FROM %s AS t USING (SELECT r.tenant, l.lexeme, r.chunk_id'
            '  FROM (%s) AS r CROSS JOIN LATERAL unnest(r.fts) AS l) AS x'
            ' WHERE t.tenant = x.tenant AND t.lexeme = x.lexeme AND t.chunk_id = x.chunk_id', terms, removed);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        EXECUTE format(
            'INSERT INTO %s (tenant, lexeme, chunk_id, tf, token_count, access_labels)'
            ' SELECT r.tenant, l.lexeme, r.chunk_id, cardinality(l.positions), r.token_count, r.access_labels'
            ' FROM (%s) AS r CROSS JOIN LATERAL unnest(r.fts) AS l ORDER BY 1, 2, 3', terms, added);
    END IF;
    EXECUTE format(
        'WITH changes AS (SELECT -1 AS sign, r.tenant, r.access_labels, r.token_count, r.fts FROM (%2$s) AS r'
        '  UNION ALL SELECT 1, r.tenant, r.access_labels, r.token_count, r.fts FROM (%3$s) AS r),'
        ' deltas AS (SELECT c.tenant, c.access_labels, l.lexeme, sum(c.sign) AS df, 0::bigint AS tokens'
        '  FROM changes AS c CROSS JOIN LATERAL unnest(c.fts) AS l GROUP BY 1, 2, 3'
        '  UNION ALL SELECT c.tenant, c.access_labels, '''', sum(c.sign), sum(c.sign * c.token_count)'
        '  FROM changes AS c GROUP BY 1, 2),'
        ' written AS (INSERT INTO %1$s (tenant, access_labels, lexeme, df, tokens)'
        '  SELECT d.tenant, d.access_labels, d.lexeme, d.df, d.tokens FROM deltas AS d'
        '  WHERE d.df <> 0 OR d.tokens <> 0 RETURNING tenant, access_labels, lexeme)'
        ' SELECT array_agg(w.tenant) AS tenants, array_agg(w.access_labels::text) AS label_sets,'
        '  array_agg(w.lexeme) AS lexemes FROM written AS w', stats, removed, added)
    INTO keys;
    -- One write transaction in eight folds the keys it touched (a fold costs about what the deltas did): a key's
    -- rows stay few between folds, and mark_version_ready folds them all.
    IF keys.tenants IS NOT NULL AND txid_current() % 8 = 0 THEN
        PERFORM toolkit._fold_term_stats(target, keys.tenants, keys.label_sets, keys.lexemes);
    END IF;
    RETURN NULL;
END
$$;

-- Creates a version's postings and statistics when they are missing (filled from the chunk table's rows in bulk, the
-- key's index built after them), and the triggers that keep them. Run when a version becomes ready
-- (mark_version_ready: a backfill loads none) and, for every version ready to serve, by each upgrade (900-apply.sql).
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
    saved_work_mem text;
BEGIN
    IF to_regclass(chunks) IS NULL THEN
        RETURN;
    END IF;
    IF to_regclass(terms) IS NULL OR to_regclass(stats) IS NULL THEN
        -- Writers wait while the postings are filled, so none of their rows is missed (the mode the triggers'
        -- creation below takes: no lock to upgrade midway, where a second builder could deadlock with this one).
        PERFORM toolkit._take_lock(chunks::regclass, 'SHARE ROW EXCLUSIVE',
            format('building the full-text postings of version %s', target), '1h');
        EXECUTE format('DROP TABLE IF EXISTS %s, %s', terms, stats);
        EXECUTE format(
            'CREATE TABLE %s ('
            '  tenant text NOT NULL,'
            '  lexeme text NOT NULL,'
            '  chunk_id text NOT NULL,'
            '  tf integer NOT NULL,'
            '  token_count integer NOT NULL,'
            '  access_labels text[] NOT NULL DEFAULT ''{}'''
            ')', terms);
        EXECUTE format(
            'CREATE TABLE %s ('
            '  tenant text NOT NULL,'
            '  access_labels text[] NOT NULL DEFAULT ''{}'','
            '  lexeme text NOT NULL,'
            '  df bigint NOT NULL,'
            '  tokens bigint NOT NULL DEFAULT 0'
            ')', stats);
        EXECUTE format('CREATE INDEX %I ON %s (tenant, lexeme)',
            toolkit._term_stats_table(target) || '_key_idx', stats);
        EXECUTE format('COMMENT ON TABLE %s IS %L', terms,
            format('Full-text postings of version %s: each chunk''s lexemes, their counts (tf), the chunk''s'
                ' token_count and labels.', target));
        EXECUTE format('COMMENT ON TABLE %s IS %L', stats,
            format('Full-text statistics of version %s: delta rows of df per tenant, label set and lexeme;'
                ' lexeme '''' holds the chunk count (df) and their tokens.', target));
        EXECUTE format(
            'INSERT INTO %s (tenant, lexeme, chunk_id, tf, token_count, access_labels)'
            ' SELECT c.tenant, l.lexeme, c.chunk_id, cardinality(l.positions), c.token_count, c.access_labels'
            ' FROM %s AS c CROSS JOIN LATERAL unnest(c.fts) AS l WHERE NOT c.is_parent', terms, chunks);
        -- The key's index built after the rows (a sort, not one insertion per row).
        EXECUTE format(
            'ALTER TABLE %s ADD PRIMARY KEY (tenant, lexeme, chunk_id) INCLUDE (tf, token_count, access_labels)',
            terms);
        -- The statistics aggregate every posting: with maintenance_work_mem (the build's memory, as the index's
        -- sort has) rather than work_mem, the hash table does not spill (20k chunks: 4.3 s at 4 MB, 0.9 s at 256 MB).
        saved_work_mem := current_setting('work_mem');
        PERFORM set_config('work_mem', current_setting('maintenance_work_mem'), true);
        EXECUTE format(
            'INSERT INTO %s (tenant, access_labels, lexeme, df, tokens)'
            ' SELECT t.tenant, t.access_labels, t.lexeme, count(*), 0 FROM %s AS t GROUP BY 1, 2, 3'
            ' UNION ALL SELECT c.tenant, c.access_labels, '''', count(*), sum(c.token_count)'
            ' FROM %s AS c WHERE NOT c.is_parent GROUP BY 1, 2', stats, terms, chunks);
        PERFORM set_config('work_mem', saved_work_mem, true);
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
    -- The triggers are the ones that run the postings' trigger function (their names are _create_text_postings').
    FOR name IN
        SELECT t.tgname FROM pg_catalog.pg_trigger AS t
        WHERE t.tgrelid = chunks AND t.tgfoid = 'toolkit._text_postings_trigger()'::regprocedure
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', name, chunks);
    END LOOP;
    EXECUTE format('DROP TABLE IF EXISTS %s, %s', toolkit._postings_table(target), toolkit._statistics_table(target));
END
$$;
