"""Opening the database from a command, telling the user which one is used."""

from __future__ import annotations

import click

from toolkit.cli._output import say


def settings():
    """The options of the root group (database URL, data directory)."""
    return click.get_current_context().find_root().obj


def _say_embedded(db) -> None:
    # Said once, when the command started the server; the commands that reuse it say nothing.
    if db.embedded and db.started:
        say(f"toolkit: started the embedded PostgreSQL in {db.data_dir}", err=True)


def open_database():
    """Returns (Database, connection) for the current command; says on stderr when it is the embedded one."""
    from toolkit.db.schema import open_database as _open

    chosen = settings()
    db, conn = _open(chosen.database_url, chosen.data_dir)
    _say_embedded(db)
    return db, conn


def in_database(function, *args, **kwargs):
    """``function(conn, *args, **kwargs)`` on a connection to the command's database, in ``with conn`` (committed
    when it returns, rolled back when it raises, then closed)."""
    _, conn = open_database()
    with conn:
        return function(conn, *args, **kwargs)


def database_url() -> str:
    """The URL of the command's database, resolved, checked and (the embedded one) migrated as ``open_database``
    does, without opening a connection: for library functions that open their own (backfill's workers)."""
    from toolkit.db.connection import resolve_database
    from toolkit.db.schema import ensure_schema

    chosen = settings()
    db = resolve_database(chosen.database_url, chosen.data_dir)
    ensure_schema(db)
    _say_embedded(db)
    return db.url
