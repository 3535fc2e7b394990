"""The bundled sample corpus: real licensed text of the right size and ≥ 200 labelled queries that resolve."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter

import pytest

from toolkit.evaluation.metrics import Span
from toolkit.evaluation.queries import SAMPLE_DIR, SAMPLE_DOCS, SAMPLE_QUERIES, load_queries, read_sample_documents


def test_corpus_is_a_few_hundred_kilobytes_of_markdown_with_structure():
    documents = read_sample_documents()
    assert len(documents) >= 5
    size = sum(len(text.encode("utf-8")) for text in documents.values())
    assert 300_000 <= size <= 500_000, size
    joined = "\n".join(documents.values())
    for structure in ("\n## ", "\n### ", "\n```", "\n| ", "\n- ", "\n> **Note**"):
        assert structure in joined, f"no {structure.strip()!r} in the sample corpus"


def test_the_postgresql_licence_travels_with_the_text():
    licence = (SAMPLE_DIR / "LICENSE").read_text(encoding="utf-8")
    assert "PostgreSQL Global Development Group" in licence
    assert "Permission to use, copy, modify, and distribute" in licence


def test_every_answer_text_occurs_exactly_once_in_its_document():
    documents = read_sample_documents()
    records = [json.loads(line) for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines() if line]
    assert len(records) >= 200
    for number, record in enumerate(records, start=1):
        for answer in record["answers"]:
            count = documents[answer["doc_id"]].count(answer["text"])
            assert count == 1, f"queries.jsonl line {number}: answer occurs {count} times"


def test_queries_load_and_resolve_to_spans_of_their_documents():
    documents = read_sample_documents()
    queries = load_queries(SAMPLE_QUERIES, documents)
    assert len(queries) >= 200
    assert len({q.query for q in queries}) == len(queries)  # no question asked twice
    for query in queries:
        (span,) = query.answers
        assert isinstance(span, Span)
        assert 0 <= span.start < span.end <= len(documents[span.doc_id])
    per_document = Counter(q.answers[0].doc_id for q in queries)
    assert set(per_document) == set(documents), "every document has queries"


def _script(name: str, monkeypatch):
    """Import one of the sample folder's scripts under a private module name (no clash with PyPI's `build`)."""
    spec = importlib.util.spec_from_file_location(f"_sample_{name}", SAMPLE_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_queries_file_is_what_make_queries_derives(monkeypatch):
    # The committed file must be reproducible from the committed Markdown by the committed script.
    make_queries = _script("make_queries", monkeypatch)

    derived = make_queries.build_queries(SAMPLE_DOCS)
    committed = [json.loads(line) for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines() if line]
    assert derived == committed
    assert {q["kind"] for q in committed} == {"heading", "definition", "table-row", "manual"}


def test_converter_keeps_headings_code_tables_lists_and_notes(monkeypatch):
    build = _script("build", monkeypatch)
    html = """<html><body><div id="docContent"><div class="navheader">Prev Next</div>
    <div class="sect1"><div class="titlepage"><h2 class="title">11.2. Index   Types</h2></div>
    <p>B-trees handle <code class="literal">=</code> and
       <em class="firstterm">range</em> queries.<a class="indexterm" name="x"></a></p>
    <pre class="programlisting">CREATE INDEX i
    ON t (c);</pre>
    <div class="table"><p class="title"><strong>Table 8.2. Numeric Types</strong></p>
    <table><thead><tr><th>Name</th><th>Size</th></tr></thead>
    <tbody><tr><td><code class="type">smallint</code></td><td>2 | bytes</td></tr></tbody></table></div>
    <div class="itemizedlist"><ul><li><p>first</p></li><li><p>second</p></li></ul></div>
    <div class="note"><h3 class="title">Note</h3><p>Be careful.</p></div>
    <div class="sect2"><div class="titlepage"><h3 class="title">11.2.1. B-Tree</h3></div><p>Text.</p></div>
    </div></div></body></html>"""
    assert build.page_markdown(html) == [
        "## 11.2. Index Types",
        "B-trees handle `=` and *range* queries.",
        "```\nCREATE INDEX i\n    ON t (c);\n```",
        "**Table 8.2. Numeric Types**",
        "| Name | Size |\n|---|---|\n| `smallint` | 2 \\| bytes |",
        "- first\n- second",
        "> **Note**\n>\n> Be careful.",
        "### 11.2.1. B-Tree",
        "Text.",
    ]


def test_committed_markdown_is_what_the_converter_produces(monkeypatch):
    build = _script("build", monkeypatch)
    if not (build.DEFAULT_HTML / "index.html").exists():
        pytest.skip("postgresql-doc-15 is not installed (apt-get install postgresql-doc-15) to rebuild from")
    for name, first in build.CHAPTERS.items():
        assert build.chapter_markdown(build.DEFAULT_HTML, first) == (SAMPLE_DOCS / name).read_text(encoding="utf-8")


def test_ingest_reads_the_same_text_the_queries_were_labelled_on():
    # Answer offsets refer to the stored raw text; toolkit.text.sources must not alter the Markdown.
    from toolkit.text.sources import read_documents

    stored = {d.doc_id: d.text for d in read_documents([SAMPLE_DOCS])}
    assert stored == read_sample_documents()
    assert len(load_queries(SAMPLE_QUERIES, stored)) >= 200
