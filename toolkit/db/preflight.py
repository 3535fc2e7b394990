"""Before a migration changes anything: what the migrating role lacks, named, when it is not a superuser.

A DBA often migrates as a role with CREATEROLE that owns its database rather than as a superuser. That works,
given what a superuser set up once: the ``vector`` extension (pgvector is not a trusted extension, so only a
superuser creates it) and, on PostgreSQL 16 and newer, ADMIN OPTION on the toolkit roles that already exist
(CREATEROLE no longer lets a role grant roles it did not create: the first revision grants ``toolkit_owner`` to the
migrating role). Without them the migration would fail half-way with PostgreSQL's "permission denied"; this check
names every missing piece, and the statement that gives it, before the first change.
"""

from __future__ import annotations

ROLES = ("toolkit_owner", "toolkit_writer", "toolkit_reader", "toolkit_deployer")


def missing_privileges(conn, *, current: str | None) -> list[str]:
    """What the connected role lacks to upgrade a database at revision ``current`` (None: no toolkit schema yet),
    each as a sentence naming the statement that gives it; empty for a superuser."""
    me, superuser, createrole, version_num, database = conn.execute(
        "SELECT current_user, rolsuper, rolcreaterole, current_setting('server_version_num')::int,"
        " current_database() FROM pg_catalog.pg_roles WHERE rolname = current_user"
    ).fetchone()
    if superuser:
        return []
    missing = []
    installing = current is None
    has_vector = conn.execute("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'vector')").fetchone()
    if installing and not has_vector[0]:
        trusted = conn.execute(
            "SELECT coalesce(bool_or(trusted), false) FROM pg_catalog.pg_available_extension_versions"
            " WHERE name = 'vector'"
        ).fetchone()[0]
        if not trusted:
            missing.append(
                "the vector extension, which only a superuser can create: "
                f'CREATE EXTENSION vector; in database "{database}"'
            )
    if installing and not conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()[0]:
        missing.append(f'the CREATE privilege on database "{database}" (GRANT CREATE ON DATABASE ... TO {me})')
    existing = {
        name
        for (name,) in conn.execute(
            "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(%s)", (list(ROLES),)
        ).fetchall()
    }
    absent = [role for role in ROLES if role not in existing]
    if absent and not createrole:
        statements = " ".join(f"CREATE ROLE {role} NOLOGIN;" for role in absent)
        missing.append(f"CREATEROLE, or the roles created by a superuser: {statements}")
    member = (
        "toolkit_owner" in existing
        and conn.execute("SELECT pg_has_role(current_user, 'toolkit_owner', 'MEMBER')").fetchone()[0]
    )
    if installing and "toolkit_owner" in existing:
        # The first revision runs GRANT toolkit_owner TO current_user: on 16+ that needs ADMIN OPTION on it, on 15
        # CREATEROLE is enough.
        admin = conn.execute("SELECT pg_has_role(current_user, 'toolkit_owner', 'USAGE WITH ADMIN OPTION')").fetchone()[
            0
        ]
        if not admin and (version_num >= 160000 or not createrole):
            missing.append(
                f"ADMIN OPTION on toolkit_owner: a superuser runs GRANT toolkit_owner TO {me} WITH ADMIN OPTION;"
            )
    elif not installing and not member:
        missing.append(f"membership in toolkit_owner, which owns schema toolkit: GRANT toolkit_owner TO {me};")
    return missing


def preflight(conn, *, current: str | None) -> None:
    """Refuses the migration, before it changes anything, when the connected role lacks what it needs."""
    from alembic.util import CommandError

    missing = missing_privileges(conn, current=current)
    if missing:
        me = conn.execute("SELECT current_user").fetchone()[0]
        raise CommandError(
            f"The migration was not started: the role {me} is not a superuser, and it needs "
            + "; ".join(f"({n}) {item.rstrip(';')}" for n, item in enumerate(missing, 1))
            + ". Nothing was changed; see docs/operations.md (Migrating without a superuser)."
        )
