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
    from toolkit.db.connection import resolve_database
    from toolkit.db.schema import ensure_schema

    settings = _settings()
    database = resolve_database(None, settings.data_dir)
    ensure_schema(database)
    click.echo(f"The embedded PostgreSQL runs in {database.data_dir}.")
    click.echo(database.url)


@db.command()
def stop() -> None:
    """Stop the embedded server."""
    from toolkit.db.connection import default_data_dir, stop_embedded

    data_dir = _settings().data_dir or default_data_dir()
    if stop_embedded(data_dir):
        click.echo(f"Stopped the embedded PostgreSQL in {data_dir}.")
    else:
        click.echo(f"The embedded PostgreSQL in {data_dir} was not running.")


@db.command()
@FORMAT_OPTION
def status(output_format: str) -> None:
    """Show whether the embedded server runs, where, and its schema revision."""
    from toolkit.db import migrate
    from toolkit.db.connection import check_server, connect, embedded_status

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
    from toolkit.db.connection import resolve_database
    from toolkit.db.schema import ensure_schema

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    ensure_schema(database)
    click.echo(database.url)


@click.command(short_help="Upgrade (or downgrade) the toolkit schema.")
@click.argument("revision", default="head")
@click.option("--downgrade", is_flag=True, help="Downgrade to REVISION (`base` removes the toolkit schema).")
@click.option("--force", is_flag=True, help="With --downgrade: delete the data the downgrade drops (back it up first).")
def migrate(revision: str, downgrade: bool, force: bool) -> None:
    """Upgrade the schema to REVISION (default head), or downgrade with --downgrade.

    Wraps `alembic upgrade|downgrade`; the whole migration is one transaction.
    """
    from toolkit.db import migrate as migrations
    from toolkit.db.connection import resolve_database

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    if downgrade:
        before = migrations.database_revision(database.url)
        result = migrations.downgrade(database.url, revision, force=force)
        after = migrations.database_revision(database.url)
        message = (
            f"Downgraded from {before} to {after or 'base'}."
            if before != after
            else f"Already at {after or 'base'}; nothing was downgraded."
        )
    else:
        before = migrations.database_revision(database.url)
        result = migrations.upgrade(database.url, revision)
        after = migrations.database_revision(database.url)
        at_head = " (head)" if after == migrations.head_revision() else ""
        if not result.changed:
            message = f"Already at {after}{at_head}; nothing to do."
        elif before == after:
            message = f"Re-applied the functions, views, policies and grants of {after}{at_head}."
        else:
            message = f"Upgraded from {before or 'an empty database'} to {after}{at_head}."
    for notice in result.notices:
        click.echo(f"toolkit: {notice}", err=True)
    click.echo(message)


@click.command(name="status", short_help="Every version: state, what it serves, rows, index, last evaluation.")
@FORMAT_OPTION
def status_command(output_format: str) -> None:
    """Each version: model, chunker, state, what it serves (active, canary share, rollback target), rows, pending
    rows, documents and tenants, index validity, the last recall and whether its verification still counts for a
    cutover (stale once its contents changed); then the canary and the query log."""
    from toolkit.cli._context import open_database
    from toolkit.serving import canary_status
    from toolkit.store.query_log import query_log_status
    from toolkit.store.versions import version_status

    _, conn = open_database()
    with conn:
        rows = [dataclasses.asdict(s) for s in version_status(conn)]
        canary = canary_status(conn)
        log = query_log_status(conn)
    if output_format == "json":
        click.echo(
            to_json({"versions": rows, "canary": canary.as_dict() if canary else None, "query_log": log.as_dict()})
        )
        return
    for row in rows:
        passed = row["last_evaluation_passed"]
        row["verification"] = (
            "-" if passed is None else "failed" if not passed else "current" if row["evaluation_current"] else "stale"
        )
    emit(
        rows,
        "table",
        [
            "version",
            "model_alias",
            "chunker_version",
            "state",
            "serving",
            "total_rows",
            "pending_documents",
            "documents",
            "tenants",
            "index_valid",
            "last_recall",
            "verification",
        ],
    )
    if canary is not None:
        click.echo(
            f"Canary: version {canary.candidate} serves {canary.percent:g}% of request keys"
            + (f" and tenants {', '.join(canary.tenants)}" if canary.tenants else "")
            + f", since {canary.started_at:%Y-%m-%d %H:%M}."
        )
    click.echo(
        "Query log: "
        + ("off." if log.sample_rate == 0 else f"logging {log.sample_rate:.0%} of questions")
        + (f", {log.questions:,} kept for {log.retention}." if log.sample_rate or log.questions else "")
    )


commands = [db, migrate, status_command]
