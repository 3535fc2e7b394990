"""A newcomer's path (issue 37): README.md's Python example, then docs/python.md's LangChain and LlamaIndex examples,
run as written (extracted from the Markdown) against a real database holding documents, as a reader login; every
Python block of those pages is run by this file or by the test named for it; and every field name docs/python.md
cites for a record or a hit is one the code has."""

from __future__ import annotations

import dataclasses
import re
import shutil
import textwrap
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from support import create_database, drop_database, insert_test_model, with_database

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "python.md"
SAMPLE = ROOT / "toolkit" / "data" / "sample" / "docs"
ENGLISH = "indexes.md"  # ingested with metadata lang=en; row-security.md with lang=fr
GLOBEX = "concurrency-control.md"
# The blocks other tests run as written (marker in the block -> the test).
RUN_ELSEWHERE = {"api.backfill": "tests/test_python_api.py::test_the_documented_example_runs"}


def python_blocks(path: Path) -> list[str]:
    found = re.findall(r"^( *)```python\n(.*?)^ *```", path.read_text(encoding="utf-8"), re.M | re.S)
    return [textwrap.dedent(body) for _, body in found]


def the_block(path: Path, marker: str) -> str:
    found = [block for block in python_blocks(path) if marker in block]
    assert len(found) == 1, f"{path.name}: expected one python block with {marker!r}, found {len(found)}"
    return found[0]


# What this file runs: (page, marker of the block).
RUN_HERE = [
    (ROOT / "README.md", "from toolkit.search import search"),
    (PAGE, "from toolkit.integrations.langchain import"),
    (PAGE, "from toolkit.integrations.llamaindex import"),
    (PAGE, "from toolkit.api import SearchOptions"),
]


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture(scope="module")
def reader_url(pg_admin_url, migrated_template, tmp_path_factory):
    """A database with one active version of acme's two chapters (one in English, one in French, as their metadata
    says) and globex's one, and a reader login's URL (hashing model: the examples' mechanics are under test)."""
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    name = create_database(pg_admin_url, migrated_template)
    url = with_database(pg_admin_url, name)
    reader = f"app_{uuid.uuid4().hex[:8]}"
    root = tmp_path_factory.mktemp("newcomer")
    try:
        with connect(url, autocommit=True) as conn:
            insert_test_model(conn, "words", 64, options={"seed": 1})
            for tenant, doc, lang in [
                ("acme", ENGLISH, "en"),
                ("acme", "row-security.md", "fr"),
                ("globex", GLOBEX, "en"),
            ]:
                folder = root / f"{tenant}-{doc}"
                folder.mkdir()
                shutil.copyfile(SAMPLE / doc, folder / doc)
                ingest(conn, [folder], tenant, metadata={"lang": lang})
            version = backfill(url, "words", "recursive:200:0").version
            cutover.activate_version(conn, version, force=True)
            conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
        yield as_user(url, reader)
    finally:
        drop_database(pg_admin_url, name)
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {reader}")


def run(path: Path, marker: str, **names) -> dict:
    namespace = {"__name__": "example", **names}
    exec(compile(the_block(path, marker), str(path), "exec"), namespace)
    return namespace


def test_every_python_block_is_run():
    for path in (ROOT / "README.md", PAGE):
        for block in python_blocks(path):
            here = [marker for page, marker in RUN_HERE if page == path and marker in block]
            elsewhere = [marker for marker in RUN_ELSEWHERE if marker in block]
            assert here or elsewhere, f"{path.name}: no test runs the python block starting {block[:80]!r}"


def test_the_readme_python_example_runs_as_the_reader(reader_url, capsys):
    run(ROOT / "README.md", "from toolkit.search import search", READER_URL=reader_url)
    printed = capsys.readouterr().out.strip().splitlines()
    assert 1 <= len(printed) <= 5 and all(line.split()[1] in (ENGLISH, "row-security.md") for line in printed)


def test_the_langchain_example_runs_as_written(reader_url):
    from langchain_core.documents import Document

    namespace = run(PAGE, "from toolkit.integrations.langchain import", READER_URL=reader_url)
    try:
        docs, english = namespace["docs"], namespace["english"]
        assert docs and all(isinstance(doc, Document) for doc in docs) and len(docs) <= 5
        # The metadata keys the block's comment names are the Documents' own.
        comment = the_block(PAGE, "from toolkit.integrations.langchain import").split("docs[0].metadata", 1)[1]
        named = re.findall(r"\b([a-z_]+)\b", comment.split("\n", 1)[0].split("#", 1)[1])
        assert named and set(named) <= set(docs[0].metadata), set(named) - set(docs[0].metadata)
        # Per call: k=2 and the metadata filter lang=en (only the English chapter).
        assert 1 <= len(english) <= 2 and {doc.metadata["doc_id"] for doc in english} == {ENGLISH}
    finally:
        namespace["retriever"].close()


def test_the_llamaindex_example_runs_as_written(reader_url):
    from llama_index.core.llms.mock import MockLLM

    namespace = run(
        PAGE, "from toolkit.integrations.llamaindex import", READER_URL=reader_url, llm=MockLLM(max_tokens=8)
    )
    try:
        sources = namespace["response"].source_nodes
        assert sources and len(sources) <= 5
        assert {n.node.metadata["doc_id"] for n in sources} <= {ENGLISH, "row-security.md"}
        # The filtered retriever keeps the English chapter; the per-call one searched globex's documents.
        assert {n.node.metadata["doc_id"] for n in namespace["english"].retrieve("create an index")} == {ENGLISH}
        nodes = namespace["nodes"]
        assert 1 <= len(nodes) <= 2 and {n.node.metadata["doc_id"] for n in nodes} == {GLOBEX}
    finally:
        namespace["retriever"].close()
        namespace["english"].close()


def test_the_search_options_example_runs_as_written(reader_url):
    """The options as a record and as keywords search alike: three chunks (vector), of the English chapter only."""
    from toolkit.db.connection import connect

    with connect(reader_url, autocommit=True) as conn:
        namespace = run(PAGE, "from toolkit.api import SearchOptions", conn=conn)
    hits, same = namespace["hits"], namespace["same"]
    assert len(hits) == 3 and {hit.kind for hit in hits} == {"chunk"} and {hit.doc_id for hit in hits} == {ENGLISH}
    assert [(h.doc_id, h.start, h.end) for h in hits] == [(h.doc_id, h.start, h.end) for h in same]


def test_the_record_fields_docs_python_names_exist():
    """Every ``Record`` (field, field, …) of the page's table names fields the record has (QuestionVectors.model was
    named where the field is model_alias)."""
    from toolkit import api

    cited = re.findall(r"`(\w+)` \(([^)`]*)", PAGE.read_text(encoding="utf-8"))
    checked = 0
    for record, fields in cited:
        cls = getattr(api, record, None)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        # Each item's first word ("chunks_written per version", "removed: rows per table…"); "…" ends a list.
        names = [match.group() for part in fields.split(",") if (match := re.match(r"\s*\w+", part))]
        names = [name.strip() for name in names]
        known = {field.name for field in dataclasses.fields(cls)} | {
            name for name, value in vars(cls).items() if isinstance(value, property)
        }
        assert set(names) <= known, f"docs/python.md names {record}.{sorted(set(names) - known)}"
        checked += 1
    assert checked >= 8  # IngestReport, BackfillReport, VerifyReport, CanaryChange, Cutover, Rollback, …


def test_the_library_raises_the_cli_s_sentence_not_psycopg_s(reader_url, tmp_path):
    """A reader login calling the writer's verbs: toolkit.api raises DatabaseError with the sentence the CLI prints
    for the same refusal (it raised psycopg.errors.InsufficientPrivilege), the psycopg error as its cause."""
    from click.testing import CliRunner

    from toolkit import api
    from toolkit.cli import main

    (tmp_path / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    with api.connect(reader_url) as conn:
        with pytest.raises(api.DatabaseError) as ingest_error:
            api.ingest(conn, [tmp_path], "acme")
        with pytest.raises(api.DatabaseError, match=r"^The database refused: permission denied for function erase"):
            api.erase_tenant(conn, "acme")
        with pytest.raises(api.DatabaseError, match=r"toolkit_deployer for verify, canary, cutover"):
            api.cutover(conn, version=1, force=True)
    assert isinstance(ingest_error.value.__cause__, psycopg.errors.InsufficientPrivilege)
    printed = CliRunner().invoke(main, ["--database-url", reader_url, "ingest", str(tmp_path), "--tenant", "acme"])
    assert printed.exit_code == 1
    assert str(ingest_error.value) in " ".join(printed.output.split()), (str(ingest_error.value), printed.output)
