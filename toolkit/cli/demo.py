"""`toolkit demo`: the whole lifecycle on the embedded database and the bundled sample corpus."""

from __future__ import annotations

import click


@click.command(short_help="Run the whole lifecycle on the embedded database and a bundled sample.")
def demo() -> None:
    """Ingest the bundled PostgreSQL-manual sample, build v1 (MiniLM) and v2 (e5), verify, cut over, search,
    roll back — narrated, on a fresh `toolkit_demo` database in the embedded server."""
    from toolkit.demo import run_demo

    settings = click.get_current_context().find_root().obj
    if settings.database_url:
        raise click.UsageError("The demo runs on the embedded server; drop --database-url / TOOLKIT_DATABASE_URL.")
    run_demo(settings.data_dir, say=click.echo)


commands = [demo]
