"""The served search at 10k and 100k chunks in one tenant (``bench/search.py --served``): p50/p95 at k = 5 of
``search_passages`` (what applications get by default), ``hybrid_search_chunks`` and ``search_chunks``, as
``toolkit_reader`` with the tenant set, on a fresh connection (cold: plans and PL/pgSQL compiled anew; the buffer
cache stays warm) and then warm; against the full-text side of the previous release (the GIN index behind ``@@``,
which row-level security keeps the planner from using: every row of the tenant holding a question lexeme is read) on
the same data; the cost of the full-text postings (rows/s written with and without them, building them for an
existing version, their size); and HNSW recall@5 of ``search_chunks`` against exact search.

Text: sentences of the sample documents and bench/data/plain, recombined at random into chunks of 4-7 sentences,
10 chunks a document (joined by blank lines, so neighbouring hits touch and merge into passages), each document also
naming three made-up words of its own (a product, a person, a code: the rare terms a real corpus is full of).
Vectors: the hashing model at 384 dimensions (signed feature hashing of the words: a real, if weak, text embedding).
Questions: the sample set's 260 and bench/data/plain's (their words are all common here: the hard case for the
postings limit), plus as many made from a random chunk (three of its words and its document's made-up word).

    .venv/bin/python bench/search.py --served            # print the results
    .venv/bin/python bench/search.py --served --write    # also replace its section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from report import copy_chunk_rows, cpu_name, start_server, write_section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECTION = "## Search: the served retrieval"
DIMS = 384
K = 5
TENANT = "bench"
CHUNKS_PER_DOCUMENT = 10
BATCH = 500  # rows per COPY statement: what ingest writes per statement, about
SHARED_BUFFERS = "2GB"
BEFORE_COMMIT = "4c3c51e"  # the release's search before the postings (git show of 012-search-hybrid.sql)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def sentences() -> list[str]:
    from toolkit.evaluation.queries import read_sample_documents

    texts = list(read_sample_documents().values())
    texts += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "bench" / "data" / "plain" / "docs").iterdir())]
    found = []
    for text in texts:
        for line in text.splitlines():
            line = line.strip().lstrip("#-*> ").strip()
            found += [s.strip() for s in re.split(r"(?<=[.!?])\s+", line) if len(s.split()) >= 4]
    return sorted(set(found))


def made_up_word(rng: np.random.Generator) -> str:
    syllables = ["ka", "lo", "ve", "ri", "tan", "mur", "zel", "quo", "fi", "dra", "bex", "sul", "nor", "pim"]
    return "".join(rng.choice(syllables, size=int(rng.integers(3, 5))))


def questions(rng: np.random.Generator, chunks: list[dict], count: int, labelled_count: int | None = None) -> list[str]:
    from toolkit.evaluation.queries import SAMPLE_QUERIES, load_queries, read_sample_documents

    plain = ROOT / "bench" / "data" / "plain"
    plain_docs = {p.name: p.read_text(encoding="utf-8") for p in sorted((plain / "docs").iterdir()) if p.is_file()}
    labelled = [q.query for q in load_queries(SAMPLE_QUERIES, read_sample_documents())]
    labelled += [q.query for q in load_queries(plain / "queries.jsonl", plain_docs)]
    if labelled_count is not None and labelled_count < len(labelled):  # evenly spread over both sets
        labelled = [labelled[i * len(labelled) // labelled_count] for i in range(labelled_count)]
    made = []
    for index in rng.choice(len(chunks), size=count, replace=False):
        chunk = chunks[int(index)]
        words = [w for w in re.findall(r"[A-Za-z]{5,}", chunk["text"]) if w.lower() != chunk["rare"]]
        picked = [*rng.choice(words, size=min(3, len(words)), replace=False), chunk["rare"]]
        made.append("What about " + " ".join(picked) + "?")
    return labelled + made


def corpus(
    rows: int, rng: np.random.Generator, pool: list[str], per_document: int = CHUNKS_PER_DOCUMENT
) -> tuple[list[dict], dict[str, str]]:
    """Chunks (dicts) and documents (doc id → raw text) of ``rows`` chunks, ``per_document`` to a document."""
    chunks, documents = [], {}
    for d in range(rows // per_document):
        doc_id = f"doc-{d:07d}.md"
        rare = [made_up_word(rng) for _ in range(3)]
        texts = []
        for _ in range(per_document):
            picked = [pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(4, 8)))]
            if rng.random() < 0.5:  # the document's own words, in half its chunks
                picked.insert(int(rng.integers(0, len(picked))), f"See {' '.join(rare)}.")
            texts.append(" ".join(picked))
        raw = "\n\n".join(texts)
        documents[doc_id] = raw
        offset = 0
        for position, text in enumerate(texts):
            chunk_id = hashlib.sha256(f"{doc_id}\x1f{position}".encode()).hexdigest()[:32]
            chunks.append(
                {
                    "chunk_id": chunk_id,
                    "doc_id": doc_id,
                    "position": position,
                    "start": offset,
                    "end": offset + len(text),
                    "text": text,
                    "tokens": int(len(text.split()) * 1.3) + 1,
                    "rare": rare[0],
                    "gap": "\n\n" if position else "",  # the whitespace before it in its document
                }
            )
            offset += len(text) + 2
    return chunks, documents


class Served:
    def __init__(
        self,
        sizes: list[int],
        made_questions: int,
        rounds: int,
        cold: int,
        seed: int,
        options: bool = False,
        per_document: int = CHUNKS_PER_DOCUMENT,
        labelled: int | None = None,
    ):
        self.sizes, self.made_questions, self.rounds, self.cold, self.seed = (
            sizes,
            made_questions,
            rounds,
            cold,
            seed,
        )
        self.options = options  # also time the search options (min_score, diversity), interleaved with the rest
        self.per_document = per_document
        self.labelled = labelled  # how many of the labelled questions (None: all)
        self.results: dict = {"sizes": {}}

    # -- server --------------------------------------------------------------------------------------------
    def start(self) -> None:
        from toolkit.db import connection, migrate

        self.data_dir = Path(tempfile.mkdtemp(prefix="toolkit-bench-served-", dir="/tmp"))
        self.url = start_server(self.data_dir, SHARED_BUFFERS)
        migrate.upgrade(self.url)
        self.owner = connection.connect(self.url, autocommit=True)  # a superuser
        info = connection.check_server(self.owner)
        self.results.update(server=info["server_version"], pgvector=info["pgvector_version"])
        self.install_before()

    def stop(self) -> None:
        from toolkit.db import server

        if getattr(self, "owner", None) is not None:
            self.owner.close()
        server.stop_embedded(self.data_dir)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def install_before(self) -> None:
        """The previous hybrid_search_chunks and search_passages (full text through ``@@``), under other names."""
        text = subprocess.run(
            ["git", "show", f"{BEFORE_COMMIT}:sql/idempotent/012-search-hybrid.sql"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pieces = [p for p in re.split(r"\n(?=CREATE OR REPLACE FUNCTION )", text) if p.startswith("CREATE")]
        wanted = {"toolkit.hybrid_search_chunks(": "before_hybrid", "toolkit.search_passages(": "before_passages"}
        body = "\n".join(
            p[: p.index("\n$$;") + 4]
            for p in pieces
            if any(p.startswith(f"CREATE OR REPLACE FUNCTION {w}") for w in wanted)
        )
        for old, new in wanted.items():
            body = body.replace(old, f"toolkit.{new}(").replace(old[len("toolkit.") : -1] + ".", new + ".")
        # Then _search_target's chunk_table was the bare name, quoted in with %I; now it is qualified and quoted
        # (toolkit._chunk_table), taken with %s. Every toolkit.%I of that release's search names it.
        body = re.sub(r"toolkit\.%(\d+\$)?I", lambda m: f"%{m.group(1) or ''}s", body)
        schema = self.owner.execute("SELECT toolkit._vector_schema()").fetchone()[0]
        with self.owner.transaction():
            self.owner.execute(f"SET LOCAL search_path = {schema}, pg_catalog")
            self.owner.execute(body)
            for name in wanted.values():
                self.owner.execute(f"ALTER FUNCTION toolkit.{name} OWNER TO toolkit_owner")
                self.owner.execute(f"GRANT EXECUTE ON FUNCTION toolkit.{name} TO toolkit_reader")

    # -- data ----------------------------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed_documents(texts), dtype=np.float32)

    def make_version(self, rows: list[dict], vectors: np.ndarray) -> dict:
        """A version of these chunks, loaded in COPY statements of BATCH rows as a backfill loads a version being
        built (it has no postings until it is ready)."""
        from toolkit.store import versions

        conn = self.owner
        v = versions.create_version(conn, "bench", "fixed:200:0", f"fixed:200:0@{len(rows)}")
        table = conn.execute("SELECT toolkit._chunk_table(%s)", (v,)).fetchone()[0]
        seconds = copy_chunk_rows(conn, table, rows, vectors, TENANT, BATCH)
        return {"version": v, "table": table, "load_s": seconds, "rows_per_s": len(rows) / seconds}

    def finish_version(self, info: dict) -> None:
        from toolkit import cutover
        from toolkit.store import versions

        conn = self.owner
        conn.execute(f"ANALYZE {info['table']}")
        started = time.perf_counter()
        versions.create_version_index(conn, info["version"], maintenance_work_mem="1GB")
        info["index_s"] = time.perf_counter() - started
        # Ready: the postings built from the rows (timed: what the end of a backfill adds).
        started = time.perf_counter()
        versions.mark_version_ready(conn, info["version"], maintenance_work_mem="1GB")
        info["postings_build_s"] = time.perf_counter() - started
        # What autovacuum does soon after a load (inserts past its threshold): the visibility map set, so searches
        # read the postings' index alone (index-only scans).
        terms, stats = conn.execute(
            "SELECT toolkit._postings_table(%s), toolkit._statistics_table(%s)",
            (info["version"], info["version"]),
        ).fetchone()
        conn.execute(f"VACUUM (ANALYZE) {terms}, {stats}")
        cutover.activate_version(conn, info["version"], force=True)

    def sizes_of(self, v: int) -> dict:
        names = self.owner.execute(
            "SELECT toolkit._chunk_table(%s), toolkit._postings_table(%s), toolkit._statistics_table(%s)",
            (v, v, v),
        ).fetchone()
        out = {}
        for key, name in zip(("chunks", "terms", "stats"), names, strict=True):
            out[key] = self.owner.execute(
                "SELECT pg_total_relation_size(%s::regclass), (SELECT count(*) FROM " + name + ")", (name,)
            ).fetchone()
        return out

    # -- queries -------------------------------------------------------------------------------------------
    def calls(self, v: int) -> dict[str, str]:
        return {
            "search_passages (default)": f"SELECT rank FROM toolkit.search_passages(%s, %s, {K}, query_version => {v})",
            "hybrid_search_chunks": f"SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, {K},"
            f" query_version => {v})",
            "search_chunks": f"SELECT chunk_id FROM toolkit.search_chunks(%s, {K}, query_version => {v})",
            "before: search_passages": f"SELECT rank FROM toolkit.before_passages(%s, %s, {K}, query_version => {v})",
            "before: hybrid_search_chunks": f"SELECT chunk_id FROM toolkit.before_hybrid(%s, %s, {K},"
            f" query_version => {v})",
        } | (self.option_calls(v) if self.options else {})

    def option_calls(self, v: int) -> dict[str, str]:
        """The search options, each at a value that does work (a threshold most hits pass, MMR half and half)."""
        return {
            "search_passages, diversity 0.5": f"SELECT rank FROM toolkit.search_passages(%s, %s, {K},"
            f" query_version => {v}, diversity => 0.5)",
            "hybrid_search_chunks, diversity 0.5": f"SELECT chunk_id FROM toolkit.hybrid_search_chunks(%s, %s, {K},"
            f" query_version => {v}, diversity => 0.5)",
            "search_chunks, diversity 0.5": f"SELECT chunk_id FROM toolkit.search_chunks(%s, {K},"
            f" query_version => {v}, diversity => 0.5)",
            "search_chunks, min_score 0.1": f"SELECT chunk_id FROM toolkit.search_chunks(%s, {K},"
            f" query_version => {v}, min_score => 0.1)",
        }

    def reader(self):
        from toolkit.db import connection

        conn = connection.connect(self.url, autocommit=True)
        conn.execute("SET ROLE toolkit_reader")
        return conn

    def run_one(self, conn, sql: str, question: str, vector) -> tuple[list, float]:
        params = (vector,) if "search_chunks(" in sql and "hybrid" not in sql else (question, vector)
        with conn.transaction():
            conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
            started = time.perf_counter()
            rows = conn.execute(sql, params).fetchall()
            return [r[0] for r in rows], (time.perf_counter() - started) * 1000

    def latency(self, v: int, qs: list[str], qv: np.ndarray) -> dict:
        calls = self.calls(v)
        out: dict = {name: {} for name in calls}
        rng = np.random.default_rng(self.seed + 7)
        # Cold: a fresh connection for each call (its first search), questions drawn at random.
        for name, sql in calls.items():
            times = []
            for i in rng.choice(len(qs), size=self.cold, replace=False):
                with self.reader() as conn:
                    times.append(self.run_one(conn, sql, qs[int(i)], qv[int(i)])[1])
            out[name]["cold"] = percentiles(times)
        conn = self.reader()
        names = list(calls)
        for i in range(min(20, len(qs))):  # warm-up
            for name in names:
                self.run_one(conn, calls[name], qs[i], qv[i])
        samples: dict[str, list[float]] = {name: [] for name in names}
        found: dict[str, list[list]] = {name: [] for name in names}
        for round_ in range(self.rounds):
            for q, vector in zip(qs, qv, strict=True):
                for index in rng.permutation(len(names)):
                    name = names[index]
                    rows, ms = self.run_one(conn, calls[name], q, vector)
                    samples[name].append(ms)
                    if round_ == 0:
                        found[name].append(rows)
        conn.close()
        for name in names:
            out[name]["warm"] = percentiles(samples[name])
        # How far the bounded full-text candidates move the results: the same top-5 chunks as before?
        same = [
            len(set(a) & set(b)) / max(1, len(b))
            for a, b in zip(found["hybrid_search_chunks"], found["before: hybrid_search_chunks"], strict=True)
        ]
        out["_agreement"] = float(np.mean(same))
        out["_found_chunks"] = found["search_chunks"]
        return out

    def text_plan(self, v: int, question: str) -> dict:
        """Postings read per question: the chosen lexemes' df, or the limit (the rarest lexeme's first chunks)."""
        # As the owner: no role below it may read term_stats_vN (011-lexical.sql); the tenant is in the WHERE.
        stats = self.owner.execute("SELECT toolkit._statistics_table(%s)", (v,)).fetchone()[0]
        rows = self.owner.execute(
            f"SELECT s.lexeme, sum(s.df) FROM {stats} AS s WHERE s.tenant = %s"
            " AND s.lexeme = ANY (toolkit.query_lexemes('english', %s)) GROUP BY 1 HAVING sum(s.df) > 0",
            (TENANT, question),
        ).fetchall()
        limit = self.owner.execute("SELECT postings_limit FROM toolkit.retrieval_settings()").fetchone()[0]
        dfs = sorted(int(r[1]) for r in rows)
        read, chosen = 0, 0
        for df in dfs:
            if read + df > limit:
                break
            read, chosen = read + df, chosen + 1
        return {"read": read if chosen else min(limit, dfs[0]) if dfs else 0, "fallback": bool(dfs) and not chosen}

    # -- the run -------------------------------------------------------------------------------------------
    def run(self) -> dict:
        from toolkit.embedding import get_embedder
        from toolkit.store.models import Model, insert_model

        started = time.perf_counter()
        self.embedder = get_embedder(f"hashing:{DIMS}")
        rng = np.random.default_rng(self.seed)
        pool = sentences()
        self.results["sentences"] = len(pool)
        self.start()
        try:
            insert_model(
                self.owner,
                Model(alias="bench", provider="hashing", model_name=str(DIMS), dimensions=DIMS, max_input_tokens=512),
            )
            for size in self.sizes:
                result: dict = {}
                rows, documents = corpus(size, rng, pool, self.per_document)
                t = time.perf_counter()
                vectors = self.embed([r["text"] for r in rows])
                result["embed_s"] = time.perf_counter() - t
                print(f"{size}: {len(rows)} chunks embedded in {result['embed_s']:.0f} s", flush=True)
                # Loaded as a backfill loads (no postings while building), then ready: the postings built in bulk.
                info = self.make_version(rows, vectors)
                result["load_rows_per_s"] = info["rows_per_s"]
                self.store_documents(documents)
                self.finish_version(info)
                result["postings_build_s"] = info["postings_build_s"]
                print(
                    f"  rows/s loaded {result['load_rows_per_s']:.0f};"
                    f" postings built in {result['postings_build_s']:.1f} s",
                    flush=True,
                )
                result["sizes"] = self.sizes_of(info["version"])
                qs = questions(rng, rows, self.made_questions, self.labelled)
                qv = np.asarray([self.embedder.embed_query(q) for q in qs], dtype=np.float32)
                plans = [self.text_plan(info["version"], q) for q in qs]
                result["postings_read"] = percentiles([p["read"] for p in plans])
                result["fallback_share"] = sum(p["fallback"] for p in plans) / len(plans)
                result["questions"] = len(qs)
                load = os.getloadavg()[0]
                result["latency"] = self.latency(info["version"], qs, qv)
                result["load"] = (load + os.getloadavg()[0]) / 2
                result["recall"] = self.recall(vectors, rows, qv, result["latency"].pop("_found_chunks"))
                for name, r in result["latency"].items():
                    if not name.startswith("_"):
                        print(
                            f"  {name}: cold {r['cold'][0]:.1f} ms, warm p50 {r['warm'][0]:.1f} p95 {r['warm'][1]:.1f}"
                        )
                print(f"  agreement {result['latency']['_agreement']:.3f}, recall {result['recall']:.3f}", flush=True)
                self.results["sizes"][size] = result
                self.clear_documents()
        finally:
            self.stop()
        self.results["seconds"] = time.perf_counter() - started
        self.results["load_average"] = os.getloadavg()[0]
        return self.results

    def recall(self, vectors: np.ndarray, rows: list[dict], qv: np.ndarray, found: list[list[str]]) -> float:
        ids = np.array([r["chunk_id"] for r in rows])
        scores = qv @ vectors.T  # unit vectors: cosine
        hits = 0
        for row, got in zip(scores, found, strict=True):
            truth = set(ids[np.argpartition(-row, K)[:K]])
            hits += len(truth & set(got))
        return hits / (K * len(found))

    def store_documents(self, documents: dict[str, str]) -> None:
        copying = "COPY toolkit.documents (tenant, doc_id, source, raw_text, content_hash) FROM STDIN"
        with self.owner.transaction(), self.owner.cursor() as cur, cur.copy(copying) as copy:
            for doc_id, text in documents.items():
                copy.write_row((TENANT, doc_id, doc_id, text, "h"))
        self.owner.execute("ANALYZE toolkit.documents")

    def clear_documents(self) -> None:
        self.owner.execute("DELETE FROM toolkit.documents")


def section(results: dict, command: str) -> str:
    mib = 1024 * 1024
    lines = [
        SECTION,
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d')}; {results['seconds']:.0f} s in all). PostgreSQL"
        f" {results['server']}, pgvector {results['pgvector']}, embedded, shared_buffers = {SHARED_BUFFERS};"
        f" {os.cpu_count()} cores ({cpu_name()}) shared with other work (1-minute load average"
        f" {results['load_average']:.1f}); {platform.machine()}.",
        "",
        f"Data: one tenant; chunks of 4-7 sentences drawn at random from the {results['sentences']:,} sentences of the"
        " sample documents and bench/data/plain, 10 to a document (cut from it by the documents' text, so neighbouring"
        " hits merge into passages), half of them also naming three made-up words of their document; vectors from the"
        f" hashing model at {DIMS} dimensions. Questions: the 260 sample questions and bench/data/plain's (all their"
        " words are common in this corpus: the hard case), plus questions made from a random chunk (three of its"
        " words and its document's made-up word). Every call as `toolkit_reader` with the tenant set, k = 5, pinned"
        " to the version. *Before* is the previous release's full text (`c.fts @@ tsquery`: row-level security keeps"
        " the planner off the GIN index, `@@` not being leakproof, so every row of the tenant is read), installed"
        " under another name on the same data.",
        "",
        "| chunks | call | cold p50 | cold p95 | warm p50 | warm p95 |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for size, r in results["sizes"].items():
        for name, t in r["latency"].items():
            if name.startswith("_"):
                continue
            lines.append(
                f"| {size:,} | {name} | {t['cold'][0]:.1f} | {t['cold'][1]:.1f} | {t['warm'][0]:.1f} |"
                f" {t['warm'][1]:.1f} |"
            )
    lines += [
        "",
        "Milliseconds; cold: the first search on a fresh connection (plans and PL/pgSQL compiled anew; the buffer"
        " cache stays warm), warm: the same connection, every call interleaved in a random order per question.",
        "",
        "| chunks | questions | postings read p50 / p95 | rarest lexeme over the limit | same top-5 as before |"
        " search_chunks recall@5 (HNSW vs exact) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, r in results["sizes"].items():
        lines.append(
            f"| {size:,} | {r['questions']} | {r['postings_read'][0]:.0f} / {r['postings_read'][1]:.0f} |"
            f" {r['fallback_share']:.0%} | {r['latency']['_agreement']:.3f} | {r['recall']:.3f} |"
        )
    sizes = list(results["sizes"])
    first, last = results["sizes"][sizes[0]], results["sizes"][sizes[-1]]

    def p50(r: dict, name: str) -> float:
        return r["latency"][name]["warm"][0]

    lines += [
        "",
        f"Reading: from {sizes[0]:,} to {sizes[-1]:,} chunks the default search's warm p50 went from"
        f" {p50(first, 'search_passages (default)'):.1f} to {p50(last, 'search_passages (default)'):.1f} ms and"
        f" `hybrid_search_chunks`' from {p50(first, 'hybrid_search_chunks'):.1f} to"
        f" {p50(last, 'hybrid_search_chunks'):.1f} ms, where the previous full text went from"
        f" {p50(first, 'before: hybrid_search_chunks'):.0f} to {p50(last, 'before: hybrid_search_chunks'):.0f} ms:"
        " the full-text candidates come from at most `postings_limit` (1,000) postings found through a btree, so"
        ' the text side\'s work is bounded, not proportional to the corpus (docs/search.md, "Full text at scale").'
        " What still grows is btree depth and the share of questions whose every lexeme is common (*rarest lexeme"
        " over the limit*: their text list is drawn from the rarest lexeme's first 1,000 chunks by chunk id), which"
        " is also where the top-5 differs from the unbounded ranking (*same top-5 as before*: the share of the"
        " previous release's top-5 chunks the new one returns). This corpus makes that share high: every sentence"
        " recurs in about a hundred chunks at 100k, so the sample questions' words are all common. `search_passages`"
        " adds the assembly (PL/pgSQL) to the hybrid call. The vector half is unchanged (recall@5 of the hashing"
        " model's vectors at the default ef_search, a weak embedding with many near ties). The machine's load"
        " differs between sizes (1-minute load average around the latency runs: "
        + ", ".join(f"{size:,}: {r.get('load', 0):.1f}" for size, r in results["sizes"].items())
        + "); compare calls within a size.",
        "",
        "### Cost of the postings",
        "",
        "| chunks | rows/s loaded (building: no postings) | postings built when ready |"
        " chunk table | postings (rows) | statistics (rows) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, r in results["sizes"].items():
        s = r["sizes"]
        lines.append(
            f"| {size:,} | {r['load_rows_per_s']:,.0f} | {r['postings_build_s']:.1f} s |"
            f" {s['chunks'][0] / mib:.0f} MiB | {s['terms'][0] / mib:.0f} MiB ({s['terms'][1]:,}) |"
            f" {s['stats'][0] / mib:.1f} MiB ({s['stats'][1]:,}) |"
        )
    lines += [
        "",
        f"Rows written by binary COPY in statements of {BATCH} rows, each its own transaction (as ingest writes),"
        " into a version being built (no postings, which mark_version_ready then builds); sizes include"
        " indexes (the chunk table's HNSW index too).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The served search at 10k and 100k chunks.")
    parser.add_argument("--served", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="10000,100000", help="chunk counts, comma-separated")
    parser.add_argument("--made-questions", type=int, default=100, help="questions made from random chunks")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cold", type=int, default=20, help="fresh connections per call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    parser.add_argument(
        "--options", action="store_true", help="also time min_score and diversity (printed; not for --write)"
    )
    parser.add_argument(
        "--chunks-per-document",
        type=int,
        default=CHUNKS_PER_DOCUMENT,
        help=f"longer documents (default {CHUNKS_PER_DOCUMENT}; printed, not for --write)",
    )
    parser.add_argument(
        "--labelled-questions",
        type=int,
        default=None,
        help="use this many of the labelled questions, evenly spread (default all; printed, not for --write)",
    )
    args = parser.parse_args(argv)
    if args.labelled_questions is not None and args.write:
        parser.error("the section describes every labelled question: run --labelled-questions without --write")
    if args.options and args.write:
        parser.error("--options adds rows the section does not describe: run it without --write")
    if args.chunks_per_document != CHUNKS_PER_DOCUMENT and args.write:
        parser.error("the section describes 10 chunks a document: run --chunks-per-document without --write")
    if args.chunks_per_document < 1:
        parser.error("--chunks-per-document must be 1 or more")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = Served(
        sizes,
        args.made_questions,
        args.rounds,
        args.cold,
        args.seed,
        args.options,
        args.chunks_per_document,
        args.labelled_questions,
    ).run()
    command = ".venv/bin/python bench/search.py --served" + (
        f" --sizes {args.sizes}" if args.sizes != "10000,100000" else ""
    )
    text = section(results, command + " --write")
    print(text)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, text)


if __name__ == "__main__":
    main()
