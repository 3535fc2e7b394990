"""The retrievers in the frameworks' own idioms (issue 37, item 2), on the real database as a reader login:
LangChain's ``search_kwargs`` (k, filter, search()'s options) and per-call keywords of ``invoke``; LlamaIndex's
``similarity_top_k``, ``MetadataFilters`` (EQ and IN; others refused by name) and a per-call tenant
(``with_options``); an argument either does not know is refused with a sentence, never ignored. And LangChain's own
standard retriever tests (langchain-tests' ``RetrieversIntegrationTests``) against ToolkitRetriever."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from support import create_database, drop_database, insert_test_model, with_database

from toolkit.errors import InputError

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_tests.integration_tests import RetrieversIntegrationTests
from llama_index.core.vector_stores import (
    ExactMatchFilter,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from toolkit.integrations.langchain import ToolkitRetriever as LangChainRetriever
from toolkit.integrations.llamaindex import ToolkitRetriever as LlamaIndexRetriever

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
QUESTION = "Which policies apply when row security is enabled on a table?"
# Two chapters of acme's, each ingested with its own metadata; one of globex's.
ACME = {"indexes.md": {"lang": "en", "topic": "indexes"}, "row-security.md": {"lang": "fr", "topic": "rls"}}
GLOBEX = "concurrency-control.md"


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture(scope="module")
def library(pg_admin_url, migrated_template, tmp_path_factory):
    """A database of the module's own with one active version (hashing model: the mechanics, not the quality, are
    under test), and a reader login's URL: (admin URL of the database, reader URL)."""
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    name = create_database(pg_admin_url, migrated_template)
    url = with_database(pg_admin_url, name)
    reader = f"app_{uuid.uuid4().hex[:8]}"
    root = tmp_path_factory.mktemp("native")
    try:
        with connect(url, autocommit=True) as conn:
            insert_test_model(conn, "words", 64, options={"seed": 1})
            for tenant, doc, metadata in [
                *(("acme", doc, metadata) for doc, metadata in ACME.items()),
                ("globex", GLOBEX, None),
            ]:
                folder = root / f"{tenant}-{doc}"
                folder.mkdir()
                shutil.copyfile(SAMPLE / doc, folder / doc)
                ingest(conn, [folder], tenant, metadata=metadata)
            version = backfill(url, "words", "recursive:200:0").version
            cutover.activate_version(conn, version, force=True)
            conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
        yield url, as_user(url, reader)
    finally:
        drop_database(pg_admin_url, name)
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {reader}")


@pytest.fixture(scope="module")
def expected(library):
    """search() as the library answers it, on the admin connection, as the reader role: what the retrievers must
    return."""
    from toolkit.db.connection import connect
    from toolkit.search import search

    connection = connect(library[0], autocommit=True)

    def run(k: int = 5, tenant: str = "acme", **options):
        return [
            (h.doc_id, h.start, h.end, h.kind) for h in search(connection, QUESTION, tenant, k, log=False, **options)
        ]

    yield run
    connection.close()


def documents(docs) -> list[tuple]:
    return [(d.metadata["doc_id"], d.metadata["start"], d.metadata["end"], d.metadata["kind"]) for d in docs]


def spans_of(found) -> list[tuple]:
    return [tuple(n.node.metadata[key] for key in ("doc_id", "start", "end", "kind")) for n in found]


# -- LangChain -----------------------------------------------------------------------------------------------------


def test_langchain_refuses_what_it_does_not_know(library):
    reader = library[1]
    with pytest.raises(InputError, match=r"no argument 'tenent' \(did you mean 'tenant'\?\)"):
        LangChainRetriever(database_url=reader, tenant="acme", tenent="globex")
    # A search option is a field, checked when the retriever is made (SearchOptions' own sentence).
    with pytest.raises(InputError, match=r"The retrieval 'vectors' is not one of passages, hybrid, vector"):
        LangChainRetriever(database_url=reader, tenant="acme", retrieval="vectors")
    with pytest.raises(InputError, match=r"max_tokens is the passages' token budget"):
        LangChainRetriever(database_url=reader, tenant="acme", retrieval="vector", max_tokens=100)
    with pytest.raises(InputError, match=r"search_kwargs has no argument 'kk' \(did you mean 'k'\?\)"):
        LangChainRetriever(database_url=reader, tenant="acme", search_kwargs={"kk": 2})
    # Another store's name for a toolkit setting: refused, naming the toolkit's.
    with pytest.raises(InputError, match=r"no argument 'score_threshold'; the toolkit's setting for it is min_score"):
        LangChainRetriever(database_url=reader, tenant="acme", search_kwargs={"score_threshold": 0.5})
    retriever = LangChainRetriever(database_url=reader, tenant="acme")
    try:
        with pytest.raises(InputError, match=r"invoke has no argument 'fliter' \(did you mean 'filter'\?\)"):
            retriever.invoke(QUESTION, fliter={"lang": "en"})
        with pytest.raises(InputError, match=r"The filter operator '\$gt' is not supported: EQ and IN \(\$eq, \$in\)"):
            retriever.invoke(QUESTION, filter={"year": {"$gt": 2020}})
        with pytest.raises(InputError, match=r"IN filter on the metadata key 'lang' takes a non-empty list"):
            retriever.invoke(QUESTION, filter={"lang": {"$in": []}})
    finally:
        retriever.close()


def test_every_search_option_is_a_field_and_vector_returns_chunks(library, expected):
    """retrieval="vector" given to either constructor returns chunks (it was accepted and returned passages), and
    retrieval and max_tokens reach the search from the constructor, as search() answers them."""
    reader = library[1]
    langchain = LangChainRetriever(database_url=reader, tenant="acme", k=3, retrieval="vector")
    llamaindex = LlamaIndexRetriever(reader, tenant="acme", k=3, retrieval="vector")
    budget = LangChainRetriever(database_url=reader, tenant="acme", k=5, max_tokens=60)
    try:
        chunks = expected(3, retrieval="vector")
        assert chunks and {kind for *_, kind in chunks} == {"chunk"}
        assert documents(langchain.invoke(QUESTION)) == chunks
        assert spans_of(llamaindex.retrieve(QUESTION)) == chunks
        assert documents(budget.invoke(QUESTION)) == expected(5, max_tokens=60) != expected(5)
        # Per call, the other retrievals: hybrid chunks, and passages again.
        assert documents(langchain.invoke(QUESTION, retrieval="hybrid")) == expected(3, retrieval="hybrid")
        assert spans_of(llamaindex.with_options(retrieval="passages").retrieve(QUESTION)) == expected(3)
    finally:
        langchain.close()
        llamaindex.close()
        budget.close()


def test_in_on_a_metadata_key_is_any_of_its_values(library, expected):
    # IN on a metadata key: SQL reads the list as "any of". Checked against the EQ filter's answer (SQL's scalar path)
    # and, with every value the tenant's documents hold, against no filter at all.
    retriever = LangChainRetriever(database_url=library[1], tenant="acme")
    try:
        french = retriever.invoke(QUESTION, filter={"lang": {"$in": ["fr", "de"]}})
        assert documents(french) == expected(5, filters={"metadata": {"lang": "fr"}})
        assert {doc for doc, *_ in documents(french)} == {"row-security.md"}
        assert documents(retriever.invoke(QUESTION, filter={"lang": {"$in": ["en", "fr"]}})) == expected(5)
        assert retriever.invoke(QUESTION, filter={"lang": {"$in": ["de"]}}) == []
    finally:
        retriever.close()


def test_langchain_search_kwargs_and_call_keywords_are_honoured(library, expected):
    reader = library[1]
    # LangChain's idiom: search_kwargs={"k": 2} gives 2 documents (it gave search()'s default 5).
    two = LangChainRetriever(database_url=reader, tenant="acme", search_kwargs={"k": 2})
    english = LangChainRetriever(
        database_url=reader, tenant="acme", search_kwargs={"k": 3, "filter": {"lang": "en"}, "retrieval": "vector"}
    )
    try:
        assert documents(two.invoke(QUESTION)) == expected(2)
        assert len(expected(5)) > 2  # what ignoring search_kwargs gave
        wanted = expected(3, filters={"metadata": {"lang": "en"}}, retrieval="vector")
        assert {doc for doc, *_ in wanted} == {"indexes.md"} and {kind for *_, kind in wanted} == {"chunk"}
        assert documents(english.invoke(QUESTION)) == wanted
        # Per call, overriding search_kwargs: k, a filter (PGVector's form, $in on the document), the tenant.
        assert documents(two.invoke(QUESTION, k=1)) == expected(1)
        only_rls = two.invoke(QUESTION, filter={"doc_id": {"$in": ["row-security.md"]}, "topic": {"$eq": "rls"}})
        assert documents(only_rls) == expected(2, filters={"doc_id": ["row-security.md"], "metadata": {"topic": "rls"}})
        assert {d.metadata["doc_id"] for d in only_rls} == {"row-security.md"}
        # filter and filters in one call both hold.
        both = two.invoke(QUESTION, filter={"lang": "fr"}, filters={"doc_id": ["indexes.md"]})
        assert both == [] and expected(2, filters={"doc_id": ["indexes.md"], "metadata": {"lang": "fr"}}) == []
        globex = two.invoke(QUESTION, tenant="globex")
        assert documents(globex) == expected(2, tenant="globex") and {d.metadata["doc_id"] for d in globex} == {GLOBEX}
        assert all(d.id.split(":")[1] == "globex" for d in globex)
        assert documents(asyncio.run(english.ainvoke(QUESTION, k=2, filter={"lang": "fr"}))) == expected(
            2, filters={"metadata": {"lang": "fr"}}, retrieval="vector"
        )
    finally:
        two.close()
        english.close()


# -- LlamaIndex ----------------------------------------------------------------------------------------------------


def test_llamaindex_refuses_what_it_does_not_know(library):
    reader = library[1]
    with pytest.raises(InputError, match=r"no argument 'top_k'"):
        LlamaIndexRetriever(reader, tenant="acme", top_k=3)
    with pytest.raises(InputError, match=r"k \(3\) and similarity_top_k \(4\) are the same setting"):
        LlamaIndexRetriever(reader, tenant="acme", k=3, similarity_top_k=4)
    greater = MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.GT)])
    with pytest.raises(InputError, match=r"^The filter operator '>' is not supported: EQ and IN are\.$"):
        LlamaIndexRetriever(reader, tenant="acme", filters=greater)
    either = MetadataFilters(
        filters=[ExactMatchFilter(key="lang", value="en"), ExactMatchFilter(key="topic", value="rls")],
        condition=FilterCondition.OR,
    )
    with pytest.raises(InputError, match=r"condition 'OR' is not supported"):
        LlamaIndexRetriever(reader, tenant="acme", filters=either)
    retriever = LlamaIndexRetriever(reader, tenant="acme")
    with pytest.raises(InputError, match=r"with_options has no argument 'tenent'"):
        retriever.with_options(tenent="globex")
    retriever.close()


def test_llamaindex_metadata_filters_top_k_and_a_tenant_per_call(library, expected):
    reader = library[1]
    english = MetadataFilters(filters=[ExactMatchFilter(key="lang", value="en")])  # LlamaIndex's own filter
    one_doc = MetadataFilters(
        filters=[MetadataFilter(key="doc_id", value=["row-security.md"], operator=FilterOperator.IN)]
    )
    retriever = LlamaIndexRetriever(reader, tenant="acme", similarity_top_k=2)
    filtered = LlamaIndexRetriever(reader, tenant="acme", similarity_top_k=3, filters=english)
    try:
        assert spans_of(retriever.retrieve(QUESTION)) == expected(2)
        wanted = expected(3, filters={"metadata": {"lang": "en"}})
        assert wanted and {doc for doc, *_ in wanted} == {"indexes.md"}
        assert spans_of(filtered.retrieve(QUESTION)) == wanted
        # Per call: another tenant, another filter, another k, on the same connections; the original is unchanged.
        globex = retriever.with_options(tenant="globex", similarity_top_k=1)
        assert spans_of(globex.retrieve(QUESTION)) == expected(1, tenant="globex")
        assert globex.retrieve(QUESTION)[0].node.id_.split(":")[1] == "globex"
        rls = retriever.with_options(filters=one_doc)
        assert spans_of(asyncio.run(rls.aretrieve(QUESTION))) == expected(2, filters={"doc_id": ["row-security.md"]})
        assert spans_of(retriever.retrieve(QUESTION)) == expected(2)
    finally:
        retriever.close()
        filtered.close()


# -- LangChain's standard tests ----------------------------------------------------------------------------------


class TestLangChainStandardRetrieverTests(RetrieversIntegrationTests):
    """langchain-tests' retriever suite, as LangChain runs it against any retriever, on this module's database as
    the reader login."""

    @pytest.fixture(autouse=True)
    def _database(self, library):
        self.reader_url = library[1]

    @property
    def retriever_constructor(self) -> type[LangChainRetriever]:
        return LangChainRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"database_url": self.reader_url, "tenant": "acme"}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


# The suite's one coroutine, test_ainvoke_returns_documents, marked for pytest-asyncio (installed with
# langchain-tests): in its strict mode (the default) it runs only what is marked, so no other test of the suite
# changes; the suite forbids overriding its tests, so the mark goes on its own function.
pytest.mark.asyncio(RetrieversIntegrationTests.test_ainvoke_returns_documents)
