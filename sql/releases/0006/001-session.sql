-- Session context: the tenant and the principals an application sets per transaction, and the row-level security
-- every table with a tenant column gets.
SET LOCAL ROLE toolkit_owner;

-- Why tenant bindings cannot hold for a role (a superuser, BYPASSRLS, or a member of a service role, which work
-- across tenants), or NULL when they can.
CREATE OR REPLACE FUNCTION toolkit._binding_cannot_hold(role_oid oid)
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN r.rolsuper THEN 'a superuser'
        WHEN r.rolbypassrls THEN 'a role with BYPASSRLS'
        WHEN pg_has_role(r.oid, 'toolkit_owner', 'MEMBER') THEN 'a member of toolkit_owner'
        WHEN pg_has_role(r.oid, 'toolkit_writer', 'MEMBER') THEN 'a member of toolkit_writer'
        WHEN pg_has_role(r.oid, 'toolkit_deployer', 'MEMBER') THEN 'a member of toolkit_deployer'
    END
    FROM pg_catalog.pg_roles AS r
    WHERE r.oid = role_oid
$$;

-- The tenants the session's login is bound to (by role OID, so a renamed login stays bound), or NULL when it is
-- unbound. Fails closed: raises for a bound login that has since become a role a binding cannot hold for, and for
-- a login whose name has bindings recorded for another role (restored from another cluster, or the role was
-- dropped and re-created) until the owner re-links or removes them.
-- Definer: reads toolkit.tenant_bindings, which only the owner may read (a login must not list the bindings).
CREATE OR REPLACE FUNCTION toolkit._session_binding()
RETURNS text[]
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    me oid := (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user);
    bound text[];
    reason text;
BEGIN
    bound := ARRAY(SELECT b.tenant FROM toolkit.tenant_bindings AS b WHERE b.login_oid = me ORDER BY 1);
    IF cardinality(bound) = 0 THEN
        IF EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = session_user) THEN
            RAISE EXCEPTION 'login % has tenant bindings recorded under its name for another role', session_user
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'The owner re-links them (SELECT toolkit.relink_tenant_bindings()) after restoring on '
                          'another cluster, or removes them (toolkit tenant revoke --all).';
        END IF;
        RETURN NULL;
    END IF;
    reason := toolkit._binding_cannot_hold(me);
    IF reason IS NOT NULL THEN
        RAISE EXCEPTION 'login % is bound to tenants but is now %, for which a binding cannot hold', session_user,
            reason
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Revoke the role from the login, or remove its bindings (toolkit tenant revoke --all).';
    END IF;
    RETURN bound;
END
$$;

-- The tenants the session's login is bound to (toolkit tenant grant), or NULL when it is unbound and chooses its
-- tenant. A login learns only its own binding, never which other tenants exist.
-- Definer: reads the bindings through _session_binding, which only the owner may call.
CREATE OR REPLACE FUNCTION toolkit.bound_tenants()
RETURNS text[]
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT toolkit._session_binding()
$$;

-- Returns the tenant set for this transaction (or session); NULL when none is set, or when the login is bound to
-- other tenants (toolkit tenant grant): a bound login then sees no rows, whatever it set.
-- Definer: reads the bindings through _session_binding, which only the owner may call.
CREATE OR REPLACE FUNCTION toolkit.current_tenant()
RETURNS text
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wanted text := nullif(current_setting('toolkit.tenant', true), '');
    bound text[] := toolkit._session_binding();
BEGIN
    IF bound IS NULL OR wanted = ANY (bound) THEN
        RETURN wanted;
    END IF;
    RETURN NULL;
END
$$;

-- Whether the service roles' cross-tenant policy applies to this session: true, and raises (failing closed) for a
-- login bound to tenants that was later granted a service role.
-- Definer: reads the bindings through _session_binding, which only the owner may call.
CREATE OR REPLACE FUNCTION toolkit._service_access()
RETURNS boolean
LANGUAGE plpgsql
STABLE PARALLEL SAFE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM toolkit._session_binding();
    RETURN true;
END
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

-- Sets the tenant for the current transaction only (safe behind connection poolers). A login bound to tenants
-- (toolkit tenant grant) that names another one is refused, naming its binding: it would see no rows (the
-- policies hide them), and an empty answer is not how a misconfiguration should show. Setting toolkit.tenant by
-- hand instead of through this function still shows it no rows. Its first lock in a reader's transaction is
-- toolkit.tenant_bindings, which is why a migration locks that table before the views.
-- Definer: reads toolkit.tenant_bindings (owner only), one indexed lookup inline (every search calls this); a
-- binding that cannot hold is reported as the reads report it (_session_binding fails closed).
CREATE OR REPLACE FUNCTION toolkit.set_tenant(tenant text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bound text[];
BEGIN
    IF tenant IS NULL OR tenant = '' THEN
        RAISE EXCEPTION 'the tenant must be a non-empty string'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Call toolkit.set_tenant(''your-tenant'') inside the transaction that queries.';
    END IF;
    bound := ARRAY(
        SELECT b.tenant FROM toolkit.tenant_bindings AS b
        WHERE b.login_oid = (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user)
        ORDER BY 1
    );
    IF cardinality(bound) > 0 AND NOT tenant = ANY (bound) THEN
        PERFORM toolkit._session_binding();  -- a binding that can no longer hold says so first, as on every read
        RAISE EXCEPTION 'login % is bound to tenant % (toolkit tenant grant), so it cannot set tenant %',
            session_user, array_to_string(bound, ', '), quote_literal(tenant)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Set one of the tenants it is bound to, or have the DBA bind it to this one as well '
                      '(toolkit tenant grant LOGIN TENANT).';
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
-- own rows (no tenant set, no rows), the writer and the owner see all (ingest and backfill work across tenants)
-- unless the login is bound to tenants (then nothing: see _service_access).
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
        ' USING ((SELECT toolkit._service_access())) WITH CHECK ((SELECT toolkit._service_access()))', target);
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
