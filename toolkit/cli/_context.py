"""Opening the database from a command, telling the user which one is used."""

from __future__ import annotations

import click


def open_database():
    """Returns (Database, connection) for the current command; says on stderr when it is the embedded one."""
    from toolkit.db.schema import open_database as _open

    settings = click.get_current_context().find_root().obj
    db, conn = _open(settings.database_url, settings.data_dir)
    if db.embedded:
        click.echo(f"toolkit: using the embedded PostgreSQL in {db.data_dir}", err=True)
    return db, conn
