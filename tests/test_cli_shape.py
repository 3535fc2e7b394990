"""The command line stays thin: every click command parses its options, calls one library function and prints.

Measured on the source: a command is a function in toolkit/cli/*.py with a decorator whose text contains
``command``; its body runs from the first statement after the docstring to the end of the last statement.
"""

from __future__ import annotations

import ast
import statistics
from pathlib import Path

CLI = Path(__file__).resolve().parent.parent / "toolkit" / "cli"
MAX_LINES = 25
MAX_MEDIAN = 15
# Fewer found means the walk is broken (or commands moved), not that the CLI became thin.
MIN_COMMANDS = 20


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def command_bodies(directory: Path = CLI) -> dict[str, int]:
    """``file:function`` → lines of its body, for every click command callback in ``directory``/*.py."""
    found = {}
    for path in sorted(directory.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not any("command" in ast.unparse(decorator) for decorator in node.decorator_list):
                continue
            body = node.body[1:] if _is_docstring(node.body[0]) and len(node.body) > 1 else node.body
            found[f"{path.name}:{node.name}"] = body[-1].end_lineno - body[0].lineno + 1
    return found


def test_every_command_body_is_short_and_the_median_shorter():
    lengths = command_bodies()
    assert len(lengths) >= MIN_COMMANDS, f"found only {len(lengths)} commands in {CLI}: {sorted(lengths)}"
    offenders = {name: n for name, n in sorted(lengths.items(), key=lambda item: -item[1]) if n > MAX_LINES}
    assert not offenders, f"command bodies over {MAX_LINES} lines (move the logic into the library): {offenders}"
    median = statistics.median(lengths.values())
    longest = dict(sorted(lengths.items(), key=lambda item: -item[1])[:10])
    assert median <= MAX_MEDIAN, f"median command body {median} lines > {MAX_MEDIAN}; the longest: {longest}"


def test_the_measure_finds_commands_and_counts_their_bodies(tmp_path):
    # A docstring is not counted, a statement spanning lines counts to its end, a helper is no command, and a
    # command of 30 lines is over the limit: the measure can fail.
    long_body = "\n".join(f"    x{i} = {i}" for i in range(30))
    (tmp_path / "sample.py").write_text(
        f"""
@click.command()
@click.option("--n")
def short(n):
    \"\"\"Doc
    on two lines.\"\"\"
    value = call(
        n,
    )
    print(value)


@group.command("long")
def long_():
{long_body}


def helper():
{long_body}
""",
        encoding="utf-8",
    )
    assert command_bodies(tmp_path) == {"sample.py:short": 4, "sample.py:long_": 30}


def test_json_is_written_in_one_place():
    """Output options are declared once (``_output.FORMAT_OPTION``) and JSON written once (``_output.json_output`` and
    ``json_line``): no command or printer compares the format with "json" or calls json.dumps itself."""
    cli = Path(__file__).resolve().parents[1] / "toolkit" / "cli"
    offenders = []
    for path in sorted(cli.glob("*.py")):
        if path.name == "_output.py":
            continue
        text = path.read_text()
        for pattern in ('== "json"', '!= "json"', "json.dumps(", 'click.Choice(["table", "json"])'):
            if pattern in text:
                offenders.append(f"{path.name}: {pattern}")
    assert offenders == []
    assert '== "json"' not in (cli / "_render.py").read_text() and "json_output(" in (cli / "_render.py").read_text()
