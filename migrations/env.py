"""Alembic environment: each revision applies its incremental SQL files; the idempotent files are
re-applied whenever the database ends at head. The whole upgrade is one transaction."""

from __future__ import annotations

import os

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from toolkit.schema import apply_idempotent, sqlalchemy_url

VERSION_TABLE = "toolkit_alembic_version"

config = context.config


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("TOOLKIT_DATABASE_URL")
    if not url:
        raise SystemExit(
            "TOOLKIT_DATABASE_URL is not set. Set it to the database to migrate "
            "(or run `toolkit migrate`, which also works with the embedded server)."
        )
    return sqlalchemy_url(url)


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    engine = None
    if connection is None:
        engine = create_engine(_url(), poolclass=pool.NullPool)
        connection = engine.connect()
    try:
        context.configure(connection=connection, version_table=VERSION_TABLE, transaction_per_migration=False)
        with context.begin_transaction():
            context.run_migrations()
            heads = set(ScriptDirectory.from_config(config).get_heads())
            if set(context.get_context().get_current_heads()) == heads:
                driver = connection.connection.driver_connection
                apply_idempotent(driver)
                # Commands check the schema revision as whatever role they run as.
                driver.execute(
                    f"GRANT SELECT ON public.{VERSION_TABLE} TO toolkit_reader, toolkit_writer, toolkit_owner"
                )
    finally:
        if engine is not None:
            connection.close()
            engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "Offline (--sql) mode is not supported: the SQL to review is in sql/incremental and sql/idempotent."
    )
run_migrations_online()
