"""Test helpers (import them from here, never from conftest): databases made from the session's template, rows
for version tables (real inserts, real vectors), platform checks."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from psycopg import sql


def with_database(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(admin_url: str, template: str | None) -> str:
    """Creates a database (a copy of ``template``, or an empty one) with a unique name and returns the name."""
    name = f"toolkit_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(query)
    return name


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# A throwaway cluster's data dies with the test session: the tests need no crash safety against a power cut, and
# every CREATE DATABASE (one per test that asks for a database) would otherwise wait on fsync. A killed backend
# (the kill -9 trials) is still recovered from the WAL as on any server.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_wal_size": "256MB"}

# Where the tests' PostgreSQL clusters live: in memory (/dev/shm) when there is room, else the temporary directory. On
# ext4, a CREATE DATABASE made right after the previous test's DROP DATABASE spends about 0.2 s of CPU in the kernel
# (each of the ~1,000 new files looks for a free inode past the ones just deleted): most of a database test's setup,
# and every CREATE TABLE pays its share. On tmpfs the same CREATE DATABASE takes 0.01 s (docs/benchmarks.md).
IN_MEMORY_ROOT = Path("/dev/shm")
IN_MEMORY_ROOM = 4 * 2**30


def scratch_directory(prefix: str) -> Path:
    """A new directory for a throwaway PostgreSQL cluster (mode 0755: on root the server runs as the
    embedded_postgres user, which must reach it), in memory when there is room for one."""
    import os
    import tempfile

    root = None
    try:
        free = os.statvfs(IN_MEMORY_ROOT)
        if free.f_bavail * free.f_frsize >= IN_MEMORY_ROOM and os.access(IN_MEMORY_ROOT, os.W_OK | os.X_OK):
            root = str(IN_MEMORY_ROOT)
    except OSError:
        pass
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    directory.chmod(0o755)
    return directory


def wait_until(condition, what: str, errors: list | tuple = (), timeout: float = 60.0) -> None:
    """Polls ``condition`` (a state nothing notifies: other sessions' locks, readers' counts) until it holds; fails
    with ``what`` after ``timeout`` seconds, or at once when ``errors`` holds any."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline and not errors, (what, list(errors)[:3])
        time.sleep(0.005)


def insert_test_model(conn, alias: str = "m1", dimensions: int = 8, **kwargs) -> str:
    """Registers a model for tests without loading it (the hashing provider by default: it needs no weights)."""
    from toolkit.store.models import Model, insert_model

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


@contextlib.contextmanager
def prepared_database(admin_url: str, template: str, build):
    """A database copied from ``template`` and built once by ``build(conn)`` (an autocommit connection, closed
    before the database is copied), to be the template of a module's test databases (conftest's
    ``template_database``); yields (its name, what ``build`` returned) and drops it at the end."""
    from toolkit.db.connection import connect

    name = create_database(admin_url, template)
    try:
        with connect(with_database(admin_url, name), autocommit=True) as conn:
            built = build(conn)
        yield name, built
    finally:
        drop_database(admin_url, name)


def fastokens_installed_here() -> bool:
    """Whether pyproject.toml installs fastokens on this platform (its marker lists where it has wheels)."""
    import tomllib

    from packaging.requirements import Requirement

    with open(Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    requirement = next(Requirement(d) for d in dependencies if Requirement(d).name == "fastokens")
    return requirement.marker is None or requirement.marker.evaluate()


needs_fastokens = pytest.mark.skipif(not fastokens_installed_here(), reason="fastokens is not installed here")


def fill_version(
    conn,
    version: int,
    dimensions: int,
    rows_per_tenant: dict[str, int],
    *,
    seed: int = 0,
    labels: list[list[str]] | None = None,
) -> None:
    """Inserts embedded rows; chunk ids are prefixed with the version (``v3-a-17``) so tests can tell
    which table a row came from."""
    rng = np.random.default_rng(seed)
    with conn.cursor() as cur:
        for tenant, count in rows_per_tenant.items():
            vectors = rng.standard_normal((count, dimensions)).astype(np.float32)
            rows = []
            for i in range(count):
                label = labels[i % len(labels)] if labels else []
                rows.append(
                    (
                        tenant,
                        f"v{version}-{tenant}-{i}",
                        f"doc-{i % 10}",
                        i,
                        0,
                        10,
                        f"text {i}",
                        f"h{i}",
                        3,
                        label,
                        vectors[i],
                    )
                )
            cur.executemany(
                f"INSERT INTO toolkit.chunks_v{int(version)} (tenant, chunk_id, doc_id, position, start_offset,"
                " end_offset, text, content_hash, token_count, access_labels, embedding)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
    conn.execute(f"ANALYZE toolkit.chunks_v{int(version)}")


def ready_version(
    conn,
    model: str,
    dimensions: int,
    rows_per_tenant: dict[str, int],
    *,
    storage="vector",
    seed: int = 0,
    labels=None,
    chunker: str = "fixed:10:0",
) -> int:
    """Creates a version, fills it, builds its index and marks it ready."""
    from toolkit.store import versions

    v = versions.create_version(conn, model, chunker, f"{chunker}@1#{seed}", storage=storage)
    fill_version(conn, v, dimensions, rows_per_tenant, seed=seed, labels=labels)
    versions.create_version_index(conn, v, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, v)
    return v


def default_sigint() -> None:
    """preexec_fn for a child that a test interrupts: a process started in the background by a non-interactive
    shell (nohup, some CI runners) inherits SIGINT ignored, and Ctrl-C would then do nothing in the child."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
