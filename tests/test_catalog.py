"""Catalog checks in the style of splinter's lints, on a database with live versions."""

from __future__ import annotations

import re

from support import ready_version

from toolkit import cutover
from toolkit.store import versions


def test_catalog_lints(conn, make_model):
    make_model("m1", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 5})
    ready_version(conn, "m1", 8, {"a": 5}, storage="halfvec")
    versions.create_version(conn, "m1", "fixed:5:0", "fixed:5:0@1")
    cutover.activate_version(conn, v1, force=True)

    chunk_tables = conn.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
        " (SELECT count(*) FROM pg_policies p WHERE p.schemaname = 'toolkit' AND p.tablename = c.relname)"
        " FROM pg_class c WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind = 'r'"
        " AND c.relname LIKE 'chunks_v%'"
    ).fetchall()
    assert len(chunk_tables) == 3
    for name, rls, forced, policies in chunk_tables:
        assert rls and forced, f"{name}: RLS must be enabled and forced"
        assert policies == 3, f"{name}: {policies} policies, expected tenant_isolation, service_access, access_labels"

    views = conn.execute(
        "SELECT relname, reloptions FROM pg_class WHERE relnamespace = 'toolkit'::regnamespace AND relkind = 'v'"
    ).fetchall()
    assert views
    for name, options in views:
        assert options and "security_invoker=true" in options, f"view {name} is not security_invoker"

    unpinned = conn.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = 'toolkit'::regnamespace"
        " AND NOT coalesce(proconfig::text LIKE '%search_path=%', false)"
    ).fetchall()
    assert unpinned == []

    public_definers = conn.execute(
        "SELECT proname FROM pg_proc WHERE pronamespace = 'toolkit'::regnamespace AND prosecdef"
        " AND has_function_privilege('public', oid, 'EXECUTE')"
    ).fetchall()
    assert public_definers == []

    # every other table with a tenant column: RLS enabled and forced, the two tenant policies; documents also the
    # access-label policy for the reader (passages are cut from them)
    for table, policies in (
        ("documents", ["access_labels", "service_access", "tenant_isolation"]),
        ("query_log", ["service_access", "tenant_isolation"]),
        ("document_metadata_keys", ["access_labels", "service_access", "tenant_isolation"]),
    ):
        row = conn.execute(
            "SELECT relrowsecurity, relforcerowsecurity,"
            " (SELECT array_agg(policyname ORDER BY policyname) FROM pg_policies WHERE schemaname = 'toolkit'"
            "  AND tablename = %s) FROM pg_class WHERE oid = ('toolkit.' || %s)::regclass",
            (table, table),
        ).fetchone()
        assert row == (True, True, policies), table
    tenant_tables = {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant'"
            " WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind = 'r'"
        )
    }
    # each version's full-text postings and statistics: RLS enabled and forced, the chunk table's policies
    postings = {name for name in tenant_tables if re.fullmatch(r"term(s|_stats)_v\d+", name)}
    assert postings, tenant_tables
    for name in postings:
        row = conn.execute(
            "SELECT relrowsecurity, relforcerowsecurity,"
            " (SELECT array_agg(policyname ORDER BY policyname) FROM pg_policies WHERE schemaname = 'toolkit'"
            "  AND tablename = %s) FROM pg_class WHERE oid = ('toolkit.' || %s)::regclass",
            (name, name),
        ).fetchone()
        assert row == (True, True, ["access_labels", "service_access", "tenant_isolation"]), name
    # the bindings table holds tenants too, but is private (no role but the owner reads it) instead of per tenant;
    # so is the audit log of deletions (the owner and the deployer read it; no application may)
    assert tenant_tables - {name for name, *_ in chunk_tables} - postings == {
        "documents",
        "document_metadata_keys",
        "query_log",
        "tenant_bindings",
        "deletions",
    }
