-- Roles and inputs hardened (issue 28): tenant bindings held by role OID (a renamed login stays bound), the query
-- log bounded (who logged each question, a rate per login and a row cap). Re-runnable: an upgrade after a
-- downgrade to 0004 (which keeps these columns) applies it again.
SET LOCAL ROLE toolkit_owner;

-- A binding names the role by OID; login keeps the name it had when bound (the owner's relink function
-- re-links by it after a restore into another cluster, where OIDs differ: toolkit tenant relink).
ALTER TABLE toolkit.tenant_bindings ADD COLUMN IF NOT EXISTS login_oid oid;
UPDATE toolkit.tenant_bindings AS b SET login_oid = r.oid
FROM pg_catalog.pg_roles AS r
WHERE r.rolname = b.login AND b.login_oid IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS tenant_bindings_login_oid_idx ON toolkit.tenant_bindings (login_oid, tenant);
COMMENT ON COLUMN toolkit.tenant_bindings.login_oid IS
'The bound role (pg_roles.oid); NULL until relinked when the role named login did not exist.';
COMMENT ON COLUMN toolkit.tenant_bindings.login IS
'The name of the role when it was bound (a rename does not unbind it: the OID holds the binding).';

-- Who logged each question (the rate per login is counted from it) and the log's bounds.
ALTER TABLE toolkit.query_log ADD COLUMN IF NOT EXISTS logged_by name NOT NULL DEFAULT session_user;
CREATE INDEX IF NOT EXISTS query_log_logged_by_idx ON toolkit.query_log (logged_by, logged_at);
ALTER TABLE toolkit.query_log_settings
ADD COLUMN IF NOT EXISTS max_rows bigint NOT NULL DEFAULT 1000000 CHECK (max_rows > 0),
ADD COLUMN IF NOT EXISTS max_per_minute integer NOT NULL DEFAULT 600 CHECK (max_per_minute > 0),
ADD COLUMN IF NOT EXISTS skipped_over_rate bigint NOT NULL DEFAULT 0,
ADD COLUMN IF NOT EXISTS pruned_over_cap bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN toolkit.query_log_settings.max_rows IS
'The most questions kept: pruning deletes the oldest beyond it (besides those past the retention).';
COMMENT ON COLUMN toolkit.query_log_settings.max_per_minute IS
'The most questions one login may log per minute; log_query skips (and counts) the rest.';
