"""Running the alembic migrations from Python (what `toolkit migrate` and the embedded server use)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit.db.sql_files import migrations_dir
from toolkit.errors import DatabaseError, InputError

if TYPE_CHECKING:
    from toolkit.db.migration_locks import LockPolicy

VERSION_TABLE = "toolkit_alembic_version"


def _config(url: str, stdout=None):
    from alembic.config import Config

    config = Config(stdout=stdout or io.StringIO())
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["database_url"] = url
    return config


@dataclass
class MigrationResult:
    """What a migration did: ``changed`` is False when the database was already at the revision with this
    installation's SQL; ``notices`` are the warnings meant for the operator (e.g. secrets removed)."""

    revision: str
    changed: bool
    notices: list[str] = field(default_factory=list)


def upgrade(
    url: str, revision: str = "head", *, reapply: bool = False, progress=None, locks: LockPolicy | None = None
) -> MigrationResult:
    """Upgrades the database to ``revision`` (default: head) in one transaction; at head with this installation's
    SQL already in place it does nothing (``reapply`` re-applies the idempotent SQL anyway). ``locks``: how it gets
    its locks next to live sessions (toolkit.db.migration_locks). A revision older than the database's is refused:
    going back is a downgrade."""
    from alembic import command

    _refuse_going_back(url, revision)
    return _run(
        command.upgrade, url, revision, direction="upgrade", reapply=reapply, progress=progress, lock_policy=locks
    )


def downgrade(
    url: str, revision: str, *, force: bool = False, progress=None, locks: LockPolicy | None = None
) -> MigrationResult:
    """Downgrades the database to ``revision`` (``base`` removes the toolkit schema). A downgrade that would delete
    data is refused, naming what it would delete, unless ``force``."""
    from alembic import command

    return _run(
        command.downgrade, url, revision, direction="downgrade", force=force, progress=progress, lock_policy=locks
    )


def _refuse_going_back(url: str, revision: str) -> None:
    """An upgrade to ``base`` or to a revision older than the database's would otherwise answer "Already at …
    (head)" and do nothing: it is refused, naming the downgrade that does it."""
    if revision == "base":
        raise InputError(
            "Upgrading to base means nothing: base is no schema at all. To remove the toolkit schema run "
            "`toolkit migrate base --downgrade` (it refuses while the database holds data, unless --force)."
        )
    known = revisions()
    if revision not in known:
        return  # head, relative revisions and unknown names: alembic and check_revision answer those
    current = database_revision(url)
    if current in known and known.index(revision) < known.index(current):
        raise InputError(
            f"The database is at revision {current}, newer than {revision}: an upgrade cannot go back. To go back "
            f"run `toolkit migrate {revision} --downgrade` (it refuses to delete data unless --force)."
        )


def _run(action, url: str, revision: str, **attributes) -> MigrationResult:
    import psycopg
    from alembic.util import CommandError

    check_revision(revision)
    config = _config(url)
    config.attributes.update(attributes, target_revision=revision)
    try:
        try:
            action(config, revision)
        finally:
            if attributes.get("progress") is not None:
                attributes["progress"].finish()
    except psycopg.Error as error:
        from toolkit.db.errors import describe_database_error, one_line

        if error.sqlstate == "42501":
            # Not the commands' advice (join toolkit_writer…): a migration needs the owner's and a DBA's rights.
            reason = (
                f"the database refused: {one_line(error.diag.message_primary or str(error)).rstrip('.')}. Migrate as "
                "a superuser, or see docs/operations.md (Migrating without a superuser)"
            )
        else:
            reason = describe_database_error(error)
        raise DatabaseError(f"The migration to {revision} failed and was rolled back: {reason}") from error
    except CommandError as error:
        raise DatabaseError(str(error)) from error
    return MigrationResult(
        revision, not config.attributes.get("nothing_to_do", False), list(config.attributes.get("notices", []))
    )


def check_revision(revision: str) -> None:
    """Refuses a revision that names none (an up-to-date database would otherwise answer "nothing to do" to
    any name); relative ones (+1, -1, 0002@head) are left to alembic, which knows the current revision."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    if revision.startswith(("+", "-")) or "@" in revision:
        return
    try:
        ScriptDirectory.from_config(_config("postgresql://unused")).get_revisions(revision)
    except CommandError:
        known = ", ".join([*revisions(), "head", "base"])
        raise InputError(f"There is no revision {revision!r}; name one of {known}.") from None


def database_revision(url: str) -> str | None:
    """The revision of the database at ``url`` (None: no toolkit schema)."""
    from toolkit.db.connection import connect

    with connect(url, autocommit=True, register_vector=False) as conn:
        return current_revision(conn)


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
