"""Search at 1,000,000 chunks, measured (issue 35, part 3): load and build times, every structure's size, the default
search's cold and warm p50/p95 at k = 5, and HNSW recall@5 against exact search, in two layouts:

- ``one``: every chunk in one tenant;
- ``many``: the chunks spread over 1,000 tenants (consecutive documents in different tenants, N/1,000 chunks each),
  searches run as one tenant's reader (its chunks scattered through the heap and the HNSW graph: the filtered case).

Text: bench/search_served.py's corpus (chunks of 4-7 sentences of the sample documents and bench/data/plain, 10 to a
document, half naming three made-up words of their document) and its questions (labelled questions and questions
made from the searched tenant's chunks). Vectors: bench/search.py's clustered synthetic unit vectors (200 clusters in
a 24-dimensional latent space mapped to 384 dimensions: a realistic neighbour structure, not the hashing model's near
ties), one per chunk and one per question. Exact top-5s (within the searched tenant) are kept with numpy while the
rows stream, so neither the corpus nor the vectors are ever held whole: batches of GENERATE rows are generated, then
written by binary COPY in statements of search_served.BATCH rows, each its own transaction (as ingest writes), with
the version's triggers on.

Per size and layout: create_version; the COPY load (rows/s: COPY time only, generation timed apart); ANALYZE;
create_version_index (HNSW, maintenance_work_mem); mark_version_ready (where a bulk-built lexical structure is made);
activate_version(force); VACUUM (ANALYZE) of the chunk table and of the full-text tables that exist (what autovacuum
does soon after a load); sizes (heap, TOAST, each index by name from pg_index) of the chunk table, the postings table
and the statistics table (names from toolkit._chunk_table/_postings_table/_statistics_table, each only when
to_regclass finds it: nothing here depends on their columns, triggers or indexes); then the searches as
``toolkit_reader`` with the tenant set. The previous size's version is retired once the next one is active.

    .venv/bin/python bench/scale.py --sizes 20000 --layouts one,many   # a quick check
    nice -n 10 .venv/bin/python bench/scale.py                          # 100k and 1M, both layouts
    nice -n 10 .venv/bin/python bench/scale.py --write                  # also replace its docs/benchmarks.md section

It runs its own embedded PostgreSQL in a temporary directory under /tmp (unix socket / 127.0.0.1 only) and stops it
at the end. Output: a markdown section on stdout, also saved to bench/results/scale-<timestamp>.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from report import copy_chunk_rows, cpu_name, start_server, write_section
from search import DIMS, clustered_vectors
from search_served import BATCH, CHUNKS_PER_DOCUMENT, corpus, percentiles, questions, sentences

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECTION = "## Search at 1M chunks"
K = 5
TENANTS = 1000
GENERATE = 10_000  # rows generated at a time (text and vectors), then written in COPY statements of BATCH rows
KEEP_FOR_QUESTIONS = 5_000  # about this many of the searched tenant's chunks kept to make questions from
DEFAULT_SQL = "SELECT rank FROM toolkit.search(toolkit.search_request(query_text => %s, query_embedding => %s, k => 5))"
VECTOR_SQL = (
    "SELECT chunk_id FROM toolkit.search(toolkit.search_request(query_embedding => %s, k => 5, retrieval => 'vector'"
    "{ef}))"
)
EF_SEARCH = (None, 100)  # None: the request's default (40)


def many_tenant(document: int) -> str:
    """The tenant of the run's ``document``-th document in the many layout: consecutive documents go to different
    tenants (7919 is prime to 1,000), every tenant gets one document in each 1,000 (N/1,000 chunks each, scattered
    through the heap in whole documents)."""
    return f"t{document * 7919 % TENANTS:04d}"


def load_average() -> float:
    return os.getloadavg()[0]


def mb(n: int) -> float:
    return n / (1024 * 1024)


def size_mb(n: int) -> str:
    """MiB: one decimal below 10, none above."""
    return f"{mb(n):,.1f}" if mb(n) < 10 else f"{mb(n):,.0f}"


class Scale:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        self.layouts = [s.strip() for s in args.layouts.split(",") if s.strip()]
        biggest = max(self.sizes)
        self.shared_buffers = args.shared_buffers or ("4GB" if biggest > 300_000 else "2GB")
        self.maintenance_work_mem = args.maintenance_work_mem or ("4GB" if biggest > 300_000 else "1GB")
        self.results: dict = {"runs": [], "shared_buffers": self.shared_buffers, "mwm": self.maintenance_work_mem}

    # -- server --------------------------------------------------------------------------------------------
    def start(self) -> None:
        from toolkit.db import connection, migrate
        from toolkit.store.models import Model, insert_model

        self.data_dir = Path(tempfile.mkdtemp(prefix="toolkit-bench-scale-", dir="/tmp"))
        self.url = start_server(self.data_dir, self.shared_buffers)
        migrate.upgrade(self.url)
        self.owner = connection.connect(self.url, autocommit=True)  # a superuser
        info = connection.check_server(self.owner)
        self.results.update(server=info["server_version"], pgvector=info["pgvector_version"])
        self.results["parallel_workers"] = self.owner.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
        insert_model(
            self.owner,
            Model(alias="bench", provider="hashing", model_name=str(DIMS), dimensions=DIMS, max_input_tokens=512),
        )

    def stop(self) -> None:
        from toolkit.db import server

        if getattr(self, "owner", None) is not None:
            self.owner.close()
        server.stop_embedded(self.data_dir)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def reader(self):
        """As bench/search_served.py's reader(): toolkit_reader; the tenant is set in each call's transaction."""
        from toolkit.db import connection

        conn = connection.connect(self.url, autocommit=True)
        conn.execute("SET ROLE toolkit_reader")
        return conn

    # -- data ----------------------------------------------------------------------------------------------
    def batches(self, size: int, layout: str, seed: int):
        """(chunks, tenants, vectors) of GENERATE rows at a time; doc ids unique over the whole run."""
        text_rng = np.random.default_rng([seed, size, 1])
        projection, centers = self.space()
        row_rng = np.random.default_rng([seed, size, 3])
        for number, start in enumerate(range(0, size, GENERATE)):
            chunks, _ = corpus(min(GENERATE, size - start), text_rng, self.pool)
            tenants = []
            for c in chunks:
                document = start // CHUNKS_PER_DOCUMENT + int(c["doc_id"][4:11])  # corpus() names it doc-NNNNNNN.md
                tenant = "bench" if layout == "one" else many_tenant(document)
                c["doc_id"] = f"b{number:04d}-{c['doc_id']}"
                c["chunk_id"] = hashlib.sha256(f"{c['doc_id']}\x1f{c['position']}".encode()).hexdigest()[:32]
                tenants.append(tenant)
            yield chunks, tenants, clustered_vectors(len(chunks), row_rng, projection, centers)

    def load(self, size: int, layout: str, v: int, table: str, tenant: str, query_vectors: np.ndarray) -> dict:
        # Where the rows keep their gaps, passages need no documents: spans touch by the rows' own gaps (issue 36).
        gaps = self.owner.execute(
            "SELECT count(*) > 0 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'gap_before'"
            " AND NOT attisdropped",
            (table,),
        ).fetchone()[0]
        keep_rng = np.random.default_rng([self.args.seed, size, 5])
        expected = size if layout == "one" else size / TENANTS
        keep = min(1.0, KEEP_FOR_QUESTIONS / expected)
        best_scores = np.full((len(query_vectors), K), -np.inf, dtype=np.float32)
        best_ids = np.full((len(query_vectors), K), "", dtype=object)
        kept: list[dict] = []
        tenant_rows = 0
        generate_s = copy_s = 0.0
        loads = [load_average()]
        started = time.perf_counter()
        batches = self.batches(size, layout, self.args.seed)
        while True:
            t = time.perf_counter()
            item = next(batches, None)
            if item is None:
                break
            chunks, tenants, vectors = item
            # Exact top-5 within the searched tenant, merged batch by batch.
            mine = np.flatnonzero(np.asarray(tenants) == tenant)
            if len(mine):
                tenant_rows += len(mine)
                scores = np.concatenate([best_scores, query_vectors @ vectors[mine].T], axis=1)
                ids = np.concatenate(
                    [
                        best_ids,
                        np.broadcast_to(
                            np.array([chunks[i]["chunk_id"] for i in mine], dtype=object),
                            (len(query_vectors), len(mine)),
                        ),
                    ],
                    axis=1,
                )
                top = np.argpartition(-scores, K, axis=1)[:, :K] if scores.shape[1] > K else np.arange(K)[None]
                best_scores = np.take_along_axis(scores, top, axis=1)
                best_ids = np.take_along_axis(ids, top, axis=1)
                for i in mine[keep_rng.random(len(mine)) < keep]:
                    kept.append({"text": chunks[i]["text"], "rare": chunks[i]["rare"]})
            generate_s += time.perf_counter() - t
            copy_s += copy_chunk_rows(self.owner, table, chunks, vectors, tenants, BATCH)
            loads.append(load_average())
            done = min(size, (len(loads) - 1) * GENERATE)
            if len(loads) % 10 == 1 or done == size:
                print(
                    f"    {done:,} rows: COPY {copy_s:.0f} s ({done / copy_s:,.0f} rows/s), generation"
                    f" {generate_s:.0f} s, load {loads[-1]:.1f}",
                    flush=True,
                )
        self.truth = [  # a tenant of fewer than K rows has fewer true neighbours
            {i for i, score in zip(ids, scores, strict=True) if score > -np.inf}
            for ids, scores in zip(best_ids, best_scores, strict=True)
        ]
        self.kept = kept
        return {
            "generate_s": generate_s,
            "load_s": copy_s,
            "rows_per_s": size / copy_s,
            "load_wall_s": time.perf_counter() - started,
            "load_avg_load": float(np.mean(loads)),
            "tenant_rows": tenant_rows,
            "gap_before": bool(gaps),
        }

    # -- sizes ---------------------------------------------------------------------------------------------
    def structures(self, v: int) -> list[dict]:
        names = self.owner.execute(
            "SELECT toolkit._chunk_table(%s), toolkit._postings_table(%s), toolkit._statistics_table(%s)",
            (v, v, v),
        ).fetchone()
        out = []
        for role, name in zip(("chunks", "postings", "statistics"), names, strict=True):
            oid = self.owner.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()[0]
            if oid is None:
                out.append({"role": role, "name": name, "exists": False})
                continue
            heap, toast, rows = self.owner.execute(
                "SELECT pg_relation_size(c.oid, 'main') + pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid,"
                " 'vm'), CASE WHEN c.reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(c.reltoastrelid) END,"
                " c.reltuples::bigint FROM pg_class AS c WHERE c.oid = %s",
                (oid,),
            ).fetchone()
            indexes = self.owner.execute(
                "SELECT i.indexrelid::regclass::text, am.amname, pg_relation_size(i.indexrelid)"
                " FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS am ON am.oid = c.relam"
                " WHERE i.indrelid = %s ORDER BY 1",
                (oid,),
            ).fetchall()
            out.append(
                {
                    "role": role,
                    "name": name,
                    "exists": True,
                    "rows": int(rows),
                    "heap": heap,
                    "toast": toast,
                    "indexes": [(n.split(".")[-1].strip('"'), am, size) for n, am, size in indexes],
                    "total": heap + toast + sum(size for _, _, size in indexes),
                }
            )
        return out

    # -- searches ------------------------------------------------------------------------------------------
    @staticmethod
    def call(conn, tenant: str, sql: str, params: tuple) -> tuple[list, float]:
        with conn.transaction():
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
            started = time.perf_counter()
            rows = conn.execute(sql, params).fetchall()
            return [r[0] for r in rows], (time.perf_counter() - started) * 1000

    def searches(self, table: str, tenant: str, qs: list[str], qv: np.ndarray) -> dict:
        out: dict = {"questions": len(qs)}
        rng = np.random.default_rng(self.args.seed + 7)
        # Cold: the first search on a fresh connection (plans and PL/pgSQL compiled anew; the buffer cache stays).
        loads = [load_average()]
        times = []
        for i in rng.choice(len(qs), size=min(self.args.cold, len(qs)), replace=False):
            with self.reader() as conn:
                times.append(self.call(conn, tenant, DEFAULT_SQL, (qs[int(i)], qv[int(i)]))[1])
        out["cold"] = percentiles(times)
        out["cold_n"] = len(times)
        loads.append(load_average())
        out["cold_load"] = float(np.mean(loads))
        # Warm: one connection, a warm-up, then every question once.
        loads = [load_average()]
        with self.reader() as conn:
            for i in range(min(20, len(qs))):
                self.call(conn, tenant, DEFAULT_SQL, (qs[i], qv[i]))
            times, empty = [], 0
            for q, vector in zip(qs, qv, strict=True):
                rows, ms = self.call(conn, tenant, DEFAULT_SQL, (q, vector))
                times.append(ms)
                empty += not rows
            out["warm"] = percentiles(times)
            out["empty"] = empty
            loads.append(load_average())
            out["warm_load"] = float(np.mean(loads))
        # HNSW recall@5 of retrieval 'vector' against the exact top-5 (numpy, within the tenant); whether the HNSW
        # index answered: its idx_scan before and after (a connection's statistics are flushed when it closes).
        scans = self.hnsw_scans(table)
        with self.reader() as conn:
            for ef in EF_SEARCH:
                loads = [load_average()]
                sql = VECTOR_SQL.format(ef=f", ef_search => {ef}" if ef else "")
                for i in range(min(20, len(qv))):
                    self.call(conn, tenant, sql, (qv[i],))
                found, times = [], []
                for vector in qv:
                    rows, ms = self.call(conn, tenant, sql, (vector,))
                    found.append(rows)
                    times.append(ms)
                loads.append(load_average())
                hits = sum(len(set(f) & t) for f, t in zip(found, self.truth, strict=True))
                out[f"recall_{ef or 40}"] = hits / sum(len(t) for t in self.truth)
                out[f"vector_{ef or 40}"] = percentiles(times)
                out[f"vector_{ef or 40}_load"] = float(np.mean(loads))
        time.sleep(1)
        out["hnsw_scans"] = self.hnsw_scans(table) - scans
        out["vector_calls"] = len(EF_SEARCH) * (len(qv) + min(20, len(qv)))
        return out

    def hnsw_scans(self, table: str) -> int:
        """Scans of the chunk table's HNSW indexes (found by access method, not by name) so far."""
        self.owner.execute("SELECT pg_stat_clear_snapshot()")
        return self.owner.execute(
            "SELECT coalesce(sum(s.idx_scan), 0) FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
            " JOIN pg_am AS am ON am.oid = c.relam JOIN pg_stat_all_indexes AS s ON s.indexrelid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND am.amname = 'hnsw'",
            (table,),
        ).fetchone()[0]

    # -- one size and layout -------------------------------------------------------------------------------
    def run_one(self, size: int, layout: str) -> dict:
        from toolkit import cutover
        from toolkit.store import versions

        conn = self.owner
        r: dict = {"size": size, "layout": layout}
        drawn = int(np.random.default_rng(self.args.seed).integers(min(TENANTS, size // CHUNKS_PER_DOCUMENT)))
        tenant = "bench" if layout == "one" else many_tenant(drawn)
        r["tenant"] = tenant
        # Query vectors first (exact top-5s are kept as the rows stream), from the rows' space.
        count = self.args.queries
        projection, centers = self.space()
        qv = clustered_vectors(count, np.random.default_rng([self.args.seed, size, 6]), projection, centers)

        v = versions.create_version(conn, "bench", "fixed:200:0", f"scale:{size}:{layout}")
        table = conn.execute("SELECT toolkit._chunk_table(%s)", (v,)).fetchone()[0]
        r["version"] = v
        print(f"{size:,} chunks, layout {layout} (version {v}, searched tenant {tenant}):", flush=True)
        r |= self.load(size, layout, v, table, tenant, qv)

        def timed(key: str, action) -> None:
            before = load_average()
            t = time.perf_counter()
            action()
            r[key] = time.perf_counter() - t
            r[key + "_load"] = (before + load_average()) / 2
            print(f"    {key}: {r[key]:.1f} s (load {r[key + '_load']:.1f})", flush=True)

        timed("analyze_s", lambda: conn.execute(f"ANALYZE {table}"))
        timed(
            "index_s",
            lambda: versions.create_version_index(conn, v, maintenance_work_mem=self.maintenance_work_mem),
        )
        timed("ready_s", lambda: versions.mark_version_ready(conn, v))
        timed("activate_s", lambda: cutover.activate_version(conn, v, force=True))

        def settle() -> None:  # what autovacuum does soon after a load; the full-text tables that exist
            names = conn.execute(
                "SELECT toolkit._chunk_table(%s), toolkit._postings_table(%s), toolkit._statistics_table(%s)",
                (v, v, v),
            ).fetchone()
            existing = [n for n in names if conn.execute("SELECT to_regclass(%s)", (n,)).fetchone()[0] is not None]
            conn.execute(f"VACUUM (ANALYZE) {', '.join(existing)}")

        timed("vacuum_s", settle)
        if getattr(self, "previous", None) is not None:
            cutover.retire_version(conn, self.previous, reason="bench/scale.py", force=True)
        self.previous = v
        r["structures"] = self.structures(v)
        r["database"] = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        r["data_dir"] = sum(f.stat().st_size for f in self.data_dir.rglob("*") if f.is_file())
        for s in r["structures"]:
            if s["exists"]:
                parts = ", ".join(f"{n} {mb(b):.0f}" for n, _, b in s["indexes"])
                print(
                    f"    {s['role']} {s['name']}: {s['rows']:,} rows, heap {mb(s['heap']):.0f} MB, TOAST"
                    f" {mb(s['toast']):.0f} MB, indexes: {parts}",
                    flush=True,
                )
            else:
                print(f"    {s['role']} {s['name']}: does not exist", flush=True)

        made = min(count - count // 2, len(self.kept))  # a small tenant has fewer chunks than that
        qs = questions(np.random.default_rng([self.args.seed, size, 7]), self.kept, made, count - made)[:count]
        r["made_questions"] = made
        self.truth = self.truth[: len(qs)]
        r |= self.searches(table, tenant, qs, qv[: len(qs)])
        self.truth = []
        print(
            f"    default search: cold p50 {r['cold'][0]:.1f} p95 {r['cold'][1]:.1f} ms, warm p50 {r['warm'][0]:.1f}"
            f" p95 {r['warm'][1]:.1f} ms; recall@5 {r['recall_40']:.3f} (ef_search 100: {r['recall_100']:.3f}),"
            f" HNSW index scans {r['hnsw_scans']} in {r['vector_calls']} vector searches;"
            f" Python peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
            flush=True,
        )
        r["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return r

    def space(self) -> tuple[np.ndarray, np.ndarray]:
        """bench/search.py's latent space (projection, cluster centres): the same for every size and layout."""
        vector_rng = np.random.default_rng([self.args.seed, 2])
        projection = vector_rng.standard_normal((DIMS, 24)).astype(np.float32) / np.sqrt(24)
        centers = 2.0 * vector_rng.standard_normal((200, 24))
        return projection, centers

    def run(self) -> dict:
        started = time.perf_counter()
        self.pool = sentences()
        self.results["sentences"] = len(self.pool)
        self.start()
        try:
            for size in self.sizes:
                for layout in self.layouts:
                    self.results["runs"].append(self.run_one(size, layout))
        finally:
            if self.args.keep:
                print(f"kept: the server in {self.data_dir} ({self.url}); stop it with toolkit's server.stop_embedded")
            else:
                self.stop()
        self.results["seconds"] = time.perf_counter() - started
        self.results["load_average"] = load_average()
        return self.results


def section(results: dict, command: str) -> str:
    runs = results["runs"]
    lines = [
        SECTION,
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M')}; {results['seconds']:.0f} s in all). PostgreSQL"
        f" {results['server']}, pgvector {results['pgvector']}, embedded, shared_buffers = {results['shared_buffers']},"
        f" HNSW built with maintenance_work_mem = {results['mwm']} and max_parallel_maintenance_workers ="
        f" {results['parallel_workers']}; {os.cpu_count()} cores ({cpu_name()}) shared with other work (1-minute load"
        f" average given per phase); {platform.machine()}.",
        "",
        "Data: chunks of 4-7 sentences drawn at random from the"
        f" {results['sentences']:,} sentences of the sample documents and bench/data/plain (bench/search_served.py's"
        " corpus), 10 to a document, half naming three made-up words of their document; *one*: every chunk in one"
        f" tenant; *many*: {TENANTS:,} tenants of N/{TENANTS:,} chunks each, consecutive documents in different"
        " tenants (a tenant's rows are scattered through the heap), searched as one of them. Vectors:"
        f" clustered synthetic unit vectors at {DIMS} dimensions (bench/search.py: 200 clusters in a 24-dimensional"
        " latent space; the rows' clusters drawn at random, so a tenant's rows are scattered through the graph)."
        f" Rows written by binary COPY in statements of {BATCH} rows, each its own transaction, the version's triggers"
        " on; rows/s counts COPY time only.",
        "",
        "| chunks | layout | generate (Python) | COPY load | rows/s | ANALYZE | HNSW build | mark ready | activate |"
        " VACUUM (ANALYZE) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r['size']:,} | {r['layout']} | {r['generate_s']:.0f} s | {r['load_s']:.0f} s"
            f" (load {r['load_avg_load']:.1f}) | {r['rows_per_s']:,.0f} | {r['analyze_s']:.1f} s |"
            f" {r['index_s']:.0f} s (load {r['index_s_load']:.1f}) | {r['ready_s']:.1f} s (load"
            f" {r['ready_s_load']:.1f}) | {r['activate_s']:.1f} s | {r['vacuum_s']:.0f} s |"
        )
    lines += [
        "",
        "Sizes in MB (MiB) after the VACUUM: heap (with its free-space and visibility maps), TOAST (with its index),"
        " each index by name (pg_index); rows are pg_class.reltuples. *Database* is pg_database_size; *data"
        " directory* adds the WAL.",
        "",
        "| chunks | layout | structure | rows | heap | TOAST | indexes | total |",
        "| ---: | --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in runs:
        for s in r["structures"]:
            if not s["exists"]:
                lines.append(
                    f"| {r['size']:,} | {r['layout']} | {s['role']} (`{s['name']}`) | — | — | — | absent | — |"
                )
                continue
            indexes = "; ".join(f"{n} ({am}) {size_mb(b)}" for n, am, b in s["indexes"]) or "none"
            lines.append(
                f"| {r['size']:,} | {r['layout']} | {s['role']} (`{s['name']}`) | {s['rows']:,} | {size_mb(s['heap'])}"
                f" | {size_mb(s['toast'])} | {indexes} | {size_mb(s['total'])} |"
            )
        lines.append(
            f"| {r['size']:,} | {r['layout']} | database / data directory | | | | |"
            f" {size_mb(r['database'])} / {size_mb(r['data_dir'])} |"
        )
    lines += [
        "",
        "| chunks | layout | tenant's chunks | questions | cold p50 | cold p95 | warm p50 | warm p95 | no result |"
        " vector p50 / p95 | recall@5 (ef_search 40) | recall@5 (ef_search 100) | HNSW scans / vector searches |"
        " load (cold / warm / vector) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in runs:
        lines.append(
            f"| {r['size']:,} | {r['layout']} | {r['tenant_rows']:,} | {r['questions']} (cold {r['cold_n']}) |"
            f" {r['cold'][0]:.1f} | {r['cold'][1]:.1f} | {r['warm'][0]:.1f} | {r['warm'][1]:.1f} | {r['empty']} |"
            f" {r['vector_40'][0]:.1f} / {r['vector_40'][1]:.1f} | {r['recall_40']:.3f} | {r['recall_100']:.3f} |"
            f" {r['hnsw_scans']:,} / {r['vector_calls']:,} |"
            f" {r['cold_load']:.1f} / {r['warm_load']:.1f} / {r['vector_40_load']:.1f} |"
        )
    lines += [
        "",
        "Milliseconds. The default search is `toolkit.search(toolkit.search_request(query_text => ..., query_embedding"
        " => ..., k => 5))` (hybrid passages, unpinned: the active version) as `toolkit_reader` with the tenant set;"
        " cold: the first search on a fresh connection (the buffer cache stays warm), warm: one connection after 20"
        " warm-up searches. Questions: half the labelled ones (sample set and bench/data/plain, evenly spread), half"
        " made from a random chunk of the searched tenant; each paired with a clustered query vector. *Vector*:"
        " retrieval 'vector' at the default ef_search, warm; recall@5 against the exact top-5 of the tenant's rows"
        " (numpy); *HNSW scans*: idx_scan of the chunk table's HNSW index over those searches (pg_stat_all_indexes;"
        " 0: the planner read the tenant's rows and sorted them exactly). *No result*: searches that returned no"
        " passage.",
    ]
    sizes = sorted({r["size"] for r in runs})
    if len(sizes) > 1:
        growth = []
        for layout in sorted({r["layout"] for r in runs}):
            by = {r["size"]: r for r in runs if r["layout"] == layout}
            if sizes[0] in by and sizes[-1] in by:
                a, b = by[sizes[0]], by[sizes[-1]]
                growth.append(
                    f"{layout}: warm p50 {a['warm'][0]:.1f} → {b['warm'][0]:.1f} ms"
                    f" ({b['warm'][0] / a['warm'][0]:.2f}×), load {a['rows_per_s']:,.0f} → {b['rows_per_s']:,.0f}"
                    f" rows/s, HNSW build {a['index_s']:.0f} → {b['index_s']:.0f} s"
                )
        lines += ["", f"Growth from {sizes[0]:,} to {sizes[-1]:,} chunks: " + "; ".join(growth) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Search at 1M chunks: load, build, sizes, latency, recall.")
    parser.add_argument("--sizes", default="100000,1000000", help="chunk counts, comma-separated (multiples of 10)")
    parser.add_argument("--layouts", default="one,many", help="one (one tenant), many (1,000 tenants)")
    parser.add_argument("--queries", type=int, default=200, help="questions (half labelled, half made)")
    parser.add_argument("--cold", type=int, default=20, help="fresh connections (a subset of the questions)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shared-buffers", default=None, help="default 4GB past 300k chunks, else 2GB")
    parser.add_argument("--maintenance-work-mem", default=None, help="for the HNSW build; 4GB past 300k, else 1GB")
    parser.add_argument("--keep", action="store_true", help="leave the server and the last version for inspection")
    parser.add_argument("--write", action="store_true", help='replace "## Search at 1M chunks" in docs/benchmarks.md')
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(s <= 0 or s % 10 for s in sizes):
        parser.error("--sizes: positive multiples of 10 (10 chunks a document)")
    if not set(s.strip() for s in args.layouts.split(",") if s.strip()) <= {"one", "many"} or not args.layouts.strip():
        parser.error("--layouts: one, many or both")
    if args.queries < 20:
        parser.error("--queries: 20 or more")
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv]) if argv is None else shlex.join(argv)
    niceness = os.nice(0)
    results = Scale(args).run()
    text = section(results, (f"nice -n {niceness} " if niceness else "") + command)
    print(text)
    out = ROOT / "bench" / "results" / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"(saved to {out.relative_to(ROOT)})")
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, text)


if __name__ == "__main__":
    main()
