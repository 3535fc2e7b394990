-- Search filters on documents.metadata (metadata.key=value, toolkit._search_filter_values): a containment test
-- (metadata @> '{"key": value}'), which this GIN index serves. jsonb_path_ops: smaller and faster than the default
-- operator class for @>, the only operator the filters use.
SET LOCAL ROLE toolkit_owner;

CREATE INDEX IF NOT EXISTS documents_metadata_idx ON toolkit.documents USING gin (metadata jsonb_path_ops);
