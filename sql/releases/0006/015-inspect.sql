-- Seeing inside a version (toolkit show, toolkit diff): its documents, and one document's chunks, read from the
-- version's own table as the caller (row-level security applies: an application sees its tenant's rows only).
SET LOCAL ROLE toolkit_owner;

-- Returns the table of a live version, or raises undefined_object when it has none (retired or unknown).
CREATE OR REPLACE FUNCTION toolkit._live_version_table(target integer)
RETURNS regclass
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl regclass := to_regclass(toolkit._chunk_table(target));
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'version % has no chunks to show: it is retired or does not exist', target
            USING ERRCODE = 'undefined_object', HINT = 'toolkit status lists the versions.';
    END IF;
    RETURN tbl;
END
$$;

-- Lists a version's documents (of one tenant, or of every tenant the caller sees): chunks, parent sections, the
-- chunks' tokens, and the span of the text they cover.
CREATE OR REPLACE FUNCTION toolkit.version_documents(target integer, only_tenant text DEFAULT NULL)
RETURNS TABLE (
    tenant text,
    doc_id text,
    chunks bigint,
    parents bigint,
    tokens bigint,
    first_offset integer,
    last_offset integer
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT c.tenant, c.doc_id, count(*) FILTER (WHERE NOT c.is_parent), count(*) FILTER (WHERE c.is_parent),'
        ' coalesce(sum(c.token_count) FILTER (WHERE NOT c.is_parent), 0)::bigint, min(c.start_offset),'
        ' max(c.end_offset)'
        ' FROM %s AS c WHERE ($1 IS NULL OR c.tenant = $1) GROUP BY 1, 2 ORDER BY 1, 2',
        toolkit._live_version_table(target)) USING only_tenant;
END
$$;

-- Lists one document's rows in a version, in reading order (chunks and their parent sections): span, tokens,
-- heading path, pages and text.
CREATE OR REPLACE FUNCTION toolkit.version_chunks(target integer, document text, only_tenant text DEFAULT NULL)
RETURNS TABLE (
    tenant text,
    chunk_id text,
    parent_id text,
    is_parent boolean,
    chunk_position integer,
    start_offset integer,
    end_offset integer,
    token_count integer,
    heading_path text[],
    pages integer[],
    chunk_text text
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT c.tenant, c.chunk_id, c.parent_id, c.is_parent, c.position, c.start_offset, c.end_offset,'
        ' c.token_count, c.heading_path, c.pages, c.text'
        ' FROM %s AS c WHERE c.doc_id = $1 AND ($2 IS NULL OR c.tenant = $2)'
        ' ORDER BY c.tenant, c.is_parent, c.start_offset, c.position',
        toolkit._live_version_table(target)) USING document, only_tenant;
END
$$;
