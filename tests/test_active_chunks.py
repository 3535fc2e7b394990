"""active_chunks: the view applications query. It uses the version's HNSW index before and after a
cutover across dimensions, and readers running through cutovers see no error and no mixed result."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from support import ready_version, wait_until

from toolkit import cutover

QUERY = "SELECT version, chunk_id FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 10"


def plan(conn, vector) -> str:
    rows = conn.execute("EXPLAIN " + QUERY, (vector,)).fetchall()
    return "\n".join(r[0] for r in rows)


def test_query_uses_the_hnsw_index_before_and_after_a_cutover_across_dimensions(conn, make_model):
    make_model("small", 8)
    make_model("wide", 24)
    v1 = ready_version(conn, "small", 8, {"a": 3000})
    v2 = ready_version(conn, "wide", 24, {"a": 3000}, seed=1)
    cutover.activate_version(conn, v1, force=True)
    view_oid = conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0]
    before = plan(conn, np.ones(8, dtype=np.float32))
    assert f"Index Scan using chunks_v{v1}_embedding_idx on chunks_v{v1}" in before
    cutover.activate_version(conn, v2, force=True)
    after = plan(conn, np.ones(24, dtype=np.float32))
    assert f"Index Scan using chunks_v{v2}_embedding_idx on chunks_v{v2}" in after
    assert conn.execute("SELECT 'toolkit.active_chunks'::regclass::oid").fetchone()[0] == view_oid
    rows = conn.execute(QUERY, (np.ones(24, dtype=np.float32),)).fetchall()
    assert len(rows) == 10 and {r[0] for r in rows} == {v2}


def test_halfvec_versions_use_their_index_and_swap_with_vector_versions(conn, make_model):
    make_model("m1", 16)
    vec = ready_version(conn, "m1", 16, {"a": 3000})
    half = ready_version(conn, "m1", 16, {"a": 3000}, storage="halfvec", seed=1)
    cutover.activate_version(conn, half, force=True)
    assert f"Index Scan using chunks_v{half}_embedding_idx" in plan(conn, np.ones(16, dtype=np.float32))
    cutover.activate_version(conn, vec, force=True)
    assert f"Index Scan using chunks_v{vec}_embedding_idx" in plan(conn, np.ones(16, dtype=np.float32))
    cutover.rollback_version(conn)
    options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'toolkit.active_chunks'::regclass")
    assert options.fetchone()[0] == ["security_invoker=true"]


def test_the_active_model_is_exposed_to_applications(conn, make_model):
    make_model("m1", 8, query_prefix="query: ")
    v = ready_version(conn, "m1", 8, {"a": 10})
    assert conn.execute("SELECT * FROM toolkit.active_model()").fetchall() == []
    cutover.activate_version(conn, v, force=True)
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        row = conn.execute(
            "SELECT version, model_alias, provider, model_name, dimensions, distance, storage, query_prefix"
            " FROM toolkit.active_model()"
        ).fetchone()
        assert row == (v, "m1", "hashing", "8", 8, "cosine", "vector", "query: ")
        assert conn.execute("SELECT toolkit.active_version()").fetchone()[0] == v


def test_readers_see_no_error_and_no_mixed_result_through_20_cutovers(conn, database_url, make_model):
    make_model("m1", 8)
    make_model("m2", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 400, "b": 400})
    v2 = ready_version(conn, "m2", 8, {"a": 400, "b": 400}, seed=1)
    cutover.activate_version(conn, v1, force=True)

    stop = threading.Event()
    errors: list[BaseException] = []
    results: list[tuple[int, ...]] = []
    mixed: list[list] = []
    lock = threading.Lock()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            with psycopg.connect(database_url, autocommit=True) as rconn:
                register_vector(rconn)
                rconn.execute("SET ROLE toolkit_reader")
                while not stop.is_set():
                    with rconn.transaction():
                        rconn.execute("SELECT toolkit.set_tenant('a')")
                        # psycopg prepares a statement after 5 runs: the swap must not break it.
                        rows = rconn.execute(QUERY, (rng.standard_normal(8).astype(np.float32),)).fetchall()
                    seen = {r[0] for r in rows}
                    prefixes = {r[1].split("-")[0] for r in rows}
                    with lock:
                        results.append(tuple(sorted(seen)))
                        if len(seen) != 1 or prefixes != {f"v{seen.pop()}"} or len(rows) != 10:
                            mixed.append(rows)
        except BaseException as error:  # any error at all fails the test
            with lock:
                errors.append(error)

    def reads_since(mark: int) -> list[tuple[int, ...]]:
        with lock:
            return results[mark:]

    def until(condition, what: str) -> None:  # each swap waits for the readers' results, not a clock
        wait_until(condition, what, errors)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        until(lambda: len(reads_since(0)) >= 8, "the readers did not start")
        for _ in range(10):  # each swap while readers are mid-flight, each version read before the next swap
            mark = len(reads_since(0))
            cutover.activate_version(conn, v2, force=True)
            until(lambda mark=mark: (v2,) in reads_since(mark), "no reader saw the activated version")
            mark = len(reads_since(0))
            cutover.rollback_version(conn)
            until(lambda mark=mark: (v1,) in reads_since(mark), "no reader saw the version rolled back to")
        until(lambda: len(reads_since(0)) > 100, "the readers read too little")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)

    assert not errors, errors[:3]
    assert not mixed, mixed[:2]
    assert {r for r in results} == {(v1,), (v2,)}, "readers should have seen both versions"
    assert len(results) > 100
    swaps = conn.execute("SELECT count(*) FROM toolkit.cutovers WHERE action IN ('activate', 'rollback')")
    assert swaps.fetchone()[0] == 21
