-- Serving across migrations and least privilege: the deployer role, private tables the toolkit locks (no reader
-- may lock them), the canary traffic split, the opt-in query log, logins bound to tenants; API keys and URL
-- credentials already stored in the model registry are removed (they come from the environment from now on).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'toolkit_deployer') THEN
        CREATE ROLE toolkit_deployer NOLOGIN;
    END IF;
END
$$;

SET LOCAL ROLE toolkit_owner;

-- Locks. Each is taken with LOCK TABLE by the toolkit's own functions; no role but the owner has any privilege on
-- these tables, so no other session can take or hold their locks. They never hold rows.
CREATE TABLE toolkit.version_set_lock ();
COMMENT ON TABLE toolkit.version_set_lock IS
'Lock only: versions are created and retired under EXCLUSIVE, chunk writes run under SHARE.';
CREATE TABLE toolkit.cutover_lock ();
COMMENT ON TABLE toolkit.cutover_lock IS 'Lock only: one cutover, rollback, retirement or canary change at a time.';
CREATE TABLE toolkit.migration_lock ();
COMMENT ON TABLE toolkit.migration_lock IS 'Lock only: one schema migration at a time.';

-- The canary: a share of requests (and whole tenants) served by a candidate version beside the active one.
CREATE TABLE toolkit.traffic_split (
    singleton boolean PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    candidate integer NOT NULL REFERENCES toolkit.versions (version),
    percent numeric(5, 2) NOT NULL CHECK (percent >= 0 AND percent <= 100),
    tenants text[] NOT NULL DEFAULT '{}',
    evaluation_id bigint REFERENCES toolkit.evaluations (evaluation_id),
    forced boolean NOT NULL DEFAULT FALSE,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE toolkit.traffic_split IS
'The canary: which candidate serves which share of request keys and which tenants (at most one row).';

ALTER TABLE toolkit.cutovers DROP CONSTRAINT cutovers_action_check;
ALTER TABLE toolkit.cutovers ADD CONSTRAINT cutovers_action_check
CHECK (action IN ('activate', 'rollback', 'retire', 'canary'));
ALTER TABLE toolkit.cutovers ADD COLUMN details jsonb NOT NULL DEFAULT '{}';

-- The query log: off by default (sample_rate 0). It holds users' questions: personal data.
CREATE TABLE toolkit.query_log (
    tenant text NOT NULL CHECK (tenant <> ''),
    query_id uuid NOT NULL DEFAULT gen_random_uuid(),
    logged_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    request_key text,
    question text NOT NULL,
    version integer NOT NULL,
    model_alias text NOT NULL,
    k integer NOT NULL,
    results jsonb NOT NULL DEFAULT '[]',
    latency_ms double precision,
    PRIMARY KEY (tenant, query_id)
);
COMMENT ON TABLE toolkit.query_log IS
'Sampled questions and what they were served (personal data: off by default, kept for the retention period).';
CREATE INDEX query_log_logged_at_idx ON toolkit.query_log (logged_at);
ALTER TABLE toolkit.query_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE toolkit.query_log FORCE ROW LEVEL SECURITY;

CREATE TABLE toolkit.query_log_settings (
    singleton boolean PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    sample_rate double precision NOT NULL DEFAULT 0 CHECK (sample_rate >= 0 AND sample_rate <= 1),
    retention interval NOT NULL DEFAULT '30 days' CHECK (retention > interval '0'),
    last_pruned_at timestamptz NOT NULL DEFAULT '-infinity',
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE toolkit.query_log_settings IS 'Whether questions are logged (a share of them), and for how long.';
INSERT INTO toolkit.query_log_settings DEFAULT VALUES;

-- Logins bound to tenants: a bound login sees only its tenants, whatever it sets toolkit.tenant to.
CREATE TABLE toolkit.tenant_bindings (
    login name NOT NULL,
    tenant text NOT NULL CHECK (tenant <> ''),
    granted_by name NOT NULL DEFAULT session_user,
    granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (login, tenant)
);
COMMENT ON TABLE toolkit.tenant_bindings IS
'Logins bound to tenants (toolkit tenant grant); logins without a row keep choosing their tenant.';

-- Which definition of the chunk-table security a version's table last received: an upgrade that does not change
-- it leaves the table (and the readers on it) alone.
ALTER TABLE toolkit.versions ADD COLUMN secured_with text;

-- NaN passes CHECK (price >= 0) (NaN sorts above every number): refuse it too; a NaN already stored becomes 0.
UPDATE toolkit.models SET price_per_million_tokens = 0
WHERE price_per_million_tokens = 'NaN'::numeric;
ALTER TABLE toolkit.models ADD CONSTRAINT models_price_is_a_number
CHECK (price_per_million_tokens <> 'NaN'::numeric);

-- Secrets stored by earlier releases: options whose name says key, secret, token, password or credential, and
-- user:password@ in a base URL. They are removed, and the migration warns which aliases need their key set in the
-- environment (OPENAI_API_KEY, or the variable named by --option api_key_env=...).
DO $$
DECLARE
    m record;
    removed text[];
BEGIN
    FOR m IN SELECT x.alias, x.options, x.base_url FROM toolkit.models AS x ORDER BY x.alias LOOP
        removed := ARRAY(
            SELECT o.key FROM jsonb_object_keys(m.options) AS o (key)
            WHERE o.key ~* '(api[_-]?key|secret|token|passw(or)?d|credential|auth)' AND o.key !~* '_env$'
            ORDER BY o.key
        );
        IF m.base_url ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@' THEN
            removed := removed || 'credentials in base_url'::text;
        END IF;
        IF cardinality(removed) > 0 THEN
            UPDATE toolkit.models AS x
            SET options = x.options - ARRAY(
                SELECT o.key FROM jsonb_object_keys(x.options) AS o (key)
                WHERE o.key ~* '(api[_-]?key|secret|token|passw(or)?d|credential|auth)' AND o.key !~* '_env$'
            ),
            base_url = regexp_replace(x.base_url, '^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@', '\1')
            WHERE x.alias = m.alias;
            RAISE WARNING 'model %: removed the stored secret(s) % from the registry', m.alias, removed
                USING HINT = 'Set the key in the environment of every toolkit process that embeds with this model '
                    '(OPENAI_API_KEY, or register a new alias with --option api_key_env=VARIABLE).';
        END IF;
    END LOOP;
END
$$;
