-- Session context: the tenant and the principals an application sets per transaction.
SET LOCAL ROLE toolkit_owner;

-- Returns the tenant set for this transaction (or session), or NULL when none is set.
CREATE OR REPLACE FUNCTION toolkit.current_tenant()
RETURNS text
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT nullif(current_setting('toolkit.tenant', true), '')
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
