"""Ingest at 100k chunks × 384 dimensions with the hashing embedder, so the toolkit's own cost is measured, in one
run on one embedded PostgreSQL: ``toolkit ingest`` (the library function the CLI calls) into a fresh version, a
bare binary COPY of the same rows into an identical fresh table (made by ``create_version``, so the same DDL:
primary key, (tenant, doc_id) index, generated tsvector with its GIN index, the backfill queue's partial index),
the same ingest as a login role in toolkit_writer (row-level security applies: a temporary table and INSERT … SELECT),
and langchain-postgres ``PGVectorStore.add_embeddings`` with the same texts and vectors. Then real models
(all-MiniLM-L6-v2, multilingual-e5-small) through ``ingest()`` on a small corpus, next to the same embedder's
bare ``embed_documents`` on the same chunk texts.

The corpus is generated Markdown (one title, a heading every 10 paragraphs, paragraphs of 2-3 sentences drawn
from the vocabulary of the installed packages' descriptions), written to disk so ingest reads real files. Every
paragraph is different, so no chunk reuses another's embedding.

    .venv/bin/python bench/ingest.py                    # 100k chunks: print the table, write bench/results/ingest.json
    .venv/bin/python bench/ingest.py --chunks 5000 --langchain-chunks 1000 --real-chunks 100   # a smoke test

It runs its own embedded PostgreSQL in a temporary directory under /tmp and stops it at the end.
"""

from __future__ import annotations

import argparse
import email.parser
import itertools
import json
import os
import re
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
DIMS = 384
CHUNKER = "markdown:60:0"
TENANT = "bench"
REAL_MODELS = (
    ("minilm", "sentence-transformers", "all-MiniLM-L6-v2"),
    ("e5", "e5", "multilingual-e5-small"),
)


# -- corpus ---------------------------------------------------------------------------------------------------
def vocabulary() -> list[str]:
    """Words of the installed packages' descriptions: English-like text for tiktoken, the same on every run."""
    site = Path(sysconfig.get_paths()["purelib"])
    words: set[str] = set()
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        message = email.parser.Parser().parsestr(metadata.read_text(encoding="utf-8", errors="replace"))
        words.update(w.lower() for w in re.findall(r"[A-Za-z]{2,14}", str(message.get_payload() or "")))
    return sorted(words)


def markdown_document(rng: np.random.Generator, vocab: list[str], number: int, paragraphs: int) -> str:
    parts = [f"# Document {number}"]
    for i in range(paragraphs):
        if i % 10 == 0:
            parts.append(f"## Section {i // 10 + 1}")
        sentences = []
        for _ in range(int(rng.integers(2, 4))):
            words = [vocab[j] for j in rng.integers(0, len(vocab), int(rng.integers(6, 14)))]
            sentences.append(" ".join(words).capitalize() + ".")
        parts.append(" ".join(sentences))
    return "\n\n".join(parts) + "\n"


def write_corpus(directory: Path, chunks: int, *, paragraphs: int = 100, seed: int = 0, spec: str = CHUNKER) -> dict:
    """Writes Markdown files until they make at least ``chunks`` chunks with ``spec`` (each file is chunked as
    it is written, outside any timing)."""
    from toolkit.chunking import get_chunker

    directory.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    rng = np.random.default_rng(seed)
    chunker = get_chunker(spec)
    files = size = total = 0
    while total < chunks:
        text = markdown_document(rng, vocab, files, paragraphs)
        (directory / f"doc{files:05d}.md").write_text(text, encoding="utf-8")
        total += len(chunker.chunk(text, doc_id=f"doc{files:05d}.md"))
        size += len(text.encode("utf-8"))
        files += 1
    return {"files": files, "bytes": size, "paragraphs_per_file": paragraphs, "chunks": total}


# -- the server -----------------------------------------------------------------------------------------------
def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


class Server:
    """An embedded PostgreSQL in its own data directory under /tmp (0755, so the server's user reaches it)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __enter__(self) -> Server:
        from toolkit.db import migrate, server

        self.data_dir = Path(tempfile.mkdtemp(prefix=self.prefix, dir="/tmp"))
        self.data_dir.chmod(0o755)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.url = server.start_embedded(self.data_dir).url
        migrate.upgrade(self.url)
        return self

    def __exit__(self, *exc) -> None:
        from toolkit.db import server

        server.stop_embedded(self.data_dir)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def new_database(self, name: str) -> str:
        """Another database on this server, migrated to head (ingest writes to every live version of a database,
        so each measurement that needs its own versions gets its own database)."""
        import psycopg
        from psycopg import sql

        from toolkit.db import migrate

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = with_database(self.url, name)
        migrate.upgrade(url)
        return url

    def settings(self) -> dict:
        from toolkit.db.connection import check_server, connect

        with connect(self.url, autocommit=True) as conn:
            info = check_server(conn)
            for name in ("shared_buffers", "max_wal_size", "synchronous_commit", "fsync", "wal_level"):
                info[name] = conn.execute(f"SHOW {name}").fetchone()[0]
        return info


def checkpoint(conn) -> None:
    """Starts each timed write from a clean slate: no dirty buffers left by the previous one."""
    conn.execute("CHECKPOINT")
    if not conn.autocommit:
        conn.commit()


def register_hashing(conn, alias: str = "hash384") -> str:
    from toolkit.store.models import Model, insert_model

    insert_model(
        conn,
        Model(alias=alias, provider="hashing", model_name=str(DIMS), dimensions=DIMS, max_input_tokens=8192),
    )
    return alias


def new_version(conn, alias: str, spec: str, chunker_version: str | None = None) -> int:
    from toolkit.chunking import get_chunker
    from toolkit.store import versions

    return versions.create_version(conn, alias, spec, chunker_version or get_chunker(spec).version)


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# -- the measurements -----------------------------------------------------------------------------------------
def measure_ingest(url: str, corpus: Path, spec: str, overlap: bool = True) -> tuple[dict, int]:
    """(a) ingest() into a fresh version, as ``toolkit ingest`` runs it (a non-autocommit connection). With
    ``overlap=False`` the next batch is prepared only after the current one is written, so the write stage is
    timed alone (with the overlap, chunking in the worker thread competes with it for the interpreter)."""
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    with connect(url) as conn:
        alias = register_hashing(conn)
        version = new_version(conn, alias, spec)
        checkpoint(conn)
        started = time.perf_counter()
        report = ingest(conn, [corpus], TENANT, overlap=overlap)
        wall = time.perf_counter() - started
    chunks = report.chunks_written[version]
    assert not report.failed, report.failed
    return {
        "documents": report.documents,
        "chunks": chunks,
        "embedded": report.embedded,  # every paragraph differs: nothing should be reused
        "reused": report.reused,
        "seconds": wall,
        "stages": report.seconds,
        "chunks_per_s": chunks / wall,
        "write_chunks_per_s": chunks / report.seconds["write"],
        "load_average": load_average(),
    }, version


def measure_ingest_as_writer(server: Server, corpus: Path, spec: str) -> dict:
    """(a') The same ingest as a login role in toolkit_writer (the least-privilege setup): row-level security
    applies, so ingest writes through a temporary table and INSERT … SELECT instead of COPY into the table."""
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    url = server.new_database("bench_writer")
    with connect(url, autocommit=True) as conn:
        register_hashing(conn)
        version = new_version(conn, "hash384", spec)
        conn.execute("CREATE ROLE bench_writer LOGIN IN ROLE toolkit_writer")
        checkpoint(conn)
    parts = urlsplit(url)
    writer_url = urlunsplit(parts._replace(netloc="bench_writer@" + parts.netloc.split("@")[-1]))
    with connect(writer_url) as conn:
        started = time.perf_counter()
        report = ingest(conn, [corpus], TENANT)
        wall = time.perf_counter() - started
    chunks = report.chunks_written[version]
    return {
        "documents": report.documents,
        "chunks": chunks,
        "seconds": wall,
        "stages": report.seconds,
        "chunks_per_s": chunks / wall,
        "write_chunks_per_s": chunks / report.seconds["write"],
        "load_average": load_average(),
    }


def stored_rows(conn, version: int) -> list[tuple]:
    from psycopg import sql

    from toolkit.store.chunk_table import CHUNK_COLUMNS, chunk_table_name

    return conn.execute(
        sql.SQL("SELECT {} FROM {} ORDER BY tenant, doc_id, position").format(
            sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS)), chunk_table_name(conn, version)
        )
    ).fetchall()


def measure_bare_copy(url: str, rows: list[tuple], spec: str, batch_documents: int | None = None) -> dict:
    """(b) Binary COPY of the same rows into an identical fresh chunks table: in one transaction, or (to see what
    ingest's transaction boundaries cost) one COPY and commit per ``batch_documents`` documents."""
    from psycopg import sql

    from toolkit.db.connection import connect
    from toolkit.store.chunk_table import _COPY_TYPES, CHUNK_COLUMNS, chunk_table_name

    doc_column = CHUNK_COLUMNS.index("doc_id")
    documents = [list(group) for _, group in itertools.groupby(rows, key=lambda row: row[doc_column])]
    size = batch_documents or len(documents)
    batches = [
        [row for document in documents[i : i + size] for row in document] for i in range(0, len(documents), size)
    ]
    with connect(url) as conn:
        label = "bare-copy@1" if batch_documents is None else f"bare-copy-{batch_documents}@1"
        version = new_version(conn, "hash384", spec, label)
        conn.commit()
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            chunk_table_name(conn, version), sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        )
        checkpoint(conn)
        started = time.perf_counter()
        for batch in batches:
            with conn.transaction(), conn.cursor() as cur, cur.copy(query) as copy:
                copy.set_types([*_COPY_TYPES, "vector"])
                for row in batch:
                    copy.write_row(row)
        seconds = time.perf_counter() - started
        count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(chunk_table_name(conn, version)))
        assert count.fetchone()[0] == len(rows)
        conn.commit()
    return {
        "chunks": len(rows),
        "transactions": len(batches),
        "seconds": seconds,
        "chunks_per_s": len(rows) / seconds,
        "load_average": load_average(),
    }


def measure_langchain(url: str, rows: list[tuple], limit: int) -> dict:
    """(c) langchain-postgres PGVectorStore.add_embeddings (PGEngine + PGVectorStore) with the same texts and
    vectors, and a little metadata (document, position, offsets, heading path) in its JSON column."""
    import importlib.metadata

    from langchain_core.embeddings import Embeddings
    from langchain_postgres import PGEngine, PGVectorStore

    from toolkit.db.connection import connect
    from toolkit.store.chunk_table import CHUNK_COLUMNS

    class Unused(Embeddings):
        # add_embeddings is given the vectors; the store still wants an embedding service.
        def embed_documents(self, texts):
            raise AssertionError("add_embeddings must not embed")

        def embed_query(self, text):
            raise AssertionError("add_embeddings must not embed")

    column = {name: i for i, name in enumerate(CHUNK_COLUMNS)}
    rows = rows[:limit]
    texts = [r[column["text"]] for r in rows]
    vectors = [r[column["embedding"]].tolist() for r in rows]
    metadatas = [
        {
            "doc_id": r[column["doc_id"]],
            "chunk_id": r[column["chunk_id"]],
            "position": r[column["position"]],
            "start": r[column["start_offset"]],
            "end": r[column["end_offset"]],
            "heading_path": r[column["heading_path"]],
        }
        for r in rows
    ]
    parts = urlsplit(url)
    engine = PGEngine.from_connection_string(url=urlunsplit(parts._replace(scheme="postgresql+psycopg")))
    try:
        engine.init_vectorstore_table("langchain_chunks", DIMS)
        store = PGVectorStore.create_sync(engine, embedding_service=Unused(), table_name="langchain_chunks")
        with connect(url, autocommit=True) as conn:
            checkpoint(conn)
        started = time.perf_counter()
        for start in range(0, len(rows), 1000):
            store.add_embeddings(
                texts[start : start + 1000], vectors[start : start + 1000], metadatas[start : start + 1000]
            )
        seconds = time.perf_counter() - started
        with connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM langchain_chunks").fetchone()[0] == len(rows)
    finally:
        engine._run_as_sync(engine.close())
    return {
        "chunks": len(rows),
        "seconds": seconds,
        "chunks_per_s": len(rows) / seconds,
        "version": importlib.metadata.version("langchain-postgres"),
        "load_average": load_average(),
    }


def embed_texts(conn, version: int) -> list[str]:
    """What ingest sent to the model for each stored chunk (heading path, context, body)."""
    from psycopg import sql

    from toolkit.chunking.document import compose_embed_text
    from toolkit.store.chunk_table import chunk_table_name

    rows = conn.execute(
        sql.SQL("SELECT heading_path, context, text FROM {} WHERE NOT is_parent ORDER BY doc_id, position").format(
            chunk_table_name(conn, version)
        )
    ).fetchall()
    return [compose_embed_text(tuple(h), c, t) for h, c, t in rows]


def corpus_embed_texts(corpus: Path, embedder) -> list[str]:
    """The texts ingest will send to the model for this corpus (to time the bare model before ingest runs)."""
    from toolkit.chunking import get_chunker
    from toolkit.text.sources import read_documents

    chunker = get_chunker(CHUNKER, embedder=embedder)
    return [
        chunk.embed_text
        for document in read_documents([corpus])
        for chunk in chunker.chunk(document.text, doc_id=document.doc_id)
        if not chunk.is_parent
    ]


def bare_rate(embedder, texts: list[str], repeats: int) -> list[float]:
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        vectors = embedder.embed_documents(texts)
        rates.append(len(texts) / (time.perf_counter() - started))
        assert vectors.shape == (len(texts), embedder.dimensions)
    return rates


def measure_real_model(server: Server, corpus: Path, alias: str, provider: str, name: str, repeats: int) -> dict:
    """ingest() with a real model on a small corpus (its own database, one version), then the same embedder's
    bare embed_documents on the chunk texts ingest embedded. The model is loaded (and warmed) before either
    is timed, so neither pays for loading it."""
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest
    from toolkit.store.models import embedder_for_model, register_model

    url = server.new_database(f"bench_{alias.replace('-', '_')}")
    with connect(url) as conn:
        model = register_model(conn, alias, provider, name)
        embedder = embedder_for_model(model)
        embedder.embed_documents(["warm up"] * 16)
        version = new_version(conn, alias, CHUNKER)
        conn.commit()
        # The bare runs come before and after ingest, so load from other work on the machine falls on both.
        texts = corpus_embed_texts(corpus, embedder)
        rates = bare_rate(embedder, texts, (repeats + 1) // 2)
        started = time.perf_counter()
        report = ingest(conn, [corpus], TENANT)
        wall = time.perf_counter() - started
        stored = embed_texts(conn, version)
        conn.commit()
    chunks = report.chunks_written[version]
    assert report.embedded == len(stored) == chunks, (report.embedded, len(stored), chunks)
    assert sorted(stored) == sorted(texts), "the bare run must embed exactly what ingest embedded"
    rates += bare_rate(embedder, stored, repeats // 2)
    bare = statistics.median(rates)
    tokens = [embedder.count_tokens(t) for t in texts]
    return {
        "model": f"{provider}:{name}",
        "documents": report.documents,
        "chunks": chunks,
        "mean_tokens": statistics.mean(tokens),
        "seconds": wall,
        "stages": report.seconds,
        "chunks_per_s": chunks / wall,
        "prepare_chunks_per_s": chunks / report.seconds["prepare"],
        "bare_chunks_per_s": bare,
        "bare_runs": rates,
        "ratio": chunks / wall / bare,
        "load_average": load_average(),
    }


# -- the run --------------------------------------------------------------------------------------------------
def run(args) -> dict:
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "chunker": CHUNKER, "dims": DIMS}
    work = Path(tempfile.mkdtemp(prefix="toolkit-bench-ingest-corpus-", dir="/tmp"))
    try:
        results["corpus"] = write_corpus(work / "big", args.chunks)
        results["real_corpus"] = write_corpus(work / "small", args.real_chunks, seed=1)
        print(f"corpus: {results['corpus']}", flush=True)
        with Server("toolkit-bench-ingest-") as server:
            results["server"] = server.settings()
            results["load_average_start"] = load_average()
            results["ingest"], version = measure_ingest(server.url, work / "big", CHUNKER)
            print(f"ingest (prepare overlapping write): {results['ingest']}", flush=True)
            from toolkit.db.connection import connect

            with connect(server.url) as conn:
                rows = stored_rows(conn, version)
            # The write stage against a bare COPY, in pairs: each round ingests without the overlap into a fresh
            # database, then COPYs the rows it wrote into a fresh table there. The COPY alone varies by a
            # quarter between repeats on this machine, so the ratio is the median of the rounds' own ratios.
            results["rounds"] = []
            for number in range(args.rounds):
                url = server.new_database(f"bench_round_{number}")
                sequential, round_version = measure_ingest(url, work / "big", CHUNKER, overlap=False)
                with connect(url) as conn:
                    round_rows = stored_rows(conn, round_version)
                bare = measure_bare_copy(url, round_rows, CHUNKER)
                del round_rows
                ratio = sequential["write_chunks_per_s"] / bare["chunks_per_s"]
                results["rounds"].append({"ingest": sequential, "bare_copy": bare, "ratio": ratio})
                print(f"round {number + 1}: write stage / bare COPY {ratio:.2f}", flush=True)
            results["bare_copy_batched"] = measure_bare_copy(server.url, rows, CHUNKER, batch_documents=32)
            print(f"bare COPY, 32 documents a transaction: {results['bare_copy_batched']}", flush=True)
            results["ingest_writer"] = measure_ingest_as_writer(server, work / "big", CHUNKER)
            print(f"ingest as a toolkit_writer login: {results['ingest_writer']}", flush=True)
            results["langchain"] = measure_langchain(server.url, rows, args.langchain_chunks)
            print(f"langchain-postgres: {results['langchain']}", flush=True)
            del rows
            results["real"] = {}
            if not args.skip_real:
                for alias, provider, name in REAL_MODELS:
                    results["real"][alias] = measure_real_model(
                        server, work / "small", alias, provider, name, args.repeats
                    )
                    print(f"{alias}: {results['real'][alias]}", flush=True)
            results["load_average_end"] = load_average()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ingest, chain, rounds = results["ingest"], results["langchain"], results["rounds"]
    median = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]  # the median round (lower if even)
    results["sequential"], results["bare_copy"] = median["ingest"], median["bare_copy"]
    bare = median["bare_copy"]
    results["ratios"] = {
        "write_stage_over_bare_copy": median["ratio"],
        "write_stage_over_bare_copy_rounds": [r["ratio"] for r in rounds],
        "end_to_end_over_bare_copy": ingest["chunks_per_s"] / bare["chunks_per_s"],
        "writer_write_stage_over_bare_copy": results["ingest_writer"]["write_chunks_per_s"] / bare["chunks_per_s"],
        "write_stage_over_langchain": median["ingest"]["write_chunks_per_s"] / chain["chunks_per_s"],
        "end_to_end_over_langchain": ingest["chunks_per_s"] / chain["chunks_per_s"],
    }
    return results


def table(results: dict) -> str:
    ingest, bare, chain, ratios = results["ingest"], results["bare_copy"], results["langchain"], results["ratios"]
    sequential, batched, writer = results["sequential"], results["bare_copy_batched"], results["ingest_writer"]
    stages, alone = ingest["stages"], sequential["stages"]
    rounds = ", ".join(f"{r:.2f}" for r in ratios["write_stage_over_bare_copy_rounds"])
    lines = [
        "| path | chunks | seconds | chunks/s |",
        "| --- | ---: | ---: | ---: |",
        f"| toolkit ingest, end to end (read + chunk + hash-embed + write; the next batch is prepared while one is"
        f" written) | {ingest['chunks']:,} | {ingest['seconds']:.1f} | {ingest['chunks_per_s']:,.0f} |",
        f"| … its read stage / prepare stage (worker thread) / write stage (main thread), overlapping | |"
        f" {stages['read']:.1f} / {stages['prepare']:.1f} / {stages['write']:.1f} | |",
        f"| toolkit ingest without the overlap (median round), end to end | {sequential['chunks']:,} |"
        f" {sequential['seconds']:.1f} | {sequential['chunks_per_s']:,.0f} |",
        f"| … its prepare stage (chunk + hashing embedder) | | {alone['prepare']:.1f} |"
        f" {sequential['chunks'] / alone['prepare']:,.0f} |",
        f"| … its write stage (documents + binary COPY, 32 documents a transaction) | | {alone['write']:.1f} |"
        f" {sequential['write_chunks_per_s']:,.0f} |",
        f"| bare binary COPY of that round's rows, one transaction, same DDL | {bare['chunks']:,} |"
        f" {bare['seconds']:.1f} | {bare['chunks_per_s']:,.0f} |",
        f"| bare binary COPY, one transaction per 32 documents (ingest's boundaries) | {batched['chunks']:,} |"
        f" {batched['seconds']:.1f} | {batched['chunks_per_s']:,.0f} |",
        f"| toolkit ingest as a `toolkit_writer` login, end to end | {writer['chunks']:,} | {writer['seconds']:.1f} |"
        f" {writer['chunks_per_s']:,.0f} |",
        f"| … its write stage (temporary table + INSERT … SELECT; overlapping) | |"
        f" {writer['stages']['write']:.1f} | {writer['write_chunks_per_s']:,.0f} |",
        f"| langchain-postgres {chain['version']} `PGVectorStore.add_embeddings` | {chain['chunks']:,} |"
        f" {chain['seconds']:.1f} | {chain['chunks_per_s']:,.0f} |",
    ]
    lines += [
        "",
        f"- toolkit write stage / bare COPY: **{ratios['write_stage_over_bare_copy']:.2f}×** (target ≥ 0.8), the"
        f" median of {len(ratios['write_stage_over_bare_copy_rounds'])} paired rounds ({rounds});"
        f" end to end / bare COPY: {ratios['end_to_end_over_bare_copy']:.2f}×",
        f"- toolkit write stage / langchain-postgres: **{ratios['write_stage_over_langchain']:.1f}×**;"
        f" end to end / langchain-postgres: **{ratios['end_to_end_over_langchain']:.1f}×** (target ≥ 10)",
    ]
    if results["real"]:
        lines += [
            "",
            "| model | chunks | mean tokens | ingest chunks/s (end to end) | prepare stage chunks/s |"
            " bare embed_documents chunks/s | ingest / bare |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for real in results["real"].values():
            lines.append(
                f"| {real['model']} | {real['chunks']} | {real['mean_tokens']:.0f} | {real['chunks_per_s']:.1f} |"
                f" {real['prepare_chunks_per_s']:.1f} | {real['bare_chunks_per_s']:.1f} | {real['ratio']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="about this many chunks (hashing embedder)")
    parser.add_argument(
        "--langchain-chunks",
        type=int,
        default=10_000,
        help="rows given to langchain-postgres (at most --chunks; it inserts and commits one row at a time)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="paired rounds of ingest (no overlap) and bare COPY for the write ratio"
    )
    parser.add_argument("--real-chunks", type=int, default=300, help="about this many chunks for each real model")
    parser.add_argument(
        "--repeats", type=int, default=2, help="bare embed_documents runs, half before and half after ingest"
    )
    parser.add_argument("--skip-real", action="store_true", help="skip the real models")
    args = parser.parse_args()
    results = run(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ingest.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(table(results))
    print(f"\nload average: start {results['load_average_start']}, end {results['load_average_end']}")
    print(f"results: {RESULTS / 'ingest.json'}")


if __name__ == "__main__":
    main()
