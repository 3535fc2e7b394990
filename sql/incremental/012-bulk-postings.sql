-- Full-text postings built when a version becomes ready (release 0007). Here, once: every version table loses the
-- GIN index over its tsvector, which no search reads (@@ cannot use it under row-level security; a search reads the
-- version's postings), and which every write kept up to date. The idempotent files then drop the postings of a
-- version being built (900-apply.sql): mark_version_ready builds them from its rows.
SET LOCAL ROLE toolkit_owner;

DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_catalog.pg_class AS c
        WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^chunks_v[0-9]+$'
        ORDER BY c.relname
    LOOP
        EXECUTE format('DROP INDEX IF EXISTS toolkit.%I', tbl || '_fts_idx');
    END LOOP;
END
$$;
