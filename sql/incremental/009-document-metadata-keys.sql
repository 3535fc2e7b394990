-- Search filters on documents.metadata (metadata.key=value, toolkit._search_filter_values) through an index a reader
-- can use. A GIN index on documents.metadata cannot serve a caller under row-level security (every toolkit role: the
-- policies are forced): jsonb's @> is not leakproof, so PostgreSQL tests it only after the policies, never in an
-- index scan. Text equality is leakproof: each top-level key and scalar value of a document's metadata is kept here as
-- one row, the SHA-256 (hex) of its canonical JSON [key, value] (a number without trailing zeros), found through the
-- primary key. Written by the documents' trigger (toolkit._sync_document_metadata_keys); removed with the document.
SET LOCAL ROLE toolkit_owner;

CREATE TABLE IF NOT EXISTS toolkit.document_metadata_keys (
    tenant text NOT NULL,
    key_value text NOT NULL,
    doc_id text NOT NULL,
    access_labels text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, key_value, doc_id),
    FOREIGN KEY (tenant, doc_id) REFERENCES toolkit.documents (tenant, doc_id) ON DELETE CASCADE ON UPDATE CASCADE
);
COMMENT ON TABLE toolkit.document_metadata_keys IS
'Each document''s top-level metadata keys and scalar values (SHA-256 of canonical JSON [key, value]), for filters.';
CREATE INDEX IF NOT EXISTS document_metadata_keys_doc_idx ON toolkit.document_metadata_keys (tenant, doc_id);

-- The documents stored before this release (toolkit._metadata_key_value computes the same value for new ones; a test
-- checks the two agree).
INSERT INTO toolkit.document_metadata_keys (tenant, key_value, doc_id, access_labels)
SELECT
    d.tenant,
    encode(sha256(convert_to(jsonb_build_array(
        e.key, CASE WHEN jsonb_typeof(e.value) = 'number' THEN to_jsonb(trim_scale(e.value::numeric)) ELSE e.value END
    )::text, 'UTF8')), 'hex') AS key_value,
    d.doc_id,
    d.access_labels
FROM toolkit.documents AS d
CROSS JOIN LATERAL jsonb_each(d.metadata) AS e
WHERE jsonb_typeof(d.metadata) = 'object' AND jsonb_typeof(e.value) NOT IN ('object', 'array')
ON CONFLICT DO NOTHING;
