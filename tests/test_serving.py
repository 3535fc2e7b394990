"""Serving across a migration, as an application sees it: serving_model() -> embed with that model -> search pinned
to that version. Readers run as a toolkit_reader login with the tenant set, while cutovers, rollbacks and canary
changes run; every returned row must come from the version the question was embedded for."""

from __future__ import annotations

import random
import shutil
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from support import wait_until

from toolkit import cutover, search, serving
from toolkit.backfill import backfill
from toolkit.db.connection import connect
from toolkit.errors import VersionUnavailableError
from toolkit.ingest import ingest
from toolkit.store.models import embedder_for_model, get_model

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
QUESTIONS = [
    "Which policies apply when row security is enabled on a table?",
    "How do I create an index on an expression?",
    "What does a partial index store?",
    "Which lock does CREATE INDEX take?",
    "How are policies combined for a command?",
]
TENANT = "acme"


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


def build_versions(conn, database_url, make_model, tmp_path, dims: tuple[int, int]) -> tuple[int, int]:
    """Two versions of two chapters for TENANT, by two hashing models whose vector spaces differ (other seeds), with
    other chunkers (so their chunk ids differ too); the first is active."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("row-security.md", "indexes.md"):
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", dims[0], model_name=str(dims[0]), options={"seed": 1})
    make_model("two", dims[1], model_name=str(dims[1]), options={"seed": 2})
    ingest(conn, [docs], TENANT)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


def chunk_ids(conn, version: int) -> set[str]:
    table = f"toolkit.chunks_v{int(version)}"
    return {r[0] for r in conn.execute(f"SELECT chunk_id FROM {table} WHERE NOT is_parent")}


def embedders(conn, aliases) -> dict:
    return {alias: embedder_for_model(get_model(conn, alias)) for alias in aliases}


def test_serving_model_names_the_active_version_and_its_model(conn, database_url, make_model, tmp_path, reader_url):
    first, _ = build_versions(conn, database_url, make_model, tmp_path, (32, 32))
    with connect(reader_url) as app:
        model = serving.serving_model(app, TENANT, "user-1")
    assert (model.version, model.model_alias, model.provider, model.dimensions) == (first, "one", "hashing", 32)
    assert model.serving == "active"


@pytest.mark.parametrize("dims", [(32, 32), (32, 16)], ids=["same dimensions", "other dimensions"])
def test_readers_following_the_pattern_never_fail_through_cutovers_rollbacks_and_canary_changes(
    conn, database_url, make_model, tmp_path, reader_url, dims
):
    first, second = build_versions(conn, database_url, make_model, tmp_path, dims)
    rows_of = {first: chunk_ids(conn, first), second: chunk_ids(conn, second)}
    assert rows_of[first].isdisjoint(rows_of[second])
    stop = threading.Event()
    errors: list[str] = []
    counts = {"searches": 0, "empty": 0, "wrong_version": 0, "served": {first: 0, second: 0}}
    lock = threading.Lock()
    models = embedders(conn, ["one", "two"])

    def reader(number: int) -> None:
        rng = random.Random(number)
        with connect(reader_url) as app:
            while not stop.is_set():
                key = f"user-{rng.randrange(10_000)}"
                question = rng.choice(QUESTIONS)
                try:
                    served = serving.serving_model(app, TENANT, key)
                    vector = models[served.model_alias].embed_query(question)
                    hits = search.search(app, vector, TENANT, 5, version=served.version, log=False)
                except Exception as error:  # counted: the test requires none
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    counts["searches"] += 1
                    counts["served"][served.version] += 1
                    if not hits:
                        counts["empty"] += 1
                    if any(h.version != served.version or h.chunk_ids[0] not in rows_of[served.version] for h in hits):
                        counts["wrong_version"] += 1

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()

    def until(condition, what: str) -> None:  # each change waits for the readers' counts, not a clock
        def holds() -> bool:
            with lock:
                return condition()

        wait_until(holds, what, errors)

    try:
        until(lambda: counts["searches"] >= 8, "the readers did not start")
        # 20 cutovers and rollbacks, 10 canary changes, interleaved: each one while readers are mid-flight.
        changes = 0
        for round_ in range(10):
            with lock:
                served_second = counts["served"][second]
            cutover.activate_version(conn, second, force=True, reason=f"round {round_}")
            changes += 1
            until(lambda before=served_second: counts["served"][second] > before, "no reader was served the cutover")
            cutover.rollback_version(conn, reason=f"round {round_}")
            changes += 1
            serving.set_canary(conn, second, random.Random(round_).choice([5, 10, 25, 50]), force=True)
            with lock:
                searches = counts["searches"]
            until(lambda before=searches: counts["searches"] >= before + 8, "the readers stopped during the canary")
            if round_ % 2:
                serving.end_canary(conn)
        assert changes == 20
        until(lambda: counts["searches"] > 100, "the readers searched too little")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert counts["searches"] > 100
    assert counts["empty"] == 0 and counts["wrong_version"] == 0
    assert counts["served"][first] and counts["served"][second], counts


def _waiting(conn, pid: int) -> bool:
    return conn.execute("SELECT EXISTS (SELECT FROM pg_locks WHERE pid = %s AND NOT granted)", (pid,)).fetchone()[0]


def test_a_search_during_a_cutover_that_waits_for_the_view_returns_its_versions_rows(
    conn, database_url, make_model, tmp_path, reader_url
):
    """The reproduction of the 0-rows race: A holds the view, B's cutover waits for it, C searches meanwhile."""
    first, second = build_versions(conn, database_url, make_model, tmp_path, (32, 32))
    vector = embedders(conn, ["one"])["one"].embed_query(QUESTIONS[0])
    holder = connect(database_url)
    holder.execute("SELECT 1 FROM toolkit.active_chunks LIMIT 0")  # a transaction left open on the view
    swapper = connect(database_url, autocommit=True)
    swapper_pid = swapper.info.backend_pid
    done = threading.Event()

    def swap() -> None:
        swapper.execute("SELECT toolkit.activate_version(%s, true)", (second,))
        done.set()

    thread = threading.Thread(target=swap)
    thread.start()
    try:
        for _ in range(200):
            if _waiting(conn, swapper_pid):
                break
            time.sleep(0.02)
        assert _waiting(conn, swapper_pid), "the cutover should be waiting for the view"
        with connect(reader_url) as app:
            unpinned = search.search(app, vector, TENANT, 5, log=False)
            pinned = search.search(app, vector, TENANT, 5, version=first, log=False)
        assert not done.is_set()
        holder.commit()
        thread.join(timeout=30)
        assert done.is_set()
        with connect(reader_url) as app:
            after = search.search(app, vector, TENANT, 5, version=first, log=False)
            by_alias = search.search(app, vector, TENANT, 5, query_model="one", log=False)
    finally:
        holder.close()
        thread.join(timeout=30)
        swapper.close()
    ids = chunk_ids(conn, first)
    for hits in (unpinned, pinned, after, by_alias):
        assert len(hits) == 5
        assert {h.version for h in hits} == {first} and all(h.chunk_ids[0] in ids for h in hits)
    assert [h.chunk_ids for h in pinned] == [h.chunk_ids for h in after]


def test_a_question_embedded_for_a_retired_version_gets_the_retryable_sqlstate(
    conn, database_url, make_model, tmp_path, reader_url
):
    first, second = build_versions(conn, database_url, make_model, tmp_path, (32, 32))
    cutover.activate_version(conn, second, force=True)
    cutover.retire_version(conn, first)
    vector = embedders(conn, ["one"])["one"].embed_query(QUESTIONS[0])
    with connect(reader_url) as app:
        with pytest.raises(VersionUnavailableError, match="serving_model"):
            search.search(app, vector, TENANT, 5, version=first, log=False)
        with pytest.raises(VersionUnavailableError):
            search.search(app, vector, TENANT, 5, query_model="one", log=False)
        for statement in (
            "SELECT * FROM toolkit.search_chunks(%s, 5, query_version => %s)",
            "SELECT * FROM toolkit.hybrid_search_chunks('row security', %s, 5, query_version => %s)",
            "SELECT * FROM toolkit.search_context(%s, 5, 'window:1', query_version => %s)",
        ):
            with app.transaction(), pytest.raises(psycopg.Error) as caught:
                app.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
                app.execute(statement, (vector, first))
            assert caught.value.sqlstate == "TK002"
            assert "serving_model" in caught.value.diag.message_hint


def test_a_search_that_waited_for_a_retirement_gets_the_retryable_sqlstate(
    conn, database_url, make_model, tmp_path, reader_url
):
    """The table is dropped while the pinned search waits for it: TK002, not 'relation does not exist'."""
    first, second = build_versions(conn, database_url, make_model, tmp_path, (32, 32))
    cutover.activate_version(conn, second, force=True)
    vector = embedders(conn, ["one"])["one"].embed_query(QUESTIONS[0])
    retirer = connect(database_url)
    retirer.execute("SELECT toolkit.retire_version(%s)", (first,))  # holds the dropped table's lock, uncommitted
    outcome: list = []

    def pinned_search() -> None:
        with connect(reader_url) as app:
            try:
                search.search(app, vector, TENANT, 5, version=first, log=False)
                outcome.append("rows")
            except VersionUnavailableError as error:
                outcome.append(error)

    thread = threading.Thread(target=pinned_search)
    thread.start()
    try:
        waiting = None
        for _ in range(500):
            # The version's tables (its chunks, or the full-text statistics the default search reads first).
            waiting = conn.execute(
                "SELECT l.pid FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation"
                " WHERE NOT l.granted AND c.relname ~ %s",
                (f"^(chunks|terms|term_stats)_v{first}$",),
            ).fetchone()
            if waiting or outcome:
                break
            time.sleep(0.02)
        assert waiting, "the pinned search should wait for the version's table"
        retirer.commit()
        thread.join(timeout=30)
    finally:
        retirer.close()
        thread.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], VersionUnavailableError), outcome


def test_live_chunks_is_a_race_free_pinned_form_for_raw_sql_and_uses_the_versions_index(
    conn, database_url, make_model, tmp_path
):
    first, second = build_versions(conn, database_url, make_model, tmp_path, (32, 16))
    # both servable versions appear, each under its own version number
    found = dict(conn.execute("SELECT version, count(*) FROM toolkit.live_chunks GROUP BY 1").fetchall())
    assert set(found) == {first, second}
    vector = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    for statement, params in (
        (
            f"SELECT chunk_id FROM toolkit.live_chunks WHERE version = {second} ORDER BY embedding <=> %s LIMIT 5",
            (vector,),
        ),
        (
            "SELECT chunk_id FROM toolkit.live_chunks WHERE version = %s ORDER BY embedding <=> %s LIMIT 5",
            (second, vector),
        ),
    ):
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + statement, params))
            rows = conn.execute(statement, params, prepare=False).fetchall()
        assert f"chunks_v{second}_embedding_idx" in plan, plan
        assert f"chunks_v{first}_embedding_idx" not in plan or "One-Time Filter" in plan, plan
        assert len(rows) == 5 and {r[0] for r in rows} <= chunk_ids(conn, second)
    # a cutover changes nothing for a query pinned by version; retiring the version empties its rows
    cutover.activate_version(conn, second, force=True)
    assert conn.execute("SELECT count(*) FROM toolkit.live_chunks WHERE version = %s", (first,)).fetchone()[0] > 0
    cutover.retire_version(conn, first)
    assert conn.execute("SELECT count(*) FROM toolkit.live_chunks WHERE version = %s", (first,)).fetchone()[0] == 0
