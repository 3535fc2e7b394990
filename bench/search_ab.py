"""Issue 36's search request, before and after, in one run: the default search as a user gets it, in two source
trees, each imported by a worker process of its own (PYTHONPATH=<tree>; the worker checks that the toolkit and
its SQL files come from that tree), each with its own embedded PostgreSQL (same settings), every call
interleaved between the trees.

(a) **One long document vs many**: about 580 KB of prose bundled in the repository (the seven sample chapters of
    toolkit/data/sample/docs and the six texts of bench/data/plain/docs, concatenated in that order) stored in
    one database twice: as 100 documents of about 6 KB (tenant ``many``, cut at paragraph ends) and as one
    document (tenant ``long``), ingested and backfilled as a user does (``toolkit.ingest.ingest``, then
    ``toolkit.backfill.backfill`` with the recommended chunker, then activated). Questions: 60 drawn (seeded)
    from the labelled questions of the same texts (toolkit/data/sample/queries.jsonl and
    bench/data/plain/queries.jsonl). Each goes through ``toolkit.search.search()`` with its defaults (passages,
    k = 5) as a reader login, in a random order between the two layouts and the two trees.
(b) **k sweep**: ``search()`` with defaults at k = 5, 20, 100, 250 and 1,000 on about 10,000 chunks (documents
    of about 6 KB made of random runs of the same texts' sentences, ingested and backfilled the same way): per
    round one fresh-connection call and one warm call per k and tree. Every call has a statement timeout
    (``--timeout``); a (tree, k) that timed out is reported as such and not called again.
(c) **bench/search.py --served** (10k and 100k chunks at 10 chunks a document; 10k at 100 and 1,000): this
    checkout's bench/search_served.py (one benchmark code for both) run with each tree's toolkit imported first
    (and checked), before and after alternating; its table's rows for search_passages (default),
    hybrid_search_chunks and search_chunks. (The bench file at 3969a2c itself fails: it reads term_stats_vN as
    toolkit_reader, which the grants no longer allow; fixed here. It writes chunk rows by COPY, so it fills
    the after tree's new gap_before column itself when the table has one: left NULL, the after SQL falls back to
    cutting passages from the document, the path of rows written before.)

Embedder: the hashing model at 384 dimensions (signed feature hashing of words), registered with e5-small's
512-token input limit, so backfill picks the chunker a user of the demo model gets (recursive:128:64). It is
what bench/search_served.py uses for latency: the search's cost does not depend on the model's quality, and
e5 on two shared cores would make the embedding of the question most of each call.

Cold: the first search on a new connection (the connection's opening not timed); warm: a connection that has
already searched (after a warm-up). Milliseconds, as ``search()`` returns (embedding the question included).

    .venv/bin/python bench/search_ab.py --before /tmp/toolkit-before --quick     # a smoke run (a few minutes)
    .venv/bin/python bench/search_ab.py --before /tmp/toolkit-before --write     # full; replaces the section
    .venv/bin/python bench/search_ab.py --before /tmp/toolkit-before --c-questions 30 --c-cold 5 --write
        # (a) and (b) full, (c) with 30 labelled + 30 made questions and 5 cold calls (the section says so)

"before" is a worktree of the commit before the rewrite (``git -C /work/main worktree add /tmp/toolkit-before
3969a2c``); "after" defaults to this checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Search request (issue 36): before and after"
TREES = ("before", "after")
DIMS = 384
INPUT_LIMIT = 512  # e5-small's, the demo model's: backfill picks the recommended chunker for it
READER = "bench_app"
SHARED_BUFFERS = "512MB"
KS = (5, 20, 100, 250, 1000)
QUICK_KS = (5, 20, 100, 250)
MANY_DOCUMENTS = 100
BYTES_PER_CHUNK = 365  # measured in a smoke run: recursive:128:64 on these documents (overlapping by half)
LOGS = Path(tempfile.gettempdir()) / "toolkit-search-ab-logs"  # the workers' and runs' logs of the last run
SERVED_CALLS = ("search_passages (default)", "hybrid_search_chunks", "search_chunks")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------------------------------------
# The worker: one per tree, the tree's toolkit imported. Commands on stdin, one JSON reply a line on the original
# stdout (the toolkit's own prints go to stderr, which the parent keeps in a log file).
# ---------------------------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, tree: Path):
        self.tree = tree
        self.warm: dict[str, object] = {}
        self.databases: dict[str, str] = {}

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
        return {"server": version}

    def stop(self) -> dict:
        from toolkit.db import server

        for conn in self.warm.values():
            conn.close()
        self.warm.clear()
        server.stop_embedded(self.data_dir)
        return {}

    def _url(self, database: str, user: str | None = None) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = conninfo_to_dict(self.url) | {"dbname": database}
        if user:
            parts = parts | {"user": user}
            parts.pop("password", None)
        return make_conninfo(**parts)

    def load(self, database: str, tenants: dict[str, str]) -> dict:
        """A database at schema head, the hashing model registered, each tenant's directory ingested, a version
        backfilled with the recommended chunker and activated, a reader login."""
        import psycopg
        from psycopg import sql

        from toolkit import cutover
        from toolkit.backfill import backfill
        from toolkit.db import connection, migrate
        from toolkit.ingest import ingest
        from toolkit.store.models import Model, insert_model

        started = time.perf_counter()
        with connection.connect(self.url, autocommit=True, register_vector=False) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        url = self._url(database)
        migrate.upgrade(url)
        with connection.connect(url, autocommit=True) as conn:
            insert_model(
                conn,
                Model(
                    alias="bench",
                    provider="hashing",
                    model_name=str(DIMS),
                    dimensions=DIMS,
                    max_input_tokens=INPUT_LIMIT,
                ),
            )
            for tenant, directory in tenants.items():
                ingest(conn, [directory], tenant)
            report = backfill(url, "bench")
            cutover.activate_version(conn, report.version, force=True)
            conn.execute("VACUUM ANALYZE")  # what autovacuum does soon after a load
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER,)).fetchone()
            if not exists:
                conn.execute(f"CREATE ROLE {READER} LOGIN IN ROLE toolkit_reader")
            table = conn.execute("SELECT toolkit._chunk_table(%s)", (report.version,)).fetchone()[0]
            counts = dict(conn.execute(f"SELECT tenant, count(*) FROM {table} GROUP BY tenant").fetchall())
        self.databases[database] = self._url(database, READER)
        with psycopg.connect(self.databases[database]) as conn:
            conn.execute("SELECT 1")
        return {
            "version": report.version,
            "chunker": report.chunker_version,
            "chunks": counts,
            "seconds": time.perf_counter() - started,
        }

    def _reader(self, database: str, timeout_s: float):
        import psycopg

        return psycopg.connect(
            self.databases[database], autocommit=True, options=f"-c statement_timeout={int(timeout_s * 1000)}"
        )

    def search(self, database: str, tenant: str, question: str, k: int, cold: bool, timeout_s: float) -> dict:
        from toolkit.search import search

        if cold:
            conn = self._reader(database, timeout_s)
        else:
            conn = self.warm.get(database)
            if conn is None or conn.closed:
                conn = self.warm[database] = self._reader(database, timeout_s)
        started = time.perf_counter()
        try:
            hits = search(conn, question, tenant, k)
        except Exception as error:
            ms = (time.perf_counter() - started) * 1000
            text = f"{type(error).__name__}: {error}"
            if "statement timeout" in text.lower() or "canceling statement" in text.lower():
                return {"ms": ms, "timeout": True}
            raise
        finally:
            if cold:
                conn.close()
        ms = (time.perf_counter() - started) * 1000
        return {"ms": ms, "hits": len(hits), "spans": [[h.doc_id, h.start, h.end] for h in hits]}


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
            reply = {
                "ok": False,
                "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            }
        protocol.write(json.dumps(reply) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# The parent: data, the two workers, the interleaving, the report.
# ---------------------------------------------------------------------------------------------------------------
class WorkerError(RuntimeError):
    pass


class Tree:
    """A worker process with one tree's toolkit on its PYTHONPATH: ``script --worker <tree>`` (this file by
    default; bench/postings_ab.py runs its own), under ``nice`` when given; its log is named in errors as it will be
    found in ``logs``."""

    def __init__(
        self, label: str, path: Path, scratch: Path, *, script: Path | None = None, nice: int = 0, logs: Path = LOGS
    ):
        self.label, self.path = label, path
        self.log = scratch / f"{label}.log"
        self.shown_log = logs / self.log.name
        self.data_dir = scratch / f"pg-{label}"
        env = dict(os.environ, PYTHONPATH=str(path), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.process = subprocess.Popen(
            [
                *(["nice", "-n", str(nice)] if nice else []),
                sys.executable,
                str(script or Path(__file__).resolve()),
                "--worker",
                str(path),
            ],
            cwd=path,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
            start_new_session=True,
        )
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.broken: str | None = None

    def _read(self) -> None:
        for line in self.process.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)

    def call(self, op: str, timeout: float = 3600, **args):
        if self.broken:
            raise WorkerError(self.broken)
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.kill(f"{op} did not answer in {timeout:.0f} s")
            raise WorkerError(self.broken) from None
        if reply is None:
            self.broken = f"the {self.label} worker exited (log: {self.shown_log})"
            raise WorkerError(self.broken)
        if not reply["ok"]:
            raise WorkerError(f"{self.label}: {op}: {reply['error']} (log: {self.shown_log})")
        return reply["result"]

    def kill(self, why: str) -> None:
        self.broken = f"the {self.label} worker was stopped: {why}"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, 9)

    def close(self) -> None:
        if self.process.poll() is None and not self.broken:
            try:
                self.call("stop", timeout=120)
                self.process.stdin.close()
                self.process.wait(timeout=60)
                return
            except WorkerError as error:
                print(f"  {error}", file=sys.stderr)
        if self.data_dir.exists():  # the worker died or hung: stop its server with the tree's own code
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from toolkit.db import server; server.stop_embedded(sys.argv[1])",
                    str(self.data_dir),
                ],
                env=dict(os.environ, PYTHONPATH=str(self.path)),
                cwd=self.path,
                check=False,
            )


def texts() -> list[tuple[str, str]]:
    sample = sorted((ROOT / "toolkit" / "data" / "sample" / "docs").glob("*.md"))
    plain = sorted(p for p in (ROOT / "bench" / "data" / "plain" / "docs").iterdir() if p.is_file())
    return [(p.name, p.read_text(encoding="utf-8")) for p in [*sample, *plain]]


def labelled_questions() -> list[str]:
    found = []
    for path in (
        ROOT / "toolkit" / "data" / "sample" / "queries.jsonl",
        ROOT / "bench" / "data" / "plain" / "queries.jsonl",
    ):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                found.append(json.loads(line)["query"])
    return found


def cut(text: str, pieces: int) -> list[str]:
    """``text`` in ``pieces`` parts of about equal size, each cut at the paragraph end nearest its share."""
    ends = [m.end() for m in re.finditer(r"\n\n+", text)]
    cuts = [0]
    for i in range(1, pieces):
        target = i * len(text) / pieces
        best = min((e for e in ends if e > cuts[-1]), key=lambda e: abs(e - target), default=None)
        if best is None or best >= len(text):
            break
        cuts.append(best)
    cuts.append(len(text))
    return [text[a:b] for a, b in itertools.pairwise(cuts)]


def sweep_documents(target_chunks: int, rng: random.Random) -> list[str]:
    """Documents of about 6 KB: paragraphs of 4-7 sentences drawn at random from the bundled texts."""
    pool = []
    for _, text in texts():
        for line in text.splitlines():
            line = line.strip().lstrip("#-*> ").strip()
            pool += [s.strip() for s in re.split(r"(?<=[.!?])\s+", line) if len(s.split()) >= 4]
    pool = sorted(set(pool))
    documents = []
    for _ in range(max(1, round(target_chunks * BYTES_PER_CHUNK / 6000))):
        paragraphs, size = [], 0
        while size < 6000:
            paragraph = " ".join(rng.choice(pool) for _ in range(rng.randint(4, 7)))
            paragraphs.append(paragraph)
            size += len(paragraph) + 2
        documents.append("\n\n".join(paragraphs) + "\n")
    return documents


class Run:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.results: dict = {"parts": {}}
        self.scratch = Path(tempfile.mkdtemp(prefix="toolkit-search-ab-", dir="/tmp"))
        os.chmod(self.scratch, 0o755)  # the embedded server may run as another user (on root)
        self.trees: dict[str, Tree] = {}

    # -- workers -------------------------------------------------------------------------------------------
    def start(self) -> None:
        paths = {"before": Path(self.args.before).resolve(), "after": Path(self.args.after).resolve()}
        for label, path in paths.items():
            if not (path / "toolkit" / "__init__.py").exists():
                raise SystemExit(f"{path} holds no toolkit/ (give a source tree: --{label} PATH)")
            self.trees[label] = Tree(label, path, self.scratch)
        self.results["trees"] = {}
        for label, tree in self.trees.items():
            info = tree.call("hello", timeout=120)
            info |= tree.call("start", timeout=300, data_dir=str(tree.data_dir))
            info["path"] = str(tree.path)
            self.results["trees"][label] = info
            print(
                f"{label}: {tree.path} at {info['commit']}"
                + (f" + {info['changed_files']} changed files" if info["changed_files"] else "")
                + f"; toolkit {info['toolkit']}, SQL {info['sql_dir']}; PostgreSQL {info['server']}",
                flush=True,
            )

    def load(self, database: str, tenants: dict[str, str]) -> dict:
        out = {}
        for label, tree in self.trees.items():
            try:
                out[label] = tree.call("load", database=database, tenants=tenants)
                print(
                    f"  {label}: {database} loaded in {out[label]['seconds']:.0f} s ({out[label]['chunker']},"
                    f" chunks {out[label]['chunks']})",
                    flush=True,
                )
            except WorkerError as error:
                out[label] = {"error": str(error)}
                print(f"  {label}: {error}", flush=True)
        return out

    def call(self, label: str, database: str, tenant: str, question: str, k: int, cold: bool) -> dict:
        timeout = self.args.timeout
        try:
            return self.trees[label].call(
                "search",
                timeout=timeout + 60,
                database=database,
                tenant=tenant,
                question=question,
                k=k,
                cold=cold,
                timeout_s=timeout,
            )
        except WorkerError as error:
            return {"error": str(error)}

    # -- (a) one long document vs many ---------------------------------------------------------------------
    def part_a(self) -> None:
        started = time.perf_counter()
        print("(a) one long document vs 100 documents", flush=True)
        named = texts()
        whole = "\n\n".join(text.strip("\n") for _, text in named) + "\n"
        base = self.scratch / "a"
        (base / "long").mkdir(parents=True)
        (base / "long" / "book.md").write_text(whole, encoding="utf-8")
        (base / "many").mkdir()
        parts = cut(whole, MANY_DOCUMENTS)
        for i, part in enumerate(parts):
            (base / "many" / f"part-{i:03d}.md").write_text(part, encoding="utf-8")
        questions = self.rng.sample(labelled_questions(), self.args.questions)
        loaded = self.load("bench_a", {"many": str(base / "many"), "long": str(base / "long")})
        live = [label for label in TREES if "error" not in loaded[label]]
        cells = [(label, layout) for label in live for layout in ("many", "long")]
        samples = {cell: {"warm": [], "cold": []} for cell in cells}
        spans: dict = {cell: [] for cell in cells}
        errors: dict = {}

        def once(cell, question, cold):
            r = self.call(cell[0], "bench_a", cell[1], question, 5, cold)
            if "ms" in r and not r.get("timeout"):
                samples[cell]["cold" if cold else "warm"].append(r["ms"])
                return r
            errors.setdefault(cell, r.get("error") or "timeout")
            return None

        for q in questions[:10]:  # warm-up
            for cell in cells:
                once(cell, q, False)
        for cell in cells:
            samples[cell]["warm"].clear()
        for i in range(self.args.cold):
            for cell in self.rng.sample(cells, len(cells)):
                once(cell, questions[i % len(questions)], True)
        for round_ in range(self.args.rounds):
            for q in questions:
                for cell in self.rng.sample(cells, len(cells)):
                    r = once(cell, q, False)
                    if round_ == 0:
                        spans[cell].append(r and r["spans"])
        same = {}
        if len(live) == 2:
            for layout in ("many", "long"):
                pairs = list(zip(spans[("before", layout)], spans[("after", layout)], strict=True))
                # The share of before's passages (doc, start, end) that after returns for the same question.
                found = sum(len({tuple(x) for x in a or []} & {tuple(x) for x in b or []}) for a, b in pairs)
                same[layout] = found / max(1, sum(len(a or []) for a, _ in pairs))
        self.results["parts"]["a"] = {
            "loaded": loaded,
            "bytes": len(whole.encode()),
            "documents": len(parts),
            "questions": len(questions),
            "times": {
                f"{c[0]}/{c[1]}": {m: percentiles(s) if s else None for m, s in v.items()} for c, v in samples.items()
            },
            "counts": {f"{c[0]}/{c[1]}": {m: len(s) for m, s in v.items()} for c, v in samples.items()},
            "same_passages": same,
            "errors": {f"{c[0]}/{c[1]}": e for c, e in errors.items()},
            "seconds": time.perf_counter() - started,
        }
        print(f"  {time.perf_counter() - started:.0f} s", flush=True)

    # -- (b) k sweep ---------------------------------------------------------------------------------------
    def part_b(self) -> None:
        started = time.perf_counter()
        print(f"(b) k sweep at about {self.args.sweep_chunks:,} chunks", flush=True)
        base = self.scratch / "b" / "docs"
        base.mkdir(parents=True)
        for i, text in enumerate(sweep_documents(self.args.sweep_chunks, self.rng)):
            (base / f"doc-{i:05d}.md").write_text(text, encoding="utf-8")
        questions = labelled_questions()
        self.rng.shuffle(questions)
        loaded = self.load("bench_b", {"sweep": str(base)})
        live = [label for label in TREES if "error" not in loaded[label]]
        ks = self.args.ks
        samples = {(label, k): {"warm": [], "cold": []} for label in live for k in ks}
        stopped: dict = {}
        for label in live:  # warm-up: the warm connection has searched
            for q in questions[:5]:
                self.call(label, "bench_b", "sweep", q, 5, False)
        n = 0
        for round_ in range(self.args.rounds):
            for k in ks:
                for label in self.rng.sample(live, len(live)):
                    for cold in (True, False):
                        if (label, k) in stopped:
                            continue
                        q = questions[n % len(questions)]
                        n += 1
                        r = self.call(label, "bench_b", "sweep", q, k, cold)
                        if r.get("timeout"):
                            stopped[(label, k)] = f"timeout ({self.args.timeout:.0f} s)"
                        elif "error" in r:
                            stopped[(label, k)] = r["error"]
                        else:
                            samples[(label, k)]["cold" if cold else "warm"].append(r["ms"])
            print(f"  round {round_ + 1}: {time.perf_counter() - started:.0f} s", flush=True)
        self.results["parts"]["b"] = {
            "loaded": loaded,
            "ks": ks,
            "times": {
                f"{label}/{k}": {m: percentiles(s) if s else None for m, s in v.items()}
                for (label, k), v in samples.items()
            },
            "counts": {f"{label}/{k}": len(v["warm"]) for (label, k), v in samples.items()},
            "stopped": {f"{label}/{k}": why for (label, k), why in stopped.items()},
            "seconds": time.perf_counter() - started,
        }

    # -- (c) bench/search.py --served of each tree --------------------------------------------------------
    def part_c(self) -> None:
        started = time.perf_counter()
        print("(c) bench/search.py --served with each tree's toolkit", flush=True)
        quick = self.args.quick
        configs = [("2000", 10), ("2000", 1000)] if quick else [("10000,100000", 10), ("10000", 100), ("10000", 1000)]
        extra = ["--labelled-questions", "30", "--made-questions", "10", "--cold", "3"] if quick else []
        if self.args.c_questions is not None:  # fewer questions, in the labelled and the made sets alike
            n = str(self.args.c_questions)
            extra = ["--labelled-questions", n, "--made-questions", n, "--cold", str(self.args.c_cold or 20)]
        elif self.args.c_cold is not None:
            extra = [*extra[:-2], "--cold", str(self.args.c_cold)] if extra else ["--cold", str(self.args.c_cold)]
        runs: dict = {}
        for i, (sizes, per_document) in enumerate(configs):
            order = TREES if i % 2 == 0 else TREES[::-1]
            for label in order:
                tree = self.trees[label].path
                argv = ["--served", "--sizes", sizes, "--chunks-per-document", str(per_document), *extra]
                t = time.perf_counter()
                rows, error = self.served(label, tree, argv)
                runs[f"{label}/{sizes}/{per_document}"] = {"rows": rows, "error": error}
                print(
                    f"  {label} --sizes {sizes} --chunks-per-document {per_document}: "
                    + (error or f"{len(rows)} rows")
                    + f" ({time.perf_counter() - t:.0f} s)",
                    flush=True,
                )
        self.results["parts"]["c"] = {
            "configs": configs,
            "extra": extra,
            "runs": runs,
            "seconds": time.perf_counter() - started,
        }

    def served(self, label: str, tree: Path, argv: list[str]) -> tuple[dict, str | None]:
        """Runs ``tree``'s bench/search.py with that tree's toolkit (checked); the table rows of SERVED_CALLS as
        {(chunks, call): (cold p50, cold p95, warm p50, warm p95)}."""
        # The tree's toolkit imported first (and checked), so that search_served's sys.path.insert of this
        # checkout does not take it back: the same benchmark code (this checkout's) for both trees.
        code = (
            "import runpy, sys\n"
            "from pathlib import Path\n"
            "tree, bench = Path(sys.argv[1]), Path(sys.argv[2])\n"
            "sys.path[:0] = [str(tree), str(bench)]\n"
            "import toolkit\n"
            "from toolkit.db.sql_files import sql_dir\n"
            "for p in (toolkit.__file__, sql_dir()):\n"
            "    assert Path(p).resolve().is_relative_to(tree), f'{p} is not under {tree}'\n"
            "print('toolkit', toolkit.__file__, 'SQL', sql_dir(), flush=True)\n"
            "sys.argv = [str(bench / 'search.py'), *sys.argv[3:]]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "import toolkit.search\n"
            "assert Path(toolkit.search.__file__).resolve().is_relative_to(tree), toolkit.search.__file__\n"
        )
        log = self.scratch / f"served-{label}-{'-'.join(argv[1:]).replace(',', '_')}.log"
        env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        command = [sys.executable, "-c", code, str(tree), str(ROOT / "bench"), *argv]
        with log.open("w") as out:
            done = subprocess.run(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
        text = log.read_text(encoding="utf-8", errors="replace")
        rows = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1] in SERVED_CALLS and cells[0].replace(",", "").isdigit():
                rows[f"{cells[0]}|{cells[1]}"] = [float(c) for c in cells[2:]]
        if done.returncode != 0 or not rows:
            tail = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
            return rows, f"failed (exit {done.returncode}): {tail[0][:200]} (log: {LOGS / log.name})"
        return rows, None


# ---------------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------------
def ratio(before, after) -> str:
    if not before or not after:
        return ""
    return f"{after / before:.2f}×"


def ms(value) -> str:
    return "—" if value is None else f"{value:.1f}"


def section(results: dict, command: str) -> str:
    trees = results["trees"]

    def described(label: str) -> str:
        t = trees[label]
        changed = f" plus {t['changed_files']} uncommitted changed files" if t["changed_files"] else ""
        return f"*{label}* = `{t['path']}` at {t['commit']}{changed}"

    lines = [
        SECTION,
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}; {results['seconds']:.0f} s in all). "
        + "; ".join(described(label) for label in TREES if label in trees)
        + (
            f". Each tree imported by a worker process of its own (PYTHONPATH, checked: the toolkit and its SQL"
            f" files from that tree), each with its own embedded PostgreSQL {trees['before']['server']}"
            f" (shared_buffers = {SHARED_BUFFERS}); every call interleaved between the trees in a random order."
            if trees["before"].get("toolkit")
            else "."
        )
        + f" {os.cpu_count()} cores shared with other work (1-minute load average {results['load_average']:.1f}"
        " at the end).",
        "",
        "All searches are `toolkit.search.search()` with its defaults (passages) as a reader login; the hashing"
        f" model at {DIMS} dimensions registered with a {INPUT_LIMIT}-token input limit, so backfill picks the"
        " chunker the demo model gets. Milliseconds (embedding the question included); *cold* is the first search"
        " on a new connection, *warm* a connection that has searched. Ratio: after / before.",
        "",
    ]
    parts = results["parts"]
    if "a" in parts:
        a = parts["a"]
        chunker = next((v["chunker"] for v in a["loaded"].values() if "chunker" in v), "?")
        chunks = next((v["chunks"] for v in a["loaded"].values() if "chunks" in v), {})
        lines += [
            "### One long document vs the same text as 100 documents",
            "",
            f"{a['bytes'] / 1000:.0f} KB of prose (toolkit/data/sample/docs and bench/data/plain/docs,"
            f" concatenated) stored as {a['documents']} documents of about"
            f" {a['bytes'] / a['documents'] / 1000:.0f} KB (tenant `many`, {chunks.get('many', '?')} chunks) and as one"
            f" document (tenant `long`, {chunks.get('long', '?')} chunks), {chunker}; {a['questions']} labelled"
            f" questions of these texts, k = 5; warm: {results['rounds']} round(s) of every question, cold:"
            f" {results['cold']} fresh connections per layout and tree.",
            "",
            "| layout | measure | before | after | ratio |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        t = a["times"]

        def pick(label, layout, mode, index):
            cell = t.get(f"{label}/{layout}", {}).get(mode)
            return cell[index] if cell else None

        for layout, name in (("many", "100 documents"), ("long", "one document")):
            for mode in ("warm", "cold"):
                for index, p in ((0, "p50"), (1, "p95")):
                    b, f = pick("before", layout, mode, index), pick("after", layout, mode, index)
                    lines.append(f"| {name} | {mode} {p} | {ms(b)} | {ms(f)} | {ratio(b, f)} |")
        for mode in ("warm", "cold"):
            rb = ratio(pick("before", "many", mode, 0), pick("before", "long", mode, 0))
            ra = ratio(pick("after", "many", mode, 0), pick("after", "long", mode, 0))
            lines.append(f"| **long / many** | {mode} p50 | {rb} | {ra} | |")
        lines.append("")
        long_many = [pick("after", "many", "warm", 0), pick("after", "long", "warm", 0)]
        if all(long_many):
            verdict = "met" if long_many[1] / long_many[0] <= 1.2 else "not met"
            lines.append(f"Issue target (after: warm p50 long / many ≤ 1.2): **{verdict}**.")
        if a["same_passages"]:
            lines.append(
                "Before's passages (doc, start, end) that after returns for the same question (HNSW graphs are"
                " built with random levels, so two builds of the same data differ a little: before against itself"
                " gave 85-90% in a smoke run): "
                + ", ".join(f"{layout} {share:.0%}" for layout, share in a["same_passages"].items())
                + "."
            )
        for cell, error in a["errors"].items():
            lines.append(f"{cell}: {error}")
        lines.append("")
    if "b" in parts:
        b = parts["b"]
        chunks = {label: sum(v["chunks"].values()) for label, v in b["loaded"].items() if "chunks" in v}
        lines += [
            "### Cost in k",
            "",
            f"`search()` with defaults at each k on {next(iter(chunks.values()), 0):,} chunks (documents of about"
            " 6 KB of the same texts' sentences in random runs, one tenant); per round, per k and tree, one cold and"
            f" one warm call, {results['rounds']} round(s); statement timeout {results['timeout']:.0f} s (a (tree, k)"
            " that timed out is not called again).",
            "",
            "| k | measure | before | after | ratio |",
            "| ---: | --- | ---: | ---: | ---: |",
        ]
        for k in b["ks"]:
            for mode in ("warm", "cold"):
                values = []
                for label in TREES:
                    key = f"{label}/{k}"
                    cell = b["times"].get(key, {}).get(mode)
                    values.append(cell[0] if cell else None)
                shown = []
                for label, value in zip(TREES, values, strict=True):
                    why = b["stopped"].get(f"{label}/{k}")
                    shown.append(ms(value) if value is not None else (why.split(" (")[0] if why else "—"))
                lines.append(f"| {k:,} | {mode} p50 | {shown[0]} | {shown[1]} | {ratio(*values)} |")
        growth = []
        for label in TREES:
            first = b["times"].get(f"{label}/{b['ks'][0]}", {}).get("warm")
            last_k = next((k for k in reversed(b["ks"]) if b["times"].get(f"{label}/{k}", {}).get("warm")), None)
            if first and last_k and last_k != b["ks"][0]:
                last = b["times"][f"{label}/{last_k}"]["warm"][0]
                growth.append(
                    f"{label}: k {last_k:,} / k {b['ks'][0]} = {last / first[0]:.1f}× for {last_k / b['ks'][0]:.0f}×"
                    " the hits"
                )
        lines += ["", "Growth of the warm p50: " + "; ".join(growth) + "." if growth else ""]
        for cell, why in b["stopped"].items():
            lines.append(f"{cell}: {why}")
        lines.append("")
    if "c" in parts:
        c = parts["c"]
        lines += [
            "### bench/search.py --served",
            "",
            "This checkout's bench/search_served.py run with each tree's toolkit (imported first, checked), one"
            " after the other (the order alternating between configurations; each run its own embedded server,"
            " shared_buffers = 2GB: not interleaved call by call, so load from other work lands on one side)"
            + (
                f", with `{' '.join(c['extra'])}` (reduced, to fit the run in the time it had: search_served.py's"
                " defaults are all 319 labelled questions, 100 made questions and --cold 20)"
                if c["extra"]
                else ""
            )
            + ".",
            "",
            "| chunks / a document | call | measure | before | after | ratio |",
            "| --- | --- | --- | ---: | ---: | ---: |",
        ]
        notes = []
        for sizes, per_document in c["configs"]:
            before = c["runs"].get(f"before/{sizes}/{per_document}", {})
            after = c["runs"].get(f"after/{sizes}/{per_document}", {})
            for which, run in (("before", before), ("after", after)):
                if run.get("error"):
                    notes.append(f"{which} --sizes {sizes} --chunks-per-document {per_document}: {run['error']}")
            keys = list(dict.fromkeys([*before.get("rows", {}), *after.get("rows", {})]))
            for key in keys:
                chunks, call = key.split("|")
                for index, measure in ((0, "cold p50"), (2, "warm p50"), (3, "warm p95")):
                    vb = before.get("rows", {}).get(key, [None] * 4)[index]
                    va = after.get("rows", {}).get(key, [None] * 4)[index]
                    lines.append(
                        f"| {chunks} / {per_document} | {call} | {measure} | {ms(vb)} | {ms(va)} | {ratio(vb, va)} |"
                    )
        lines += [""] + notes + ([""] if notes else [])
    return "\n".join(line for line in lines).rstrip("\n") + "\n"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description="Issue 36's search, before and after, in one run.")
    parser.add_argument("--before", default="/tmp/toolkit-before", help="the source tree before (a worktree)")
    parser.add_argument("--after", default=str(ROOT), help=f"the source tree after (default {ROOT})")
    parser.add_argument("--rounds", type=int, default=None, help="warm rounds (default 5; --quick 1)")
    parser.add_argument("--cold", type=int, default=None, help="(a): fresh connections per layout and tree")
    parser.add_argument("--questions", type=int, default=None, help="(a): questions (default 60; --quick 20)")
    parser.add_argument("--sweep-chunks", type=int, default=None, help="(b): chunks, about (default 10,000)")
    parser.add_argument("--ks", default=None, help="(b): k values, comma-separated")
    parser.add_argument("--timeout", type=float, default=60.0, help="statement timeout per call, seconds")
    parser.add_argument(
        "--c-questions",
        type=int,
        default=None,
        help="(c): pass --labelled-questions N --made-questions N to search_served.py (default: all labelled, 100"
        " made; the section says which were used)",
    )
    parser.add_argument("--c-cold", type=int, default=None, help="(c): pass --cold N to search_served.py (default 20)")
    parser.add_argument("--only", choices=["a", "b", "c"], action="append", help="run only these parts")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round: a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args()
    q = args.quick
    args.rounds = args.rounds or (1 if q else 5)
    args.cold = args.cold or (5 if q else 20)
    args.questions = args.questions or (20 if q else 60)
    args.sweep_chunks = args.sweep_chunks or (2000 if q else 10000)
    args.ks = [int(k) for k in args.ks.split(",")] if args.ks else list(QUICK_KS if q else KS)
    parts = args.only or ["a", "b", "c"]
    if args.write and q:
        parser.error("--quick is a smoke run: run the full sizes to --write")

    started = time.perf_counter()
    run = Run(args)
    results = run.results
    try:
        if {"a", "b"} & set(parts):
            run.start()
        else:
            results["trees"] = {}
            for label in TREES:
                path = Path(getattr(args, label)).resolve()
                head = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True)
                dirty = subprocess.run(
                    ["git", "-C", str(path), "status", "--porcelain", "--", "toolkit", "sql", "migrations"],
                    capture_output=True,
                    text=True,
                )
                results["trees"][label] = {
                    "path": str(path),
                    "commit": head.stdout.decode().strip(),
                    "changed_files": len(dirty.stdout.splitlines()),
                    "server": "(each run's own)",
                }
            run.trees = {label: type("T", (), {"path": Path(results["trees"][label]["path"])})() for label in TREES}
        if "a" in parts:
            run.part_a()
        if "b" in parts:
            run.part_b()
        if "a" in parts or "b" in parts:
            for tree in run.trees.values():
                tree.close()
            run.trees = {label: type("T", (), {"path": tree.path})() for label, tree in run.trees.items()}
        if "c" in parts:
            run.part_c()
    finally:
        for tree in run.trees.values():
            if isinstance(tree, Tree):
                tree.close()
        shutil.rmtree(LOGS, ignore_errors=True)
        LOGS.mkdir()
        for log in run.scratch.glob("*.log"):
            shutil.copyfile(log, LOGS / log.name)
        shutil.rmtree(run.scratch, ignore_errors=True)
    results.update(
        seconds=time.perf_counter() - started,
        load_average=os.getloadavg()[0],
        rounds=args.rounds,
        cold=args.cold,
        timeout=args.timeout,
    )
    command = ".venv/bin/python bench/search_ab.py" + "".join(
        f" {flag}" for flag in sys.argv[1:] if flag not in ("--write",)
    )
    text = section(results, command)
    print()
    print(text)
    print(
        "Seconds per part: "
        + ", ".join(f"({name}) {p['seconds']:.0f}" for name, p in results["parts"].items())
        + f"; {results['seconds']:.0f} in all."
    )
    if args.write:
        from report import write_section

        write_section(ROOT / "docs" / "benchmarks.md", SECTION, text)


if __name__ == "__main__":
    main()
