-- Logins bound to tenants (optional per login): a bound login sees only its tenants, whatever it sets
-- toolkit.tenant to (toolkit.current_tenant() returns NULL for any other, and the policies then hide every row).
SET LOCAL ROLE toolkit_owner;

-- Binds a login to tenants (in addition to those it has), by role OID (a renamed login stays bound). Refuses roles
-- for which a binding could not hold: group (NOLOGIN) roles, whose members would not be bound, the toolkit's own
-- roles, superusers, BYPASSRLS and members of a service role. Returns the login's tenants.
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
    reason text;
BEGIN
    SELECT x.oid, x.rolname, x.rolcanlogin INTO r FROM pg_catalog.pg_roles AS x WHERE x.rolname = login;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no role named %', quote_ident(login)
            USING ERRCODE = 'undefined_object', HINT = 'Create the login first: CREATE ROLE ... LOGIN IN ROLE toolkit_reader.';
    END IF;
    IF r.rolname IN ('toolkit_reader', 'toolkit_writer', 'toolkit_deployer', 'toolkit_owner') THEN
        RAISE EXCEPTION 'role % is one of the toolkit''s roles, not a login: binding it would bind no one',
            quote_ident(login)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Bind the application''s login (a member of toolkit_reader).';
    END IF;
    IF NOT r.rolcanlogin THEN
        RAISE EXCEPTION 'role % cannot log in (a group role): its members would not be bound', quote_ident(login)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Bind each login that reads: a binding holds for the login that connects, not its groups.';
    END IF;
    reason := toolkit._binding_cannot_hold(r.oid);
    IF reason IS NOT NULL THEN
        RAISE EXCEPTION 'role % bypasses tenants (%), so a binding would not hold', quote_ident(login), reason
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Bind the application''s reader login instead.';
    END IF;
    IF tenants IS NULL OR cardinality(tenants) = 0 OR EXISTS (SELECT FROM unnest(tenants) AS t WHERE coalesce(t, '') = '')
    THEN
        RAISE EXCEPTION 'give one or more non-empty tenant names' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A binding recorded under this name for another role (dropped, or restored from another cluster) is stale.
    IF EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = r.rolname AND b.login_oid IS DISTINCT FROM r.oid)
    THEN
        RAISE EXCEPTION 'login % has tenant bindings recorded under its name for another role', quote_ident(login)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Re-link them (SELECT toolkit.relink_tenant_bindings()) or remove them (toolkit tenant revoke '
                      '--all) first.';
    END IF;
    -- A renamed login: its bindings take its current name.
    UPDATE toolkit.tenant_bindings AS b SET login = r.rolname WHERE b.login_oid = r.oid AND b.login <> r.rolname;
    INSERT INTO toolkit.tenant_bindings AS b (login, login_oid, tenant)
    SELECT r.rolname, r.oid, t FROM unnest(tenants) AS t
    ON CONFLICT DO NOTHING;
    RETURN ARRAY(SELECT b.tenant FROM toolkit.tenant_bindings AS b WHERE b.login_oid = r.oid ORDER BY 1);
END
$$;

-- Removes a login's bindings to the given tenants (all of them when tenants is NULL); a login with none left is
-- unbound again (it chooses its tenant). The login is its current name, or the name a stale binding was recorded
-- under. Returns the tenants it keeps.
-- Definer: writes toolkit.tenant_bindings, which only the owner may write (run by the DBA).
CREATE OR REPLACE FUNCTION toolkit.unbind_tenants(login name, tenants text[] DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    role_oid oid := (SELECT x.oid FROM pg_catalog.pg_roles AS x WHERE x.rolname = login);
BEGIN
    IF role_oid IS NULL
        AND NOT EXISTS (SELECT FROM toolkit.tenant_bindings AS b WHERE b.login = unbind_tenants.login) THEN
        RAISE EXCEPTION 'there is no role named %, and no binding of one', quote_ident(login)
            USING ERRCODE = 'undefined_object', HINT = 'List the bindings with toolkit tenant list.';
    END IF;
    DELETE FROM toolkit.tenant_bindings AS b
    WHERE (b.login_oid = role_oid OR b.login = unbind_tenants.login)
        AND (tenants IS NULL OR b.tenant = ANY (tenants));
    RETURN ARRAY(
        SELECT b.tenant FROM toolkit.tenant_bindings AS b
        WHERE b.login_oid = role_oid OR b.login = unbind_tenants.login ORDER BY 1
    );
END
$$;

-- Every binding: the login (its current name), the tenant, whether it holds (bound; or, failing closed: role
-- dropped or not re-linked, a group role, a service role), who granted it and when, and the name it was bound under.
-- Definer: reads toolkit.tenant_bindings, which only the owner may read.
CREATE OR REPLACE FUNCTION toolkit.list_tenant_bindings()
RETURNS TABLE (login name, tenant text, status text, granted_by name, granted_at timestamptz, bound_as name)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(r.rolname, b.login), b.tenant,
        CASE
            WHEN r.oid IS NULL THEN 'not holding: no role has this binding''s OID (run relink_tenant_bindings)'
            WHEN NOT r.rolcanlogin THEN 'not holding: a group role (bind its logins)'
            WHEN toolkit._binding_cannot_hold(r.oid) IS NOT NULL
                THEN 'refused at query time: now ' || toolkit._binding_cannot_hold(r.oid)
            ELSE 'bound'
        END,
        b.granted_by, b.granted_at, b.login
    FROM toolkit.tenant_bindings AS b
    LEFT JOIN pg_catalog.pg_roles AS r ON b.login_oid = r.oid
    ORDER BY 1, 2
$$;

-- Re-links bindings to roles by the name they were bound under, where their OID names no role (after a restore
-- into another cluster, where role OIDs differ). Fails closed: a name that would re-link to a role already bound
-- under another name is an ambiguity it refuses. Returns each re-linked login and its tenants.
-- Definer: writes toolkit.tenant_bindings, which only the owner may write (run by the DBA after a restore).
CREATE OR REPLACE FUNCTION toolkit.relink_tenant_bindings()
RETURNS TABLE (login name, tenants text[], status text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b record;
    r record;
BEGIN
    FOR b IN
        SELECT x.login AS name, array_agg(x.tenant ORDER BY x.tenant) AS tenants
        FROM toolkit.tenant_bindings AS x
        WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS y WHERE y.oid = x.login_oid)
        GROUP BY x.login ORDER BY x.login
    LOOP
        login := b.name;
        tenants := b.tenants;
        SELECT y.oid, y.rolcanlogin INTO r FROM pg_catalog.pg_roles AS y WHERE y.rolname = b.name;
        IF NOT FOUND THEN
            status := 'no role of that name: left unlinked (it binds no one; remove it with tenant revoke --all)';
        ELSIF EXISTS (SELECT FROM toolkit.tenant_bindings AS x WHERE x.login_oid = r.oid AND x.login <> b.name) THEN
            RAISE EXCEPTION 'bindings recorded for % would re-link to a role already bound under another name',
                quote_ident(b.name)
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Check toolkit tenant list and remove the bindings that are wrong first.';
        ELSE
            DELETE FROM toolkit.tenant_bindings AS x
            WHERE x.login = b.name AND x.login_oid IS DISTINCT FROM r.oid
                AND EXISTS (SELECT FROM toolkit.tenant_bindings AS y WHERE y.login_oid = r.oid AND y.tenant = x.tenant);
            UPDATE toolkit.tenant_bindings AS x SET login_oid = r.oid
            WHERE x.login = b.name AND x.login_oid IS DISTINCT FROM r.oid;
            status := CASE WHEN toolkit._binding_cannot_hold(r.oid) IS NOT NULL OR NOT r.rolcanlogin
                THEN 're-linked, but it cannot hold for that role: see toolkit tenant list' ELSE 're-linked' END;
        END IF;
        RETURN NEXT;
    END LOOP;
END
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
    SELECT d.tenant, count(*) FROM toolkit.documents AS d
    WHERE (SELECT toolkit._service_access())  -- a bound login given the deployer role lists no tenants
    GROUP BY 1 ORDER BY 1
$$;
