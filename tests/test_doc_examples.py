"""The application examples of README.md and docs/sql.md run verbatim, extracted from the Markdown, against an
embedded server of their own, as the reader login the README tells a newcomer to create: the shell lines that
create it, the SQL of the pinned pattern (its $1/$2 bound the way a driver binds them), and the Python examples on
a plain psycopg.connect(url). If a doc example stops working, this test fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from support import scratch_directory

from toolkit.cli import main
from toolkit.db import server as embedded
from toolkit.embedding import get_embedder

# starts a PostgreSQL server of its own: not in `make check`
pytestmark = pytest.mark.database

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "toolkit" / "data" / "sample" / "docs"
QUESTION = "Which index type can speed up a query on an expression like lower(col1)?"


def blocks(path: Path, language: str) -> list[str]:
    """The fenced blocks of a language, dedented (a block inside a list item is indented)."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^ *```", path.read_text(encoding="utf-8"), re.M | re.S)
    return [textwrap.dedent(body) if indent else body for indent, body in found]


def the_block(path: Path, language: str, marker: str) -> str:
    found = [b for b in blocks(path, language) if marker in b]
    assert len(found) == 1, f"{path.name}: expected one {language} block with {marker!r}, found {len(found)}"
    return found[0]


def statements(sql: str) -> list[str]:
    """The block's statements, as psql would send them (comments kept; each ends at a ';' ending a line)."""
    found, current = [], []
    for line in sql.splitlines():
        current.append(line)
        if line.split("--")[0].rstrip().endswith(";"):
            found.append("\n".join(current).strip())
            current = []
    return [s for s in found if re.sub(r"--[^\n]*", "", s).strip(" ;\n")]


def run_sql(conn: psycopg.Connection, sql: str, params: list[str]) -> list[list[dict]]:
    """Runs each statement; those with $n placeholders are bound with ``params`` by libpq itself (exec_params),
    the text unchanged. Returns each statement's rows, as column name → value (text for bound statements)."""
    results = []
    for statement in statements(sql):
        numbers = sorted({int(n) for n in re.findall(r"\$(\d+)", re.sub(r"--[^\n]*", "", statement))})
        if numbers:
            result = conn.pgconn.exec_params(statement.encode(), [params[n - 1].encode() for n in numbers])
            if result.status not in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
                raise AssertionError(f"{statement}\n-> {result.error_message.decode()}")
            names = [result.fname(c).decode() for c in range(result.nfields)]
            rows = [
                {names[c]: result.get_value(r, c).decode() for c in range(result.nfields)}
                for r in range(result.ntuples)
            ]
        else:
            cur = conn.execute(statement)
            names = [c.name for c in cur.description] if cur.description else []
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()] if cur.description else []
        results.append(rows)
    return results


@pytest.fixture(scope="module")
def server():
    """An embedded server with a version of two sample chapters live (hashing model: the examples' mechanics, not
    retrieval quality, are under test)."""
    directory = scratch_directory("toolkit-test-docs-")
    data_dir = directory / "pg"
    docs = directory / "docs"
    docs.mkdir()
    for name in ("indexes.md", "row-security.md"):
        shutil.copyfile(SAMPLE / name, docs / name)
    env = {**os.environ, "TOOLKIT_DATA_DIR": str(data_dir)}
    old = os.environ.get("TOOLKIT_DATA_DIR")
    os.environ["TOOLKIT_DATA_DIR"] = str(data_dir)
    try:
        runner = CliRunner()
        for args in (
            ["model", "add", "v1", "--provider", "hashing", "--name", "64"],
            ["ingest", str(docs), "--tenant", "acme"],
            ["backfill", "--model", "v1", "--chunker", "recursive:200:0"],
            ["cutover", "--model", "v1", "--force"],
        ):
            result = runner.invoke(main, args)
            assert result.exit_code == 0, result.output
        yield env
    finally:
        if old is None:
            os.environ.pop("TOOLKIT_DATA_DIR", None)
        else:
            os.environ["TOOLKIT_DATA_DIR"] = old
        embedded.stop_embedded(data_dir)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def reader_url(server):
    """Runs the README's shell lines that create the reader login and compute READER_URL."""
    script = the_block(ROOT / "README.md", "sh", "CREATE ROLE app")
    env = {**server, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script + '\nprintf "%s" "$READER_URL"'],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip().splitlines()[-1]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == "app"
        # the reader sees no row without a tenant: the superuser URL would have shown every one
        assert conn.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()[0] == 0
    return url


def question_vector() -> str:
    return str([float(x) for x in get_embedder("hashing:64").embed_query(QUESTION)]).replace(" ", "")


@pytest.mark.parametrize("doc", ["README.md", "docs/sql.md"])
def test_the_pinned_sql_pattern_runs_as_the_reader(reader_url, doc):
    sql = the_block(ROOT / doc, "sql", "toolkit.serving_model(")
    with psycopg.connect(reader_url, autocommit=True) as conn:
        version = conn.execute("SELECT toolkit.active_version()").fetchone()[0]
        results = run_sql(conn, sql, [QUESTION, question_vector(), str(version)])
    served = next(rows for rows in results if rows and "model_name" in rows[0])
    assert served[0]["version"] == version and served[0]["provider"] == "hashing"
    hits = next(rows for rows in reversed(results) if rows and "doc_id" in rows[0])
    # Passages: at most 5 (touching hits merge), each cut from its document.
    assert 1 <= len(hits) <= 5 and all(row["doc_id"].endswith(".md") for row in hits)


def test_the_live_chunks_example_reads_only_the_pinned_version(reader_url):
    sql = the_block(ROOT / "docs" / "sql.md", "sql", "FROM toolkit.live_chunks")
    with psycopg.connect(reader_url, autocommit=True) as conn:
        version = conn.execute("SELECT toolkit.active_version()").fetchone()[0]
        conn.execute("BEGIN")
        conn.execute("SELECT toolkit.set_tenant('acme')")
        (rows,) = run_sql(conn, sql, [question_vector(), str(version)])
        conn.execute("ROLLBACK")
    assert len(rows) == 5 and all(row["doc_id"].endswith(".md") for row in rows)


@pytest.mark.parametrize(
    ("doc", "marker"), [("README.md", "from toolkit.search import search"), ("docs/sql.md", "EMBED(")]
)
def test_the_python_examples_run_on_a_plain_psycopg_connection(reader_url, doc, marker, capsys):
    code = the_block(ROOT / doc, "python", marker)
    embedder = get_embedder("hashing:64")
    namespace = {"READER_URL": reader_url, "EMBED": embedder.embed_query}
    exec(compile(code, doc, "exec"), namespace)
    if "rows" in namespace:
        assert 1 <= len(namespace["rows"]) <= 5
    else:
        printed = capsys.readouterr().out.strip().splitlines()
        assert 1 <= len(printed) <= 5 and all(line.split()[1].endswith(".md") for line in printed)
