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


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrades the database to ``revision`` (default: head) in one transaction."""
    from alembic import command

    _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str) -> None:
    """Downgrades the database to ``revision`` (``base`` removes the toolkit schema)."""
    from alembic import command

    _run(command.downgrade, url, revision)


def _run(action, url: str, revision: str) -> None:
    import psycopg

    try:
        action(_config(url), revision)
    except psycopg.Error as error:
        raise DatabaseError(f"The migration to {revision} failed and was rolled back: {error}".strip()) from error


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
