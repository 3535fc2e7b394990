"""Docs are checked: every command has help text and a section in docs/ (sqlite-utils' test_docs habit)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from toolkit.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"


def all_commands(group: click.Group, prefix: str = "toolkit"):
    for name, command in sorted(group.commands.items()):
        path = f"{prefix} {name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from all_commands(command, path)


COMMANDS = list(all_commands(main))


def test_there_are_commands():
    names = {path for path, _ in COMMANDS}
    assert {"toolkit db", "toolkit ingest", "toolkit backfill", "toolkit verify", "toolkit cutover"} <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_has_help(path, command):
    assert command.help and len(command.help.strip()) > 10, f"{path} has no help text"
    result = CliRunner().invoke(main, [*path.split()[1:], "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if not isinstance(c, click.Group) or p.count(" ") == 1])
def test_every_top_level_command_and_group_has_a_docs_section(path):
    top = " ".join(path.split()[:2])
    headings = set()
    for doc in DOCS.glob("*.md"):
        headings.update(m.group(1).strip() for m in re.finditer(r"^#+\s+`?(toolkit [a-z -]+)`?", doc.read_text(), re.M))
    assert top in headings, f"no docs section headed '{top}' in docs/*.md"


def test_readme_starts_with_the_two_commands():
    readme = (DOCS.parent / "README.md").read_text()
    block = readme.split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert lines == ["make demo", "make test"]
