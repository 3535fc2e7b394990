"""Where the database is (a URL, or the embedded server: toolkit.db.server), connecting to it, checking the
server, and turning its errors into the library's exceptions. With a URL the toolkit uses any PostgreSQL >= 15 with
pgvector >= 0.8."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import errors as pg_errors

from toolkit.db.errors import describe_database_error, one_line
from toolkit.db.server import DATABASE_NAME, Database, start_embedded
from toolkit.errors import (
    DatabaseError,
    InputError,
    LockTimeoutError,
    ModelMismatchError,
    StateError,
    VersionUnavailableError,
)

__all__ = ["DATABASE_NAME", "Database", "check_server", "connect", "resolve_database", "translate_errors"]

MIN_SERVER_VERSION_NUM = 150000
MIN_PGVECTOR = (0, 8, 0)


def resolve_database(database_url: str | None = None, data_dir: str | Path | None = None) -> Database:
    """Returns the database to use: the URL if one is given (or in TOOLKIT_DATABASE_URL), else the
    embedded server, started if it is not running."""
    url = database_url or os.environ.get("TOOLKIT_DATABASE_URL")
    if url:
        return Database(url=url, embedded=False)
    return start_embedded(data_dir)


def connect(
    url: str, *, autocommit: bool = False, register_vector: bool = True, statement_timeout: str | None = None
) -> psycopg.Connection:
    """Opens a connection; registers pgvector's types when the extension is installed. ``statement_timeout`` (e.g.
    "10s") bounds every statement of the session."""
    try:
        conn = psycopg.connect(url, autocommit=autocommit)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as error:
        reason = describe_database_error(error)
        if not reason.startswith("Could not connect"):
            reason = f"Could not connect to the database: {reason[0].lower()}{reason[1:]}"
        raise DatabaseError(reason) from error
    if statement_timeout is not None:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (statement_timeout,))
        if not autocommit:
            conn.commit()
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


_STATE_CODES = {"55000", "P0001"}
_INPUT_CODES = {"22023", "42704", "23514", "22P02", "23505", "22001", "23502", "22007", "22003", "22021"}


@contextlib.contextmanager
def translate_errors(*, retry_locks: bool = False) -> Iterator[None]:
    """Turns PostgreSQL errors raised by toolkit functions into the library's exceptions. With ``retry_locks``, a
    bare lock timeout (a statement's own lock_timeout, not a toolkit lock's message) is re-raised as it is, for a
    caller that retries."""
    try:
        yield
    except psycopg.Error as error:
        diag = error.diag
        message = one_line(diag.message_primary or str(error))
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
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            raise DatabaseError(describe_database_error(error)) from error
        raise
