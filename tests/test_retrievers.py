"""The LangChain and LlamaIndex retrievers (issue 26, item 1), against the real langchain-core and llama-index-core
and the real database: they return what search() returns, sync and async, as the frameworks' Documents and nodes
with the hit's metadata; a LangChain chain and a LlamaIndex query engine (the frameworks' own fake LLMs) keep
answering through a cutover and a rollback, every answer from one version."""

from __future__ import annotations

import asyncio
import shutil
import threading
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.ingest import ingest
from toolkit.search import search

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
TENANT = "acme"
QUESTION = "Which policies apply when row security is enabled on a table?"
METADATA = {"doc_id", "start", "end", "heading_path", "pages", "version", "model_alias", "score", "rank"}


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def versions(conn, database_url, make_model, tmp_path):
    """Two versions of two chapters (two hashing models, two chunkers); the first is active."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("row-security.md", "indexes.md"):
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", 32, options={"seed": 1})
    make_model("two", 48, options={"seed": 2})
    ingest(conn, [docs], TENANT)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


@pytest.fixture
def reader_url(conn, database_url):
    name = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_reader")
    yield as_user(database_url, name)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


def spans(hits) -> list[tuple]:
    return [(h.doc_id, h.start, h.end, h.version) for h in hits]


def test_langchain_retriever_returns_what_search_returns(conn, versions, reader_url):
    from langchain_core.documents import Document

    from toolkit.integrations.langchain import ToolkitRetriever

    expected = search(conn, QUESTION, TENANT, 4, log=False)
    retriever = ToolkitRetriever(database_url=reader_url, tenant=TENANT, k=4)
    try:
        docs = retriever.invoke(QUESTION)
        assert all(isinstance(d, Document) for d in docs)
        found = [(d.metadata["doc_id"], d.metadata["start"], d.metadata["end"], d.metadata["version"]) for d in docs]
        assert found == spans(expected)
        assert [d.page_content for d in docs] == [h.text for h in expected]
        assert set(docs[0].metadata) >= METADATA
        assert docs[0].metadata["model_alias"] == "one" and docs[0].id.startswith(f"v{versions[0]}:")
        assert "text" not in docs[0].metadata
        # async, and per-call overrides
        again = asyncio.run(retriever.ainvoke(QUESTION))
        assert [d.metadata for d in again] == [d.metadata for d in docs]
        assert len(retriever.invoke(QUESTION, k=2)) == 2
        assert retriever.invoke(QUESTION, tenant="nobody") == []  # row-level security: another tenant sees nothing
    finally:
        retriever.close()


def test_llamaindex_retriever_returns_what_search_returns(conn, versions, reader_url):
    from llama_index.core.schema import NodeWithScore, TextNode

    from toolkit.integrations.llamaindex import ToolkitRetriever

    expected = search(conn, QUESTION, TENANT, 4, log=False)
    retriever = ToolkitRetriever(reader_url, tenant=TENANT, k=4)
    try:
        nodes = retriever.retrieve(QUESTION)
        assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
        found = [(n.node.metadata["doc_id"], n.node.metadata["start"], n.node.metadata["end"]) for n in nodes]
        assert [*zip(found, [n.node.metadata["version"] for n in nodes], strict=True)] == [
            (s[:3], s[3]) for s in spans(expected)
        ]
        assert [n.score for n in nodes] == pytest.approx([h.score for h in expected])
        assert [n.node.get_content() for n in nodes] == [h.text for h in expected]
        assert set(nodes[0].node.metadata) >= METADATA
        # The LLM sees the document and headings, not spans and scores.
        shown = nodes[0].node.get_content(metadata_mode="llm")
        assert nodes[0].node.metadata["doc_id"] in shown and "score" not in shown
        again = asyncio.run(retriever.aretrieve(QUESTION))
        assert [n.node.metadata for n in again] == [n.node.metadata for n in nodes]
    finally:
        retriever.close()


def run_through_cutover(conn, versions, ask) -> list[set[int]]:
    """Calls ``ask()`` (returns the versions of one answer's sources) in a thread until it has seen the first version,
    then the second (after a cutover), then the first again (after a rollback); the cutover and the rollback happen
    when the thread has answered from the version before. Returns each answer's versions; raises what ask raised."""
    first, second = versions
    answers: list[set[int]] = []
    errors: list[BaseException] = []
    seen = {first: threading.Event(), second: threading.Event()}
    back = threading.Event()
    done = threading.Event()

    def loop() -> None:
        try:
            while not done.is_set():
                got = ask()
                answers.append(got)
                for version in got:
                    seen[version].set()
                if back.is_set() and got == {first}:
                    done.set()
        except BaseException as error:
            errors.append(error)
            done.set()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        assert seen[first].wait(60)
        cutover.activate_version(conn, second, force=True)
        assert seen[second].wait(60) or errors
        cutover.roll_back(conn)
        back.set()
        assert done.wait(60)
    finally:
        done.set()
        thread.join(60)
    if errors:
        raise errors[0]
    return answers


def test_a_langchain_chain_answers_through_a_cutover(conn, versions, reader_url):
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    from toolkit.integrations.langchain import ToolkitRetriever

    retriever = ToolkitRetriever(database_url=reader_url, tenant=TENANT, k=3)
    prompt = PromptTemplate.from_template("Answer from the context.\n{context}\nQuestion: {question}")
    llm = FakeListLLM(responses=["Permissive policies are combined with OR."])

    def context(docs) -> str:
        return "\n\n".join(d.page_content for d in docs)

    chain = {"docs": retriever, "question": RunnablePassthrough()} | RunnablePassthrough.assign(
        answer=({"context": lambda x: context(x["docs"]), "question": lambda x: x["question"]} | prompt | llm)
        | StrOutputParser()
    )

    def ask() -> set[int]:
        result = chain.invoke(QUESTION)
        assert result["answer"] == "Permissive policies are combined with OR."
        assert result["docs"]
        return {d.metadata["version"] for d in result["docs"]}

    try:
        answers = run_through_cutover(conn, versions, ask)
    finally:
        retriever.close()
    assert all(len(a) == 1 for a in answers), "an answer mixed versions"
    assert {v for a in answers for v in a} == set(versions)


def test_a_llamaindex_query_engine_answers_through_a_cutover(conn, versions, reader_url):
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    from toolkit.integrations.llamaindex import ToolkitRetriever

    retriever = ToolkitRetriever(reader_url, tenant=TENANT, k=3)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(max_tokens=8))

    def ask() -> set[int]:
        response = engine.query(QUESTION)
        assert str(response).strip()
        assert response.source_nodes
        return {n.node.metadata["version"] for n in response.source_nodes}

    try:
        answers = run_through_cutover(conn, versions, ask)
        # the async engine too, once back on the first version
        response = asyncio.run(engine.aquery(QUESTION))
        assert {n.node.metadata["version"] for n in response.source_nodes} == {versions[0]}
    finally:
        retriever.close()
    assert all(len(a) == 1 for a in answers), "an answer mixed versions"
    assert {v for a in answers for v in a} == set(versions)


def test_the_canary_serves_its_share_through_the_retrievers(conn, versions, reader_url):
    """A request key in the canary's share, and a tenant the canary serves whole, get the candidate's rows."""
    from toolkit import serving
    from toolkit.integrations.langchain import ToolkitRetriever as LangChainRetriever
    from toolkit.integrations.llamaindex import ToolkitRetriever as LlamaIndexRetriever

    first, second = versions
    serving.set_canary(conn, second, 50, force=True)
    keys = [f"user-{i}" for i in range(40)]
    with conn.transaction():
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        expected = {k: conn.execute("SELECT version FROM toolkit.serving_model(%s)", (k,)).fetchone()[0] for k in keys}
    assert set(expected.values()) == {first, second}
    lang = LangChainRetriever(database_url=reader_url, tenant=TENANT, k=2)
    llama = {k: LlamaIndexRetriever(reader_url, tenant=TENANT, k=2, request_key=k) for k in keys[:6]}
    try:
        for key in keys:
            assert {d.metadata["version"] for d in lang.invoke(QUESTION, request_key=key)} == {expected[key]}
        for key, retriever in llama.items():
            assert {n.node.metadata["version"] for n in retriever.retrieve(QUESTION)} == {expected[key]}
        serving.set_canary(conn, second, 0, [TENANT], force=True)  # the whole tenant on the candidate
        assert {d.metadata["version"] for d in lang.invoke(QUESTION, request_key="anyone")} == {second}
    finally:
        lang.close()
        for retriever in llama.values():
            retriever.close()


def test_the_retrievers_take_metadata_filters_min_score_and_diversity(conn, versions, reader_url):
    """The options search() takes, given to each retriever (constructor, or per call in LangChain), give search()'s
    answer."""
    from toolkit.integrations.langchain import ToolkitRetriever as LangChainRetriever
    from toolkit.integrations.llamaindex import ToolkitRetriever as LlamaIndexRetriever

    conn.execute("UPDATE toolkit.documents SET metadata = metadata || '{\"topic\": \"rls\"}' WHERE doc_id LIKE 'row%'")
    filters = {"metadata": {"topic": "rls"}}
    plain = search(conn, QUESTION, TENANT, 4, log=False)
    threshold = sorted(h.score for h in search(conn, QUESTION, TENANT, 4, retrieval="vector", log=False))[1]
    options = {"filters": filters, "min_score": 0.05, "diversity": 0.7}
    expected = search(conn, QUESTION, TENANT, 4, log=False, **options)
    assert expected and {h.doc_id for h in expected} == {"row-security.md"}
    assert spans(expected) != spans(plain)
    langchain = LangChainRetriever(database_url=reader_url, tenant=TENANT, k=4, **options)
    llamaindex = LlamaIndexRetriever(reader_url, tenant=TENANT, k=4, **options)
    try:
        got = langchain.invoke(QUESTION)
        assert [(d.metadata["doc_id"], d.metadata["start"], d.metadata["end"], d.metadata["version"]) for d in got] == (
            spans(expected)
        )
        nodes = llamaindex.retrieve(QUESTION)
        assert [n.node.metadata["start"] for n in nodes] == [h.start for h in expected]
        # Per call (LangChain): a threshold on the vector retrieval's cosine similarity, a filter changed.
        vector = search(conn, QUESTION, TENANT, 4, retrieval="vector", min_score=threshold, log=False)
        assert len(vector) == 3
        called = langchain.invoke(QUESTION, retrieval="vector", min_score=threshold, diversity=0.0, filters=None)
        assert [d.metadata["rank"] for d in called] == [1, 2, 3]
        assert [(d.metadata["doc_id"], d.metadata["start"]) for d in called] == [(h.doc_id, h.start) for h in vector]
    finally:
        langchain.close()
        llamaindex.close()
