"""Attacks through the files the toolkit reads back and writes (issue 39, items 3, 5 and 7): a vector planted in the
embedding cache steers neither a search nor a backfill; a tampered ONNX export whose hash was rewritten in its own
manifest is refused; a cache directory someone else may write is refused; what the toolkit writes is private
(0700/0600, created so); the cache forgets and purges; dumps are 0600; a restore as the documented non-superuser DBA
works, and one that fails half-way leaves the database exactly as it was and says so."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from support import ready_version

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.chunking.document import compose_embed_text
from toolkit.cli import main
from toolkit.db.server import client_binary
from toolkit.embedding import get_embedder, onnx_runtime
from toolkit.embedding.cache import CACHE_FILE, CACHE_VARIABLE, EmbeddingCache, cached_when_configured
from toolkit.errors import EmbeddingError, InputError
from toolkit.ingest import ingest
from toolkit.search import search
from toolkit.store.models import register_model

MINILM = "all-MiniLM-L6-v2"
QUESTION = "How do I reset my password?"


def write_corpus(directory: Path) -> Path:
    directory.mkdir()
    (directory / "accounts.md").write_text("# Accounts\n\nTo reset a password, open the settings page, choose Reset.\n")
    (directory / "birds.md").write_text("# Birds\n\nPenguins live in the southern hemisphere, mostly Antarctica.\n")
    return directory


def plant(cache_directory: Path, vector: np.ndarray) -> int:
    """What anyone who can write the cache file does: every vector in every table of it becomes ``vector``."""
    planted = 0
    with sqlite3.connect(cache_directory / CACHE_FILE) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = {row[1] for row in db.execute(f'PRAGMA table_info("{table}")')}
            if "vector" in columns:
                planted += db.execute(
                    f'UPDATE "{table}" SET vector = ?', (vector.astype(np.float32).tobytes(),)
                ).rowcount
    return planted


def stored_vectors(conn, version: int) -> dict[str, np.ndarray]:
    rows = conn.execute(
        f"SELECT heading_path, context, text, embedding FROM toolkit.chunks_v{int(version)} WHERE NOT is_parent"
    ).fetchall()
    return {
        compose_embed_text(tuple(path or ()), context or "", text): np.asarray(vector, dtype=np.float32)
        for path, context, text, vector in rows
    }


def test_a_query_vector_planted_in_the_cache_does_not_steer_the_search(conn, database_url, tmp_path, monkeypatch):
    ingest(conn, [write_corpus(tmp_path / "docs")], "acme")
    cache_directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VARIABLE, str(cache_directory))
    alias = f"planted_query_{uuid.uuid4().hex[:6]}"  # a model no other test built an embedder for in this process
    register_model(conn, alias, "sentence-transformers", MINILM)
    version = backfill(database_url, alias).version
    cutover.activate_version(conn, version, force=True)

    def answer() -> list[tuple[str, float]]:
        return [(hit.doc_id, round(hit.score, 4)) for hit in search(conn, QUESTION, "acme", k=2, log=False)]

    uncached = answer()
    assert uncached[0][0].endswith("accounts.md")
    birds = next(v for text, v in stored_vectors(conn, version).items() if "Penguins" in text)
    plant(cache_directory, birds)  # the question's entry, if the first search left one, now points at the birds
    assert answer() == uncached


def test_a_document_vector_planted_in_the_cache_is_not_stored_by_the_next_backfill(
    conn, database_url, tmp_path, monkeypatch
):
    ingest(conn, [write_corpus(tmp_path / "docs")], "acme")
    cache_directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VARIABLE, str(cache_directory))
    register_model(conn, "first", "sentence-transformers", MINILM)
    first = stored_vectors(conn, backfill(database_url, "first").version)
    planted = np.zeros(384, dtype=np.float32)
    planted[7] = 1.0
    assert plant(cache_directory, planted) == len(first) == 2
    register_model(conn, "second", "sentence-transformers", MINILM)
    second = stored_vectors(conn, backfill(database_url, "second").version)
    assert sorted(second) == sorted(first)
    for text, vector in second.items():
        assert not np.array_equal(vector, planted)
        np.testing.assert_allclose(vector, first[text], atol=1e-5)


@pytest.fixture
def signed_export(tmp_path, monkeypatch) -> tuple[str, Path]:
    """The bundled model's location and a copy of its signed export in a cache root of the test's own."""
    location = get_embedder(f"sentence-transformers:{MINILM}")._model_location
    original = onnx_runtime.prepare(location, "onnx").parent  # the user's cache: exported (and signed) once
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "exports"))
    copy = onnx_runtime.export_directory(location)
    copy.mkdir(parents=True, mode=0o700)
    os.link(original / "model.onnx", copy / "model.onnx")  # the same bytes, no copy of 90 MB
    shutil.copyfile(original / "manifest.json", copy / "manifest.json")
    assert onnx_runtime.prepare(location, "onnx") == copy / "model.onnx"  # a whole copy is used as it is
    return location, copy


def test_a_tampered_onnx_export_with_its_hash_rewritten_in_the_manifest_is_refused(signed_export):
    location, copy = signed_export
    tampered = bytearray((copy / "model.onnx").read_bytes())
    tampered[len(tampered) // 2 : len(tampered) // 2 + 64] = bytes(64)  # other weights, same size
    (copy / "model.onnx").unlink()
    (copy / "model.onnx").write_bytes(bytes(tampered))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["model.onnx"] = hashlib.sha256(tampered).hexdigest()  # what the attacker rewrites beside it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(EmbeddingError, match=r"not run; re-run `python -m toolkit\.embedding\.prepare`"):
        onnx_runtime.prepare(location, "onnx")
    assert hashlib.sha256((copy / "model.onnx").read_bytes()).hexdigest() == manifest["files"]["model.onnx"]


def test_an_onnx_export_directory_others_may_write_is_refused(signed_export):
    location, copy = signed_export
    copy.chmod(0o777)
    with pytest.raises(InputError, match=r"writable by its group or by others \(mode 0777\)"):
        onnx_runtime.prepare(location, "onnx")


def test_a_cache_directory_others_may_write_or_another_user_owns_is_refused(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    with EmbeddingCache(directory) as cache:
        cache.embed_documents(get_embedder("hashing:8"), ["a document"])
    monkeypatch.setenv(CACHE_VARIABLE, str(directory))
    local = get_embedder(f"sentence-transformers:{MINILM}")
    directory.chmod(0o777)
    with pytest.raises(InputError, match=r"writable by its group or by others \(mode 0777\).*chmod go-w"):
        EmbeddingCache(directory)
    directory.chmod(0o775)
    with pytest.raises(InputError, match="writable by its group or by others"):
        cached_when_configured(local)
    directory.chmod(0o700)
    if os.geteuid() == 0:  # only root can give a directory away
        os.chown(directory, 65534, 65534)
        with pytest.raises(InputError, match=r"belongs to another user \(uid 65534\)"):
            EmbeddingCache(directory)
        os.chown(directory, 0, 0)
        os.chown(directory / CACHE_FILE, 65534, 65534)
        with pytest.raises(InputError, match=r"belongs to another user \(uid 65534\)"):
            EmbeddingCache(directory)


def test_what_the_caches_write_is_created_private_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # a signing key made here, by this test
    previous = os.umask(0o022)
    try:
        with EmbeddingCache(tmp_path / "a" / "cache") as cache:
            cache.embed_documents(get_embedder("hashing:8"), ["a document", "another"])
            names = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "a" / "cache").iterdir()}
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "cache").stat().st_mode) == 0o700
    assert names[CACHE_FILE] == 0o600 and all(mode == 0o600 for mode in names.values()), names
    key = tmp_path / "config" / "toolkit" / "signing.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_the_cache_holds_no_question_searched_and_no_plain_hash_of_a_text(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    local = cached_when_configured(get_embedder(f"sentence-transformers:{MINILM}"))  # what search and serve use
    local.embed_documents(["acme's merger with globex"])
    local.embed_query("who is acme merging with?")
    with sqlite3.connect(tmp_path / CACHE_FILE) as db:
        rows = db.execute("SELECT kind, text_hash FROM embeddings").fetchall()
    assert [kind for kind, _ in rows] == ["document"]
    assert rows[0][1] != hashlib.sha256(b"acme's merger with globex").digest()


def test_an_erased_tenants_vectors_are_forgotten_and_purge_empties_the_cache(tmp_path, monkeypatch):
    from toolkit.embedding.cache import forget_texts

    directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VARIABLE, str(directory))
    model = get_embedder("hashing:64")
    erased, kept = "acme: the merger closes in May", "globex: quarterly numbers"
    with EmbeddingCache(directory) as cache:
        cache.embed_documents(model, [erased, kept])
    erased_bytes, kept_bytes = (
        model.embed_documents([text])[0].astype(np.float32).tobytes() for text in (erased, kept)
    )

    def on_disk() -> bytes:
        return b"".join(path.read_bytes() for path in directory.iterdir())

    assert erased_bytes in on_disk() and kept_bytes in on_disk()
    assert forget_texts([erased]) == 1
    assert erased_bytes not in on_disk() and kept_bytes in on_disk()  # overwritten, in the file and its WAL
    purged = CliRunner().invoke(main, ["cache", "purge", "--format", "json"])
    assert purged.exit_code == 0, purged.output
    assert json.loads(purged.output)["deleted"] == 1
    assert kept_bytes not in on_disk()
    with sqlite3.connect(directory / CACHE_FILE) as db:
        assert db.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 0


def test_an_erased_tenants_chunks_leave_the_cache_and_the_other_tenants_stay(conn, database_url, tmp_path, monkeypatch):
    from toolkit.chunking.document import compose_embed_text
    from toolkit.embedding.cache import forget_texts

    write_corpus(tmp_path / "acme")
    (tmp_path / "globex").mkdir()
    (tmp_path / "globex" / "plan.md").write_text("# Plan\n\nGlobex ships the new turbines in the autumn.\n")
    ingest(conn, [tmp_path / "acme"], "acme")
    ingest(conn, [tmp_path / "globex"], "globex")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    register_model(conn, "erased", "sentence-transformers", MINILM)
    version = backfill(database_url, "erased").version

    def cached() -> int:
        with sqlite3.connect(tmp_path / "cache" / CACHE_FILE) as db:
            return db.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    assert cached() == 3
    rows = conn.execute(
        f"SELECT heading_path, context, text FROM toolkit.chunks_v{version} WHERE tenant = 'acme' AND NOT is_parent"
    ).fetchall()
    assert len(rows) == 2
    texts = [compose_embed_text(tuple(path), context, text) for path, context, text in rows]
    assert forget_texts(texts) == 2  # what an erase of acme calls with the rows it deletes
    assert cached() == 1


def test_a_tenant_erase_and_a_delete_forget_their_chunks_vectors_in_the_users_cache(
    conn, database_url, tmp_path, monkeypatch
):
    from toolkit.deletion import delete_documents, erase_tenant

    write_corpus(tmp_path / "acme")
    (tmp_path / "globex").mkdir()
    (tmp_path / "globex" / "plan.md").write_text("# Plan\n\nGlobex ships the new turbines in the autumn.\n")
    (tmp_path / "globex" / "memo.md").write_text("# Memo\n\nThe turbine blades are carbon fibre this year.\n")
    ingest(conn, [tmp_path / "acme"], "acme")
    ingest(conn, [tmp_path / "globex"], "globex")
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    register_model(conn, "erased", "sentence-transformers", MINILM)
    backfill(database_url, "erased")

    def cached() -> int:
        with sqlite3.connect(tmp_path / "cache" / CACHE_FILE) as db:
            return db.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    assert cached() == 4
    assert erase_tenant(conn, "acme", dry_run=True).cached_vectors_forgotten == 0 and cached() == 4
    assert erase_tenant(conn, "acme").cached_vectors_forgotten == 2
    assert cached() == 2  # globex's two stay
    assert delete_documents(conn, "globex", ["memo.md"]).cached_vectors_forgotten == 1
    assert cached() == 1


# --- backups and restore ------------------------------------------------------------------------------------------


def _as(url: str, user: str, database: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}", path="/" + database))


@pytest.fixture
def dba_database(pg_admin_url, migrated_template):
    """The DBA of docs/operations.md: a login with CREATEROLE owning its database, not a superuser; a superuser
    created the vector extension there and granted it toolkit_owner WITH ADMIN OPTION; it migrated the schema."""
    name = f"dba_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(name)))
        conn.execute(sql.SQL("GRANT toolkit_owner TO {} WITH ADMIN OPTION").format(sql.Identifier(name)))
    with psycopg.connect(with_database(pg_admin_url, name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    url = _as(pg_admin_url, name, name)
    migrated = CliRunner().invoke(main, ["--database-url", url, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def schema_state(url: str) -> tuple:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT to_regnamespace('toolkit') IS NOT NULL, to_regclass('toolkit.versions') IS NOT NULL,"
            " (SELECT version_num FROM public.toolkit_alembic_version)"
        ).fetchone()


def cut_dump(dump_file: Path, cut: Path) -> Path:
    """``dump_file`` cut short where its table of contents still reads but its data does not (the shortest such cut
    among 1, 2, 4, … bytes: where the data lies depends on the dump)."""
    data = dump_file.read_bytes()
    for bits in range(len(data).bit_length() - 1):
        cut.write_bytes(data[: len(data) - (1 << bits)])
        listed = subprocess.run([client_binary("pg_restore"), "--list", cut], capture_output=True, check=False)
        read = subprocess.run(
            [client_binary("pg_restore"), "--file", os.devnull, cut], capture_output=True, check=False
        )
        if listed.returncode == 0 and read.returncode != 0:
            return cut
    raise AssertionError("no length of the dump has a readable table of contents and unreadable data")


def test_a_dump_is_private_and_a_restore_as_the_non_superuser_dba_is_all_or_nothing(
    conn, database_url, make_model, dba_database, tmp_path
):
    make_model("m1", 8)
    version = ready_version(conn, "m1", 8, {"a": 30, "b": 10})
    cutover.activate_version(conn, version, force=True)
    dump_file = tmp_path / "toolkit.dump"
    previous = os.umask(0o022)
    try:
        dumped = CliRunner().invoke(main, ["--database-url", database_url, "db", "dump", str(dump_file)])
    finally:
        os.umask(previous)
    assert dumped.exit_code == 0, dumped.output
    assert stat.S_IMODE(dump_file.stat().st_mode) == 0o600

    # A dump that breaks half-way (its data cut off; its table of contents still reads): the restore fails, and the
    # database is exactly as it was: the migrated schema and alembic's version table are still there.
    before = schema_state(dba_database)
    assert before == (True, True, before[2]) and before[2]
    cut = cut_dump(dump_file, tmp_path / "cut.dump")
    failed = CliRunner().invoke(main, ["--database-url", dba_database, "db", "restore", str(cut)])
    assert failed.exit_code == 1 and "Traceback" not in failed.output
    assert schema_state(dba_database) == before
    assert "rolled back (the database is as it was)" in failed.output, failed.output

    # The whole dump, as the same DBA (not the vector extension's owner): restored.
    restored = CliRunner().invoke(main, ["--database-url", dba_database, "db", "restore", str(dump_file)])
    assert restored.exit_code == 0, restored.output
    assert f"version {version} active" in restored.output
    with psycopg.connect(dba_database) as target, psycopg.connect(database_url) as source:
        query = f"SELECT chunk_id, doc_id, tenant FROM toolkit.chunks_v{version} ORDER BY chunk_id"
        assert target.execute(query).fetchall() == source.execute(query).fetchall()
