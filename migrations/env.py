"""Alembic environment: each revision applies its incremental SQL files; the idempotent files are
re-applied whenever the database ends at head. The whole upgrade is one transaction.

Next to live traffic: one migration runs at a time (the second waits for the first and says so), and before any
DDL the migration takes every lock it may need, views before tables (the order readers take them), each attempt
bounded by a lock timeout shorter than the deadlock timeout, so it never deadlocks with a reader: it waits, retries,
and after its attempts fails with a message naming who holds the locks. An upgrade with nothing to do takes no lock.
"""

from __future__ import annotations

import logging
import os

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from toolkit.db.migration_locks import lock_for_migration
from toolkit.db.sql_files import apply_idempotent, installed_fingerprint, sql_fingerprint, sqlalchemy_url

VERSION_TABLE = "toolkit_alembic_version"

config = context.config
log = logging.getLogger("alembic.runtime.migration")


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("TOOLKIT_DATABASE_URL")
    if not url:
        raise SystemExit(
            "TOOLKIT_DATABASE_URL is not set. Set it to the database to migrate "
            "(or run `toolkit migrate`, which also works with the embedded server)."
        )
    return sqlalchemy_url(url)


def _direction() -> str:
    """``upgrade`` or ``downgrade``: set by toolkit.db.migrate, or read from alembic's own command line."""
    if config.attributes.get("direction"):
        return config.attributes["direction"]
    command = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    name = getattr(command[0], "__name__", "") if command else ""
    return "downgrade" if name == "downgrade" else "upgrade"


def _say(message: str) -> None:
    """Reports to the operator: toolkit migrate prints config.attributes['notices'], alembic logs them."""
    config.attributes.setdefault("notices", []).append(message)
    log.warning(message)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    engine = None
    if connection is None:
        engine = create_engine(_url(), poolclass=pool.NullPool)
        connection = engine.connect()
    driver = connection.connection.driver_connection

    def on_notice(diagnostic) -> None:
        # Warnings raised by the SQL (e.g. secrets removed from the registry) are meant for the operator.
        if diagnostic.severity_nonlocalized == "WARNING":
            hint = f" {diagnostic.message_hint}" if diagnostic.message_hint else ""
            _say(f"{diagnostic.message_primary}.{hint}")

    driver.add_notice_handler(on_notice)
    try:
        context.configure(connection=connection, version_table=VERSION_TABLE, transaction_per_migration=False)
        heads = set(ScriptDirectory.from_config(config).get_heads())
        with context.begin_transaction():
            current = set(context.get_context().get_current_heads())
            up_to_date = current == heads and installed_fingerprint(driver) == sql_fingerprint()
            if _direction() == "upgrade" and up_to_date and not config.attributes.get("reapply"):
                config.attributes["nothing_to_do"] = True
                return
            lock_for_migration(driver, say=_say)
            context.run_migrations()
            if set(context.get_context().get_current_heads()) == heads:
                apply_idempotent(driver)
                # Commands check the schema revision as whatever role they run as.
                driver.execute(
                    f"GRANT SELECT ON public.{VERSION_TABLE} TO toolkit_reader, toolkit_writer, toolkit_deployer,"
                    " toolkit_owner"
                )
    finally:
        driver.remove_notice_handler(on_notice)
        if engine is not None:
            connection.close()
            engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "Offline (--sql) mode is not supported: the SQL to review is in sql/incremental and sql/idempotent."
    )
run_migrations_online()
