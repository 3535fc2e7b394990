-- Grants: least privilege for the reader (applications) and the writer (ingest, backfill, cutover).
SET LOCAL ROLE toolkit_owner;

REVOKE ALL ON SCHEMA toolkit FROM public;
GRANT USAGE ON SCHEMA toolkit TO toolkit_reader, toolkit_writer;

REVOKE ALL ON ALL TABLES IN SCHEMA toolkit FROM public;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA toolkit FROM public;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA toolkit FROM public;

-- What an application needs: its session context, the active model, and the view.
GRANT EXECUTE ON FUNCTION
toolkit.current_tenant(),
toolkit.current_principals(),
toolkit.set_tenant(text),
toolkit.set_principals(text[]),
toolkit._is_service_role(),
toolkit.active_version(),
toolkit.active_model()
TO toolkit_reader, toolkit_writer;
GRANT SELECT ON toolkit.active_chunks TO toolkit_reader, toolkit_writer;
-- The model registry holds no secrets; an application reads it to embed questions like the chunks.
GRANT SELECT ON toolkit.models TO toolkit_reader;

-- What ingest, backfill, verify and cutover need.
GRANT SELECT, INSERT, UPDATE, DELETE ON toolkit.documents TO toolkit_writer;
GRANT SELECT, INSERT, UPDATE ON toolkit.models TO toolkit_writer;
GRANT SELECT ON toolkit.versions, toolkit.evaluations, toolkit.cutovers, toolkit.version_transitions
TO toolkit_writer;
GRANT EXECUTE ON FUNCTION
toolkit.create_version(text, text, text, text, integer, integer, integer, regconfig),
toolkit.create_version_index(integer),
toolkit.version_index_valid(integer),
toolkit.version_pending_rows(integer),
toolkit.mark_version_ready(integer),
toolkit.mark_version_building(integer),
toolkit.touch_version(integer),
toolkit.record_evaluation(integer, text, integer, integer, jsonb, boolean, integer, jsonb),
toolkit.activate_version(integer, boolean, text),
toolkit.rollback_version(text),
toolkit.retire_version(integer, text),
toolkit.version_status(),
toolkit._version_table(integer)
TO toolkit_writer;

-- ---------------------------------------------------------------------------------------------------
-- Search (005-search.sql): what applications call, and the private helpers those invoker functions run.
-- Each name is unique, so no argument list is needed (pgvector's type may live in any schema).
GRANT EXECUTE ON FUNCTION
toolkit.search_chunks,
toolkit.hybrid_search_chunks,
toolkit.search_context,
toolkit._search_target,
toolkit._search_tenant,
toolkit._search_filter_texts,
toolkit._search_filters
TO toolkit_reader, toolkit_writer;
