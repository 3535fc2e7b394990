"""Docs are checked: every command has help text and a section in docs/ (sqlite-utils' test_docs habit)."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# -- documented outputs are the outputs of today's code -------------------------------------------------------
# A command whose output a doc shows is run and compared, so the doc cannot go stale. It is shown either as a
# ``` block holding one `toolkit …` command (continued with a trailing backslash) directly followed by a ``` block
# of its output, or as `$ toolkit …` lines inside a block, each followed by its output lines. Regenerate them all
# with `python tests/test_docs.py --write` after a change that is meant to alter them.

ROOT = DOCS.parent
# Examples whose output needs more than this test has (a database with a given corpus, a model run of minutes):
# each says where it is checked instead. Anything else with a documented output is run below.
RUN_ELSEWHERE = {
    'toolkit search "What does ERR-4021 mean?" --tenant acme --retrieval hybrid -k 3': (
        "a database holding the labelled corpus of tests/test_search_quality.py, which checks these ranks"
    ),
}
_FENCE = re.compile(r"^```[\w-]*\n(.*?)^```\n", re.M | re.S)


@dataclass(frozen=True)
class Example:
    doc: Path
    command: str  # as typed, continuation lines joined
    output: str  # as shown
    span: tuple[int, int]  # where the output is in the doc's text

    @property
    def name(self) -> str:
        return f"{self.doc.name}: {self.command[:70]}"


def documented_examples() -> list[Example]:
    found = []
    for doc in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]:
        text = doc.read_text()
        blocks = list(_FENCE.finditer(text))
        for block, following in zip(blocks, [*blocks[1:], None], strict=False):
            body = block.group(1)
            if body.startswith("toolkit ") and following is not None:
                gap = text[block.end() : following.start()]
                lines = body.splitlines()
                if gap.strip() or len([line for line in lines if not line.endswith("\\")]) != 1:
                    continue  # a synopsis or several commands: no output shown for it
                command = " ".join(line.rstrip("\\").strip() for line in lines)
                found.append(Example(doc, command, following.group(1), following.span(1)))
            elif body.startswith("$ toolkit "):
                lines = body.splitlines(keepends=True)
                offset = block.start(1)
                for i, line in enumerate(lines):
                    if not line.startswith("$ toolkit "):
                        continue
                    output = []
                    for later in lines[i + 1 :]:
                        if later.startswith("$ "):
                            break
                        output.append(later)
                    start = offset + sum(len(x) for x in lines[: i + 1])
                    shown = "".join(output)
                    if shown.strip():
                        found.append(Example(doc, line[2:].strip(), shown, (start, start + len(shown))))
    return found


EXAMPLES = documented_examples()


def run_example(example: Example) -> str:
    import os
    import shlex

    current = os.getcwd()
    os.chdir(ROOT)  # the examples name paths relative to the repository
    try:
        result = CliRunner().invoke(main, shlex.split(example.command)[1:])
    finally:
        os.chdir(current)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_documented_output_is_checked():
    assert len(EXAMPLES) >= 3, "the finder lost the examples"
    elsewhere = {e.command for e in EXAMPLES} & set(RUN_ELSEWHERE)
    assert elsewhere == set(RUN_ELSEWHERE), (
        f"RUN_ELSEWHERE names examples that no doc shows: {set(RUN_ELSEWHERE) - elsewhere}"
    )


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.command not in RUN_ELSEWHERE], ids=lambda e: e.name)
def test_a_documented_output_is_what_the_command_prints(example):
    shown = [line.rstrip() for line in example.output.rstrip("\n").splitlines()]
    printed = [line.rstrip() for line in run_example(example).rstrip("\n").splitlines()]
    assert printed == shown, (
        f"{example.doc.name} shows another output for `{example.command}`; run python tests/test_docs.py --write"
    )


def write_examples() -> None:
    """Replaces every runnable documented output with what the command prints today."""
    by_doc: dict[Path, list[Example]] = {}
    for example in EXAMPLES:
        if example.command not in RUN_ELSEWHERE:
            by_doc.setdefault(example.doc, []).append(example)
    for doc, examples in by_doc.items():
        text = doc.read_text()
        for example in sorted(examples, key=lambda e: e.span[0], reverse=True):
            printed = "\n".join(line.rstrip() for line in run_example(example).rstrip("\n").splitlines()) + "\n"
            text = text[: example.span[0]] + printed + text[example.span[1] :]
        doc.write_text(text)
        print(f"rewrote {len(examples)} output(s) in {doc.relative_to(ROOT)}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_docs.py --write")
    write_examples()
