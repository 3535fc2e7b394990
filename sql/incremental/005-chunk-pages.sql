-- Chunks record the pages of their document they came from (PDFs: 1-based page numbers, for citations);
-- NULL when the source has no pages. Every existing chunks_vN gets the column (a table that has it kept it through a
-- downgrade); create_version adds it to new ones.
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
        EXECUTE format('ALTER TABLE toolkit.%I ADD COLUMN IF NOT EXISTS pages integer[]', tbl);
    END LOOP;
END
$$;
