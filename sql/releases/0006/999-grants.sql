-- Grants: least privilege for each role, held against the role itself.
--   toolkit_reader   applications: search (pinned), their tenant's rows under row-level security; no registry writes
--   toolkit_writer   the ingest job: documents and chunk rows, building versions (ingest, backfill)
--   toolkit_deployer CI/CD: verification (computed by SQL), canary, cutover, rollback, retirement
--   toolkit_owner    the DBA's migrations: owns everything; the SECURITY DEFINER functions run as it
-- No role but the owner may write the model registry, the evaluations or the audit log directly, or take the
-- toolkit's locks (the lock tables are private).
SET LOCAL ROLE toolkit_owner;

REVOKE ALL ON SCHEMA toolkit FROM public;
GRANT USAGE ON SCHEMA toolkit TO toolkit_reader, toolkit_writer, toolkit_deployer;

REVOKE ALL ON ALL TABLES IN SCHEMA toolkit FROM public, toolkit_reader, toolkit_writer, toolkit_deployer;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA toolkit FROM public, toolkit_reader, toolkit_writer, toolkit_deployer;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA toolkit FROM public, toolkit_reader, toolkit_writer, toolkit_deployer;

-- The chunk tables lost their grants with the REVOKE above: every live one gets them back.
DO $$
DECLARE
    v integer;
BEGIN
    FOR v IN SELECT x.version FROM toolkit.versions AS x WHERE x.state = ANY (toolkit.version_states('live')) ORDER BY 1 LOOP
        PERFORM toolkit._grant_version_table(v);
    END LOOP;
END
$$;

-- Every role: its session context, what is live and what to embed questions with, the views, and search.
-- Each name is unique, so no argument list is needed (pgvector's type may live in any schema).
GRANT EXECUTE ON FUNCTION
toolkit.current_tenant,
toolkit.current_principals,
toolkit.set_tenant,
toolkit.bound_tenants,
toolkit.set_principals,
toolkit._is_service_role,
toolkit.active_version,
toolkit.active_model,
toolkit.serving_model,
toolkit.version_model,
toolkit.traffic_bucket,
toolkit.search_max_k,
toolkit.search_chunks,
toolkit.hybrid_search_chunks,
toolkit.search_context,
toolkit.search_passages,
toolkit.search,
toolkit.search_request,
toolkit._search_stage_filters,
toolkit._search_stage_vector_hits,
toolkit._search_stage_text_hits,
toolkit._search_stage_fusion,
toolkit._search_stage_rows,
toolkit._search_stage_mmr,
toolkit._search_stage_chunks,
toolkit._search_stage_contexts,
toolkit._search_stage_passages,
toolkit._spans_touch,
toolkit._passage_tokens,
toolkit._search_target,
toolkit._search_tenant,
toolkit._search_filter_texts,
toolkit._search_filters,
toolkit._search_filter_values,
toolkit._heading_filter_unmatchable,
toolkit._search_filter_condition,
toolkit._search_cosine_sql,
toolkit._check_search_options,
toolkit._mmr_candidates,
toolkit._mmr_order,
toolkit._metadata_key_value,
toolkit._check_k,
toolkit._version_gone,
toolkit.lexical_settings,
toolkit.retrieval_settings,
toolkit.served_retrieval,
toolkit.chunk_search_text,
toolkit.query_lexemes,
toolkit._any_lexeme,
toolkit._terms_table,
toolkit._term_stats_table,
toolkit._postings_table,
toolkit._statistics_table,
-- The full-text postings and statistics are read only through these (the caller's own rows; no direct grants).
toolkit._read_term_stats,
toolkit._read_postings,
toolkit._read_term_stats_function,
toolkit._read_postings_function,
toolkit.log_query,
toolkit.query_log_sample_rate,
toolkit.model_secrets,
toolkit.model_destination,
toolkit.model_destination_refused
TO toolkit_reader, toolkit_writer, toolkit_deployer;
GRANT SELECT ON toolkit.active_chunks, toolkit.live_chunks TO toolkit_reader, toolkit_writer, toolkit_deployer;
-- A service role's full-text reads: every label set of the tenant, as the policies show the writer (and the owner).
GRANT EXECUTE ON FUNCTION toolkit._read_term_stats_service, toolkit._read_postings_service TO toolkit_writer;
-- A passage of chunk rows written before they kept their gap_before is cut from its document (row-level security
-- and access labels apply).
-- The metadata filters (metadata.key=value) find the documents they match, as the caller.
GRANT SELECT (tenant, doc_id, title, raw_text, metadata, access_labels, updated_at) ON toolkit.documents TO toolkit_reader;
GRANT SELECT ON toolkit.document_metadata_keys TO toolkit_reader, toolkit_writer, toolkit_deployer;
-- What a version holds (toolkit show, toolkit diff), read as the caller: row-level security applies.
GRANT EXECUTE ON FUNCTION
toolkit._version_table,
toolkit._chunk_table,
toolkit._live_version_table,
toolkit.version_documents,
toolkit.version_chunks
TO toolkit_reader, toolkit_writer, toolkit_deployer;
-- What an application needs of the registry to embed a question the way the chunks were embedded (it holds no
-- secrets: the trigger refuses them); not the price.
GRANT SELECT (
    alias, provider, model_name, revision, dimensions, distance, max_input_tokens, query_prefix, document_prefix,
    supports_shortening, base_url, options
) ON toolkit.models TO toolkit_reader;

-- The ingest job: documents, chunk rows (granted per table by _secure_version_table), building versions.
GRANT SELECT, INSERT, UPDATE, DELETE ON toolkit.documents TO toolkit_writer;
GRANT SELECT ON toolkit.models, toolkit.versions, toolkit.version_transitions TO toolkit_writer;
GRANT EXECUTE ON FUNCTION
toolkit.create_version,
toolkit.create_version_index,
toolkit.version_index_valid,
toolkit.version_pending_rows,
toolkit.version_pending_documents,
toolkit.claim_pending_documents,
toolkit._pending_document_condition,
toolkit.mark_version_ready,
toolkit.mark_version_building,
toolkit.touch_version,
toolkit.live_versions,
toolkit.version_states,
toolkit.lock_version_set,
toolkit.lock_documents,
toolkit._lock_holders,
toolkit._version_table,
toolkit._chunk_table,
toolkit.register_model,
toolkit.version_status,
toolkit.version_lag,
toolkit.version_evaluation_current,
toolkit.canary_status,
toolkit.query_log_status,
toolkit.prune_query_log,
toolkit.embedding_deferred,
toolkit._service_access
TO toolkit_writer;
-- Deleting documents at a user's request (documents, chunks in every live version, their logged questions; audited).
GRANT EXECUTE ON FUNCTION toolkit.delete_documents TO toolkit_writer;

-- The deployer: verify (the evaluation is computed and recorded by SQL), canary, cutover, rollback, retire.
-- It reads documents (one tenant at a time, under row-level security) to resolve labelled answers.
GRANT SELECT ON toolkit.documents TO toolkit_deployer;
GRANT SELECT ON toolkit.models, toolkit.versions, toolkit.evaluations, toolkit.cutovers,
toolkit.version_transitions TO toolkit_deployer;
GRANT EXECUTE ON FUNCTION
toolkit.evaluate_version,
toolkit.activate_version,
toolkit.rollback_version,
toolkit.retire_version,
toolkit.retire_candidates,
toolkit.rollback_window,
toolkit.protected_standby,
toolkit.retire_refusal,
toolkit.standby_replay,
toolkit.set_canary,
toolkit.canary_status,
toolkit.version_status,
toolkit.version_lag,
toolkit.version_evaluation_current,
toolkit.version_index_valid,
toolkit.document_tenants,
toolkit.logged_questions,
toolkit.query_log_status,
toolkit.prune_query_log,
toolkit.register_model,
toolkit._lock_holders,
toolkit._version_table,
toolkit._chunk_table,
toolkit.version_states
TO toolkit_deployer;
-- Erasing a tenant (every version, the query log, its bindings; audited), and reading the log of deletions.
GRANT EXECUTE ON FUNCTION toolkit.erase_tenant TO toolkit_deployer;
GRANT SELECT ON toolkit.deletions TO toolkit_deployer;
