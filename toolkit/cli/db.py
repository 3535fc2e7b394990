"""`toolkit db …` (the embedded server), `toolkit migrate` and `toolkit status`."""

from __future__ import annotations

import click

from toolkit.cli import _render
from toolkit.cli._context import in_database
from toolkit.cli._context import settings as _settings
from toolkit.cli._output import FORMAT_OPTION, QUIET_OPTION, say
from toolkit.cli._params import Duration, Number
from toolkit.db.migration_locks import LOCK_TIMEOUT, MAX_STALL, TERMINATE_AFTER, LockPolicy


@click.group()
def db() -> None:
    """Start, stop and inspect the embedded PostgreSQL (18 + pgvector)."""


@db.command()
@click.option(
    "--port",
    type=click.IntRange(1024, 65535),
    help="Also listen on 127.0.0.1:PORT (TCP needs the password it prints; kept for later starts).",
)
@click.option(
    "--standby-of",
    "standby_of",
    metavar="URL",
    help="Make a new --data-dir a read-only hot standby of the server at URL (pg_basebackup -R), then start it.",
)
def start(port: int | None, standby_of: str | None) -> None:
    """Start the embedded server (or reuse it) and bring its schema up to date."""
    from toolkit.db.server import start_embedded, tcp_url

    database = start_embedded(_settings().data_dir, port=port, standby_of=standby_of)
    if standby_of is None:
        from toolkit.db.schema import ensure_schema

        ensure_schema(database)
    _render.print_started(database, tcp_url(database.data_dir), standby_of)


@db.command()
def stop() -> None:
    """Stop the embedded server."""
    from toolkit.db.server import default_data_dir, stop_embedded

    data_dir = _settings().data_dir or default_data_dir()
    if stop_embedded(data_dir):
        say(f"Stopped the embedded PostgreSQL in {data_dir}.")
    else:
        say(f"The embedded PostgreSQL in {data_dir} was not running.")


@db.command()
@FORMAT_OPTION
def status(output_format: str) -> None:
    """Show whether the embedded server runs, where, and its schema revision."""
    from toolkit.db.schema import database_status

    chosen = _settings()
    _render.print_server_status(database_status(chosen.database_url, chosen.data_dir), output_format)


@db.command()
def url() -> None:
    """Print the connection URL (started if needed) alone on the last line.

    At any schema revision: a schema below (or above) this toolkit's is named in a warning on stderr, and the URL is
    printed anyway (it is what `alembic upgrade head` or `toolkit db psql` needs then). A database that cannot be
    reached is still an error.
    """
    from toolkit.db.connection import connect, resolve_database
    from toolkit.db.schema import ensure_schema
    from toolkit.errors import DatabaseError

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    connect(database.url, autocommit=True, register_vector=False).close()  # unreachable: an error, no URL
    try:
        ensure_schema(database)
    except DatabaseError as error:
        say(f"Warning: {error} The URL is printed anyway.", err=True)
    say(database.url)


@db.command(
    # ARGS are psql's: its options (-h, -c, -f…) are not the toolkit's; `--help` is ours, `-- --help` psql's.
    context_settings={
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
        "help_option_names": ["--help"],
    },
    short_help="Run the embedded server's psql 18 on the database.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def psql(args: tuple[str, ...]) -> None:
    """Run psql 18 (the embedded PostgreSQL's own, which has `\\bind`) on the toolkit's database, passing ARGS to
    it: `toolkit db psql -c 'SELECT 1'`, `toolkit db psql -f script.sql`. The database is --database-url /
    TOOLKIT_DATABASE_URL, else the embedded server (started if needed); its schema is not checked. Put `--` before
    ARGS that start with a dash the toolkit itself knows (--help). psql's exit status is the command's."""
    from toolkit.db.connection import resolve_database
    from toolkit.db.server import run_client

    settings = _settings()
    database = resolve_database(settings.database_url, settings.data_dir)
    run_client("psql", ["-d", database.url, *args])


@db.command(name="bin")
def bin_directory() -> None:
    """Print the directory of the embedded PostgreSQL 18's client tools (psql, pg_dump, pg_dumpall, pg_restore…):
    `"$(toolkit db bin)/pg_dumpall"`. Starts nothing."""
    from toolkit.db.server import client_binary

    say(client_binary("psql").parent)


@db.command()
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
@FORMAT_OPTION
def dump(file: str, output_format: str) -> None:
    """Back the database up to FILE (pg_dump's custom format), with the pg_dump matching the embedded server.

    Roles are cluster-wide and not in the dump: see docs/operations.md, Backup and restore.
    """
    from toolkit.db.backup import dump as dump_database
    from toolkit.db.connection import resolve_database

    chosen = _settings()
    report = dump_database(resolve_database(chosen.database_url, chosen.data_dir).url, file)
    _render.print_backup(report, "Dumped", output_format)


@db.command()
@click.argument("file", type=click.Path(dir_okay=False))
@FORMAT_OPTION
def restore(file: str, output_format: str) -> None:
    """Restore a dump FILE into the database (which must hold no toolkit data), in one transaction.

    The toolkit's roles are created when missing; application logins come from `pg_dumpall --roles-only`.
    """
    from toolkit.db.backup import restore as restore_database
    from toolkit.db.connection import resolve_database
    from toolkit.db.schema import ensure_schema

    chosen = _settings()
    database = resolve_database(chosen.database_url, chosen.data_dir)
    report = restore_database(database.url, file)
    # Said first: a URL's database restored from an older release is then named for `toolkit migrate` (exit 1),
    # and the restore itself has been committed by then.
    _render.print_backup(report, "Restored", output_format)
    ensure_schema(database)  # a dump of an older release: the embedded one is upgraded


@click.command(short_help="Upgrade (or downgrade) the toolkit schema.")
@click.argument("revision", default="head")
@click.option("--downgrade", is_flag=True, help="Downgrade to REVISION (`base` removes the toolkit schema).")
@click.option("--force", is_flag=True, help="With --downgrade: delete the data the downgrade drops (back it up first).")
@click.option(
    "--max-stall",
    type=Number(MAX_STALL),
    default=LockPolicy.max_stall,
    show_default=True,
    help="Seconds: the longest the migration queues for its locks at a time, so the longest it holds a reader up.",
)
@click.option(
    "--lock-timeout",
    type=Number(LOCK_TIMEOUT),
    default=LockPolicy.timeout,
    show_default=True,
    help="Seconds: give up (nothing changed, the sessions holding it out named) after trying this long.",
)
@click.option(
    "--terminate-blockers-after",
    type=Number(TERMINATE_AFTER),
    default=None,
    help="Seconds: after this long, end the sessions still holding the locks it needs (each named on stderr): "
    "cancel a running statement, terminate a transaction left idle. Off by default.",
)
@QUIET_OPTION
def migrate(
    revision: str,
    downgrade: bool,
    force: bool,
    max_stall: float,
    lock_timeout: float,
    terminate_blockers_after: float | None,
    quiet: bool,
) -> None:
    """Upgrade the schema to REVISION (default head), or downgrade with --downgrade.

    Wraps `alembic upgrade|downgrade`; the whole migration is one transaction. Next to live readers it waits for
    their transactions, holding each up at most --max-stall at a time (docs/operations.md, Next to live traffic).
    """
    from toolkit.db import migrate as migrations
    from toolkit.db.connection import resolve_database
    from toolkit.progress import Progress

    locks = LockPolicy(max_stall=max_stall, timeout=lock_timeout, terminate_after=terminate_blockers_after)
    chosen = _settings()
    target = resolve_database(chosen.database_url, chosen.data_dir).url
    before = migrations.database_revision(target)
    run = migrations.downgrade if downgrade else migrations.upgrade
    options = {"force": force} if downgrade else {}
    progress = Progress("migrate", unit="steps", quiet=quiet)
    result = run(target, revision, progress=progress, locks=locks, **options)
    after = migrations.database_revision(target)
    _render.print_migration(result, before, after, None if downgrade else migrations.head_revision(), downgrade)


@click.command(name="status", short_help="Every version: state, what it serves, rows, index, last evaluation.")
@FORMAT_OPTION
def status_command(output_format: str) -> None:
    """Each version: model, chunker, state, what it serves (active, canary share, rollback target), rows, pending
    rows, documents and tenants, index validity, the last recall and whether its verification still counts for a
    cutover (stale once its contents changed); then the canary and the query log."""
    from toolkit.status import overview

    _render.print_overview(in_database(overview), output_format)


@click.command(name="rollback-window", short_help="Show or set how long retire keeps the rollback target.")
@click.argument("duration", required=False, type=Duration())
@FORMAT_OPTION
def rollback_window_command(duration, output_format) -> None:
    """Show the rollback window, or set it to DURATION (7d, 12h, 30m; 0 turns it off) as the owner role.

    For that long after a cutover, the version it replaced (the rollback target) is kept: `toolkit retire` keeps
    it, and retiring it needs --version N --force. The window is a setting of the database (toolkit.settings),
    enforced by SQL.
    """
    from toolkit.cutover import protected_standby, rollback_window, set_rollback_window
    from toolkit.validation import parse_duration

    def run(conn):
        window = rollback_window(conn) if duration is None else set_rollback_window(conn, parse_duration(duration))
        return window, protected_standby(conn)

    window, protected = in_database(run)
    _render.print_rollback_window(window, protected, changed=duration is not None, output_format=output_format)


commands = [db, migrate, status_command, rollback_window_command]
