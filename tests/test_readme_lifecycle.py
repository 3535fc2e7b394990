"""The README's lifecycle, verbatim, on a fresh database: every line of its `sh` block under "The lifecycle" runs as
written (through the `toolkit` command's entry point), in a directory holding `docs/` (three chapters of the bundled
sample) and `labelled.jsonl` (their 60 labelled questions), and succeeds — the first verification reaches its
documented floor with the default retrieval, the second passes its gate against the live first version, and the
cutovers need no --force."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ("indexes.md", "concurrency-control.md", "row-security.md")

pytestmark = pytest.mark.slow


def lifecycle_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The lifecycle", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    lines = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip()
        if command:
            lines.append(command)
    return lines


def test_the_lifecycle_block_is_what_this_test_runs():
    lines = lifecycle_lines()
    assert lines[0].startswith("toolkit model add v1") and lines[-1] == "toolkit status"
    assert any(line.startswith("toolkit verify --model v1") and "--min-recall" in line for line in lines)
    assert all(line.startswith("toolkit ") for part in lines for line in part.split(" && "))


def test_the_readme_lifecycle_passes_as_written(database_url, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in CHAPTERS:
        shutil.copyfile(SAMPLE_DOCS / name, docs / name)
    queries = [json.loads(line) for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    chosen = [q for q in queries if all(a["doc_id"] in CHAPTERS for a in q["answers"])]
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps(q) + "\n" for q in chosen), encoding="utf-8")
    assert len(chosen) >= 50  # the gate's default minimum
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLKIT_DATABASE_URL", database_url)
    runner = CliRunner()
    ran = []
    for line in lifecycle_lines():
        for command in line.split(" && "):
            args = shlex.split(command)
            assert args[0] == "toolkit"
            result = runner.invoke(main, args[1:], catch_exceptions=False)
            ran.append(command)
            assert result.exit_code == 0, f"{command}\n{result.output}"
            if command.startswith("toolkit verify"):
                assert "PASSED" in result.output or "passed" in result.output, result.output
            if command.startswith("toolkit cutover"):
                assert "force" not in result.output.lower(), result.output
    assert len(ran) >= 12
