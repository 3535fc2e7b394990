-- Applies the definitions above to what already exists: the tenant policies of documents and the query log, the
-- security of every live chunk table whose definition changed, and the two chunk views (replaced only when their
-- definition changed). The migration took every lock it needs before this file, views before tables: the order
-- readers take them, so an upgrade next to live readers waits for them and never deadlocks with them.
SET LOCAL ROLE toolkit_owner;

DO $$
DECLARE
    v integer;
    definition text := toolkit._version_security_definition();
BEGIN
    PERFORM toolkit._replace_active_view(toolkit.active_version());
    PERFORM toolkit._replace_live_view();
    PERFORM toolkit._secure_tenant_table('toolkit.documents');
    -- Readers cut passages from documents (search_passages): a labelled document is theirs only with its label.
    PERFORM toolkit._secure_access_labels('toolkit.documents', 'toolkit_reader');
    PERFORM toolkit._secure_tenant_table('toolkit.query_log');
    -- The metadata filters' keys: a labelled document's keys are found only by who may read the document.
    PERFORM toolkit._secure_tenant_table('toolkit.document_metadata_keys');
    PERFORM toolkit._secure_access_labels('toolkit.document_metadata_keys');
    -- Full-text postings: built for a version ready to serve that has none (a version made by an earlier release),
    -- dropped for one building (its postings are built when it is ready) or retired (left by a downgrade's retire).
    FOR v IN SELECT x.version FROM toolkit.versions AS x ORDER BY 1 LOOP
        IF (SELECT x.state FROM toolkit.versions AS x WHERE x.version = v) = ANY (toolkit.version_states('serve')) THEN
            PERFORM toolkit._create_text_postings(v);
        ELSE
            PERFORM toolkit._drop_text_postings(v);
        END IF;
    END LOOP;
    FOR v IN
        SELECT x.version FROM toolkit.versions AS x
        WHERE x.state = ANY (toolkit.version_states('live')) AND x.secured_with IS DISTINCT FROM definition
        ORDER BY 1
    LOOP
        PERFORM toolkit._secure_version_table(v);
    END LOOP;
END
$$;

-- The lock-holder messages say since when a transaction has been open: that needs pg_read_all_stats. Granted
-- by the migrating role when it may grant it (a superuser may); otherwise the messages name pid and role only.
RESET ROLE;
DO $$
BEGIN
    IF NOT pg_has_role('toolkit_owner', 'pg_read_all_stats', 'USAGE') THEN
        GRANT pg_read_all_stats TO toolkit_owner;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'toolkit_owner was not granted pg_read_all_stats: lock messages will not say since when a lock is held';
END
$$;
