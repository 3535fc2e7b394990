"""Running the alembic migrations from Python (what `toolkit migrate` and the embedded server use)."""

from __future__ import annotations

import io

from toolkit.errors import DatabaseError
from toolkit.schema import migrations_dir

VERSION_TABLE = "toolkit_alembic_version"


def _config(url: str, stdout=None):
    from alembic.config import Config

    config = Config(stdout=stdout or io.StringIO())
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["database_url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Upgrades the database to ``revision`` (default: head) in one transaction; returns the revisions
    before and after (equal when it was already there: the idempotent SQL is re-applied all the same)."""
    from alembic import command

    return _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str) -> tuple[str | None, str | None]:
    """Downgrades the database to ``revision`` (``base`` removes the toolkit schema); returns the revisions
    before and after."""
    from alembic import command

    return _run(command.downgrade, url, revision)


def database_revision(url: str) -> str | None:
    """The revision of the database at ``url`` (None: no toolkit schema)."""
    from toolkit.database import connect

    with connect(url, autocommit=True, register_vector=False) as conn:
        return current_revision(conn)


def _run(action, url: str, revision: str) -> tuple[str | None, str | None]:
    import psycopg

    from toolkit.database_errors import describe_database_error

    before = database_revision(url)
    try:
        action(_config(url), revision)
    except psycopg.Error as error:
        reason = describe_database_error(error)
        raise DatabaseError(f"The migration to {revision} failed and was rolled back: {reason}") from error
    return before, database_revision(url)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config("postgresql://unused")).get_current_head()


def revisions() -> list[str]:
    """All revisions, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config("postgresql://unused"))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def current_revision(conn) -> str | None:
    """The database's revision, or None when the toolkit schema is not installed."""
    row = conn.execute("SELECT to_regclass(%s)", (f"public.{VERSION_TABLE}",)).fetchone()
    if row[0] is None:
        return None
    row = conn.execute(f"SELECT version_num FROM public.{VERSION_TABLE}").fetchone()
    return row[0] if row else None
