-- The metadata filters' index (009-document-metadata-keys.sql): each document's top-level metadata keys with a scalar
-- value, as one text each, kept by a trigger on toolkit.documents. toolkit._search_filter_values looks a filter's
-- keys up there (an index a caller under row-level security can use: text equality is leakproof, jsonb's @> is not)
-- and checks the documents found with @>.
SET LOCAL ROLE toolkit_owner;

-- One top-level key and its value as the metadata filters index them: the SHA-256 (hex) of the canonical JSON
-- [key, value], a number without trailing zeros (2024 and 2024.0 are equal in jsonb, as @> compares them).
CREATE OR REPLACE FUNCTION toolkit._metadata_key_value(key text, value jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT encode(sha256(convert_to(jsonb_build_array(
        key, CASE WHEN jsonb_typeof(value) = 'number' THEN to_jsonb(trim_scale(value::numeric)) ELSE value END
    )::text, 'UTF8')), 'hex')
$$;

-- Keeps a document's rows of toolkit.document_metadata_keys in step with its metadata and access labels (a deleted
-- document's rows go with it: the foreign key cascades). Keys whose value is an object or a list are not indexed
-- (a filter compares a key with one scalar).
-- Definer: the writer writes documents, not this table.
CREATE OR REPLACE FUNCTION toolkit._sync_document_metadata_keys()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tg_op = 'UPDATE' THEN
        IF new.metadata IS NOT DISTINCT FROM old.metadata AND new.access_labels IS NOT DISTINCT FROM old.access_labels
        THEN
            RETURN NULL;
        END IF;
        DELETE FROM toolkit.document_metadata_keys AS m WHERE m.tenant = new.tenant AND m.doc_id = new.doc_id;
    END IF;
    IF jsonb_typeof(new.metadata) = 'object' THEN
        INSERT INTO toolkit.document_metadata_keys (tenant, key_value, doc_id, access_labels)
        SELECT new.tenant, toolkit._metadata_key_value(e.key, e.value), new.doc_id, new.access_labels
        FROM jsonb_each(new.metadata) AS e
        WHERE jsonb_typeof(e.value) NOT IN ('object', 'array');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER sync_metadata_keys AFTER INSERT OR UPDATE OF metadata, access_labels ON toolkit.documents
FOR EACH ROW EXECUTE FUNCTION toolkit._sync_document_metadata_keys();
