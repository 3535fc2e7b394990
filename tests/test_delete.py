"""Deleting what a user asks to delete (issue 26, item 4): `toolkit delete` removes documents of one tenant from every
live version (active and standby here) and the query log; `toolkit tenant erase` removes a tenant everywhere; both in
one transaction, audited, other tenants untouched, a dry run by default. A killed erase leaves nothing half-done."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.deletion import delete_documents, erase_tenant
from toolkit.errors import InputError
from toolkit.ingest import ingest

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
NAMES = ("row-security.md", "indexes.md")
TENANTS = ("acme", "globex")


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def store(conn, database_url, make_model, tmp_path):
    """Two tenants with the same two documents in three versions (the second active, the first on standby, the third
    ready), and logged questions of both tenants, one citing each document and one citing nothing."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in NAMES:
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", 16, options={"seed": 1})
    make_model("two", 24, options={"seed": 2})
    for tenant in TENANTS:
        ingest(conn, [docs], tenant)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    cutover.activate_version(conn, second, force=True)
    third = backfill(database_url, "one", "fixed:128:0").version  # ready: a candidate not yet served
    conn.execute("SELECT toolkit.set_query_log(1.0)")
    for tenant in TENANTS:
        for cited in ([NAMES[0]], [NAMES[1]], [NAMES[0], NAMES[1]], []):
            with conn.transaction():
                conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
                results = [
                    {"doc_id": d, "start": 0, "end": 10, "rank": i + 1, "score": 0.5} for i, d in enumerate(cited)
                ]
                conn.execute("SELECT toolkit.log_query(%s, %s, 5, %s)", (f"about {cited}", second, Jsonb(results)))
    return first, second, third


def counts(conn, versions) -> dict:
    """Rows per (table, tenant, doc_id or None)."""
    found = {}
    for tenant in TENANTS:
        for doc in NAMES:
            found["documents", tenant, doc] = conn.execute(
                "SELECT count(*) FROM toolkit.documents WHERE tenant = %s AND doc_id = %s", (tenant, doc)
            ).fetchone()[0]
            for v in versions:
                found[f"chunks_v{v}", tenant, doc] = conn.execute(
                    f"SELECT count(*) FROM toolkit.chunks_v{int(v)} WHERE tenant = %s AND doc_id = %s", (tenant, doc)
                ).fetchone()[0]
            found["query_log", tenant, doc] = conn.execute(
                "SELECT count(*) FROM toolkit.query_log WHERE tenant = %s AND results @> %s",
                (tenant, Jsonb([{"doc_id": doc}])),
            ).fetchone()[0]
        found["query_log", tenant, None] = conn.execute(
            "SELECT count(*) FROM toolkit.query_log WHERE tenant = %s", (tenant,)
        ).fetchone()[0]
    return found


def test_delete_removes_the_documents_from_every_version_and_the_query_log(conn, store):
    versions = store
    before = counts(conn, versions)
    assert all(n > 0 for n in before.values())
    changed_before = dict(conn.execute("SELECT version, content_changed_at FROM toolkit.versions").fetchall())

    preview = delete_documents(conn, "acme", [NAMES[0]], dry_run=True)
    assert counts(conn, versions) == before
    assert conn.execute("SELECT count(*) FROM toolkit.deletions").fetchone()[0] == 0
    expected = {
        ("documents", None): 1,
        **{(f"chunks_v{v}", v): before[f"chunks_v{v}", "acme", NAMES[0]] for v in versions},
        ("query_log", None): 2,  # the question citing it alone and the one citing both
    }
    assert {(r.relation, r.version): r.rows for r in preview.removed} == expected

    done = delete_documents(conn, "acme", [NAMES[0]], reason="request 42")
    assert {(r.relation, r.version): r.rows for r in done.removed} == expected
    after = counts(conn, versions)
    for key, n in before.items():
        _, tenant, doc = key
        if tenant == "acme" and doc == NAMES[0]:
            assert after[key] == 0, key
        elif key == ("query_log", "acme", NAMES[1]):
            assert after[key] == n - 1  # the question that cited both documents went with the first
        elif key == ("query_log", "acme", None):
            assert after[key] == n - 2
        else:
            assert after[key] == n, key  # the other document, and the other tenant, untouched

    audit = conn.execute("SELECT action, tenant, doc_id_sha256, counts, reason FROM toolkit.deletions").fetchall()
    assert audit == [
        (
            "delete",
            "acme",
            [hashlib.sha256(NAMES[0].encode()).hexdigest()],
            {
                "documents": 1,
                "chunks": {str(v): expected[f"chunks_v{v}", v] for v in versions},
                "query_log": 2,
            },
            "request 42",
        )
    ]
    # Each version that lost rows is marked changed (a verification before the deletion no longer counts); the
    # active version stays active.
    changed_after = dict(conn.execute("SELECT version, content_changed_at FROM toolkit.versions").fetchall())
    assert all(changed_after[v] > changed_before[v] for v in versions)
    assert conn.execute("SELECT toolkit.active_version()").fetchone()[0] == versions[1]
    states = dict(conn.execute("SELECT version, state FROM toolkit.versions").fetchall())
    assert [states[v] for v in versions] == ["standby", "active", "ready"]


def test_delete_refuses_an_unknown_document_and_deletes_nothing(conn, store):
    before = counts(conn, store)
    with pytest.raises(InputError, match=r"Tenant 'acme' has no document nope\.md"):
        delete_documents(conn, "acme", [NAMES[0], "nope.md"])
    with pytest.raises(InputError, match="has no document"):
        delete_documents(conn, "initech", [NAMES[0]])  # another tenant's id is not this tenant's
    assert counts(conn, store) == before


def test_erase_removes_the_tenant_everywhere_and_only_it(conn, store):
    reader = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
    conn.execute("SELECT toolkit.bind_tenants(%s, %s)", (reader, ["acme", "globex"]))
    before = counts(conn, store)

    preview = erase_tenant(conn, "acme", dry_run=True)
    assert counts(conn, store) == before
    assert {r.relation: r.rows for r in preview.removed}["tenant_bindings"] == 1

    done = erase_tenant(conn, "acme")
    assert [(r.relation, r.rows) for r in done.removed] == [(r.relation, r.rows) for r in preview.removed]
    after = counts(conn, store)
    for (table, tenant, doc), n in before.items():
        assert after[table, tenant, doc] == (0 if tenant == "acme" else n), (table, tenant, doc)
    for v in store:
        assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{v} WHERE tenant = 'acme'").fetchone()[0] == 0
    assert [r[0] for r in conn.execute("SELECT tenant FROM toolkit.list_tenant_bindings()")] == ["globex"]
    assert conn.execute("SELECT action, tenant FROM toolkit.deletions").fetchall() == [("erase", "acme")]
    with pytest.raises(InputError, match="Nothing of tenant 'acme' is stored"):
        erase_tenant(conn, "acme", dry_run=True)
    conn.execute(f"DROP ROLE {reader}")


def test_a_killed_erase_leaves_nothing_half_done(conn, database_url, store):
    """The erase is killed (its backend terminated) after it deleted the documents and chunks, while it waits for
    the query log, which another session holds locked: everything is still there."""
    before = counts(conn, store)
    blocker = connect(database_url)
    eraser = connect(database_url)
    pid = eraser.info.backend_pid
    blocker.execute("LOCK TABLE toolkit.query_log IN ACCESS EXCLUSIVE MODE")  # held until blocker's rollback
    failure: list[BaseException] = []

    def run() -> None:
        try:
            erase_tenant(eraser, "acme")
            eraser.commit()
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    # The eraser has deleted the documents (it holds row locks on them) and waits for the query log's lock.
    while not conn.execute(
        "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = %s AND relation = 'toolkit.query_log'::regclass"
        " AND NOT granted)",
        (pid,),
    ).fetchone()[0]:
        assert time.monotonic() < deadline and thread.is_alive(), "the erase never reached the query log"
        time.sleep(0.01)  # polling pg_locks for the state, not waiting for it to happen
    deleted_uncommitted = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE pid = %s AND relation = 'toolkit.documents'::regclass AND granted", (pid,)
    ).fetchone()[0]
    assert deleted_uncommitted
    assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    thread.join(30)
    assert failure, "the terminated erase did not fail"
    blocker.rollback()
    blocker.close()
    eraser.close()
    assert counts(conn, store) == before
    assert conn.execute("SELECT count(*) FROM toolkit.deletions").fetchone()[0] == 0


def test_rights_writer_deletes_deployer_erases_reader_neither(conn, database_url, store):
    suffix = uuid.uuid4().hex[:8]
    names = {role: f"{role}_{suffix}" for role in ("writer", "deployer", "reader")}
    for role, name in names.items():
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_{role}")
    try:
        refused = [("reader", delete_documents, [NAMES[0]]), ("reader", erase_tenant), ("writer", erase_tenant)]
        for role, function, *args in refused:
            denied = pytest.raises(psycopg.errors.InsufficientPrivilege)
            with connect(as_user(database_url, names[role])) as login, denied:
                function(login, "acme", *args)
        with connect(as_user(database_url, names["writer"])) as writer:
            assert delete_documents(writer, "acme", [NAMES[0]]).rows > 0
        with connect(as_user(database_url, names["deployer"])) as deployer:
            assert erase_tenant(deployer, "globex").rows > 0
        assert conn.execute("SELECT actor FROM toolkit.deletions ORDER BY deletion_id").fetchall() == [
            (names["writer"],),
            (names["deployer"],),
        ]
    finally:
        conn.execute(f"DROP OWNED BY {', '.join(names.values())}")
        conn.execute(f"DROP ROLE {', '.join(names.values())}")


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_cli_is_a_dry_run_until_yes(conn, database_url, store):
    before = counts(conn, store)
    shown = run(database_url, "delete", "--tenant", "acme", NAMES[0])
    assert "Dry run: nothing was changed" in shown.output and "chunks_v" in shown.output
    shown = run(database_url, "tenant", "erase", "globex")
    assert "Dry run" in shown.output and "tenant_bindings" in shown.output
    assert counts(conn, store) == before

    refused = run(database_url, "delete", "--tenant", "acme", "nope.md", "--yes", code=1)
    assert "has no document nope.md" in refused.output
    assert counts(conn, store) == before

    run(database_url, "delete", "--tenant", "acme", NAMES[0], "--yes", "--reason", "ticket 7")
    run(database_url, "tenant", "erase", "globex", "--yes")
    after = counts(conn, store)
    assert all(n == 0 for (t, tenant, doc), n in after.items() if tenant == "globex" or doc == NAMES[0])
    assert after["documents", "acme", NAMES[1]] == 1
