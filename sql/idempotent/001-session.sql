-- Session context: the tenant and the principals an application sets per transaction, and the row-level security
-- every table with a tenant column gets.
SET LOCAL ROLE toolkit_owner;

-- Returns the tenant set for this transaction (or session); NULL when none is set, or when the login is bound to
-- other tenants (toolkit tenant grant): a bound login then sees no rows, whatever it set.
-- Definer: reads toolkit.tenant_bindings, which only the owner may read (a login must not list the bindings).
CREATE OR REPLACE FUNCTION toolkit.current_tenant()
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.tenant
    FROM (SELECT nullif(current_setting('toolkit.tenant', true), '') AS tenant) AS s
    WHERE NOT EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = session_user)
        OR EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = session_user AND b.tenant = s.tenant)
$$;

-- Returns the principals (users, groups) that access labels are matched against; empty when none.
CREATE OR REPLACE FUNCTION toolkit.current_principals()
RETURNS text[]
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(nullif(current_setting('toolkit.principals', true), '')::text[], '{}'::text[])
$$;

-- Sets the tenant for the current transaction only (safe behind connection poolers).
CREATE OR REPLACE FUNCTION toolkit.set_tenant(tenant text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tenant IS NULL OR tenant = '' THEN
        RAISE EXCEPTION 'the tenant must be a non-empty string'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Call toolkit.set_tenant(''your-tenant'') inside the transaction that queries.';
    END IF;
    RETURN set_config('toolkit.tenant', tenant, true);
END
$$;

-- Sets the principals for the current transaction only; labels are matched against them.
CREATE OR REPLACE FUNCTION toolkit.set_principals(principals text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM set_config('toolkit.principals', coalesce(principals, '{}'::text[])::text, true);
    RETURN toolkit.current_principals();
END
$$;

-- True when the current role is a service role (writer or owner) that works across tenants.
CREATE OR REPLACE FUNCTION toolkit._is_service_role()
RETURNS boolean
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_has_role(current_user, 'toolkit_writer', 'USAGE')
        OR pg_has_role(current_user, 'toolkit_owner', 'USAGE')
$$;

-- (Re)applies the tenant policies to a table with a tenant column: RLS enabled and forced, each tenant sees its
-- own rows (no tenant set, no rows), the writer and the owner see all (ingest and backfill work across tenants).
CREATE OR REPLACE FUNCTION toolkit._secure_tenant_table(target regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', target);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', target);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %s', target);
    EXECUTE format(
        'CREATE POLICY tenant_isolation ON %s AS PERMISSIVE FOR ALL TO public'
        ' USING (tenant = (SELECT toolkit.current_tenant()))'
        ' WITH CHECK (tenant = (SELECT toolkit.current_tenant()))', target);
    EXECUTE format('DROP POLICY IF EXISTS service_access ON %s', target);
    EXECUTE format(
        'CREATE POLICY service_access ON %s AS PERMISSIVE FOR ALL TO toolkit_writer, toolkit_owner'
        ' USING (true) WITH CHECK (true)', target);
END
$$;

-- Restrictive: a labelled row of a table with access_labels is visible only to principals holding one of its labels
-- (service roles see every row). On every chunk table for every role, and on documents for the reader (the deployer
-- reads documents to resolve labelled answers).
CREATE OR REPLACE FUNCTION toolkit._secure_access_labels(target regclass, applies_to text DEFAULT 'public')
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('DROP POLICY IF EXISTS access_labels ON %s', target);
    EXECUTE format(
        'CREATE POLICY access_labels ON %s AS RESTRICTIVE FOR SELECT TO %s'
        ' USING (cardinality(access_labels) = 0'
        ' OR access_labels OPERATOR(pg_catalog.&&) (SELECT toolkit.current_principals())'
        ' OR (SELECT toolkit._is_service_role()))', target,
        CASE WHEN applies_to = 'public' THEN 'public' ELSE quote_ident(applies_to) END);
END
$$;
