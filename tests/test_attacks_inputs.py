"""The smaller hostile inputs of issue 39 (item 8), each test named for the attack it reproduces, on the real
database, the real frameworks and the real command line:

- the LangChain and LlamaIndex retrievers: a version retired between reading the serving model and searching it
  (another session retires it while the search waits for its table) is searched again on the version that
  replaced it, as ``toolkit serve`` does; two tenants' documents of one name get different ids (and the same span
  keeps its id);
- JSON nested thousands of levels deep in ``--filter metadata.KEY=`` and ``ingest --metadata`` (a RecursionError
  traceback): one sentence, exit 2; the library's parsers (which ``toolkit serve`` calls) raise InputError;
- ``--filter KEY=`` with nothing after the =: refused for every key, not searched for;
- ``toolkit shadow -k 251`` (minutes of searches): refused with the documented maximum;
- ``toolkit eval --plot /missing/dir/f.png``: refused before the evaluation runs, and nothing is created.
"""

from __future__ import annotations

import shutil
import socket
import threading
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from support import wait_until

from toolkit import cutover, validation
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.ingest import ingest

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
TENANT = "acme"
QUESTION = "Which policies apply when row security is enabled on a table?"
# Past Python's recursion limit, within the 10,000 characters an argument may hold.
DEEP = "[" * 4_900 + "]" * 4_900


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def reader_url(conn, database_url):
    name = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_reader")
    yield as_user(database_url, name)
    conn.execute(f"DROP OWNED BY {name}")
    conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def nobody_listening() -> str:
    """A database URL where nothing listens: a command that gets past its parser fails to connect (exit 1)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://nobody@127.0.0.1:{port}/nothing?connect_timeout=2"


def run(url: str, *args: str):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: show it
    return result


def refused_as_typed(result, *words: str) -> None:
    """Exit 2 (a usage error: the value was refused where the command line is read), one sentence, its words."""
    assert result.exit_code == 2, result.output[-1500:]
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].rstrip().endswith("."), result.output[-1500:]
    for word in words:
        assert word in errors[0], errors[0]


# -- the retrievers: TK002 retried, ids per tenant -------------------------------------------------------------


@pytest.fixture
def versions(conn, database_url, make_model, tmp_path):
    """Two versions of one chapter (two hashing models, two chunkers); the first is active."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copyfile(SAMPLE / "row-security.md", docs / "row-security.md")
    make_model("one", 32, options={"seed": 1})
    make_model("two", 48, options={"seed": 2})
    ingest(conn, [docs], TENANT)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


def langchain_search(reader_url: str):
    from toolkit.integrations.langchain import ToolkitRetriever

    retriever = ToolkitRetriever(database_url=reader_url, tenant=TENANT, k=3)
    try:
        return [document.metadata["version"] for document in retriever.invoke(QUESTION)]
    finally:
        retriever.close()


def llamaindex_search(reader_url: str):
    from toolkit.integrations.llamaindex import ToolkitRetriever

    retriever = ToolkitRetriever(reader_url, tenant=TENANT, k=3)
    try:
        return [node.node.metadata["version"] for node in retriever.retrieve(QUESTION)]
    finally:
        retriever.close()


@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_a_version_retired_between_serving_model_and_the_search_is_retried_by_the_retriever(
    framework, conn, database_url, versions, reader_url
):
    pytest.importorskip("langchain_core" if framework == "langchain" else "llama_index.core")
    first, second = versions
    retrieve = langchain_search if framework == "langchain" else llamaindex_search
    # Another session makes the second version active and retires the first, and holds its transaction open: the
    # retriever reads the serving model as committed (the first), embeds, and its search of the first version's
    # tables waits for the retirement, which then commits under it (SQLSTATE TK002).
    retirer = psycopg.connect(database_url)
    retirer.execute("SELECT toolkit.activate_version(%s, true, 'test: retire under a search')", (second,))
    retirer.execute("SELECT toolkit.retire_version(%s, 'test: retire under a search', true)", (first,))
    outcome: list = []

    def search_in_thread() -> None:
        try:
            outcome.append(retrieve(reader_url))
        except Exception as error:  # the assertion below shows what it was
            outcome.append(error)

    thread = threading.Thread(target=search_in_thread)
    thread.start()
    try:

        def waits_for_the_first_version() -> bool:
            return (
                conn.execute(
                    "SELECT 1 FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
                    " WHERE NOT l.granted AND c.relname ~ %s",
                    (f"^(chunks|terms|term_stats)_v{first}$",),
                ).fetchone()
                is not None
            )

        wait_until(lambda: waits_for_the_first_version() or outcome, "the search should wait for version 1's table")
        assert not outcome, f"the search did not wait for the version being retired: {outcome}"
        retirer.commit()
        thread.join(timeout=60)
    finally:
        retirer.close()
        thread.join(timeout=60)
    assert len(outcome) == 1
    found = outcome[0]
    assert not isinstance(found, Exception), f"{type(found).__name__}: {found}"
    assert found and set(found) == {second}, found


def test_two_tenants_documents_of_one_name_get_different_document_ids(conn, database_url, make_model, tmp_path):
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    from toolkit.integrations.langchain import ToolkitRetriever as LangChainRetriever
    from toolkit.integrations.llamaindex import ToolkitRetriever as LlamaIndexRetriever

    # Two different documents of one name, of one length, so each tenant's hit is the same span of "same.md".
    texts = {
        "acme": "# Plans\n\nThe plan of acme is apples and pears.\n",
        "beta": "# Plans\n\nThe plan of beta is grapes and plums.\n",
    }
    assert len(texts["acme"]) == len(texts["beta"])
    for tenant, text in texts.items():
        folder = tmp_path / tenant
        folder.mkdir()
        (folder / "same.md").write_text(text)
        ingest(conn, [folder], tenant)
    make_model("h", 16)
    version = backfill(database_url, "h", "markdown:400:0").version
    cutover.activate_version(conn, version, force=True)
    ids, spans = {}, {}
    for tenant in texts:
        chain = LangChainRetriever(database_url=database_url, tenant=tenant, k=1)
        index = LlamaIndexRetriever(database_url, tenant=tenant, k=1)
        try:
            (document,) = chain.invoke("plan")
            (again,) = chain.invoke("plan")
            (node,) = index.retrieve("plan")
        finally:
            chain.close()
            index.close()
        assert tenant in document.page_content  # each tenant reads its own document
        spans[tenant] = (document.metadata["doc_id"], document.metadata["start"], document.metadata["end"])
        assert again.id == document.id and node.node.id_ == document.id  # stable, and the same in both frameworks
        ids[tenant] = document.id
    assert spans["acme"] == spans["beta"], spans  # the same name and span: only the tenant tells them apart
    assert ids["acme"] != ids["beta"], ids
    assert ids["acme"] == f"v{version}:acme:same.md:{spans['acme'][1]}-{spans['acme'][2]}"


def test_a_tenant_named_to_collide_with_another_tenants_document_gets_its_own_id():
    """``hit_id`` percent-encodes the tenant: tenant "a:b" with document "c" is not tenant "a" with document "b:c"."""
    from toolkit.integrations._core import hit_id
    from toolkit.search import SearchHit

    def hit(doc_id: str) -> SearchHit:
        return SearchHit(1, 0.5, doc_id, 0, 10, [], "text", "passage", ["x"], 1, "h")

    assert hit_id(hit("c"), "a:b") != hit_id(hit("b:c"), "a")
    assert hit_id(hit("c"), "a:b") == "v1:a%3Ab:c:0-10"


# -- deep JSON, empty filter values --------------------------------------------------------------------------


def test_deep_json_in_a_metadata_filter_is_one_sentence_not_a_recursion_error(database_url):
    result = run(database_url, "search", "hello", "--tenant", TENANT, "--filter", f"metadata.lang={DEEP}")
    refused_as_typed(result, "--filter", f"more than {validation.MAX_JSON_DEPTH} levels deep")
    assert "Traceback" not in result.output and "RecursionError" not in result.output


def test_deep_json_in_ingest_metadata_is_one_sentence_and_nothing_is_stored(conn, database_url, tmp_path):
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    result = run(database_url, "ingest", str(tmp_path), "--tenant", TENANT, "--metadata", f"lang={DEEP}")
    refused_as_typed(result, "--metadata", f"more than {validation.MAX_JSON_DEPTH} levels deep")
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0


def test_the_parsers_toolkit_serve_calls_raise_input_error_for_deep_or_malformed_filters(conn):
    """serve hands a body's filter list to parse_filters and a filter object to search(): each refusal is an
    InputError (400 there), never a RecursionError or an AttributeError (500)."""
    from toolkit.search import parse_filters, search

    for pairs, words in (
        ([f"metadata.lang={DEEP}"], "levels deep"),
        ([5], "is a KEY=VALUE string"),
        ([None], "is a KEY=VALUE string"),
        ("doc_id=a.md", "a list of KEY=VALUE strings"),
    ):
        with pytest.raises(InputError, match=words):
            parse_filters(pairs)
    deep: dict | list = "en"
    for _ in range(5_000):  # what json.loads makes of a body 10,000 brackets deep
        deep = [deep]
    for filters in ({"metadata": {"lang": deep}}, {"doc_id": deep}):
        with pytest.raises(InputError, match=f"more than {validation.MAX_JSON_DEPTH} levels deep"):
            search(conn, [1.0] * 8, TENANT, 5, filters=filters, log=False)
    with pytest.raises(InputError, match="empty value"):
        search(conn, [1.0] * 8, TENANT, 5, filters={"doc_id": ["a.md", " "]}, log=False)


@pytest.mark.parametrize(
    "pair",
    [
        "doc_id=",
        "doc_id= ",
        "doc_id_prefix=",
        "heading_prefix=",
        "heading_prefix=Guide >",
        "updated_after=",
        "updated_before=",
        "labels=",
        "metadata.lang=",
    ],
)
def test_a_filter_with_nothing_after_the_equals_sign_is_refused(nobody_listening, pair):
    from toolkit.search import parse_filters

    # the library (and toolkit serve, which calls it) refuses it instead of searching for an empty doc id
    with pytest.raises(InputError, match=r"no value|empty heading"):
        parse_filters([pair])
    # the command line refuses it as typed, before it opens the database
    result = run(nobody_listening, "search", "hello", "--tenant", TENANT, "--filter", pair)
    refused_as_typed(result, "--filter")
    assert "no value" in result.output or "empty heading" in result.output


def test_an_empty_metadata_value_is_written_as_an_empty_json_string():
    from toolkit.search import parse_filters

    assert parse_filters(['metadata.lang=""']) == {"metadata": {"lang": ""}}
    assert parse_filters(["doc_id=a.md", "doc_id=b.md"]) == {"doc_id": ["a.md", "b.md"]}


# -- shadow's k, eval's plot ---------------------------------------------------------------------------------


def test_shadow_with_k_251_is_refused_with_its_maximum(nobody_listening, conn, tmp_path):
    from toolkit.shadow import Question, shadow

    queries = tmp_path / "q.txt"
    queries.write_text("hello\n")
    result = run(
        nobody_listening, "shadow", "--version", "2", "--queries", str(queries), "--tenant", TENANT, "-k", "251"
    )
    refused_as_typed(result, "-k", f"from 1 to {validation.SHADOW_K.maximum}")
    # the library refuses it before it reads a version
    with pytest.raises(InputError, match=f"from 1 to {validation.SHADOW_K.maximum}, not 251"):
        shadow(conn, 2, [Question(TENANT, "hello")], k=251)
    # the largest k passes the parser (the command then fails to connect: exit 1)
    allowed = run(
        nobody_listening, "shadow", "--version", "2", "--queries", str(queries), "-k", str(validation.SHADOW_K.maximum)
    )
    assert allowed.exit_code == 1, allowed.output


def test_eval_plot_in_a_missing_folder_is_refused_and_nothing_is_created(database_url, tmp_path):
    from toolkit.evaluation.offline import evaluate_request

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nRule one applies to tables.\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "rule one", "answers": [{"doc_id": "a.md", "text": "Rule one"}]}\n')
    missing = tmp_path / "missing" / "dir"
    plot = missing / "f.png"
    common = ["--corpus", str(corpus), "--queries", str(queries), "--configs", "fixed:40:0", "--model", "hashing:16"]
    result = run(database_url, "eval", *common, "--no-cache", "--plot", str(plot))
    refused_as_typed(result, "--plot", "does not exist", "nothing was created")
    assert not (tmp_path / "missing").exists()
    # a file where the folder should be
    (tmp_path / "file").write_text("")
    refused_as_typed(run(database_url, "eval", *common, "--plot", str(tmp_path / "file" / "f.png")), "not a folder")
    # the library refuses it before evaluating
    with pytest.raises(InputError, match="does not exist"):
        evaluate_request(corpus=[str(corpus)], queries=str(queries), configs=["fixed:40:0"], model="hashing:16",
                         no_cache=True, plot=plot)  # fmt: skip
    assert not (tmp_path / "missing").exists()
