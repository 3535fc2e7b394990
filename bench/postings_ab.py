"""Issue 35's full-text postings, before and after, in one run: two source trees, each imported by a worker process
of its own (PYTHONPATH=<tree>; the worker checks that the toolkit and its SQL files come from that tree), each with
its own embedded PostgreSQL (bench/report.py's start_server, same settings), the trees alternating.

(a) **Sizes on real text**: corpora bundled in the repository and installed on this machine, each its own tenant,
    ingested and backfilled as a user does (``toolkit.ingest.ingest``, then ``toolkit.backfill.backfill`` with
    ``recursive:128:64`` and the hashing model at 384 dimensions), then activated and vacuumed. Each corpus alone in
    a database of its own, and all of them together in one more. Per tree: chunks, postings (the sum over chunks
    of their distinct lexemes, ``length(fts)``), and the bytes of terms_vN, term_stats_vN and the chunk table (total,
    heap, TOAST, each index by name); after's lexical total = terms + term_stats + the chunk table's (tenant,
    ordinal) index; before's = terms + term_stats (its chunk-table GIN index listed apart); and a GIN index built
    fresh over the same chunks' ``fts`` (``CREATE INDEX ... USING gin (fts)``, default options, then dropped).
    Optionally the same at ``--big`` chunks of bench/search_served.py's ``corpus()`` in one tenant, loaded by
    binary COPY in statements of 500 rows into a version being built, then ``create_version_index`` and
    ``mark_version_ready``.
(b) **Backfill against bare COPY**: each tree's own bench/backfill.py (``--rows 20000 --rounds 1 --real-rows 0``,
    PYTHONPATH and working directory the tree), one round per invocation, the trees alternating.
(c) **Live ingest with and without postings**: on a ready, active version of ``--live-base`` chunks (the same
    ``corpus()``, loaded as in (a)'s big case), 2,000 new chunk rows by binary COPY in statements of 500 rows, each
    its own transaction, the postings triggers enabled and then disabled (``ALTER TABLE ... DISABLE TRIGGER``); the
    rows deleted again the same way and the tables vacuumed between runs; repeats alternating trees and modes.

    .venv/bin/python bench/postings_ab.py --before /tmp/toolkit-before35 --after /tmp/toolkit-after35 --quick
    .venv/bin/python bench/postings_ab.py --before /tmp/toolkit-before35 --after /tmp/toolkit-after35

Writes bench/results/postings-ab-<timestamp>.md (and a .json beside it in /tmp).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path

from search_ab import Tree, WorkerError

ROOT = Path(__file__).resolve().parent.parent
TREES = ("before", "after")
DIMS = 384
INPUT_LIMIT = 512
CHUNKER = "recursive:128:64"
SHARED_BUFFERS = "512MB"
BATCH = 500
LIVE_ROWS = 2_000
TRIGGERS = ("text_postings_insert", "text_postings_delete", "text_postings_update")


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------------------------
# The worker: one per tree.
# ---------------------------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, tree: Path):
        self.tree = tree
        self.conns: dict = {}

    def hello(self) -> dict:
        from report import check_tree

        return check_tree(self.tree)

    def start(self, data_dir: str) -> dict:
        from report import start_server

        from toolkit.db import connection

        self.data_dir = Path(data_dir)
        self.url = start_server(self.data_dir, SHARED_BUFFERS)
        with connection.connect(self.url, autocommit=True, register_vector=False) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return {"server": version, "pgvector": vec and vec[0]}

    def stop(self) -> dict:
        from toolkit.db import server

        for conn in self.conns.values():
            conn.close()
        server.stop_embedded(self.data_dir)
        return {}

    def _url(self, database: str) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        return make_conninfo(**(conninfo_to_dict(self.url) | {"dbname": database}))

    def _conn(self, database: str):
        from toolkit.db import connection

        conn = self.conns.get(database)
        if conn is None or conn.closed:
            conn = self.conns[database] = connection.connect(self._url(database), autocommit=True)
        return conn

    def _database(self, database: str) -> str:
        from psycopg import sql

        from toolkit.db import connection, migrate
        from toolkit.store.models import Model, insert_model

        with connection.connect(self.url, autocommit=True, register_vector=False) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        url = self._url(database)
        migrate.upgrade(url)
        insert_model(
            self._conn(database),
            Model(
                alias="bench", provider="hashing", model_name=str(DIMS), dimensions=DIMS, max_input_tokens=INPUT_LIMIT
            ),
        )
        return url

    def load_real(self, database: str, tenants: dict[str, str]) -> dict:
        """Each tenant's directory ingested, a version backfilled with CHUNKER, activated, vacuumed."""
        from toolkit import cutover
        from toolkit.backfill import backfill
        from toolkit.ingest import ingest

        started = time.perf_counter()
        url = self._database(database)
        conn = self._conn(database)
        for tenant, directory in tenants.items():
            ingest(conn, [directory], tenant)
        ingested = time.perf_counter() - started
        report = backfill(url, "bench", CHUNKER)
        cutover.activate_version(conn, report.version, force=True)
        conn.execute("VACUUM ANALYZE")  # what autovacuum does soon after a load
        return {
            "version": report.version,
            "chunker": report.chunker_version,
            "ingest_s": ingested,
            "backfill_s": report.seconds,
            "index_s": report.index_seconds,
            "ready_s": getattr(report, "ready_seconds", None),
            "rows": report.rows_written,
            "seconds": time.perf_counter() - started,
        }

    def _copy_rows(self, conn, table: str, rows: list[dict], vectors) -> float:
        """Binary COPY in statements of BATCH rows, each its own transaction (as ingest writes), each row in its own
        tenant (report.copy_chunk_rows)."""
        from report import copy_chunk_rows

        return copy_chunk_rows(conn, table, rows, vectors, [r["tenant"] for r in rows], BATCH)

    def _synthetic(self, rows: int, seed: int, tenant: str, prefix: str = "") -> tuple[list[dict], object]:
        import numpy as np
        from search_served import corpus, sentences

        from toolkit.embedding.hashing import HashingEmbedder

        rng = np.random.default_rng(seed)
        chunks, _ = corpus(rows, rng, sentences())
        for c in chunks:
            c["tenant"] = tenant
            c["chunk_id"], c["doc_id"] = prefix + c["chunk_id"], prefix + c["doc_id"]
        embedder = HashingEmbedder(dimensions=DIMS)
        vectors = np.asarray(embedder.embed_documents([c["text"] for c in chunks]), dtype=np.float32)
        return chunks, vectors

    def load_synthetic(self, database: str, rows: int, seed: int) -> dict:
        """A version of ``rows`` chunks of search_served's corpus(), loaded by COPY as a backfill loads a version
        being built, then its HNSW index, ready (after: the postings built), active, vacuumed."""
        from toolkit import cutover
        from toolkit.store import versions

        self._database(database)
        conn = self._conn(database)
        chunks, vectors = self._synthetic(rows, seed, "bench")
        v = versions.create_version(conn, "bench", "fixed:200:0", f"fixed:200:0@{len(chunks)}")
        table = conn.execute("SELECT toolkit._chunk_table(%s)", (v,)).fetchone()[0]
        out = {"version": v, "table": table, "rows": len(chunks)}
        out["load_s"] = self._copy_rows(conn, table, chunks, vectors)
        conn.execute(f"ANALYZE {table}")
        started = time.perf_counter()
        versions.create_version_index(conn, v, maintenance_work_mem="1GB")
        out["index_s"] = time.perf_counter() - started
        started = time.perf_counter()
        versions.mark_version_ready(conn, v)
        out["ready_s"] = time.perf_counter() - started
        cutover.activate_version(conn, v, force=True)
        conn.execute("VACUUM ANALYZE")
        out["load"] = load_avg()
        return out

    def sizes(self, database: str, version: int | None = None) -> dict:
        conn = self._conn(database)
        if version is None:
            version = conn.execute("SELECT max(version) FROM toolkit.versions").fetchone()[0]
        chunks, terms, stats = conn.execute(
            "SELECT toolkit._chunk_table(%s), toolkit._postings_table(%s), toolkit._statistics_table(%s)",
            (version, version, version),
        ).fetchone()
        out: dict = {"version": version, "tables": {}}
        out["pgvector"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        for key, name in (("chunks", chunks), ("terms", terms), ("stats", stats)):
            if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is None:
                out["tables"][key] = None
                continue
            total, heap, toast, relname = conn.execute(
                "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid) + pg_relation_size(c.oid, 'fsm')"
                " + pg_relation_size(c.oid, 'vm'),"
                " coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), c.relname"
                " FROM pg_class AS c WHERE c.oid = %s::regclass",
                (name,),
            ).fetchone()
            indexes = dict(
                conn.execute(
                    "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index AS i JOIN pg_class AS c"
                    " ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass ORDER BY c.relname",
                    (name,),
                ).fetchall()
            )
            rows = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            out["tables"][key] = {
                "name": relname,
                "total": total,
                "heap": heap,
                "toast": toast,
                "indexes": indexes,
                "rows": rows,
            }
        # The chunk table's index on its ordinal (after) and GIN index (before), from its indexes' columns and methods.
        out["ordinal_index"], out["gin_on_chunks"] = conn.execute(
            "SELECT coalesce(sum(pg_relation_size(i.indexrelid)) FILTER (WHERE EXISTS (SELECT FROM pg_attribute AS a"
            "  WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) AND a.attname = 'ordinal')), 0)::bigint,"
            " coalesce(sum(pg_relation_size(i.indexrelid)) FILTER (WHERE am.amname = 'gin'), 0)::bigint"
            " FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS am ON am.oid = c.relam"
            " WHERE i.indrelid = %s::regclass",
            (chunks,),
        ).fetchone()
        counts = conn.execute(
            f"SELECT count(*) FILTER (WHERE NOT is_parent), count(*) FILTER (WHERE is_parent),"
            f" coalesce(sum(length(fts)) FILTER (WHERE NOT is_parent), 0)::bigint,"
            f" coalesce(sum(length(fts)), 0)::bigint, coalesce(sum(octet_length(text)), 0)::bigint FROM {chunks}"
        ).fetchone()
        out["chunks"], out["parents"], out["postings"], out["postings_all_rows"], out["text_bytes"] = counts
        out["per_tenant"] = {
            t: {"chunks": n, "postings": p}
            for t, n, p in conn.execute(
                f"SELECT tenant, count(*), sum(length(fts))::bigint FROM {chunks}"
                " WHERE NOT is_parent GROUP BY 1 ORDER BY 1"
            ).fetchall()
        }
        # A GIN index built fresh over the same chunks' tsvectors, default options and settings, then dropped.
        with conn.transaction():
            conn.execute(f"CREATE INDEX bench_fts_gin ON {chunks} USING gin (fts)")
            out["gin_fresh"] = conn.execute("SELECT pg_relation_size(to_regclass('toolkit.bench_fts_gin'))").fetchone()[
                0
            ]
            conn.execute("DROP INDEX toolkit.bench_fts_gin")
        if out["parents"]:
            with conn.transaction():
                conn.execute(f"CREATE INDEX bench_fts_gin ON {chunks} USING gin (fts) WHERE NOT is_parent")
                out["gin_fresh_leaves"] = conn.execute(
                    "SELECT pg_relation_size(to_regclass('toolkit.bench_fts_gin'))"
                ).fetchone()[0]
                conn.execute("DROP INDEX toolkit.bench_fts_gin")
        return out

    def prepare_live(self, database: str, seed: int) -> dict:
        self._live = self._synthetic(LIVE_ROWS, seed, "bench", prefix="extra-")
        return {"rows": len(self._live[0])}

    def live(self, database: str, table: str, postings: bool) -> dict:
        """Rows/s of ingest-like writes into the ready version, its triggers enabled or disabled; the rows then
        deleted the same way and the tables vacuumed."""
        conn = self._conn(database)
        version = conn.execute("SELECT max(version) FROM toolkit.versions").fetchone()[0]
        terms, stats = conn.execute(
            "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)", (version, version)
        ).fetchone()
        rows, vectors = self._live
        if not postings:
            for name in TRIGGERS:
                conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {name}")
        try:
            load = os.getloadavg()[0]
            seconds = self._copy_rows(conn, table, rows, vectors)
            load = (load + os.getloadavg()[0]) / 2
            started = time.perf_counter()
            conn.execute(f"DELETE FROM {table} WHERE doc_id LIKE 'extra-%'")
            delete_s = time.perf_counter() - started
        finally:
            for name in TRIGGERS:
                conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER {name}")
        conn.execute(f"VACUUM {table}, {terms}, {stats}")
        return {"rows_per_s": len(rows) / seconds, "seconds": seconds, "delete_s": delete_s, "load1": load}


def worker_main(tree: str) -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker(Path(tree).resolve())
    for line in sys.stdin:
        command = json.loads(line)
        try:
            reply = {"ok": True, "result": getattr(worker, command["op"])(**command.get("args", {}))}
        except Exception as error:
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        protocol.write(json.dumps(reply, default=str) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# The parent.
# ---------------------------------------------------------------------------------------------------------------
def write_corpora(base: Path, cap: int) -> dict[str, dict]:
    """The real-text corpora, each a directory of files (a tenant): name -> {dir, files, bytes, source}."""
    corpora: dict[str, dict] = {}

    def put(name: str, source: str, items: list[tuple[str, str]]) -> None:
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        total = 0
        for file_name, text in items:
            (d / file_name).write_text(text, encoding="utf-8")
            total += len(text.encode())
        corpora[name] = {"dir": str(d), "files": len(items), "bytes": total, "source": source}

    sample = sorted((ROOT / "toolkit" / "data" / "sample" / "docs").glob("*.md"))
    put("sample", "toolkit/data/sample/docs/*.md", [(p.name, p.read_text(encoding="utf-8")) for p in sample])
    plain = sorted(p for p in (ROOT / "bench" / "data" / "plain" / "docs").iterdir() if p.is_file())
    put("plain", "bench/data/plain/docs/*", [(p.name, p.read_text(encoding="utf-8")) for p in plain])

    site = Path(sysconfig.get_paths()["purelib"])
    items, size, seen = [], 0, set()
    for path in sorted(site.glob("*.dist-info/METADATA")):
        raw = path.read_text(encoding="utf-8", errors="replace")
        body = raw.split("\n\n", 1)[1] if "\n\n" in raw else ""
        if len(body) < 500 or body in seen:
            continue
        seen.add(body)
        items.append((path.parent.name.removesuffix(".dist-info") + ".md", body))
        size += len(body.encode())
        if size >= cap:
            break
    put("metadata", f"{site}/*.dist-info/METADATA (long descriptions, path order, to {cap // 1000} KB)", items)

    items, size, seen = [], 0, set()
    docs = sorted(
        p
        for p in Path("/usr/share/doc").rglob("*")
        if p.is_file() and not p.is_symlink() and (p.suffix in (".md", ".txt") or p.name.startswith(("README", "NEWS")))
        and not p.name.endswith((".gz", ".html"))
    )  # fmt: skip
    for path in docs:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) < 500 or text in seen:
            continue
        seen.add(text)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(path.relative_to("/usr/share/doc")))
        items.append((name + (".md" if path.suffix == ".md" else ".txt"), text))
        size += len(text.encode())
        if size >= cap:
            break
    put("usrdoc", f"/usr/share/doc README*/NEWS*/*.md/*.txt (uncompressed, path order, to {cap // 1000} KB)", items)

    licenses = Path("/usr/share/common-licenses")
    items, seen = [], set()
    for path in sorted(licenses.iterdir()) if licenses.is_dir() else []:
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            if text not in seen:
                seen.add(text)
                items.append((path.name + ".txt", text))
    if items:
        put("licenses", "/usr/share/common-licenses/* (distinct texts)", items)
    return corpora


class Run:
    def __init__(self, args):
        self.args = args
        self.results: dict = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "load_start": load_avg(),
        }
        self.scratch = Path(tempfile.mkdtemp(prefix="toolkit-postings-ab-", dir="/tmp"))
        os.chmod(self.scratch, 0o755)
        self.trees: dict[str, Tree] = {}
        self.paths = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}

    def start(self) -> None:
        self.results["trees"] = {}
        for label, path in self.paths.items():
            self.trees[label] = Tree(
                label, path, self.scratch, script=Path(__file__).resolve(), nice=5, logs=self.scratch
            )
        for label, tree in self.trees.items():
            info = tree.call("hello", timeout=120)
            info |= tree.call("start", timeout=300, data_dir=str(tree.data_dir))
            info["path"] = str(tree.path)
            self.results["trees"][label] = info
            print(f"{label}: {info}", flush=True)

    def close(self) -> None:
        for tree in self.trees.values():
            tree.close()

    def both(self, op: str, order: tuple[str, ...] = TREES, **args) -> dict:
        out = {}
        for label in order:
            try:
                out[label] = self.trees[label].call(op, **args)
            except WorkerError as error:
                out[label] = {"error": str(error)}
                print(f"  {label}: {op}: {error}", flush=True)
        return out

    # -- (a) -----------------------------------------------------------------------------------------------
    def part_a(self) -> None:
        print(f"(a) sizes on real text; load {load_avg()}", flush=True)
        corpora = write_corpora(self.scratch / "corpora", self.args.cap)
        part: dict = {"corpora": corpora, "databases": {}}
        names = list(corpora) if self.args.per_corpus else []
        flip = False
        for db in ["all", *names]:
            tenants = {n: c["dir"] for n, c in corpora.items()} if db == "all" else {db: corpora[db]["dir"]}
            order = TREES[::-1] if flip else TREES
            flip = not flip
            entry = {"load": self.both("load_real", order, database=f"real_{db}", tenants=tenants)}
            entry["sizes"] = {
                label: self.both("sizes", (label,), database=f"real_{db}")[label]
                if "error" not in entry["load"][label]
                else None
                for label in TREES
            }
            part["databases"][db] = entry
            for label in TREES:
                s = entry["sizes"][label]
                if s and "error" not in s:
                    print(f"  {db} {label}: {s['chunks']} chunks, {s['postings']} postings, lexical"
                          f" {lexical_total(label, s):,} B, GIN fresh {s['gin_fresh']:,} B; load {load_avg()}",
                          flush=True)  # fmt: skip
        self.results["a"] = part

    def part_big(self) -> None:
        print(f"(a, big) {self.args.big:,} chunks of corpus(); load {load_avg()}", flush=True)
        self.results.setdefault("a", {"corpora": {}, "databases": {}})
        if True:
            entry = {"load": self.both("load_synthetic", database="big", rows=self.args.big, seed=7, timeout=7200)}
            entry["sizes"] = {
                label: self.both("sizes", (label,), database="big")[label]
                if "error" not in entry["load"][label]
                else None
                for label in TREES
            }
            self.results["a"]["big"] = entry
            for label in TREES:
                s = entry["sizes"][label]
                if s and "error" not in s:
                    print(f"  big {label}: {s['chunks']} chunks, lexical {lexical_total(label, s):,} B,"
                          f" GIN fresh {s['gin_fresh']:,} B; load {load_avg()}", flush=True)  # fmt: skip

    # -- (c) -----------------------------------------------------------------------------------------------
    def part_c(self) -> None:
        print(f"(c) live ingest at {self.args.live_base:,} chunks; load {load_avg()}", flush=True)
        loaded = self.both("load_synthetic", database="live", rows=self.args.live_base, seed=11)
        self.both("prepare_live", database="live", seed=12)
        runs: dict = {f"{t}/{m}": [] for t in TREES for m in ("with", "without")}
        for rep in range(self.args.live_repeats):
            trees = TREES if rep % 2 == 0 else TREES[::-1]
            for label in trees:
                if "error" in loaded[label]:
                    continue
                modes = ("with", "without") if (rep + TREES.index(label)) % 2 == 0 else ("without", "with")
                for mode in modes:
                    try:
                        r = self.trees[label].call(
                            "live", database="live", table=loaded[label]["table"], postings=mode == "with"
                        )
                    except WorkerError as error:
                        r = {"error": str(error)}
                    runs[f"{label}/{mode}"].append(r)
                    print(f"  rep {rep + 1} {label} {mode} postings: {r}", flush=True)
        self.results["c"] = {"loaded": loaded, "runs": runs}

    # -- (b) -----------------------------------------------------------------------------------------------
    def part_b(self) -> None:
        print(f"(b) bench/backfill.py per tree, alternating; load {load_avg()}", flush=True)
        part: dict = {"rounds": {t: [] for t in TREES}, "commands": {}, "checks": {}}
        for label, path in self.paths.items():
            env = dict(os.environ, PYTHONPATH=str(path))
            found = subprocess.run(
                [sys.executable, "-c", "import toolkit, sys; print(toolkit.__file__)"],
                cwd=path, env=env, capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            part["checks"][label] = found
            if not Path(found).resolve().is_relative_to(path):
                raise SystemExit(f"{label}: toolkit from {found}, not {path}")
        for rnd in range(self.args.backfill_rounds):
            for label in TREES if rnd % 2 == 0 else TREES[::-1]:
                path = self.paths[label]
                command = ["nice", "-n", "5", sys.executable, str(path / "bench" / "backfill.py"),
                           "--rows", str(self.args.backfill_rows), "--rounds", "1", "--real-rows", "0"]  # fmt: skip
                part["commands"][label] = (
                    f"cd {path} && PYTHONPATH={path} nice -n 5 {sys.executable} bench/backfill.py"
                    f" --rows {self.args.backfill_rows} --rounds 1 --real-rows 0"
                )
                out = path / "bench" / "results" / "backfill.json"
                out.unlink(missing_ok=True)
                load = load_avg()
                done = subprocess.run(
                    command, cwd=path, env=dict(os.environ, PYTHONPATH=str(path)), capture_output=True, text=True
                )
                if done.returncode != 0 or not out.exists():
                    entry = {"error": done.stderr[-2000:], "load_before": load}
                else:
                    data = json.loads(out.read_text())
                    r = next(iter(data["sizes"].values()))[0]
                    b = r["backfill"]
                    entry = {
                        "rows": b["rows_written"],
                        "seconds": b["seconds"],
                        "index_s": b.get("index_seconds"),
                        "ready_s": b.get("ready_seconds"),
                        "without_index_s": b["without_index_s"],
                        "rows_per_s": b["rows_written"] / b["without_index_s"],
                        "bare_s": r["bare_copy"]["seconds"],
                        "bare_rows_per_s": r["bare_copy"]["rows_per_s"],
                        "ratio": r["ratio"],
                        "stages": b.get("stages"),
                        "uptime": r["uptime"],
                        "load_before": load,
                    }
                    out.unlink()
                part["rounds"][label].append(entry)
                print(f"  round {rnd + 1} {label}: {entry}", flush=True)
        self.results["b"] = part


def lexical_total(label: str, s: dict) -> int:
    t = s["tables"]
    total = sum(t[k]["total"] for k in ("terms", "stats") if t.get(k))
    return total + (s["ordinal_index"] if label == "after" else 0)


def mib(n: float | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1024:,.0f} KiB" if n < 1024 * 1024 else f"{n / 1048576:,.2f} MiB"


def render(results: dict, args) -> str:
    trees = results["trees"]
    lines = [
        f"# Full-text postings before/after (issue 35), {results['started']}",
        "",
        f"Command: `{results['command']}`. CPU {results.get('cpu', '?')}, {os.cpu_count()} cores;"
        f" load average (1/5/15 min) at the start `{results['load_start']}`, at the end `{results['load_end']}`."
        " Other work (a test suite, other sessions) was running on the machine.",
        "",
    ]
    for label in TREES:
        i = trees[label]
        lines.append(
            f"- {label}: `{i['path']}` at {i['commit']}"
            + (f" + {i['changed_files']} changed files" if i["changed_files"] else "")
            + f", toolkit `{i['toolkit']}`, SQL `{i['sql_dir']}`; PostgreSQL {i['server']}, pgvector {i['pgvector']},"
            f" shared_buffers {SHARED_BUFFERS} (bench/report.py start_server)."
        )
    lines.append("")
    if "a" in results:
        a = results["a"]
        lines += ["## (a) Sizes on real text", "", "Corpora (each a tenant):", ""]
        for name, c in a["corpora"].items():
            lines.append(f"- `{name}`: {c['files']} files, {c['bytes']:,} bytes — {c['source']}")
        lines += [
            "",
            "Ingested with `toolkit.ingest.ingest`, backfilled with"
            f" `toolkit.backfill.backfill(url, 'bench', '{CHUNKER}')`"
            f" (hashing model, {DIMS} dimensions), activated, `VACUUM ANALYZE`. Postings = sum over non-parent chunks"
            " of `length(fts)`. Lexical total: before = terms + term_stats (pg_total_relation_size); after = terms +"
            " term_stats + the chunk table's (tenant, ordinal) index. GIN fresh = `CREATE INDEX ... USING gin (fts)` on"
            " the chunk table, default options and settings, then dropped.",
            "",
            "| database | tree | chunks | postings | terms rows | terms | term_stats | ordinal idx | lexical total |"
            " B/posting | GIN fresh | total / GIN | chunk table's own GIN | chunk table total |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        entries = list(a["databases"].items()) + ([("big (corpus())", a["big"])] if "big" in a else [])
        for db, entry in entries:
            for label in TREES:
                s = entry["sizes"].get(label)
                if not s or "error" in s:
                    err = (s or {}).get("error") or entry["load"][label].get("error")
                    lines.append(f"| {db} | {label} | error: {err} |" + " |" * 11)
                    continue
                t = s["tables"]
                total = lexical_total(label, s)
                parents = f" (+{s['parents']} parents)" if s["parents"] else ""
                lines.append(
                    f"| {db} | {label} | {s['chunks']:,}{parents}"
                    f" | {s['postings']:,} | {t['terms']['rows']:,} | {mib(t['terms']['total'])} |"
                    f" {mib(t['stats']['total'])} | {mib(s['ordinal_index']) if label == 'after' else '—'} |"
                    f" **{mib(total)}** | {total / max(1, s['postings']):.1f} | {mib(s['gin_fresh'])} |"
                    f" **{total / s['gin_fresh']:.2f}×** | {mib(s['gin_on_chunks']) if s['gin_on_chunks'] else '—'} |"
                    f" {mib(t['chunks']['total'])} |"
                )
        for db, entry in entries:
            s = entry["sizes"].get("after") or entry["sizes"].get("before")
            if s and "error" not in s and len(s["per_tenant"]) > 1:
                per = ", ".join(
                    f"`{t}` {v['chunks']:,} chunks / {v['postings']:,} postings" for t, v in s["per_tenant"].items()
                )
                lines += ["", f"Tenants of `{db}`: {per}."]
        lines += ["", "Each structure (bytes; heap includes FSM and VM forks; TOAST includes its index):", ""]
        lines += [
            "| database | tree | table | rows | total | heap | TOAST | indexes |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for db, entry in entries:
            for label in TREES:
                s = entry["sizes"].get(label)
                if not s or "error" in s:
                    continue
                for key in ("chunks", "terms", "stats"):
                    t = s["tables"][key]
                    idx = ", ".join(f"`{n}` {v:,}" for n, v in t["indexes"].items())
                    lines.append(
                        f"| {db} | {label} | `{t['name']}` | {t['rows']:,} | {t['total']:,} | {t['heap']:,} |"
                        f" {t['toast']:,} | {idx} |"
                    )
        lines += ["", "Load and build times:", ""]
        for db, entry in entries:
            for label in TREES:
                ld = entry["load"][label]
                if "error" in ld:
                    lines.append(f"- {db} {label}: error {ld['error']}")
                else:
                    shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in ld.items()}
                    lines.append(f"- {db} {label}: {json.dumps(shown)}")
        lines.append("")
    if "b" in results:
        b = results["b"]
        lines += [
            "## (b) Backfill vs bare binary COPY (bench/backfill.py of each tree)",
            "",
            f"{args.backfill_rows:,} one-chunk documents, `recursive:400:0` (backfill.py's own chunker), its"
            " OpenAI-compatible stub on 127.0.0.1; one round per invocation, trees alternating"
            f" ({args.backfill_rounds} rounds each). Commands:",
            "",
        ]
        for label in TREES:
            lines.append(f"- {label}: `{b['commands'].get(label)}` (toolkit imported from `{b['checks'][label]}`)")
        lines += [
            "",
            "| tree | round | backfill s | HNSW s | ready s | without HNSW s | backfill rows/s | bare COPY s |"
            " bare rows/s | ratio | load avg before | uptime after |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for label in TREES:
            for n, r in enumerate(b["rounds"][label], 1):
                if "error" in r:
                    lines.append(f"| {label} | {n} | error: {r['error'][-300:]!r} |" + " |" * 9)
                    continue
                ready = f"{r['ready_s']:.2f}" if r.get("ready_s") is not None else "n/a"
                lines.append(
                    f"| {label} | {n} | {r['seconds']:.2f} | {r['index_s'] or 0:.2f} | {ready} |"
                    f" {r['without_index_s']:.2f} | {r['rows_per_s']:,.0f} | {r['bare_s']:.2f} |"
                    f" {r['bare_rows_per_s']:,.0f} | {r['ratio']:.2f} | {r['load_before']} |"
                    f" {r['uptime'].split('load average:')[-1].strip()} |"
                )
        lines.append("")
        for label in TREES:
            ok = [r for r in b["rounds"][label] if "error" not in r]
            if ok:
                lines.append(
                    f"- {label}: median {statistics.median(r['rows_per_s'] for r in ok):,.0f} rows/s, bare COPY"
                    f" {statistics.median(r['bare_rows_per_s'] for r in ok):,.0f} rows/s, ratio"
                    f" **{statistics.median(r['ratio'] for r in ok):.2f}×** (target after ≥ 0.5)"
                )
        lines.append("")
    if "c" in results:
        c = results["c"]
        lines += [
            "## (c) Live ingest with and without postings",
            "",
            f"A ready, active version of {args.live_base:,} chunks (bench/search_served.py corpus(), loaded by COPY,"
            f" HNSW, mark_version_ready, activated, VACUUM ANALYZE); {LIVE_ROWS:,} new rows by binary COPY in"
            f" statements of {BATCH} rows, each its own transaction, postings triggers enabled or disabled (ALTER TABLE"
            " ... DISABLE TRIGGER text_postings_insert/_delete/_update); rows deleted the same way and the chunk,"
            f" terms and term_stats tables vacuumed after each run; {args.live_repeats} repeats, trees and modes"
            " alternating.",
            "",
            "| tree | with postings rows/s (runs) | without rows/s (runs) | with / without (medians) | load (1 min) |",
            "| --- | --- | --- | ---: | --- |",
        ]
        for label in TREES:
            w = [r for r in c["runs"][f"{label}/with"] if "error" not in r]
            wo = [r for r in c["runs"][f"{label}/without"] if "error" not in r]
            errs = [r["error"] for r in c["runs"][f"{label}/with"] + c["runs"][f"{label}/without"] if "error" in r]
            if not w or not wo:
                lines.append(f"| {label} | error: {errs[:1]} | | | |")
                continue
            mw, mwo = statistics.median(r["rows_per_s"] for r in w), statistics.median(r["rows_per_s"] for r in wo)
            loads = ", ".join(f"{r['load1']:.1f}" for r in w + wo)
            runs_w = ", ".join(f"{r['rows_per_s']:,.0f}" for r in w)
            runs_wo = ", ".join(f"{r['rows_per_s']:,.0f}" for r in wo)
            lines.append(f"| {label} | {mw:,.0f} ({runs_w}) | {mwo:,.0f} ({runs_wo}) | **{mw / mwo:.2f}×** | {loads} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="/tmp/toolkit-before35")
    parser.add_argument("--after", default=str(ROOT))
    parser.add_argument("--parts", default="a,c,b,big", help="which parts, in order (big: --big chunks)")
    parser.add_argument("--cap", type=int, default=400_000, help="bytes per installed-text corpus")
    parser.add_argument("--no-per-corpus", dest="per_corpus", action="store_false")
    parser.add_argument("--big", type=int, default=100_000, help="chunks of corpus() for (a)'s big case (0: skip)")
    parser.add_argument("--live-base", type=int, default=10_000)
    parser.add_argument("--live-repeats", type=int, default=3)
    parser.add_argument("--backfill-rows", type=int, default=20_000)
    parser.add_argument("--backfill-rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.cap, args.big, args.live_base, args.live_repeats = 60_000, 3_000, 2_000, 1
        args.backfill_rows, args.backfill_rounds, args.per_corpus = 2_000, 1, False
    run = Run(args)
    run.results["command"] = " ".join([".venv/bin/python", "bench/postings_ab.py", *sys.argv[1:]])
    with contextlib.suppress(Exception):
        from report import cpu_name

        run.results["cpu"] = cpu_name()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out = ROOT / "bench" / "results" / f"postings-ab-{stamp}.md"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        run.start()
        for part in args.parts.split(","):
            if part in ("a", "c", "big") and not run.trees:
                run.start()
            if part == "big" and not args.big:
                continue
            if part == "b":
                run.close()  # the workers' servers stopped: backfill.py runs its own
                run.trees = {}
            try:
                getattr(run, f"part_{part}")()
            except Exception:
                traceback.print_exc()
                run.results.setdefault("errors", []).append(f"part {part}: {traceback.format_exc(limit=3)}")
            run.results["load_end"] = load_avg()
            if not args.quick:
                out.write_text(render(run.results, args) + "\n", encoding="utf-8")
    finally:
        run.close()
        run.results["load_end"] = load_avg()
        (Path("/tmp") / f"postings-ab-{stamp}.json").write_text(json.dumps(run.results, indent=2, default=str))
        text = render(run.results, args)
        print(text)
        if not args.quick:
            out.write_text(text + "\n", encoding="utf-8")
            print(f"written {out}", flush=True)
        shutil.rmtree(run.scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
