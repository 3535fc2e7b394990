-- The audit log of deletions: documents deleted at a user's request (toolkit delete) and tenants erased (toolkit
-- tenant erase). It keeps what was removed and who removed it, not the removed data: document ids are kept as their
-- SHA-256 (a deleted id can be checked against the log, not read from it). Kept after a downgrade (an upgrade
-- creates it only where it is missing).
SET LOCAL ROLE toolkit_owner;

CREATE TABLE IF NOT EXISTS toolkit.deletions (
    deletion_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action text NOT NULL CHECK (action IN ('delete', 'erase')),
    tenant text NOT NULL CHECK (tenant <> ''),
    doc_id_sha256 text[] NOT NULL DEFAULT '{}',
    counts jsonb NOT NULL,
    actor text NOT NULL DEFAULT session_user,
    reason text,
    happened_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE toolkit.deletions IS
'Audit log of deleted documents and erased tenants: counts per table, document ids as SHA-256, who and when.';
