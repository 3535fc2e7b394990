"""Values refused where the command line reads them, as usage errors (exit 2) with one sentence.

Numbers go through the library's rules (toolkit.validation) as click parameter types, so the CLI and the
Python API refuse the same values with the same words. Text is checked for every parameter of every command by
two checks on the whole command tree, so a new option is covered without anyone remembering to: before click
reads anything, an argument with a NUL byte or over MAX_ARGUMENT_CHARS (``check_arguments``, called by the root
group); after, a value that is empty or not UTF-8 (``refuse_unstorable_text``; file paths may be any bytes).
"""

from __future__ import annotations

import functools
from datetime import timedelta

import click

from toolkit.errors import InputError
from toolkit.validation import MAX_ARGUMENT_CHARS, RETENTION_DAYS, NumberRule, shown, text_problem


class Number(click.ParamType):
    """A number checked against a library rule: ``type=Number(BATCH_ROWS)``."""

    def __init__(self, rule: NumberRule):
        self.rule = rule
        self.name = "integer" if rule.whole else "float"

    def convert(self, value, param, ctx):
        try:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self.rule.check(value)  # a default given as a number
            return self.rule.parse(value)
        except InputError as error:
            self.fail(str(error), param, ctx)

    def __repr__(self) -> str:
        return f"Number({self.rule.what!r})"


class Checked(click.ParamType):
    """Text that a library parser reads (``parse(text)`` raises InputError); the command receives the text as
    typed and parses it again, so the parser stays the one source of truth."""

    def __init__(self, parse, name: str = "text"):
        self.parse = parse
        self.name = name

    def convert(self, value, param, ctx):
        try:
            self.parse(value)
        except InputError as error:
            self.fail(str(error), param, ctx)
        except (ValueError, OverflowError):
            self.fail(f"{shown(value)} is not a usable {self.name}.", param, ctx)
        return value


class Duration(Checked):
    """A duration such as 7d, 12h, 30m or 0, read by the library's parser and bounded by ``rule`` (in days)."""

    def __init__(self, rule: NumberRule = RETENTION_DAYS):
        def read(text: str) -> None:
            from toolkit.validation import parse_duration

            try:
                window = parse_duration(str(text))
            except OverflowError:
                raise rule.refuse(text) from None
            rule.check(window / timedelta(days=1))

        super().__init__(read, "duration")


class Size(Checked):
    """A size in bytes written as 100MB, 1GB, 512MiB or a plain number of bytes, bounded by ``rule``."""

    def __init__(self, rule: NumberRule):
        self.rule = rule

        def read(text: str) -> int:
            from toolkit.estimate import parse_size

            what = rule.what.removeprefix("the ").split(" (")[0]
            size = parse_size(text, what)
            try:
                return rule.check(size)
            except InputError:
                raise rule.refuse(text) from None  # quote what was typed

        super().__init__(read, "size")

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return self.rule.check(value)
        super().convert(value, param, ctx)
        return self.parse(value)


def read_limit_options(command):
    """The options that bound what one file may cost to read (``toolkit.text.sources.ReadLimits``), handed to the
    command as one ``limits`` argument."""
    from toolkit.validation import FILE_BYTES, PDF_GLYPHS, PDF_MEMORY_BYTES, PDF_PAGES, PDF_SECONDS

    names = ("max_file_size", "pdf_timeout", "pdf_memory", "pdf_max_pages", "pdf_max_glyphs")

    @functools.wraps(command)
    def with_limits(*args, **kwargs):
        from toolkit.text.sources import ReadLimits

        file_bytes, seconds, memory, pages, glyphs = (kwargs.pop(name) for name in names)
        kwargs["limits"] = ReadLimits(file_bytes, seconds, memory, pages, glyphs)
        return command(*args, **kwargs)

    options = [
        click.option(
            "--max-file-size",
            type=Size(FILE_BYTES),
            default="100MB",
            show_default=True,
            help="Skip (and report) a file larger than this.",
        ),
        click.option(
            "--pdf-timeout",
            type=Number(PDF_SECONDS),
            default=300,
            show_default=True,
            help="Seconds one PDF may take to read; a PDF that takes longer is stopped, reported and skipped.",
        ),
        click.option(
            "--pdf-memory",
            type=Size(PDF_MEMORY_BYTES),
            default="1GB",
            show_default=True,
            help="Memory the process reading PDFs may take; a PDF that needs more is stopped, reported and skipped.",
        ),
        click.option(
            "--pdf-max-pages",
            type=Number(PDF_PAGES),
            default=10_000,
            show_default=True,
            help="Skip (and report) a PDF of more pages.",
        ),
        click.option(
            "--pdf-max-glyphs",
            type=Number(PDF_GLYPHS),
            default=100_000,
            show_default=True,
            help="Skip (and report) a PDF with a page that draws more glyphs (a dense page draws about 5,000).",
        ),
    ]
    for option in reversed(options):
        with_limits = option(with_limits)
    return with_limits


class MaybeEmpty(click.types.StringParamType):
    """Text for which an empty value means something (a prefix of nothing); every other parameter refuses
    an empty value, which is an unset variable in a script far more often than a choice."""

    allow_empty = True


def check_arguments(args: list[str]) -> None:
    """Refuses, before click reads them, arguments no parameter can take: a NUL byte (no C string, file name
    or PostgreSQL text holds one) or more than MAX_ARGUMENT_CHARS characters."""
    for position, argument in enumerate(args):
        where = f"the value after {args[position - 1]}" if position else "the first argument"
        if "\x00" in argument:
            at = argument.index("\x00") + 1
            raise click.UsageError(
                f"{where[0].upper()}{where[1:]} contains a NUL byte (character {at}), which no file name or text "
                "value can hold; remove it."
            )
        if len(argument) > MAX_ARGUMENT_CHARS:
            raise click.UsageError(
                f"{where[0].upper()}{where[1:]} is {len(argument):,} characters long; no option takes more than "
                f"{MAX_ARGUMENT_CHARS:,}."
            )


def _values(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _values(item)


def check_stored_text(ctx: click.Context) -> None:
    """Refuses, as a usage error, a parameter value that is empty, not UTF-8 or holds a NUL byte. File paths
    may be any bytes (the files named are then reported and skipped one by one), but never empty: an empty path
    would mean the current directory, an empty spec or alias the default, neither what an unset variable meant."""
    for param in ctx.command.params:
        is_path = isinstance(param.type, click.Path)
        for value in _values(ctx.params.get(param.name)):
            if value == "" and not getattr(param.type, "allow_empty", False):
                what = "the path is empty; name a file or directory" if is_path else "the value is empty; give one"
                raise click.BadParameter(f"{what}, or leave the option out.", ctx=ctx, param=param)
            problem = text_problem(value)
            if problem is None or (is_path and "NUL" not in problem):
                continue
            raise click.BadParameter(f"{shown(value)} {problem}; pass it as UTF-8 text.", ctx=ctx, param=param)


def refuse_unstorable_text(command: click.Command) -> None:
    """Installs ``check_stored_text`` in front of the callback of ``command`` and of every command under it."""
    if command.callback is not None and not getattr(command.callback, "_checks_text", False):
        callback = command.callback

        @functools.wraps(callback)
        def checked(*args, **kwargs):
            check_stored_text(click.get_current_context())
            return callback(*args, **kwargs)

        checked._checks_text = True
        command.callback = checked
    for sub in getattr(command, "commands", {}).values():
        refuse_unstorable_text(sub)
