-- The signatures and result types of earlier releases, dropped once on the way up (they were dropped on every
-- re-application of the idempotent files before). CREATE OR REPLACE cannot change a function's arguments or result
-- type, and an old overload left beside the new one would make calls ambiguous (or keep an entry point this
-- release closed); the idempotent files that follow this revision create the current definitions. A downgrade
-- re-applies the earlier release's files, which create the old ones again.
SET LOCAL ROLE toolkit_owner;

-- Results that gained columns (live_versions: chunk tables; version_status: pending rows, evaluation_current;
-- query_log_status: the bounds and their counters; list_tenant_bindings: status and bound_as).
DROP FUNCTION IF EXISTS toolkit.live_versions();
DROP FUNCTION IF EXISTS toolkit.version_status();
DROP FUNCTION IF EXISTS toolkit.query_log_status();
DROP FUNCTION IF EXISTS toolkit.list_tenant_bindings();

-- Arguments that changed: retire_version gained force, logged_questions max_questions.
DROP FUNCTION IF EXISTS toolkit.retire_version(integer, text);
DROP FUNCTION IF EXISTS toolkit.logged_questions(timestamptz, text);

-- Old entry point of earlier releases (the writer could record any result): gone.
DROP FUNCTION IF EXISTS toolkit.record_evaluation(integer, text, integer, integer, jsonb, boolean, integer, jsonb);

-- Search signatures of earlier releases (without the version argument, pages in the result, or the search options
-- min_score and diversity): dropped, since
-- CREATE OR REPLACE cannot change them and each name must stay unique.
DROP FUNCTION IF EXISTS toolkit._search_target(vector, text);
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'toolkit'::regnamespace
            AND p.proname IN ('search_chunks', 'hybrid_search_chunks', 'search_context', 'search_passages')
            AND (pg_get_function_identity_arguments(p.oid) NOT LIKE '%query_version integer%'
                OR pg_get_function_result(p.oid) NOT LIKE '%pages integer[]%'
                OR (p.proname <> 'search_context'
                    AND pg_get_function_identity_arguments(p.oid) NOT LIKE '%diversity double precision%'))
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$$;
