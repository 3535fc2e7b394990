"""The model-migration lifecycle, measured on one embedded PostgreSQL: backfill throughput with the hashing embedder
(the toolkit's own overhead) and with a real model against the same model's bare ``embed_documents`` on the same
texts; the HNSW index built before loading against after loading (same rows); and the wall time of a cutover
(``activate_version`` / ``rollback_version``) while 8 reader threads query ``active_chunks`` as ``toolkit_reader``,
and again while 8 readers follow the pinned pattern (``serving_model()`` → embed → ``search_chunks(…, query_version)``);
what the pin costs a search (pinned against unpinned, paired), and what binding a login to its tenant costs.

Documents are the generated Markdown of bench/ingest.py, stored in ``toolkit.documents`` directly (a backfill
reads documents from there, not from files). The index comparison and the cutover use the hashing vectors the
backfill wrote (feature-hashed words of the generated text: not semantic, and not clustered like real embeddings).

    .venv/bin/python bench/lifecycle.py                  # 50k rows: print the table, write bench/results/lifecycle.json
    .venv/bin/python bench/lifecycle.py --rows 3000 --swaps 10 --real-rows 100     # a smoke test

It runs its own embedded PostgreSQL in a temporary directory under /tmp and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import (  # noqa: E402 - bench/ingest.py: corpus, server and helpers shared by the two benchmarks
    CHUNKER,
    DIMS,
    RESULTS,
    TENANT,
    Server,
    bare_rate,
    checkpoint,
    load_average,
    markdown_document,
    register_hashing,
    stored_rows,
    vocabulary,
)

from toolkit.progress import Progress  # noqa: E402

REAL_MODEL = ("minilm", "sentence-transformers", "all-MiniLM-L6-v2")
READERS = 8
QUERY = "SELECT version, chunk_id FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 10"
SERVING = "SELECT version, model_alias FROM toolkit.serving_model(%s)"
PINNED = "SELECT version, chunk_id FROM toolkit.search_chunks(%s, 10, query_version => %s)"
UNPINNED = "SELECT version, chunk_id FROM toolkit.search_chunks(%s, 10)"


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def store_documents(url: str, rows: int, seed: int) -> dict:
    """Stores generated Markdown documents (about ``rows`` chunks) in toolkit.documents, as ingest would."""
    from toolkit.chunking import get_chunker
    from toolkit.db.connection import connect
    from toolkit.store.documents import document_hash

    vocab = vocabulary()
    rng = np.random.default_rng(seed)
    first = markdown_document(rng, vocab, 0, 100)
    count = max(1, math.ceil(rows / len(get_chunker(CHUNKER).chunk(first, doc_id="probe"))))
    size = 0
    with connect(url) as conn, conn.transaction(), conn.cursor() as cur:
        for number in range(count):
            text = first if number == 0 else markdown_document(rng, vocab, number, 100)
            size += len(text.encode("utf-8"))
            cur.execute(
                "INSERT INTO toolkit.documents (tenant, doc_id, source, title, format, raw_text, content_hash)"
                " VALUES (%s, %s, %s, %s, 'markdown', %s, %s)",
                (TENANT, f"doc{number:05d}.md", f"doc{number:05d}.md", f"Document {number}", text, document_hash(text)),
            )
    return {"documents": count, "bytes": size}


def run_backfill(url: str, alias: str, **options) -> dict:
    """backfill() as ``toolkit backfill`` runs it (each worker claims documents, chunks, embeds and writes each row
    once; then ANALYZE, the HNSW build and the move to ready), timed around the call, with its own stage times."""
    from toolkit.backfill import backfill

    started = time.perf_counter()
    report = backfill(url, alias, CHUNKER, progress=Progress("backfill", unit="chunks", quiet=True), **options)
    seconds = time.perf_counter() - started
    assert report.state == "ready", report
    index_s = report.index_seconds or 0.0
    return {
        "version": report.version,
        "rows": report.rows_written,
        "seconds": seconds,
        "index_s": index_s,
        "without_index_s": seconds - index_s,
        "stages": report.stages,
        "workers": report.workers,
        "rows_per_s": report.rows_written / seconds,
        "rows_per_s_without_index": report.rows_written / (seconds - index_s),
        "batch_size": options.get("batch_size", "by tokens"),
        "load_average": load_average(),
    }


def measure_real_backfill(server: Server, rows: int, repeats: int) -> dict:
    """A real model: backfill's embedding stage against the same embedder's bare embed_documents on the texts
    the backfill embedded (bare runs before and after, the model loaded and warm for both)."""
    from psycopg import sql

    from toolkit.chunking.document import compose_embed_text
    from toolkit.db.connection import connect
    from toolkit.store.chunk_table import chunk_table_name
    from toolkit.store.models import embedder_for_model, register_model

    alias, provider, name = REAL_MODEL
    url = server.new_database("bench_real_backfill")
    documents = store_documents(url, rows, seed=2)
    with connect(url) as conn:
        model = register_model(conn, alias, provider, name)
        conn.commit()
    embedder = embedder_for_model(model)
    embedder.embed_documents(["warm up"] * 16)
    from toolkit.chunking import get_chunker

    chunker = get_chunker(CHUNKER, embedder=embedder)
    with connect(url) as conn:
        raw = conn.execute("SELECT doc_id, raw_text FROM toolkit.documents ORDER BY doc_id").fetchall()
        conn.commit()
    texts = [c.embed_text for doc_id, text in raw for c in chunker.chunk(text, doc_id=doc_id) if not c.is_parent]
    rates = bare_rate(embedder, texts, (repeats + 1) // 2)
    result = run_backfill(url, alias, embedder=embedder)
    with connect(url) as conn:
        stored = conn.execute(
            sql.SQL("SELECT heading_path, context, text FROM {} WHERE NOT is_parent").format(
                chunk_table_name(conn, result["version"])
            )
        ).fetchall()
        conn.commit()
    assert sorted(compose_embed_text(tuple(h), c, t) for h, c, t in stored) == sorted(texts)
    rates += bare_rate(embedder, texts, repeats // 2)
    bare = statistics.median(rates)
    tokens = [embedder.count_tokens(t) for t in texts]
    result.update(
        model=f"{provider}:{name}",
        documents=documents["documents"],
        mean_tokens=statistics.mean(tokens),
        bare_rows_per_s=bare,
        bare_runs=rates,
        without_index_ratio=result["rows_per_s_without_index"] / bare,
        total_ratio=result["rows_per_s"] / bare,
        load_average=load_average(),
    )
    return result


def measure_index_build(url: str, rows: list[tuple]) -> dict:
    """The same rows loaded by binary COPY into a table whose HNSW index exists already, and into one whose
    index is built after the load (the backfill's way; maintenance_work_mem 512MB as finalize_version sets it)."""
    from psycopg import sql

    from toolkit.db.connection import connect
    from toolkit.store import versions
    from toolkit.store.chunk_table import _COPY_TYPES, CHUNK_COLUMNS, chunk_table_name

    def load(conn, version: int) -> float:
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            chunk_table_name(conn, version), sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        )
        checkpoint(conn)
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(query) as copy:
            copy.set_types([*_COPY_TYPES, "vector"])
            for row in rows:
                copy.write_row(row)
        return time.perf_counter() - started

    out: dict = {"rows": len(rows)}
    with connect(url, autocommit=True) as conn:
        before = versions.create_version(conn, "hash384", CHUNKER, "index-before@1")
        versions.create_version_index(conn, before)
        out["before"] = {"version": before, "load_s": load(conn, before)}
        out["before"]["total_s"] = out["before"]["load_s"]
        after = versions.create_version(conn, "hash384", CHUNKER, "index-after@1")
        out["after"] = {"version": after, "load_s": load(conn, after)}
        checkpoint(conn)
        started = time.perf_counter()
        versions.create_version_index(conn, after)
        out["after"]["index_s"] = time.perf_counter() - started
        out["after"]["total_s"] = out["after"]["load_s"] + out["after"]["index_s"]
        for version in (before, after):
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(chunk_table_name(conn, version)))
            versions.mark_version_ready(conn, version)
    out["speedup"] = out["before"]["total_s"] / out["after"]["total_s"]
    out["load_average"] = load_average()
    return out


def measure_cutover(url: str, first: int, second: int, swaps: int, baseline_s: float, pause_s: float) -> dict:
    """8 readers query active_chunks in a loop (as in tests/test_active_chunks.py) while ``swaps`` swaps run,
    alternately activate_version(second) and rollback_version(); reader latency without swaps first."""
    import psycopg
    from pgvector.psycopg import register_vector

    from toolkit import cutover
    from toolkit.db.connection import connect

    conn = connect(url, autocommit=True)
    cutover.activate_version(conn, first, force=True, reason="bench")
    idle_ms = []  # the same swaps with no reader running, for comparison
    for i in range(min(swaps, 20)):
        started = time.perf_counter()
        if i % 2 == 0:
            cutover.activate_version(conn, second, force=True, reason="bench")
        else:
            cutover.rollback_version(conn, reason="bench")
        idle_ms.append((time.perf_counter() - started) * 1000)
        time.sleep(pause_s)
    if len(idle_ms) % 2:
        cutover.rollback_version(conn, reason="bench")
    stop = threading.Event()
    lock = threading.Lock()
    samples: list[tuple[float, float]] = []  # (ended at, seconds)
    errors: list[str] = []
    mixed = 0

    def reader(seed: int) -> None:
        nonlocal mixed
        rng = np.random.default_rng(seed)
        try:
            with psycopg.connect(url, autocommit=True) as rconn:
                register_vector(rconn)
                rconn.execute("SET ROLE toolkit_reader")
                while not stop.is_set():
                    vector = rng.standard_normal(DIMS).astype(np.float32)
                    started = time.perf_counter()
                    try:
                        with rconn.transaction():
                            rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
                            rows = rconn.execute(QUERY, (vector,)).fetchall()
                    except psycopg.Error as error:
                        with lock:
                            errors.append(f"{type(error).__name__}: {error}".strip())
                        continue
                    ended = time.perf_counter()
                    with lock:
                        samples.append((ended, ended - started))
                        if len(rows) != 10 or len({r[0] for r in rows}) != 1:
                            mixed += 1
        except BaseException as error:  # a reader that dies is an error too
            with lock:
                errors.append(f"{type(error).__name__}: {error}".strip())

    # One reader alone first: what a query costs when nothing competes for the two cores.
    alone = []
    with psycopg.connect(url, autocommit=True) as rconn:
        register_vector(rconn)
        rconn.execute("SET ROLE toolkit_reader")
        rng = np.random.default_rng(READERS)
        for _ in range(300):
            vector = rng.standard_normal(DIMS).astype(np.float32)
            started = time.perf_counter()
            with rconn.transaction():
                rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
                rconn.execute(QUERY, (vector,)).fetchall()
            alone.append((time.perf_counter() - started) * 1000)
        with rconn.transaction():
            rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
            explain = rconn.execute("EXPLAIN (ANALYZE, BUFFERS) " + QUERY, (vector,))
            plan = [re.sub(r"'\[[^\]]*\]'", "'[...]'", r[0]) for r in explain]
    alone = alone[50:]  # after warm-up (caches, prepared statements)
    threads = [threading.Thread(target=reader, args=(i,), name=f"reader-{i}") for i in range(READERS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # connections made, statements prepared
    baseline_from = time.perf_counter()
    time.sleep(baseline_s)
    swaps_from = time.perf_counter()
    swap_ms = []
    for i in range(swaps):
        started = time.perf_counter()
        if i % 2 == 0:
            cutover.activate_version(conn, second, force=True, reason="bench")
        else:
            cutover.rollback_version(conn, reason="bench")
        swap_ms.append((time.perf_counter() - started) * 1000)
        time.sleep(pause_s)
    swaps_to = time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    conn.close()
    baseline = [s * 1000 for ended, s in samples if baseline_from <= ended < swaps_from]
    during = [s * 1000 for ended, s in samples if swaps_from <= ended <= swaps_to]
    return {
        "readers": READERS,
        "swaps": swaps,
        "pause_ms": pause_s * 1000,
        "swap_ms": swap_ms,
        "swap_p50_ms": statistics.median(swap_ms),
        "swap_p95_ms": percentile(swap_ms, 0.95),
        "swap_max_ms": max(swap_ms),
        "idle_swap_ms": idle_ms,
        "idle_swap_p50_ms": statistics.median(idle_ms),
        "idle_swap_max_ms": max(idle_ms),
        "reader_errors": len(errors),
        "reader_error_examples": errors[:3],
        "mixed_or_short_results": mixed,
        "one_reader_alone": {
            "queries": len(alone),
            "p50_ms": statistics.median(alone),
            "p95_ms": percentile(alone, 0.95),
            "max_ms": max(alone),
            "plan": plan,
        },
        "baseline": {
            "queries": len(baseline),
            "p50_ms": statistics.median(baseline),
            "p95_ms": percentile(baseline, 0.95),
            "max_ms": max(baseline),
        },
        "during_swaps": {
            "queries": len(during),
            "p50_ms": statistics.median(during),
            "p95_ms": percentile(during, 0.95),
            "max_ms": max(during),
        },
        "load_average": load_average(),
    }


def _timed(conn, statement: str, params: tuple) -> float:
    started = time.perf_counter()
    with conn.transaction():
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        conn.execute(statement, params).fetchall()
    return (time.perf_counter() - started) * 1000


def measure_pin_cost(url: str, version: int, rounds: int) -> dict:
    """One reader alone, paired rounds in alternating order: the search unpinned and pinned to the version, the
    serving_model() call, the whole pattern (serving_model then the pinned search: two transactions), and the same
    pinned search as a login bound to its tenant (the binding's lookup) against an unbound one."""
    import psycopg
    from pgvector.psycopg import register_vector

    from toolkit.db.connection import connect

    with connect(url, autocommit=True) as conn:
        for name in ("bench_app", "bench_bound"):
            conn.execute(f"DROP ROLE IF EXISTS {name}")
            conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE toolkit_reader")
        conn.execute("SELECT toolkit.bind_tenants('bench_bound', ARRAY[%s])", (TENANT,))
    base = psycopg.conninfo.conninfo_to_dict(url)
    connections = {}
    for name in ("bench_app", "bench_bound"):
        c = psycopg.connect(**{**base, "user": name}, autocommit=True)
        register_vector(c)
        connections[name] = c
    app, bound = connections["bench_app"], connections["bench_bound"]
    rng = np.random.default_rng(11)
    samples: dict[str, list[float]] = {k: [] for k in ("unpinned", "pinned", "serving", "pattern", "bound_pinned")}
    for i in range(rounds + 50):
        vector = rng.standard_normal(DIMS).astype(np.float32)
        order = ["unpinned", "pinned", "pattern", "bound_pinned"]
        if i % 2:
            order.reverse()
        measured = {}
        for what in order:
            if what == "unpinned":
                measured[what] = _timed(app, UNPINNED, (vector,))
            elif what == "pinned":
                measured[what] = _timed(app, PINNED, (vector, version))
            elif what == "bound_pinned":
                measured[what] = _timed(bound, PINNED, (vector, version))
            else:
                serving = _timed(app, SERVING, (f"user-{i}",))
                measured["serving"] = serving
                measured[what] = serving + _timed(app, PINNED, (vector, version))
        if i >= 50:  # after warm-up
            for what, ms in measured.items():
                samples[what].append(ms)
    for c in connections.values():
        c.close()
    out = {
        what: {"p50_ms": statistics.median(v), "p95_ms": percentile(v, 0.95), "queries": len(v)}
        for what, v in samples.items()
    }
    out["pin_cost_p50"] = out["pinned"]["p50_ms"] / out["unpinned"]["p50_ms"] - 1
    out["binding_cost_p50"] = out["bound_pinned"]["p50_ms"] / out["pinned"]["p50_ms"] - 1
    out["load_average"] = load_average()
    return out


def measure_pinned_cutover(url: str, first: int, second: int, swaps: int, pause_s: float) -> dict:
    """8 readers follow the documented pattern (serving_model with a request key → the question's vector →
    search_chunks pinned to that version) while cutovers and rollbacks alternate: swap time, reader errors, and
    results that are short or come from another version than the one served."""
    import psycopg
    from pgvector.psycopg import register_vector

    from toolkit import cutover
    from toolkit.db.connection import connect
    from toolkit.store import versions

    conn = connect(url, autocommit=True)
    if versions.active_version(conn) != first:
        cutover.activate_version(conn, first, force=True, reason="bench")
    stop = threading.Event()
    lock = threading.Lock()
    errors: list[str] = []
    wrong = [0]
    latency: list[float] = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(100 + seed)
        with psycopg.connect(url, autocommit=True) as rconn:
            register_vector(rconn)
            rconn.execute("SET ROLE toolkit_reader")
            while not stop.is_set():
                vector = rng.standard_normal(DIMS).astype(np.float32)
                started = time.perf_counter()
                try:
                    with rconn.transaction():
                        rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
                        version, _ = rconn.execute(SERVING, (f"user-{rng.integers(10_000)}",)).fetchone()
                    with rconn.transaction():
                        rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
                        rows = rconn.execute(PINNED, (vector, version)).fetchall()
                except psycopg.Error as error:
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}".strip())
                    continue
                with lock:
                    latency.append((time.perf_counter() - started) * 1000)
                    if len(rows) != 10 or {r[0] for r in rows} != {version}:
                        wrong[0] += 1

    threads = [threading.Thread(target=reader, args=(i,), name=f"pinned-{i}") for i in range(READERS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    swap_ms = []
    for i in range(swaps):
        started = time.perf_counter()
        if i % 2 == 0:
            cutover.activate_version(conn, second, force=True, reason="bench")
        else:
            cutover.rollback_version(conn, reason="bench")
        swap_ms.append((time.perf_counter() - started) * 1000)
        time.sleep(pause_s)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    conn.close()
    return {
        "readers": READERS,
        "swaps": swaps,
        "swap_p50_ms": statistics.median(swap_ms),
        "swap_p95_ms": percentile(swap_ms, 0.95),
        "swap_max_ms": max(swap_ms),
        "requests": len(latency),
        "request_p50_ms": statistics.median(latency),
        "request_p95_ms": percentile(latency, 0.95),
        "reader_errors": len(errors),
        "reader_error_examples": errors[:3],
        "short_or_other_version": wrong[0],
        "load_average": load_average(),
    }


def run(args) -> dict:
    from toolkit.db.connection import connect

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "chunker": CHUNKER, "dims": DIMS}
    with Server("toolkit-bench-lifecycle-") as server:
        results["server"] = server.settings()
        results["load_average_start"] = load_average()
        results["documents"] = store_documents(server.url, args.rows, seed=0)
        # One model alias per batch size: a backfill of an existing (model, chunker) version would resume it.
        sizes = [None if size == "default" else int(size) for size in args.batch_sizes.split(",")]
        results["hashing_batches"] = {}
        for size in sizes:
            alias = "hash384" if size == sizes[0] else f"hash384-b{size}"
            with connect(server.url) as conn:
                register_hashing(conn, alias)
                conn.commit()
            options = {} if size is None else {"batch_size": size}
            results["hashing_batches"][size or "default"] = run_backfill(server.url, alias, **options)
            print(f"backfill, hashing, batch {size or 'default'}: {results['hashing_batches'][size or 'default']}")
        results["hashing"] = results["hashing_batches"][sizes[0] or "default"]
        if not args.skip_real:
            results["real"] = measure_real_backfill(server, args.real_rows, args.repeats)
            print(f"backfill, {results['real']['model']}: {results['real']}", flush=True)
        with connect(server.url) as conn:
            rows = stored_rows(conn, results["hashing"]["version"])
            conn.commit()
        results["index"] = measure_index_build(server.url, rows)
        del rows
        print(f"index: {results['index']}", flush=True)
        results["cutover"] = measure_cutover(
            server.url,
            results["index"]["before"]["version"],
            results["index"]["after"]["version"],
            args.swaps,
            args.baseline_seconds,
            args.pause,
        )
        print(f"cutover: { {k: v for k, v in results['cutover'].items() if not k.endswith('swap_ms')} }", flush=True)
        results["pinned_cutover"] = measure_pinned_cutover(
            server.url,
            results["index"]["before"]["version"],
            results["index"]["after"]["version"],
            args.swaps,
            args.pause,
        )
        print(f"pinned cutover: {results['pinned_cutover']}", flush=True)
        results["pin_cost"] = measure_pin_cost(server.url, results["index"]["before"]["version"], args.pin_rounds)
        print(f"pin cost: {results['pin_cost']}", flush=True)
        results["load_average_end"] = load_average()
    return results


def table(results: dict) -> str:
    index, cut = results["index"], results["cutover"]
    lines = [
        "| backfill | rows | total s | HNSW build s | without it s | claim / chunk / embed / write / commit s"
        " (summed over workers) | rows/s total | rows/s without the HNSW build |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    runs = [("hashing:384", r) for r in results["hashing_batches"].values()]
    if "real" in results:
        runs.append((results["real"]["model"], results["real"]))
    for label, r in runs:
        stages = " / ".join(f"{r['stages'].get(k, 0):.1f}" for k in ("claim", "chunk", "embed", "write", "commit"))
        lines.append(
            f"| {label}, batch {r['batch_size']}, {r['workers']} workers | {r['rows']:,} | {r['seconds']:.1f} |"
            f" {r['index_s']:.1f} | {r['without_index_s']:.1f} | {stages} | {r['rows_per_s']:,.0f} |"
            f" {r['rows_per_s_without_index']:,.1f} |"
        )
    if "real" in results:
        real = results["real"]
        lines += [
            "",
            f"- {real['model']}: bare embed_documents {real['bare_rows_per_s']:.1f} rows/s (runs "
            + ", ".join(f"{r:.1f}" for r in real["bare_runs"])
            + f"); backfill without the HNSW build / bare: **{real['without_index_ratio']:.2f}×**, whole backfill"
            f" / bare: {real['total_ratio']:.2f}× (target ≥ 0.9)",
        ]
    lines += [
        "",
        "| HNSW index, same rows | load s | index s | total s |",
        "| --- | ---: | ---: | ---: |",
        f"| created before loading | {index['before']['load_s']:.1f} | – | {index['before']['total_s']:.1f} |",
        f"| created after loading | {index['after']['load_s']:.1f} | {index['after']['index_s']:.1f} |"
        f" {index['after']['total_s']:.1f} |",
        "",
        f"Cutover: {cut['swaps']} swaps with {cut['readers']} readers: p50 {cut['swap_p50_ms']:.1f} ms,"
        f" p95 {cut['swap_p95_ms']:.1f} ms, max {cut['swap_max_ms']:.1f} ms (target < 100 ms);"
        f" reader errors {cut['reader_errors']}, mixed or short results {cut['mixed_or_short_results']}."
        f" The same swaps with no reader: p50 {cut['idle_swap_p50_ms']:.1f} ms, max {cut['idle_swap_max_ms']:.1f} ms.",
        "",
        "| reader latency (ms) | queries | p50 | p95 | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in (
        ("one reader alone, no swaps", "one_reader_alone"),
        (f"{cut['readers']} readers, without swaps", "baseline"),
        (f"{cut['readers']} readers, during swaps", "during_swaps"),
    ):
        r = cut[key]
        lines.append(f"| {label} | {r['queries']:,} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_ms']:.1f} |")
    pinned, pin = results["pinned_cutover"], results["pin_cost"]
    lines += [
        "",
        f"Cutover with {pinned['readers']} readers following the pinned pattern (serving_model → pinned search):"
        f" {pinned['swaps']} swaps, p50 {pinned['swap_p50_ms']:.1f} ms, p95 {pinned['swap_p95_ms']:.1f} ms,"
        f" max {pinned['swap_max_ms']:.1f} ms; {pinned['requests']:,} requests (p50 {pinned['request_p50_ms']:.1f} ms,"
        f" p95 {pinned['request_p95_ms']:.1f} ms), reader errors {pinned['reader_errors']}, short or from another"
        f" version {pinned['short_or_other_version']}.",
        "",
        "| one reader alone, paired rounds (ms) | queries | p50 | p95 |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, key in (
        ("search_chunks, unpinned (the active version)", "unpinned"),
        ("search_chunks, pinned (query_version)", "pinned"),
        ("serving_model(request_key)", "serving"),
        ("the pattern: serving_model, then the pinned search", "pattern"),
        ("pinned search as a login bound to its tenant", "bound_pinned"),
    ):
        r = pin[key]
        lines.append(f"| {label} | {r['queries']:,} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} |")
    lines += [
        "",
        f"The pin costs {pin['pin_cost_p50']:+.1%} at p50 (target ≤ 10%); binding the login to its tenant"
        f" {pin['binding_cost_p50']:+.1%} (target ≤ 10%).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="about this many chunks for the hashing backfill")
    parser.add_argument(
        "--batch-sizes",
        default="default,512",
        help="hashing backfill batch sizes in rows ('default': the CLI's, sized by tokens); the first is"
        " the one the index and cutover measurements use",
    )
    parser.add_argument("--real-rows", type=int, default=300, help="about this many chunks for the real model")
    parser.add_argument("--repeats", type=int, default=2, help="bare embed_documents runs, half before, half after")
    parser.add_argument("--skip-real", action="store_true", help="skip the real model")
    parser.add_argument("--swaps", type=int, default=40, help="activate/rollback swaps with readers running")
    parser.add_argument("--baseline-seconds", type=float, default=5.0, help="reader latency without swaps first")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between swaps")
    parser.add_argument("--pin-rounds", type=int, default=1000, help="paired rounds measuring the pin's cost")
    args = parser.parse_args()
    results = run(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lifecycle.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(table(results))
    print(f"\nload average: start {results['load_average_start']}, end {results['load_average_end']}")
    print(f"results: {RESULTS / 'lifecycle.json'}")


if __name__ == "__main__":
    main()
