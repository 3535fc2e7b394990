-- Evaluations: a version is scored on labelled queries by SQL itself (the same pinned search applications use),
-- the gate is applied here, and only this code records the result. No role below the owner can write an
-- evaluation, so a passing one always comes from a search of the version's own rows.
SET LOCAL ROLE toolkit_owner;

-- Scores one query's top-k spans against its answers (Chroma's span metrics and recall@k, MRR, nDCG@k, the
-- definitions of toolkit/metrics.py): retrieved is [{doc_id, start, end}] best first, answers the same.
CREATE OR REPLACE FUNCTION toolkit._score_spans(retrieved jsonb, answers jsonb, k integer)
RETURNS jsonb
LANGUAGE sql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH r AS (
        SELECT x.ordinality::integer AS rank, x.value ->> 'doc_id' AS doc_id,
            int4range((x.value ->> 'start')::integer, (x.value ->> 'end')::integer) AS span
        FROM jsonb_array_elements(retrieved) WITH ORDINALITY AS x
        WHERE x.ordinality <= k
    ),
    g AS (
        SELECT DISTINCT a.value ->> 'doc_id' AS doc_id,
            int4range((a.value ->> 'start')::integer, (a.value ->> 'end')::integer) AS span
        FROM jsonb_array_elements(answers) AS a
    ),
    found AS (SELECT g.doc_id, g.span, min(r.rank) AS rank FROM g INNER JOIN r ON g.doc_id = r.doc_id
        AND r.span @> g.span GROUP BY 1, 2),
    by_doc AS (
        SELECT d.doc_id,
            (SELECT range_agg(g.span) FROM g WHERE g.doc_id = d.doc_id) AS gold,
            (SELECT range_agg(r.span) FROM r WHERE r.doc_id = d.doc_id) AS hit
        FROM (SELECT g.doc_id FROM g UNION SELECT r.doc_id FROM r) AS d
    ),
    sizes AS (
        SELECT
            coalesce(sum((SELECT sum(upper(s) - lower(s)) FROM unnest(b.gold) AS s)), 0)::float8 AS gold_chars,
            coalesce(sum((SELECT sum(upper(s) - lower(s)) FROM unnest(b.gold * b.hit) AS s)), 0)::float8 AS covered
        FROM by_doc AS b
    ),
    totals AS (
        SELECT s.gold_chars, s.covered,
            coalesce((SELECT sum(upper(r.span) - lower(r.span)) FROM r), 0)::float8 AS retrieved_chars,
            (SELECT min(f.rank) FROM found AS f) AS first_rank,
            coalesce((SELECT sum(1 / log(2, f.rank + 1)) FROM found AS f), 0)::float8 AS dcg,
            (SELECT sum(1 / log(2, i + 1)) FROM generate_series(1, least((SELECT count(*) FROM g), k)) AS i)::float8
                AS ideal
        FROM sizes AS s
    )
    SELECT jsonb_build_object(
        'recall', CASE WHEN t.first_rank IS NULL THEN 0.0 ELSE 1.0 END,
        'reciprocal_rank', coalesce(1.0 / t.first_rank, 0.0),
        'ndcg', CASE WHEN coalesce(t.ideal, 0) = 0 THEN 0.0 ELSE t.dcg / t.ideal END,
        'span_recall', CASE WHEN t.gold_chars = 0 THEN 0.0 ELSE t.covered / t.gold_chars END,
        'span_precision', CASE WHEN t.retrieved_chars = 0 THEN 0.0 ELSE t.covered / t.retrieved_chars END,
        'span_iou', CASE WHEN t.retrieved_chars + t.gold_chars - t.covered = 0 THEN 0.0
            ELSE t.covered / (t.retrieved_chars + t.gold_chars - t.covered) END,
        'retrieved_chars', t.retrieved_chars
    )
    FROM totals AS t
$$;

-- Runs every labelled query against a version through the served retrieval (search_passages, pinned, the tenant
-- set) and returns the mean of each metric and, per query, whether a whole answer was in the top k.
CREATE OR REPLACE FUNCTION toolkit._evaluate_side(target integer, queries jsonb, embedding_key text, k integer)
RETURNS jsonb
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q jsonb;
    retrieved jsonb;
    scores jsonb;
    sums jsonb := '{}';
    hits boolean[] := '{}';
    n integer := jsonb_array_length(queries);
    metric text;
BEGIN
    FOR q IN SELECT x.value FROM jsonb_array_elements(queries) WITH ORDINALITY AS x ORDER BY x.ordinality LOOP
        IF jsonb_typeof(q -> embedding_key) IS DISTINCT FROM 'array' THEN
            RAISE EXCEPTION 'query % has no % for version %', quote_literal(q ->> 'query'), embedding_key, target
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        EXECUTE format(
            'SELECT coalesce(jsonb_agg(jsonb_build_object(''doc_id'', s.doc_id, ''start'', s.start_offset,'
            ' ''end'', s.end_offset) ORDER BY s.rank), ''[]'') FROM toolkit.search_passages($1 ->> ''query'','
            ' ($1 ->> %L)::%s.vector, $2, ''{}'', NULL, $3) AS s', embedding_key, toolkit._vector_schema())
        INTO retrieved USING q, k, target;
        scores := toolkit._score_spans(retrieved, q -> 'answers', k);
        FOR metric IN SELECT jsonb_object_keys(scores) LOOP
            sums := sums || jsonb_build_object(metric, coalesce((sums ->> metric)::float8, 0) + (scores ->> metric)::float8);
        END LOOP;
        hits := hits || ((scores ->> 'recall')::float8 > 0);
    END LOOP;
    RETURN jsonb_build_object(
        'queries', n, 'k', k,
        'recall', (sums ->> 'recall')::float8 / n,
        'mrr', (sums ->> 'reciprocal_rank')::float8 / n,
        'ndcg', (sums ->> 'ndcg')::float8 / n,
        'span_recall', (sums ->> 'span_recall')::float8 / n,
        'span_precision', (sums ->> 'span_precision')::float8 / n,
        'span_iou', (sums ->> 'span_iou')::float8 / n,
        'retrieved_chars', (sums ->> 'retrieved_chars')::float8 / n,
        'precision_omega', NULL,
        'hits', to_jsonb(hits)
    );
END
$$;

-- Verifies a version: runs the labelled queries (question embeddings computed with each version's model, answers
-- as character spans) against the candidate and, when another version is active, against it too, through the
-- pinned search, for one tenant; applies the gate; records the evaluation (a passing one moves ready to verified,
-- a failing one verified to ready). The gate refuses to judge on too little: fewer than min_queries questions,
-- or no active version to compare with and no min_recall. Returns the evaluation id.
-- Definer: the only writer of toolkit.evaluations, so a passing evaluation is always one this function computed.
CREATE OR REPLACE FUNCTION toolkit.evaluate_version(
    candidate integer,
    tenant text,
    queries jsonb,
    k integer DEFAULT 5,
    min_recall double precision DEFAULT NULL,
    max_drop double precision DEFAULT 0,
    min_queries integer DEFAULT 50,
    query_set_hash text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    changed_before timestamptz;
    active integer;
    n integer;
    cand jsonb;
    base jsonb;
    reasons text[] := '{}';
    wins integer := 0;
    losses integer := 0;
    saved_tenant text := current_setting('toolkit.tenant', true);
    new_id bigint;
    i integer;
BEGIN
    IF queries IS NULL OR jsonb_typeof(queries) <> 'array' THEN
        RAISE EXCEPTION 'the labelled queries must be a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := jsonb_array_length(queries);
    PERFORM toolkit._check_k(k);
    IF min_queries IS NULL OR min_queries < 1 THEN
        RAISE EXCEPTION 'min_queries must be 1 or more, not %', coalesce(min_queries::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n < min_queries THEN
        RAISE EXCEPTION 'the query set has % question(s); the gate needs at least % to mean anything', n, min_queries
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Label more questions (50 to 200 is the usual advice), or accept a smaller set explicitly '
                      'with --min-queries.';
    END IF;
    IF min_recall IS NOT NULL AND NOT (min_recall >= 0 AND min_recall <= 1) THEN
        RAISE EXCEPTION 'min_recall must be between 0 and 1, not %', min_recall
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_drop IS NULL OR NOT (max_drop >= 0 AND max_drop <= 1) THEN
        RAISE EXCEPTION 'max_drop must be between 0 and 1, not %', coalesce(max_drop::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tenant IS NULL OR tenant = '' THEN
        RAISE EXCEPTION 'the tenant whose documents the queries are about must be given'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A change of its rows not yet committed would be neither seen nor newer than this verification: wait for it.
    PERFORM toolkit._await_version_changes(candidate);
    SELECT v.content_changed_at INTO changed_before FROM toolkit.versions AS v WHERE v.version = candidate;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'version % does not exist', candidate
            USING ERRCODE = 'undefined_object', HINT = 'Run toolkit status to list the versions.';
    END IF;
    SELECT x.version INTO active FROM toolkit.versions AS x WHERE x.state = 'active';
    IF active = candidate THEN
        active := NULL;
    END IF;
    IF active IS NULL AND min_recall IS NULL THEN
        RAISE EXCEPTION 'no other version is active to compare version % with, and no absolute floor was given',
            candidate
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give the recall@k it must reach: --min-recall (e.g. 0.8).';
    END IF;

    PERFORM set_config('toolkit.tenant', tenant, true);
    cand := toolkit._evaluate_side(candidate, queries, 'embedding', k);
    IF active IS NOT NULL THEN
        base := toolkit._evaluate_side(active, queries, 'baseline_embedding', k);
    END IF;
    PERFORM set_config('toolkit.tenant', coalesce(saved_tenant, ''), true);

    IF min_recall IS NOT NULL AND (cand ->> 'recall')::float8 < min_recall THEN
        reasons := reasons || format('recall@%s %s is below --min-recall %s', k,
            round((cand ->> 'recall')::numeric, 3), round(min_recall::numeric, 3));
    END IF;
    IF base IS NOT NULL AND (cand ->> 'recall')::float8 < (base ->> 'recall')::float8 - max_drop THEN
        reasons := reasons || format('recall@%s %s dropped more than %s below the active version''s %s', k,
            round((cand ->> 'recall')::numeric, 3), round(max_drop::numeric, 3), round((base ->> 'recall')::numeric, 3));
    END IF;
    IF (SELECT v.content_changed_at FROM toolkit.versions AS v WHERE v.version = candidate) IS DISTINCT FROM changed_before
    THEN
        reasons := reasons || 'the version''s contents changed while it was being verified; run toolkit verify again'::text;
    END IF;
    IF base IS NOT NULL THEN
        FOR i IN 0 .. n - 1 LOOP
            IF (cand -> 'hits' ->> i)::boolean AND NOT (base -> 'hits' ->> i)::boolean THEN
                wins := wins + 1;
            ELSIF (base -> 'hits' ->> i)::boolean AND NOT (cand -> 'hits' ->> i)::boolean THEN
                losses := losses + 1;
            END IF;
        END LOOP;
    END IF;
    new_id := toolkit._record_evaluation(
        candidate, coalesce(query_set_hash, left(md5(queries::text), 16)), n, k,
        jsonb_build_object('candidate', cand, 'baseline', base, 'tenant', tenant, 'wins', wins, 'losses', losses),
        cardinality(reasons) = 0, active,
        jsonb_build_object('min_recall', min_recall, 'max_drop', max_drop, 'min_queries', min_queries,
            'reasons', to_jsonb(reasons), 'retrieval', toolkit.served_retrieval()),
        started);
    RETURN new_id;
END
$$;

-- Stores a verification result; a passing one moves a ready version to verified, a failing one a verified version
-- to ready. Only evaluate_version (and the owner) calls it.
CREATE OR REPLACE FUNCTION toolkit._record_evaluation(
    target integer,
    query_set_hash text,
    query_count integer,
    k integer,
    metrics jsonb,
    passed boolean,
    baseline_version integer DEFAULT NULL,
    gate jsonb DEFAULT '{}',
    evaluated_at timestamptz DEFAULT clock_timestamp()
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    current_state text;
BEGIN
    SELECT v.state INTO current_state FROM toolkit.versions AS v WHERE v.version = target FOR UPDATE;
    IF NOT FOUND OR current_state = 'retired' THEN
        RAISE EXCEPTION 'version % does not exist or is retired', target USING ERRCODE = 'undefined_object';
    END IF;
    -- created_at is when the evaluation began: a change of contents during it leaves it older than the change.
    INSERT INTO toolkit.evaluations AS e (
        version, baseline_version, query_set_hash, query_count, k, metrics, gate, passed, created_at
    )
    VALUES (target, baseline_version, query_set_hash, query_count, k, metrics, gate, passed, evaluated_at)
    RETURNING e.evaluation_id INTO new_id;
    IF passed AND current_state = 'ready' THEN
        PERFORM toolkit._set_version_state(target, 'verified');
    ELSIF NOT passed AND current_state = 'verified' THEN
        PERFORM toolkit._set_version_state(target, 'ready');
    END IF;
    RETURN new_id;
END
$$;
