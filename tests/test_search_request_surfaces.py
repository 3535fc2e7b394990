"""Every search option reaches SQL through every surface (issue 36, item 1): the test walks
``dataclasses.fields(SearchOptions)`` and gives each field a value that is not its default through the library's
``search()``, the CLI's ``toolkit search``, ``toolkit serve``'s ``POST /search`` (a real server on 127.0.0.1, a real
HTTP client), the LangChain retriever and the LlamaIndex retriever, then reads what the database was handed.

How it reads: each surface's connections are real psycopg connections to the real database, opened by the connect
function the surface uses, with a recording ``psycopg.Cursor`` subclass as their ``cursor_factory`` (the library and
the retrievers take such a connection or pool as given; the CLI and the server open theirs through
``toolkit.db.schema.connect`` / ``toolkit.db.connection.connect``, wrapped here to install the recorder). Nothing of
psycopg's behaviour is replaced: the statements run. The search statement is the one whose parameters name the
request's fields (``toolkit.store.search.REQUEST_FIELDS``); the assertions read its parameters only, never its SQL
text. Who asks is not an option but is walked too: the principals reach ``toolkit.set_principals`` and the request
key ``toolkit.serving_model``."""

from __future__ import annotations

import dataclasses
import shutil
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb
from support import create_database, drop_database, insert_test_model, with_database

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("starlette")
import httpx

from toolkit.errors import ModelMismatchError
from toolkit.search_options import IDENTITY, SearchOptions
from toolkit.store.search import REQUEST_FIELDS

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
TENANT = "acme"
QUESTION = "Which policies apply when row security is enabled on a table?"
SURFACES = ("library", "cli", "http", "langchain", "llamaindex")


@dataclasses.dataclass(frozen=True)
class Given:
    """A value for one field, not its default: as Python (and JSON) gives it, as the command line types it, and as
    SQL's request must carry it (``None``: the value as given)."""

    value: object
    typed: tuple[str, ...]
    sent: object = None


def non_default(versions: tuple[int, int]) -> dict[str, Given]:
    """Per field, a value other than its default, valid alone with the others at their defaults. The standby version
    (not the one serving) is the non-default ``version``; the serving model's alias is the only ``query_model`` a
    question may name (that it reaches the search is proven by the wrong one being refused: see below)."""
    standby, _ = versions
    return {
        "k": Given(3, ("-k", "3")),
        "retrieval": Given("vector", ("--retrieval", "vector")),
        "max_tokens": Given(200, ("--max-tokens", "200")),
        "expand": Given("window:1", ("--expand", "window:1")),
        "filters": Given({"doc_id": ["indexes.md"]}, ("--filter", "doc_id=indexes.md")),
        "min_score": Given(0.015, ("--min-score", "0.015")),
        "diversity": Given(0.5, ("--diversity", "0.5")),
        "ef_search": Given(77, ("--ef-search", "77")),
        "version": Given(standby, ("--version", str(standby))),
        "query_model": Given("two", ("--query-model", "two")),
        "query_text": Given("row security policies", ("--query-text", "row security policies")),
    }


# Who asks: each reaches its own statement (not the request).
IDENTITY_GIVEN = {
    "principals": Given(["hr"], ("--principal", "hr")),
    "request_key": Given("user-42", ("--request-key", "user-42")),
}


class Recorder:
    """Connections that record every statement they run: (query, params), in order, from any thread."""

    def __init__(self):
        self.log: list[tuple[object, object]] = []
        log = self.log

        class RecordingCursor(psycopg.Cursor):
            def execute(self, query, params=None, **kwargs):
                log.append((query, params))
                return super().execute(query, params, **kwargs)

        self.cursor_class = RecordingCursor

    def wrap(self, connect):
        def recording(*args, **kwargs) -> psycopg.Connection:
            conn = connect(*args, **kwargs)
            conn.cursor_factory = self.cursor_class
            return conn

        return recording

    def take(self) -> list[tuple[object, object]]:
        taken = list(self.log)
        self.log.clear()
        return taken


def plain(value):
    return value.obj if isinstance(value, Jsonb) else value


def search_params(statements) -> dict:
    """The parameters of the one search statement: the statement whose named parameters (or one parameter, a
    mapping) carry the request's fields."""
    found = []
    for _, params in statements:
        # The request's fields as the statement's named parameters, or as one parameter holding them all.
        values = [params] if isinstance(params, Mapping) else []
        values += [plain(value) for value in (params.values() if isinstance(params, Mapping) else params or ())]
        for value in values:
            if isinstance(value, Mapping) and len(set(value) & set(REQUEST_FIELDS)) >= len(REQUEST_FIELDS) // 2:
                found.append({name: plain(item) for name, item in value.items()})
    assert len(found) == 1, f"expected one search statement naming REQUEST_FIELDS, found {len(found)}: {statements}"
    return found[0]


def function_params(statements, function: str) -> list:
    return [params for query, params in statements if function in str(query)]


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


# -- the world: one database for the module, its server, and the recorder on every connection ------------------


@pytest.fixture(scope="module")
def world(pg_admin_url, migrated_template, tmp_path_factory):
    """A database of its own: two chapters, two versions of two hashing models (the first on standby, the second
    active), a reader login, and a labelled chunk for the principals; the recorder installed on the connect
    functions the CLI and the server use; the server running on 127.0.0.1."""
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db import connection, schema
    from toolkit.ingest import ingest
    from toolkit.serve import ServerSettings, bound_socket, server

    name = create_database(pg_admin_url, migrated_template)
    url = with_database(pg_admin_url, name)
    reader = f"app_{uuid.uuid4().hex[:8]}"
    docs = tmp_path_factory.mktemp("surfaces")
    for doc in ("row-security.md", "indexes.md"):
        shutil.copyfile(SAMPLE / doc, docs / doc)
    recorder = Recorder()
    patch = pytest.MonkeyPatch()
    try:
        with connection.connect(url, autocommit=True) as conn:
            insert_test_model(conn, "one", 32, options={"seed": 1})
            insert_test_model(conn, "two", 32, options={"seed": 2})
            ingest(conn, [docs], TENANT)
            standby = backfill(url, "one", "recursive:120:0").version
            active = backfill(url, "two", "recursive:120:0").version
            cutover.activate_version(conn, standby, force=True)
            cutover.activate_version(conn, active, force=True)
            conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
        patch.setattr(schema, "connect", recorder.wrap(schema.connect))
        patch.setattr(connection, "connect", recorder.wrap(connection.connect))
        sock = bound_socket()
        running = server(ServerSettings(url, pool_size=2))
        thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        http = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert httpx.get(f"{http}/health", timeout=30).status_code == 200
        try:
            yield {
                "url": url,
                "reader_url": as_user(url, reader),
                "http": http,
                "versions": (standby, active),
                "recorder": recorder,
            }
        finally:
            running.should_exit = True
            thread.join(30)
            sock.close()
    finally:
        patch.undo()
        drop_database(pg_admin_url, name)
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {reader}")


# -- one search through each surface ---------------------------------------------------------------------------


def through(world, surface: str, given: dict[str, Given], *, refused: type[Exception] | None = None) -> list:
    """Runs one search of QUESTION through ``surface`` with ``given`` (options and who asks); returns the statements
    the database received. With ``refused``, the surface must refuse it (the library and retrievers raise that
    class; the CLI exits 1, the server answers 400) and the sentence is returned instead."""
    from toolkit.cli import main
    from toolkit.db import connection
    from toolkit.integrations._core import ConnectionPool
    from toolkit.search import search

    recorder: Recorder = world["recorder"]
    values = {name: g.value for name, g in given.items()}
    recorder.take()
    failure = None
    if surface == "library":
        conn = connection.connect(world["url"], autocommit=True)  # the recording connect (the module's patch)
        try:
            search(conn, QUESTION, TENANT, **values)
        except Exception as error:
            failure = error
        finally:
            conn.close()
    elif surface == "cli":
        typed = [word for g in given.values() for word in g.typed]
        result = CliRunner().invoke(
            main, ["--database-url", world["url"], "search", QUESTION, "--tenant", TENANT, *typed]
        )
        assert "Traceback" not in result.output
        if result.exit_code != 0:
            failure = AssertionError(f"exit {result.exit_code}: {result.output}")
            if refused is not None and result.exit_code == 1:
                return result.output
    elif surface == "http":
        answer = httpx.post(
            f"{world['http']}/search", json={"question": QUESTION, "tenant": TENANT, **values}, timeout=60
        )
        if answer.status_code != 200:
            failure = AssertionError(f"{answer.status_code}: {answer.text}")
            if refused is not None and answer.status_code == 400:
                return answer.json()["error"]["message"]
    else:
        pool = ConnectionPool(connect=lambda: connection.connect(world["reader_url"], autocommit=True))
        try:
            if surface == "langchain":
                from toolkit.integrations.langchain import ToolkitRetriever

                ToolkitRetriever(pool=pool, tenant=TENANT, **values).invoke(QUESTION)
            else:
                from toolkit.integrations.llamaindex import ToolkitRetriever

                ToolkitRetriever(pool=pool, tenant=TENANT, **values).retrieve(QUESTION)
        except Exception as error:
            failure = error
        finally:
            pool.close()
    if refused is not None:
        assert isinstance(failure, refused), f"{surface} did not refuse {values}: {failure!r}"
        return str(failure)
    if failure is not None:
        raise failure
    return recorder.take()


# -- the walk ----------------------------------------------------------------------------------------------------


def test_every_field_has_a_non_default_value_and_a_request_field():
    """A field SearchOptions gains must be given a value here (and name the SQL request field it fills), or this
    fails: the walk below covers every field by construction."""
    values = non_default((1, 2))
    fields = dataclasses.fields(SearchOptions)
    assert [f.name for f in fields] == list(values)
    for option in fields:
        assert values[option.name].value != option.default, option.name
        assert option.metadata["request"] in REQUEST_FIELDS, option.name
        SearchOptions(**{option.name: values[option.name].value})  # valid alone
    assert set(IDENTITY_GIVEN) == set(IDENTITY) - {"tenant"}


@pytest.mark.parametrize("surface", SURFACES)
def test_every_search_option_reaches_sql(world, surface):
    values = non_default(world["versions"])
    missed = []
    for option in dataclasses.fields(SearchOptions):
        given = values[option.name]
        params = search_params(through(world, surface, {option.name: given}))
        wanted = given.value if given.sent is None else given.sent
        got = params.get(option.metadata["request"], "<absent>")
        if got != wanted:
            missed.append(f"{option.name}: SQL's {option.metadata['request']} got {got!r}, not {wanted!r}")
    assert not missed, f"{surface} dropped search options on the way to SQL: " + "; ".join(missed)


@pytest.mark.parametrize("surface", SURFACES)
def test_the_query_model_reaches_the_search(world, surface):
    """A question is embedded with the serving model: the only query_model it may name is that one (which SQL
    receives, above). A surface that dropped the option would search anyway; one that passes it refuses another."""
    message = through(
        world, surface, {"query_model": Given("one", ("--query-model", "one"))}, refused=ModelMismatchError
    )
    assert "The query model 'one' is not the model of version" in message


@pytest.mark.parametrize("surface", SURFACES)
def test_who_asks_reaches_its_statements(world, surface):
    """The principals reach toolkit.set_principals and the request key toolkit.serving_model."""
    statements = through(world, surface, IDENTITY_GIVEN)
    assert (["hr"],) in function_params(statements, "toolkit.set_principals"), surface
    assert ("user-42",) in function_params(statements, "toolkit.serving_model"), surface
    plain_statements = through(world, surface, {})
    assert (["hr"],) not in function_params(plain_statements, "toolkit.set_principals"), surface


def test_the_recorder_reads_the_defaults_when_nothing_is_given(world):
    """What a surface that dropped an option would send: the field's default (so the walk above would see it)."""
    params = search_params(through(world, "library", {}))
    assert params.get("ef_search") is None and params.get("k") == 5


# -- the record itself (no database) -----------------------------------------------------------------------------


def test_hybrid_is_a_deprecated_spelling_resolved_in_the_record_alone():
    import warnings

    from toolkit.errors import InputError
    from toolkit.search_options import search_options

    with pytest.warns(DeprecationWarning, match="retrieval='hybrid'"):
        assert SearchOptions(hybrid=True).retrieval == "hybrid"
    with pytest.warns(DeprecationWarning):
        assert search_options(None, "search()", hybrid=True, expand="parent").retrieval == "hybrid"
    with pytest.raises(InputError, match="hybrid=True asks for the hybrid retrieval, but retrieval='vector'"):
        SearchOptions(hybrid=True, retrieval="vector")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SearchOptions(retrieval="hybrid").retrieval == "hybrid"  # no warning for the field itself
    # One place resolves it: no other module of the package reads the flag.
    root = Path(__file__).resolve().parent.parent / "toolkit"
    readers = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if "parse_retrieval(" in path.read_text() and path.name != "search_options.py"
    ]
    assert readers == ["evaluation/retrieval.py"]  # its own parse_retrieval (toolkit eval's specs), not this flag


def test_options_are_checked_once_and_unknown_names_refused():
    from toolkit.errors import InputError
    from toolkit.search_options import search_options

    with pytest.raises(
        InputError, match=r"search\(\) has no option 'colour'; the options are k, retrieval, max_tokens"
    ):
        search_options(None, "search()", colour="red")
    with pytest.raises(InputError, match="did you mean 'min_score'"):
        search_options(None, "search()", min_scor=0.5)
    base = SearchOptions(k=3, retrieval="vector")
    assert search_options(base, "search()", k=4) == SearchOptions(k=4, retrieval="vector")
    with pytest.raises(InputError, match="--expand returns parents or windows of chunk hits, not passages"):
        SearchOptions(retrieval="passages", expand="parent")
    assert SearchOptions(expand="parent").retrieval == "vector"
    assert SearchOptions(filters=["doc_id=a.md", "metadata.lang=en"]).filters == {
        "doc_id": ["a.md"],
        "metadata": {"lang": "en"},
    }
    for bad in ({"k": "5"}, {"k": True}, {"min_score": "0.5"}, {"version": 0}, {"query_text": ""}, {"hybrid": 1}):
        with pytest.raises(InputError):
            SearchOptions(**bad)


def test_the_command_line_options_are_the_records_fields():
    from toolkit.cli.search import search as command

    by_name = {param.name: param for param in command.params}
    for option in dataclasses.fields(SearchOptions):
        param = by_name[option.name]
        assert param.help == option.metadata["doc"], option.name
        if option.metadata.get("choices"):
            assert tuple(param.type.choices) == option.metadata["choices"]
        if option.default is not None and option.name != "filters":
            assert param.default == option.default, option.name
