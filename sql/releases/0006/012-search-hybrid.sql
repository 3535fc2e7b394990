-- Search, continued: the passages' helpers (017-search-request.sql assembles passages with them). The searches
-- themselves are in 017-search-request.sql.
SET LOCAL ROLE toolkit_owner;


-- Whether two spans of a document touch: they overlap, or only whitespace lies between them in the document's text.
-- The document is read under the caller's row-level security; one that cannot be read touches nothing. Asked only for
-- chunk rows written before chunks kept the whitespace before them (gap_before NULL).
CREATE OR REPLACE FUNCTION toolkit._spans_touch(
    tenant text, doc_id text, start_a integer, end_a integer, start_b integer, end_b integer
)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    gap_start integer;
    gap_end integer;
    blank boolean;
BEGIN
    IF (start_a, end_a) <= (start_b, end_b) THEN
        gap_start := end_a;
        gap_end := start_b;
    ELSE
        gap_start := end_b;
        gap_end := start_a;
    END IF;
    IF gap_end <= gap_start THEN
        RETURN true;
    END IF;
    -- ASCII whitespace only (space, tab, line feed, carriage return, form feed, vertical tab), as Python's
    -- toolkit.evaluation.retrieval.touches checks it.
    SELECT substr(d.raw_text, gap_start + 1, gap_end - gap_start) ~ E'^[ \\t\\n\\r\\f\\v]*$' INTO blank
    FROM toolkit.documents AS d
    WHERE d.tenant = _spans_touch.tenant AND d.doc_id = _spans_touch.doc_id;
    RETURN coalesce(blank, false);
END
$$;

-- The tokens of a passage made of several chunks: its length in characters at the members' own tokens per
-- character (sum of their token counts over the sum of their lengths), rounded up. One chunk: its token count.
CREATE OR REPLACE FUNCTION toolkit._passage_tokens(
    span_chars integer, member_tokens bigint, member_chars bigint
)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN member_chars <= 0 THEN member_tokens::integer
        ELSE ((span_chars::bigint * member_tokens + member_chars - 1) / member_chars)::integer END;
$$;
