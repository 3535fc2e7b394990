"""Printing what commands report: an aligned table for people, JSON for scripts and CI."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Sequence

import click

# What a terminal would obey instead of print: C0 controls but tab and newline (ESC starts "set the title",
# "move the cursor", "clear the screen"), DEL, C1 controls, and the bidirectional overrides and isolates that
# reorder what follows them (U+202E shows "gpj.exe" as "exe.jpg").
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on shown as an escape (``\\x1b``, ``\\u202e``): what a
    document, a logged question or a file name holds is printed, never obeyed."""
    return _UNPRINTABLE.sub(_escape, text)


def say(message: object = "", *, err: bool = False) -> None:
    """``click.echo`` for people: control characters escaped (``printable``). JSON output goes through
    ``click.echo`` unchanged (``json.dumps`` escapes them itself)."""
    click.echo(printable(str(message)), err=err)


QUIET_OPTION = click.option(
    "--quiet", is_flag=True, help="No progress on stderr (it is shown on a terminal only; TOOLKIT_PROGRESS=always)."
)

FORMAT_OPTION = click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts and CI.",
)


def _plain(value):
    if isinstance(value, datetime.datetime):
        return value.isoformat(timespec="seconds")
    return value


def to_json(value) -> str:
    return json.dumps(value, indent=2, default=lambda v: _plain(v) if not isinstance(v, float) else v)


def number(value: float) -> str:
    """A float for people: at most four decimals, no trailing zeros (286.7, 0.8333, 1.0, 12,000.5)."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    text = f"{value:,.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def print_table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> None:
    if not rows:
        say("(none)")
        return
    columns = list(columns or rows[0].keys())

    def cell(value) -> str:
        value = _plain(value)
        if value is None:
            return "-"
        if isinstance(value, float):
            return number(value)
        return printable(str(value))  # escaped before the widths are measured

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    say("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        say("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def as_json(value):
    """What ``--format json`` prints of a command's result: a report's ``as_dict()`` (or ``to_dict()``), each item of
    a list, or the value itself."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [as_json(item) for item in value]
    return value


def json_output(output_format: str, result) -> bool:
    """The one place a command's result is written as JSON (for scripts and CI): writes it and returns True under
    ``--format json``; returns False for the table and lines a command prints for people."""
    if output_format != "json":
        return False
    click.echo(to_json(as_json(result)))
    return True


def json_line(record: dict) -> None:
    """One JSON object on one line (``--format jsonl``: a record per line as it comes)."""
    click.echo(json.dumps(record, ensure_ascii=False))


def emit(rows: Sequence[dict], output_format: str, columns: Sequence[str] | None = None) -> None:
    if not json_output(output_format, list(rows)):
        print_table(rows, columns)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 query``, ``2 queries``, ``1,200 documents``."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"
