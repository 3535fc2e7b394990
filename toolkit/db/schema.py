"""Opening the database for a command: resolve it, check the server, and make sure the schema is current.

The embedded database is the user's own, so it is migrated automatically; a database given by URL
belongs to a DBA, so it is only checked, and a clear error says to run `toolkit migrate`.
"""

from __future__ import annotations

import psycopg

from toolkit.db import migrate
from toolkit.db.connection import Database, check_server, connect, resolve_database
from toolkit.db.sql_files import held_revision, installed_fingerprint, sql_fingerprint
from toolkit.errors import DatabaseError


def ensure_schema(db: Database) -> None:
    """Returns when the database has this installation's schema. The embedded one is upgraded automatically, unless
    a migration left it below head on purpose (``toolkit migrate REV --downgrade``); otherwise, and for a database
    given by URL, raises one sentence saying at which revision it is and to run `toolkit migrate`: no command
    reads or writes a schema of another release."""
    with connect(db.url, autocommit=True, register_vector=False) as conn:
        check_server(conn)
        # The fingerprint (in the schema's comment, readable by every role) names the installed SQL exactly.
        fingerprint = installed_fingerprint(conn)
        if fingerprint == sql_fingerprint():
            return
        held = held_revision(conn)
        try:
            current = migrate.current_revision(conn)
        except psycopg.errors.InsufficientPrivilege:
            current = held or "unknown (no privilege to read it)"
    known = migrate.revisions()
    head = migrate.head_revision()
    if db.embedded and held is None and (current is None or current in known):
        migrate.upgrade(db.url)
        return
    if current is None:
        raise DatabaseError(
            "The database has no toolkit schema. Run `toolkit migrate` (or `alembic upgrade head`) "
            "as the owner role first."
        )
    if current in known and current != head:
        how = " (a migration left it there)" if held else ""
        raise DatabaseError(
            f"The database's toolkit schema is at revision {current}{how}, older than this toolkit ({head}): run "
            "`toolkit migrate` to upgrade it (or use the toolkit release of that revision); nothing was changed."
        )
    if current not in known and not current.startswith("unknown"):
        raise DatabaseError(
            f"The database's toolkit schema is at revision {current}, newer than this toolkit ({head}): upgrade the "
            "toolkit; nothing was changed."
        )
    raise DatabaseError(
        f"The database's toolkit schema (revision {current}) is not the one this toolkit installs "
        f"(revision {migrate.head_revision()}, SQL fingerprint {sql_fingerprint()}). Run `toolkit migrate`."
    )


def open_database(database_url: str | None = None, data_dir: str | None = None) -> tuple[Database, psycopg.Connection]:
    """Resolves, checks and (for the embedded server) migrates the database; returns it and a connection."""
    db = resolve_database(database_url, data_dir)
    ensure_schema(db)
    return db, connect(db.url)


def database_status(database_url: str | None, data_dir: str | None) -> dict:
    """The database at ``database_url``, or else the embedded server of ``data_dir`` (whether it runs, where): when
    it can be reached, its server and pgvector versions, its schema revision and the head revision."""
    from toolkit.db import migrate
    from toolkit.db.connection import check_server, connect
    from toolkit.db.server import embedded_status

    if database_url:
        info = {"database_url": database_url, "embedded": False}
        url = database_url
    else:
        info = {"embedded": True, **embedded_status(data_dir)}
        url = info.get("url")
    if url:
        with connect(url, autocommit=True, register_vector=False) as conn:
            info.update(check_server(conn))
            info["schema_revision"] = migrate.current_revision(conn)
        info["head_revision"] = migrate.head_revision()
    return info
