"""The SQL source of truth on disk, and applying it: alembic revisions run the incremental files once,
then the idempotent files are re-applied on every upgrade to head."""

from __future__ import annotations

import hashlib
from pathlib import Path

from toolkit.errors import DatabaseError

# The toolkit package: installed wheels carry sql/ and migrations/ inside it; a checkout has them beside it.
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _find(name: str) -> Path:
    # Installed wheels carry sql/ and migrations/ inside the package; a checkout has them at the top.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.exists():
            return candidate
    raise DatabaseError(f"The toolkit's {name}/ directory is missing from the installation; reinstall toolkit.")


def sql_dir() -> Path:
    return _find("sql")


def migrations_dir() -> Path:
    return _find("migrations")


def incremental_files() -> list[Path]:
    return sorted((sql_dir() / "incremental").glob("*.sql"))


def idempotent_files() -> list[Path]:
    return sorted((sql_dir() / "idempotent").glob("*.sql"))


def release_files(revision: str) -> list[Path]:
    """The idempotent SQL of the release last shipped at ``revision`` (what a downgrade to it re-applies)."""
    files = sorted((sql_dir() / "releases" / revision).glob("*.sql"))
    if not files:
        raise DatabaseError(f"The SQL of the release at revision {revision} is missing from sql/releases/.")
    return files


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def execute_sql_file(dbapi_connection, path: Path) -> None:
    """Runs one SQL file on a psycopg connection, in the caller's transaction.

    The file is sent as one simple query (no parameters), so format() patterns such as %I pass through.
    ``RESET ROLE`` afterwards undoes a file's ``SET LOCAL ROLE``.
    """
    dbapi_connection.execute(path.read_text(encoding="utf-8"))
    dbapi_connection.execute("RESET ROLE")


def apply_incremental(dbapi_connection, names: list[str]) -> None:
    """Applies the named incremental files (a revision lists its own)."""
    directory = sql_dir() / "incremental"
    for name in names:
        execute_sql_file(dbapi_connection, directory / name)


def sql_fingerprint() -> str:
    """A hash of every SQL file: tells whether a database has the SQL of this installation."""
    digest = hashlib.sha256()
    for path in incremental_files() + idempotent_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def apply_idempotent(dbapi_connection, on_file=None) -> None:
    """Re-applies every idempotent file (functions, views, policies, grants), then records the fingerprint;
    ``on_file(path)`` is called after each file (toolkit migrate's progress)."""
    for path in idempotent_files():
        execute_sql_file(dbapi_connection, path)
        if on_file is not None:
            on_file(path)
    dbapi_connection.execute(f"COMMENT ON SCHEMA toolkit IS 'toolkit schema; SQL fingerprint {sql_fingerprint()}'")


# What a migration that ends below head writes in the schema's comment (instead of a fingerprint): commands then
# refuse the schema, saying which revision it is at, until `toolkit migrate` (even the embedded one, which is
# otherwise upgraded automatically: someone chose that revision).
HELD_MARK = "held at revision "


def record_held_revision(dbapi_connection, revision: str, *, downgraded: bool) -> None:
    """Records in the schema's comment that a migration left the schema at ``revision``, below head."""
    how = "downgraded" if downgraded else "upgraded"
    dbapi_connection.execute(
        f"COMMENT ON SCHEMA toolkit IS 'toolkit schema {HELD_MARK}{revision} ({how} there by a migration);"
        " run toolkit migrate to bring it to head'"
    )


def schema_comment(conn) -> str | None:
    row = conn.execute("SELECT obj_description(to_regnamespace('toolkit'), 'pg_namespace')").fetchone()
    return row[0] if row else None


def held_revision(conn) -> str | None:
    """The revision a migration that ended below head recorded (None: none did, or an upgrade to head since)."""
    comment = schema_comment(conn) or ""
    if HELD_MARK not in comment:
        return None
    return comment.split(HELD_MARK, 1)[1].split(" ", 1)[0]


def installed_fingerprint(conn) -> str | None:
    """The fingerprint recorded in the database by the last upgrade, if any."""
    comment = schema_comment(conn)
    if not comment or "fingerprint " not in comment:
        return None
    return comment.rsplit("fingerprint ", 1)[1].strip()


def sqlalchemy_url(url: str):
    """Turns a libpq URL or key=value string into the SQLAlchemy URL alembic needs (psycopg 3 driver)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    import psycopg
    from sqlalchemy.engine import URL

    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise DatabaseError(
            f"Not a PostgreSQL connection string: {url!r}. Use postgresql://user:password@host:port/database."
        ) from error
    query = {k: v for k, v in info.items() if k not in ("user", "password", "dbname", "port")}
    return URL.create(
        "postgresql+psycopg",
        username=info.get("user"),
        password=info.get("password"),
        port=int(info["port"]) if info.get("port") else None,
        database=info.get("dbname"),
        query=query,
    ).render_as_string(hide_password=False)
