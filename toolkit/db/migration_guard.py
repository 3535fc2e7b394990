"""What alembic revisions need beyond their SQL: refusing a downgrade that would drop data unless forced, and
putting back the functions, views and policies of the release a downgrade returns to."""

from __future__ import annotations

from psycopg import sql

from toolkit.db.sql_files import release_files


def forced() -> bool:
    """True when the migration was forced: ``toolkit migrate --force`` or ``alembic -x force=yes``."""
    from alembic import context

    if context.config.attributes.get("force"):
        return True
    value = context.get_x_argument(as_dictionary=True).get("force", "")
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def refuse_data_loss(
    connection, tables: list[str], *, chunk_rows: bool = False, counts: dict[str, str] | None = None
) -> None:
    """Raises (nothing changed) when a downgrade would drop rows of these tables (or, with ``chunk_rows``, of any
    live chunk table, or what the ``counts`` queries count), naming how many, unless the migration is forced."""
    from alembic.util import CommandError

    if forced():
        return
    queries = dict(counts or {})
    counts = {name: connection.execute(query).fetchone()[0] for name, query in queries.items()}
    for table in tables:
        if connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None:
            counts[table] = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # our own names
    # The chunk tables' names as the schema being downgraded says them. Not toolkit._chunk_table (the one name
    # everything else asks): a downgrade runs against the schemas of older revisions too, and releases before 0005
    # do not have it; _version_table is in every one, so its qualified form is spelled here, the one copy outside
    # sql/ (tests/test_single_source.py allows it in this file only).
    names_versions = connection.execute(
        "SELECT to_regclass('toolkit.versions') IS NOT NULL"
        " AND to_regprocedure('toolkit._version_table(integer)') IS NOT NULL"
    ).fetchone()[0]
    if chunk_rows and names_versions:
        total = 0
        for (table,) in connection.execute(
            # Retired versions' tables are gone; to_regclass below skips them.
            "SELECT format('toolkit.%I', toolkit._version_table(version)) FROM toolkit.versions ORDER BY version"
        ).fetchall():
            if connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None:
                total += connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        counts["chunk rows (every version)"] = total
    lost = {name: count for name, count in counts.items() if count}
    if lost:
        listing = ", ".join(f"{count:,} in {name}" for name, count in lost.items())
        raise CommandError(
            f"This downgrade would delete data ({listing}); nothing was changed. Back the database up first "
            "(pg_dump), then run it again with --force (toolkit migrate) or -x force=yes (alembic)."
        )


def restore_release(connection, revision: str, *, replaced: list[str], dropped_views: list[str] = ()) -> None:
    """Re-applies the idempotent SQL of the release last shipped at ``revision`` over this release's, so the schema a
    downgrade leaves is one that release works with. Runs in the migration's transaction.

    Functions are replaced in place (CREATE OR REPLACE), not dropped first: a reader statement that is inside a
    function when the downgrade commits finishes with the helpers it calls still there. Only what the older release
    cannot replace is dropped: the functions in ``replaced`` (their signature or result changed; given with their
    argument types), the views in ``dropped_views`` and the model registry's trigger. Functions this release added
    stay, unused, until the next upgrade replaces them, and keep their EXECUTE grants (the older release's grants
    file revokes everything first): a reader inside one of this release's functions when the downgrade commits
    may still call them.

    Likewise the tables the older release does not know (a later release's per-version postings and statistics,
    terms_vN and term_stats_vN) keep the privileges the roles held on them: the older release's grants file revokes
    every table's first, and the functions kept above read them."""
    # The grants of this release's functions, to give back to those the older release does not define.
    granted = connection.execute(
        "SELECT p.proname, p.oid::regprocedure::text, r.rolname FROM pg_catalog.pg_proc AS p"
        " CROSS JOIN unnest(ARRAY['toolkit_reader', 'toolkit_writer', 'toolkit_deployer']) AS r (rolname)"
        " WHERE p.pronamespace = 'toolkit'::regnamespace AND has_function_privilege(r.rolname, p.oid, 'EXECUTE')"
    ).fetchall()
    held = _table_privileges(connection)
    connection.execute("SET LOCAL ROLE toolkit_owner")
    # The signatures name pgvector's types unqualified: resolve them where the extension is.
    saved = connection.execute(
        "SELECT current_setting('search_path'), set_config('search_path', toolkit._vector_schema(), true)"
    ).fetchone()[0]
    connection.execute("DROP TRIGGER IF EXISTS check_model_row ON toolkit.models")
    for view in dropped_views:
        connection.execute(f"DROP VIEW IF EXISTS {view}")  # names given by the revision itself
    for function in replaced:
        connection.execute(f"DROP FUNCTION IF EXISTS {function}")
    connection.execute("SELECT set_config('search_path', %s, true)", (saved,))
    connection.execute("RESET ROLE")
    release_sql = ""
    for path in release_files(revision):
        text = path.read_text(encoding="utf-8")
        release_sql += text
        connection.execute(text)
        connection.execute("RESET ROLE")
    connection.execute("SET LOCAL ROLE toolkit_owner")
    for name, signature, role in granted:
        if f"toolkit.{name}(" not in release_sql and f"toolkit.{name}\n" not in release_sql:
            exists = connection.execute("SELECT to_regprocedure(%s) IS NOT NULL", (signature,)).fetchone()[0]
            if exists:  # names and signatures come from the catalog, not from input
                connection.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {role}")
    for table, privilege, role in sorted(held - _table_privileges(connection)):
        bare = table.removeprefix("toolkit.")
        # a table the older release names is its own to grant; one the downgrade dropped has nothing to give back
        exists = connection.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]
        if exists and bare not in release_sql:
            connection.execute(f"GRANT {privilege} ON {table} TO {role}")  # names from the catalog, not input
    connection.execute("RESET ROLE")


def _table_privileges(connection) -> set[tuple[str, str, str]]:
    """(table, privilege, role) for each privilege the reader, writer and deployer roles hold on the toolkit's
    tables and views."""
    rows = connection.execute(
        "SELECT c.oid::regclass::text, a.privilege_type, r.rolname FROM pg_catalog.pg_class AS c"
        " CROSS JOIN LATERAL aclexplode(c.relacl) AS a INNER JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee"
        " WHERE c.relnamespace = 'toolkit'::regnamespace AND c.relkind IN ('r', 'v', 'p')"
        " AND r.rolname IN ('toolkit_reader', 'toolkit_writer', 'toolkit_deployer')"
    ).fetchall()
    return set(rows)


def withdraw(connection, functions: list[str], *, revision: str, instead: str) -> None:
    """Gives this release's ``functions`` (bare names, kept by ``restore_release`` because the release at
    ``revision`` does not define them) a body that refuses with a sentence, for those that cannot work on that
    release's schema: they call functions it replaced with its own signatures. An application still calling one
    after the downgrade is told what happened and what to call instead (``instead``), not "function … does not
    exist" or "permission denied". Same arguments, result, volatility and grants; the next upgrade puts the body
    back (CREATE OR REPLACE)."""
    connection.execute("SET LOCAL ROLE toolkit_owner")
    # The arguments name pgvector's types unqualified: read and create them where the extension is.
    saved = connection.execute(
        "SELECT current_setting('search_path'), set_config('search_path', toolkit._vector_schema(), true)"
    ).fetchone()[0]
    rows = connection.execute(
        "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),"
        " CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END"
        " FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'toolkit'::regnamespace AND p.proname = ANY (%s)",
        (functions,),
    ).fetchall()
    for name, arguments, result, volatility in rows:
        message = (
            f"toolkit.{name} is not part of the toolkit release at revision {revision}: the database was downgraded "
            "to it"
        )
        hint = f"Search with {instead} (that release's), or upgrade the database with toolkit migrate."
        body = sql.SQL(
            "BEGIN RAISE EXCEPTION USING MESSAGE = {}, ERRCODE = 'feature_not_supported', HINT = {}; END"
        ).format(sql.Literal(message), sql.Literal(hint))
        # The name, argument list, result and volatility come from the catalog, not from input.
        connection.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION toolkit.{}({}) RETURNS {} LANGUAGE plpgsql {} SECURITY INVOKER"
                " SET search_path = pg_catalog, pg_temp AS {}"
            ).format(
                sql.Identifier(name),
                sql.SQL(arguments),
                sql.SQL(result),
                sql.SQL(volatility),
                sql.Literal(body.as_string(connection)),
            )
        )
    connection.execute("SELECT set_config('search_path', %s, true)", (saved,))
    connection.execute("RESET ROLE")
