"""Printing what commands report: an aligned table for people, JSON for scripts and CI."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence

import click

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
        click.echo("(none)")
        return
    columns = list(columns or rows[0].keys())

    def cell(value) -> str:
        value = _plain(value)
        if value is None:
            return "-"
        if isinstance(value, float):
            return number(value)
        return str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def emit(rows: Sequence[dict], output_format: str, columns: Sequence[str] | None = None) -> None:
    if output_format == "json":
        click.echo(to_json(list(rows)))
    else:
        print_table(rows, columns)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 query``, ``2 queries``, ``1,200 documents``."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"
