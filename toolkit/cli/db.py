"""`toolkit db …` (the embedded server), `toolkit migrate` and `toolkit status`."""

from __future__ import annotations

import dataclasses

import click

from toolkit.cli._output import FORMAT_OPTION, emit, to_json


def _settings():
    return click.get_current_context().find_root().obj


@click.group()
def db() -> None:
    """Start, stop and inspect the embedded PostgreSQL (18 + pgvector)."""


@db.command()
def start() -> None:
    """Start the embedded server (or reuse it) and bring its schema up to date."""
    from toolkit.database import resolve_database
    from toolkit.session import ensure_schema

    settings = _settings()
    database = resolve_database(None, settings.data_dir)
    ensure_schema(database)
    click.echo(f"The embedded PostgreSQL runs in {database.data_dir}.")
    click.echo(database.url)


@db.command()
def stop() -> None:
    """Stop the embedded server."""
    from toolkit.database import default_data_dir, stop_embedded

    data_dir = _settings().data_dir or default_data_dir()
    if stop_embedded(data_dir):
        click.echo(f"Stopped the embedded PostgreSQL in {data_dir}.")
    else:
        click.echo(f"The embedded PostgreSQL in {data_dir} was not running.")


@db.command()
@FORMAT_OPTION
def status(output_format: str) -> None:
    """Show whether the embedded server runs, where, and its schema revision."""
    from toolkit import migrate
    from toolkit.database import check_server, connect, embedded_status

    settings = _settings()
    if settings.database_url:
        info = {"database_url": settings.database_url, "embedded": False}
        url = settings.database_url
    else:
        info = {"embedded": True, **embedded_status(settings.data_dir)}
        url = info.get("url")
    if url:
        with connect(url, autocommit=True, register_vector=False) as conn:
            info.update(check_server(conn))
            info["schema_revision"] = migrate.current_revision(conn)
        info["head_revision"] = migrate.head_revision()
    if output_format == "json":
        click.echo(to_json(info))
    else:
        for key, value in info.items():
            click.echo(f"{key:16} {value}")


@db.command()
def url() -> None:
    """Print the connection URL (started if needed) alone on the last line."""
    from toolkit.database import resolve_database
    from toolkit.session import ensure_schema

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    ensure_schema(database)
    click.echo(database.url)


@click.command(short_help="Upgrade (or downgrade) the toolkit schema.")
@click.argument("revision", default="head")
@click.option("--downgrade", is_flag=True, help="Downgrade to REVISION (`base` removes the toolkit schema).")
def migrate(revision: str, downgrade: bool) -> None:
    """Upgrade the schema to REVISION (default head), or downgrade with --downgrade.

    Wraps `alembic upgrade|downgrade`; the whole migration is one transaction.
    """
    from toolkit import migrate as migrations
    from toolkit.database import resolve_database

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    if downgrade:
        before, after = migrations.downgrade(database.url, revision)
        if before == after:
            click.echo(f"Already at {after or 'base'}; nothing was downgraded.")
        else:
            click.echo(f"Downgraded from {before} to {after or 'base'}.")
        return
    before, after = migrations.upgrade(database.url, revision)
    at_head = " (head)" if after == migrations.head_revision() else ""
    if before == after:
        click.echo(f"Already at {after}{at_head}; the functions, views, policies and grants were re-applied.")
    else:
        click.echo(f"Upgraded from {before or 'an empty schema'} to {after}{at_head}.")


@click.command(name="status", short_help="Every version: state, rows, pending rows, index, last evaluation.")
@FORMAT_OPTION
def status_command(output_format: str) -> None:
    """Each version: model, chunker, state, rows, pending rows, index validity, last evaluation."""
    from toolkit.cli._context import open_database
    from toolkit.versions import version_status

    _, conn = open_database()
    with conn:
        rows = [dataclasses.asdict(s) for s in version_status(conn)]
    emit(
        rows,
        output_format,
        [
            "version",
            "model_alias",
            "chunker_version",
            "storage",
            "dimensions",
            "state",
            "total_rows",
            "pending_rows",
            "index_valid",
            "last_evaluation_passed",
        ],
    )


commands = [db, migrate, status_command]
