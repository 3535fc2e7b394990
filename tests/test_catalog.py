"""Catalog checks in the style of splinter's lints, on a database with live versions."""

from __future__ import annotations

from support import ready_version

from toolkit import versions


def test_catalog_lints(conn, make_model):
    make_model("m1", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 5})
    ready_version(conn, "m1", 8, {"a": 5}, storage="halfvec")
    versions.create_version(conn, "m1", "fixed:5:0", "fixed:5:0@1")
    versions.activate_version(conn, v1, force=True)

    chunk_tables = conn.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,"
        " (SELECT count(*) FROM pg_policies p WHERE p.schemaname = 'toolkit' AND p.tablename = c.relname)"
        " FROM pg_class c WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind = 'r'"
        " AND c.relname LIKE 'chunks_v%'"
    ).fetchall()
    assert len(chunk_tables) == 3
    for name, rls, forced, policies in chunk_tables:
        assert rls and forced, f"{name}: RLS must be enabled and forced"
        assert policies >= 1, f"{name}: no policy"

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

    documents = conn.execute(
        "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = 'toolkit.documents'::regclass"
    ).fetchone()
    assert documents == (True, True)
