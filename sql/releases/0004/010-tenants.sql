-- Logins bound to tenants (optional per login): a bound login sees only its tenants, whatever it sets
-- toolkit.tenant to (toolkit.current_tenant() returns NULL for any other, and the policies then hide every row).
SET LOCAL ROLE toolkit_owner;

-- Binds a login to tenants (in addition to those it has); refuses roles that bypass tenants (service roles,
-- superusers, BYPASSRLS), for which a binding could not hold. Returns the login's tenants.
-- Definer: writes toolkit.tenant_bindings, which only the owner may write (run by the DBA).
CREATE OR REPLACE FUNCTION toolkit.bind_tenants(login name, tenants text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    SELECT x.rolname, x.rolsuper, x.rolbypassrls INTO r FROM pg_catalog.pg_roles AS x WHERE x.rolname = login;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no role named %', quote_ident(login)
            USING ERRCODE = 'undefined_object', HINT = 'Create the login first: CREATE ROLE ... LOGIN IN ROLE toolkit_reader.';
    END IF;
    IF r.rolsuper OR r.rolbypassrls OR pg_has_role(login, 'toolkit_writer', 'USAGE')
        OR pg_has_role(login, 'toolkit_owner', 'USAGE') THEN
        RAISE EXCEPTION 'role % bypasses tenants (superuser, BYPASSRLS, or a member of toolkit_writer or toolkit_owner), '
            'so a binding would not hold', quote_ident(login)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Bind the application''s reader login instead.';
    END IF;
    IF tenants IS NULL OR cardinality(tenants) = 0 OR EXISTS (SELECT FROM unnest(tenants) AS t WHERE coalesce(t, '') = '')
    THEN
        RAISE EXCEPTION 'give one or more non-empty tenant names' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO toolkit.tenant_bindings AS b (login, tenant)
    SELECT bind_tenants.login, t FROM unnest(tenants) AS t
    ON CONFLICT DO NOTHING;
    RETURN ARRAY(SELECT b.tenant FROM toolkit.tenant_bindings AS b WHERE b.login = bind_tenants.login ORDER BY 1);
END
$$;

-- Removes a login's bindings to the given tenants (all of them when tenants is NULL); a login with none left is
-- unbound again (it chooses its tenant). Returns the tenants it keeps.
-- Definer: writes toolkit.tenant_bindings, which only the owner may write (run by the DBA).
CREATE OR REPLACE FUNCTION toolkit.unbind_tenants(login name, tenants text[] DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS x WHERE x.rolname = login)
        AND NOT EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = unbind_tenants.login) THEN
        RAISE EXCEPTION 'there is no role named %, and no binding of one', quote_ident(login)
            USING ERRCODE = 'undefined_object', HINT = 'List the bindings with toolkit tenant list.';
    END IF;
    DELETE FROM toolkit.tenant_bindings AS b
    WHERE b.login = unbind_tenants.login AND (tenants IS NULL OR b.tenant = ANY (tenants));
    RETURN ARRAY(SELECT b.tenant FROM toolkit.tenant_bindings AS b WHERE b.login = unbind_tenants.login ORDER BY 1);
END
$$;

-- Every binding: login and tenant, who granted it and when.
-- Definer: reads toolkit.tenant_bindings, which only the owner may read.
CREATE OR REPLACE FUNCTION toolkit.list_tenant_bindings()
RETURNS TABLE (login name, tenant text, granted_by name, granted_at timestamptz)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.login, b.tenant, b.granted_by, b.granted_at FROM toolkit.tenant_bindings AS b ORDER BY 1, 2
$$;

-- The tenants that have documents, with their document counts (for picking the tenant a query set is about).
-- Definer: counts every tenant's documents, which a deployer reads one tenant at a time.
CREATE OR REPLACE FUNCTION toolkit.document_tenants()
RETURNS TABLE (tenant text, documents bigint)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.tenant, count(*) FROM toolkit.documents AS d GROUP BY 1 ORDER BY 1
$$;
