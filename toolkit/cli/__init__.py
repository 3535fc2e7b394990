"""The `toolkit` command line: a thin layer that parses options, calls one library function, prints.

Each module in this package that defines ``commands`` (a list of click commands) is registered
automatically; heavy imports stay inside the command bodies so ``toolkit --help`` is instant.
"""

from __future__ import annotations

import importlib
import pkgutil

import click

from toolkit import __version__
from toolkit.cli._params import check_arguments, refuse_unstorable_text
from toolkit.errors import ToolkitError


class Settings:
    """Options shared by every command (database location)."""

    def __init__(self, database_url: str | None, data_dir: str | None):
        self.database_url = database_url
        self.data_dir = data_dir


class ToolkitGroup(click.Group):
    """Turns library errors into clean CLI errors (message, non-zero exit, no traceback), and refuses
    arguments no parameter can take before any is read."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        check_arguments(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        from toolkit.cli._output import printable

        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            error.message = printable(error.message)  # a file name or a question may hold terminal escapes
            raise
        except ToolkitError as error:
            raise click.ClickException(printable(str(error))) from error
        except Exception as error:
            message = _unexpected(error)
            if message is None:
                raise
            raise click.ClickException(printable(message)) from error


def _unexpected(error: Exception) -> str | None:
    """A line for failures from the database, the migration tool, the file system or text that cannot be
    encoded; None re-raises (a bug shows its traceback)."""
    import psycopg

    from toolkit.db.errors import describe_database_error, one_line
    from toolkit.validation import shown

    if isinstance(error, psycopg.Error):
        return describe_database_error(error)
    module = type(error).__module__ or ""
    if module.startswith(("sqlalchemy", "alembic")):
        cause = error.__cause__ or getattr(error, "orig", None)
        if isinstance(cause, psycopg.Error):
            return describe_database_error(cause)
        return f"The migration tool failed: {one_line(error)}. Check the revision name and the database URL."
    if isinstance(error, OSError):
        where = f": {shown(error.filename)}" if error.filename else ""
        return f"{error.strerror or one_line(error)}{where}. Check the path and permissions."
    if isinstance(error, UnicodeError):
        return (
            "A value is not valid UTF-8 text (bytes from a file name or an argument in another encoding); "
            "rename the file or pass the value as UTF-8."
        )
    return None


@click.group(cls=ToolkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toolkit")
@click.option(
    "--database-url",
    envvar="TOOLKIT_DATABASE_URL",
    metavar="URL",
    help="PostgreSQL URL (≥ 15, pgvector ≥ 0.8). Default: the embedded server. Env: TOOLKIT_DATABASE_URL.",
)
@click.option(
    "--data-dir",
    envvar="TOOLKIT_DATA_DIR",
    metavar="DIR",
    help="Data directory of the embedded server. Default: ~/.local/share/toolkit/postgres. Env: TOOLKIT_DATA_DIR.",
)
@click.pass_context
def main(ctx: click.Context, database_url: str | None, data_dir: str | None) -> None:
    """Chunk, embed and version a retrieval corpus in PostgreSQL + pgvector."""
    ctx.obj = Settings(database_url, data_dir)


def _register_commands() -> None:
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for command in getattr(module, "commands", []):
            main.add_command(command)
    # Every parameter of every command, including ones added later, refuses text PostgreSQL cannot store.
    refuse_unstorable_text(main)


_register_commands()
