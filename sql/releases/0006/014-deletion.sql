-- Deleting what a user asks to delete: documents of a tenant (toolkit delete), or a whole tenant (toolkit tenant
-- erase), from every live version (building, ready, verified, active, standby; retired versions have no table) and
-- from the query log, in the caller's transaction, recorded in toolkit.deletions. Each returns what it removed (or,
-- with dry_run, what it would remove) per table: relation, version (chunk tables), rows.
SET LOCAL ROLE toolkit_owner;

-- Deletes documents of one tenant, their chunks in every live version (and their postings; the full-text statistics
-- are netted out, so none of their words stays behind), and the logged questions whose results cite them; refuses
-- unknown ids (nothing is deleted). A version that loses rows is marked changed (by the chunk tables'
-- version_rows_changed trigger, as every change is):
-- a verification older than the deletion no longer counts for an unforced cutover; serving is not affected.
-- Definer: writes the query log and the audit log, which the writer may not write directly.
CREATE OR REPLACE FUNCTION toolkit.delete_documents(
    tenant text, doc_ids text[], dry_run boolean DEFAULT FALSE, reason text DEFAULT NULL
)
RETURNS TABLE (relation text, version integer, removed bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target text := delete_documents.tenant;
    ids text[];
    missing text[];
    label_sets text[];
    lexemes text[];
    v record;
    n bigint;
    counts jsonb := '{}';
    chunks jsonb := '{}';
BEGIN
    IF coalesce(target, '') = '' THEN
        RAISE EXCEPTION 'the tenant must be a non-empty string' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF doc_ids IS NULL OR cardinality(doc_ids) = 0 OR EXISTS (SELECT FROM unnest(doc_ids) AS d (id) WHERE coalesce(d.id, '') = '')
    THEN
        RAISE EXCEPTION 'give one or more non-empty document ids' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    ids := ARRAY(SELECT DISTINCT d.id FROM unnest(doc_ids) AS d (id) ORDER BY 1);
    IF NOT dry_run THEN
        -- As ingest does: the version set shared (no version is created or retired meanwhile), then the documents'
        -- rows in a fixed order (a backfill batch that has claimed one finishes first, and its rows are seen).
        PERFORM toolkit.lock_version_set(false);
        PERFORM toolkit.lock_documents(target, ids, true);
    END IF;
    missing := ARRAY(
        SELECT d.id FROM unnest(ids) AS d (id)
        WHERE NOT EXISTS (SELECT FROM toolkit.documents AS x WHERE x.tenant = target AND x.doc_id = d.id)
        ORDER BY 1
    );
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'tenant % has no document %', quote_literal(target), array_to_string(missing, ', ')
            USING ERRCODE = 'undefined_object', HINT = 'Nothing was deleted. toolkit show --version N lists documents.';
    END IF;

    IF dry_run THEN
        SELECT count(*) INTO n FROM toolkit.documents AS x WHERE x.tenant = target AND x.doc_id = ANY (ids);
    ELSE
        DELETE FROM toolkit.documents AS x WHERE x.tenant = target AND x.doc_id = ANY (ids);
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    relation := 'documents'; version := NULL; removed := n; RETURN NEXT;
    counts := counts || jsonb_build_object('documents', n);

    FOR v IN SELECT l.version, l.chunk_table FROM toolkit.live_versions() AS l ORDER BY 1 LOOP
        IF dry_run THEN
            EXECUTE format('SELECT count(*) FROM %s WHERE tenant = $1 AND doc_id = ANY ($2)',
                v.chunk_table) INTO n USING target, ids;
        ELSE
            -- The chunks go (their postings with them, by the chunk table's trigger), then the statistics keys
            -- their words counted in are netted out now: no +1 and -1 rows of a deleted document's words remain.
            EXECUTE format(
                'WITH gone AS (DELETE FROM %s AS c WHERE c.tenant = $1 AND c.doc_id = ANY ($2)'
                '  RETURNING c.is_parent, c.access_labels, c.fts),'
                ' keys AS (SELECT g.access_labels::text AS labels, l.lexeme FROM gone AS g'
                '  CROSS JOIN LATERAL unnest(g.fts) AS l WHERE NOT g.is_parent'
                '  UNION SELECT g.access_labels::text, '''' FROM gone AS g WHERE NOT g.is_parent)'
                ' SELECT (SELECT count(*) FROM gone), array_agg(k.labels ORDER BY k.labels, k.lexeme),'
                '  array_agg(k.lexeme ORDER BY k.labels, k.lexeme) FROM keys AS k',
                v.chunk_table) INTO n, label_sets, lexemes USING target, ids;
            PERFORM toolkit._net_term_stats(v.version, target, label_sets, lexemes);
        END IF;
        relation := toolkit._version_table(v.version); version := v.version; removed := n; RETURN NEXT;
        chunks := chunks || jsonb_build_object(v.version::text, n);
    END LOOP;
    counts := counts || jsonb_build_object('chunks', chunks);

    IF dry_run THEN
        SELECT count(*) INTO n FROM toolkit.query_log AS q
        WHERE q.tenant = target AND EXISTS (
            SELECT FROM jsonb_array_elements(q.results) AS r (hit) WHERE r.hit ->> 'doc_id' = ANY (ids));
    ELSE
        DELETE FROM toolkit.query_log AS q
        WHERE q.tenant = target AND EXISTS (
            SELECT FROM jsonb_array_elements(q.results) AS r (hit) WHERE r.hit ->> 'doc_id' = ANY (ids));
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    relation := 'query_log'; version := NULL; removed := n; RETURN NEXT;
    counts := counts || jsonb_build_object('query_log', n);

    IF NOT dry_run THEN
        INSERT INTO toolkit.deletions (action, tenant, doc_id_sha256, counts, reason)
        SELECT 'delete', target, ARRAY(SELECT encode(sha256(convert_to(d.id, 'UTF8')), 'hex') FROM unnest(ids) AS d (id)),
            counts, delete_documents.reason;
    END IF;
END
$$;

-- Erases a tenant: its documents, its rows in every live version (chunks, postings, statistics), its logged questions
-- and the logins' bindings to it, in the caller's transaction (all or nothing). New writes to documents wait until it
-- commits, so no ingest adds a document of the tenant it did not see. Refuses a tenant of which nothing is stored.
-- Definer: deletes every table's rows of the tenant and writes the audit log, which the deployer may not do.
CREATE OR REPLACE FUNCTION toolkit.erase_tenant(tenant text, dry_run boolean DEFAULT FALSE, reason text DEFAULT NULL)
RETURNS TABLE (relation text, version integer, removed bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target text := erase_tenant.tenant;
    v record;
    n bigint;
    total bigint := 0;
    counts jsonb := '{}';
    chunks jsonb := '{}';
BEGIN
    IF coalesce(target, '') = '' THEN
        RAISE EXCEPTION 'the tenant must be a non-empty string' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT dry_run THEN
        PERFORM toolkit.lock_version_set(false);
        -- Waits for writers in flight, and holds new ones (of every tenant) until this transaction ends.
        PERFORM toolkit._take_lock('toolkit.documents', 'SHARE ROW EXCLUSIVE', 'erasing a tenant', '30s');
    END IF;

    IF dry_run THEN
        SELECT count(*) INTO n FROM toolkit.documents AS x WHERE x.tenant = target;
    ELSE
        DELETE FROM toolkit.documents AS x WHERE x.tenant = target;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    relation := 'documents'; version := NULL; removed := n; RETURN NEXT;
    counts := counts || jsonb_build_object('documents', n);
    total := total + n;

    FOR v IN SELECT l.version, l.chunk_table FROM toolkit.live_versions() AS l ORDER BY 1 LOOP
        IF dry_run THEN
            EXECUTE format('SELECT count(*) FROM %s WHERE tenant = $1', v.chunk_table) INTO n USING target;
        ELSE
            EXECUTE format('DELETE FROM %s WHERE tenant = $1', v.chunk_table) USING target;
            GET DIAGNOSTICS n = ROW_COUNT;
            -- Not even statistics keys netted to nothing stay: every postings and statistics row of the tenant goes.
            PERFORM toolkit._erase_text_postings(v.version, target);
        END IF;
        relation := toolkit._version_table(v.version); version := v.version; removed := n; RETURN NEXT;
        chunks := chunks || jsonb_build_object(v.version::text, n);
        total := total + n;
    END LOOP;
    counts := counts || jsonb_build_object('chunks', chunks);

    IF dry_run THEN
        SELECT count(*) INTO n FROM toolkit.query_log AS q WHERE q.tenant = target;
    ELSE
        DELETE FROM toolkit.query_log AS q WHERE q.tenant = target;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    relation := 'query_log'; version := NULL; removed := n; RETURN NEXT;
    counts := counts || jsonb_build_object('query_log', n);
    total := total + n;

    IF dry_run THEN
        SELECT count(*) INTO n FROM toolkit.tenant_bindings AS b WHERE b.tenant = target;
    ELSE
        DELETE FROM toolkit.tenant_bindings AS b WHERE b.tenant = target;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    relation := 'tenant_bindings'; version := NULL; removed := n; RETURN NEXT;
    counts := counts || jsonb_build_object('tenant_bindings', n);
    total := total + n;

    IF total = 0 THEN
        RAISE EXCEPTION 'nothing of tenant % is stored', quote_literal(target)
            USING ERRCODE = 'undefined_object', HINT = 'Check the name: toolkit.document_tenants() lists the tenants with documents.';
    END IF;
    IF NOT dry_run THEN
        INSERT INTO toolkit.deletions (action, tenant, counts, reason)
        VALUES ('erase', target, counts, erase_tenant.reason);
    END IF;
END
$$;
