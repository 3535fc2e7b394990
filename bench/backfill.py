"""Backfill at the speed of the wire: ``toolkit backfill`` against an OpenAI-compatible server that answers at once
with precomputed vectors, next to a bare binary COPY of the same rows into a table of the same shape, in paired
rounds on one embedded PostgreSQL.

Each round gets a fresh database holding N single-chunk documents (~800 characters of words from the installed
packages' descriptions), a model registered as ``openai`` pointing at this benchmark's own server on 127.0.0.1
(its own process; it honours ``encoding_format: base64``), and then:

1. ``toolkit backfill --model M --chunker recursive:400:0 --format json`` as a user runs it (a fresh process,
   default options), timed by its own report: total seconds, the HNSW build, and the stages summed over the
   workers (claim, chunk, embed, write, commit);
2. a bare binary COPY of the rows that backfill wrote (read back outside the timing) into a fresh table made
   by ``create_version`` (the same DDL: primary key, (tenant, doc_id) index, generated tsvector and its GIN
   index; no HNSW), in one transaction.

The ratio of each round is backfill without the HNSW build over the bare COPY; the figure is the median round.
With ``--pgai-venv DIR``, pgai's vectorizer worker (pgai 0.12.1 from PyPI, installed into that separate virtual
environment if it is not there yet) embeds the same documents against the same server in each round, once with
its defaults and once with ``processing_default(batch_size => 500, concurrency => 4)``.

    .venv/bin/python bench/backfill.py                       # 20k rows, 3 rounds: print the table
    .venv/bin/python bench/backfill.py --rows 200000 --rounds 2
    .venv/bin/python bench/backfill.py --rows 20000,200000 --write   # also update docs/benchmarks.md
    .venv/bin/python bench/backfill.py --pgai-venv /tmp/pgai-venv      # with pgai's vectorizer worker

It runs its own embedded PostgreSQL under /tmp and stops it at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DIMS = 384
CHUNKER = "recursive:400:0"
TENANT = "bench"
POOL = 4096
SECTION = "## Backfill against a fast embedding server"


# -- the embedding server (run in its own process: ``python bench/backfill.py --serve``) -----------------------
def serve() -> None:
    """An OpenAI-compatible ``/v1/embeddings`` that answers from a pool of precomputed unit vectors (chosen by the
    CRC-32 of each text), base64 when asked, JSON numbers otherwise."""
    rng = np.random.default_rng(0)
    pool = rng.standard_normal((POOL, DIMS)).astype("<f4")
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    as_base64 = [base64.b64encode(v.tobytes()).decode("ascii") for v in pool]
    as_json = [json.dumps([float(x) for x in v]) for v in pool]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            inputs = body.get("input") or []
            inputs = [inputs] if isinstance(inputs, str) else inputs
            table = as_base64 if body.get("encoding_format") == "base64" else as_json
            quote = '"' if table is as_base64 else ""
            items = ",".join(
                f'{{"object":"embedding","index":{i},"embedding":{quote}'
                f"{table[zlib.crc32(text.encode()) % POOL]}{quote}}}"
                for i, text in enumerate(inputs)
            )
            payload = (
                f'{{"object":"list","model":"bench","data":[{items}],"usage":{{"prompt_tokens":0,"total_tokens":0}}}}'
            )
            data = payload.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


class EmbeddingServer:
    def __enter__(self) -> EmbeddingServer:
        self.process = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        assert line.startswith("READY "), line
        self.url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait()


# -- corpus and measurements -----------------------------------------------------------------------------------
def documents(count: int, seed: int = 0) -> list[tuple[str, str]]:
    from ingest import vocabulary

    vocab = vocabulary()
    rng = np.random.default_rng(seed)
    out = []
    for number in range(count):
        words, size = [], 0
        while size < 800:
            word = vocab[int(rng.integers(0, len(vocab)))]
            words.append(word)
            size += len(word) + 1
        out.append((f"doc{number:07d}.md", " ".join(words).capitalize() + "."))
    return out


def store(url: str, docs: list[tuple[str, str]]) -> None:
    from toolkit.db.connection import connect
    from toolkit.store.documents import document_hash

    with (
        connect(url) as conn,
        conn.transaction(),
        conn.cursor() as cur,
        cur.copy(
            "COPY toolkit.documents (tenant, doc_id, source, title, format, raw_text, content_hash) FROM STDIN"
        ) as copy,
    ):
        for doc_id, text in docs:
            copy.write_row((TENANT, doc_id, doc_id, doc_id, "text", text, document_hash(text)))


def register(url: str, base_url: str) -> None:
    from toolkit.db.connection import connect
    from toolkit.store.models import register_model

    with connect(url) as conn:
        register_model(conn, "fast", "openai", "bench-model", dimensions=DIMS, base_url=base_url)
        conn.commit()


def run_cli_backfill(url: str, extra: list[str]) -> dict:
    env = dict(os.environ)
    env.pop("OPENAI_API_KEY", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "--database-url", url, "backfill", "--model", "fast", "--chunker", CHUNKER,
         "--format", "json", *extra],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["state"] == "ready", report
    report["process_wall_s"] = wall
    report["without_index_s"] = report["seconds"] - (report["index_seconds"] or 0.0)
    return report


def bare_copy(url: str, version: int) -> dict:
    from psycopg import sql

    from toolkit.db.connection import connect
    from toolkit.store import versions
    from toolkit.store.chunk_table import _COPY_TYPES, CHUNK_COLUMNS, chunk_table_name

    columns = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
    with connect(url) as conn:
        table = chunk_table_name(conn, version)
        rows = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY tenant, doc_id, position").format(columns, table))
        rows = rows.fetchall()
        fresh = versions.create_version(conn, "fast", CHUNKER, "bare-copy@1")
        conn.commit()
        conn.execute("CHECKPOINT")
        conn.commit()
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(chunk_table_name(conn, fresh), columns)
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(query) as copy:
            copy.set_types([*_COPY_TYPES, "vector"])
            for row in rows:
                copy.write_row(row)
        seconds = time.perf_counter() - started
    return {"rows": len(rows), "seconds": seconds, "rows_per_s": len(rows) / seconds}


def run_real_model(pg, rows: int, repeats: int) -> dict:
    """A real local model (all-MiniLM-L6-v2): ``backfill()`` (the library call of the CLI) against the same
    embedder's bare ``embed_documents`` on exactly the texts the backfill embedded, half the bare runs before and
    half after, the model loaded and warmed before either is timed."""
    from psycopg import sql

    from toolkit.backfill import backfill
    from toolkit.chunking import get_chunker
    from toolkit.chunking.document import compose_embed_text
    from toolkit.db.connection import connect
    from toolkit.store.chunk_table import chunk_table_name
    from toolkit.store.models import embedder_for_model, register_model

    url = pg.new_database("bench_backfill_minilm")
    docs = documents(rows, seed=1)
    store(url, docs)
    with connect(url) as conn:
        model = register_model(conn, "minilm", "sentence-transformers", "all-MiniLM-L6-v2")
        conn.commit()
    embedder = embedder_for_model(model)
    embedder.embed_documents(["warm up"] * 16)
    chunker = get_chunker(CHUNKER, embedder=embedder)
    texts = [c.embed_text for doc_id, text in docs for c in chunker.chunk(text, doc_id=doc_id) if not c.is_parent]

    def bare() -> float:
        started = time.perf_counter()
        embedder.embed_documents(texts)
        return len(texts) / (time.perf_counter() - started)

    rates = [bare() for _ in range((repeats + 1) // 2)]
    report = backfill(url, "minilm", CHUNKER, embedder=embedder)
    with connect(url) as conn:
        stored = conn.execute(
            sql.SQL("SELECT heading_path, context, text FROM {} WHERE NOT is_parent").format(
                chunk_table_name(conn, report.version)
            )
        ).fetchall()
    assert sorted(compose_embed_text(tuple(h), c, t) for h, c, t in stored) == sorted(texts)
    rates += [bare() for _ in range(repeats // 2)]
    without_index = report.seconds - (report.index_seconds or 0.0)
    return {
        "rows": report.rows_written,
        "backfill_rows_per_s": report.rows_written / without_index,
        "bare_rows_per_s": statistics.median(rates),
        "bare_runs": rates,
        "ratio": report.rows_written / without_index / statistics.median(rates),
        "stages": report.stages,
        "uptime": uptime(),
    }


PGAI = "pgai[vectorizer-worker]==0.12.1"


def pgai_python(venv: Path) -> Path:
    """The Python of a virtual environment holding pgai's worker, created and installed from PyPI if missing."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "pgai").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", PGAI], check=True)
    return python


def run_pgai(url: str, venv: Path, base_url: str, docs: list[tuple[str, str]], tuned: bool) -> dict:
    """pgai's vectorizer over a plain table of the same documents: install its schema, create a vectorizer
    (column loading, its recursive splitter with chunks larger than a document, no index, no schedule), then
    time ``pgai vectorizer worker --once`` until the queue is empty."""
    import psycopg

    env = dict(os.environ, OPENAI_API_KEY="no-key-needed")
    subprocess.run([str(venv / "bin" / "pgai"), "install", "-d", url], check=True, capture_output=True, env=env)
    processing = "ai.processing_default(batch_size => 500, concurrency => 4)" if tuned else "ai.processing_default()"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE pgai_docs (id text PRIMARY KEY, body text NOT NULL)")
        with conn.cursor().copy("COPY pgai_docs (id, body) FROM STDIN") as copy:
            for doc_id, text in docs:
                copy.write_row((doc_id, text))
        conn.execute(
            "SELECT ai.create_vectorizer('public.pgai_docs'::regclass,"
            " loading => ai.loading_column('body'),"
            f" embedding => ai.embedding_openai('bench-model', {DIMS}, base_url => %s),"
            " chunking => ai.chunking_recursive_character_text_splitter(chunk_size => 4000, chunk_overlap => 0),"
            " indexing => ai.indexing_none(), scheduling => ai.scheduling_none(),"
            f" processing => {processing},"
            " destination => ai.destination_table('pgai_docs_embeddings'))",
            (base_url,),
        )
        conn.execute("CHECKPOINT")
    started = time.perf_counter()
    done = subprocess.run(
        [str(venv / "bin" / "pgai"), "vectorizer", "worker", "-d", url, "--once"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT count(*) FROM pgai_docs_embeddings_store").fetchone()[0]
    assert done.returncode == 0 and rows >= len(docs), (done.returncode, rows, done.stderr[-2000:])
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "tuned": tuned}


def run(args) -> dict:
    from ingest import Server

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "sizes": {}}
    if args.pgai_venv:
        pgai_python(args.pgai_venv)
    results["uptime_start"] = uptime()
    with Server("toolkit-bench-backfill-") as pg, EmbeddingServer() as server:
        for size, count in zip(args.rows, args.rounds, strict=True):
            docs = documents(size)
            rounds = []
            for number in range(count):
                url = pg.new_database(f"bench_backfill_{size}_{number}")
                store(url, docs)
                register(url, server.url)
                backfill = run_cli_backfill(url, args.backfill_option)
                bare = bare_copy(url, backfill["version"])
                ratio = bare["seconds"] / backfill["without_index_s"]
                entry = {"backfill": backfill, "bare_copy": bare, "ratio": ratio, "uptime": uptime()}
                if args.pgai_venv:
                    for tuned in (False, True):
                        pgai_url = pg.new_database(f"bench_pgai_{size}_{number}_{int(tuned)}")
                        entry["pgai_tuned" if tuned else "pgai"] = run_pgai(
                            pgai_url, args.pgai_venv, server.url, docs, tuned
                        )
                        print(
                            f"  pgai{' (tuned)' if tuned else ''}: {entry['pgai_tuned' if tuned else 'pgai']}",
                            flush=True,
                        )
                rounds.append(entry)
                print(
                    f"{size} rows, round {number + 1}: backfill {backfill['seconds']:.2f} s"
                    f" ({backfill['without_index_s']:.2f} s without the HNSW build), bare COPY {bare['seconds']:.2f} s,"
                    f" ratio {ratio:.2f}; {uptime()}",
                    flush=True,
                )
            results["sizes"][size] = rounds
        if args.real_rows:
            results["real"] = run_real_model(pg, args.real_rows, args.repeats)
            print(f"all-MiniLM-L6-v2: {results['real']}", flush=True)
    results["uptime_end"] = uptime()
    return results


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def render(results: dict, args) -> str:
    lines = [
        SECTION,
        "",
        f"Command: `.venv/bin/python bench/backfill.py --rows {','.join(map(str, args.rows))}"
        f" --rounds {','.join(map(str, args.rounds))}"
        + (" --pgai-venv DIR`" if args.pgai_venv else "`")
        + f" ({results['date']}). One embedded PostgreSQL 18.6 + pgvector 0.8.6, default settings; the benchmark's own"
        " OpenAI-compatible server (a separate process on 127.0.0.1, precomputed unit vectors, base64 when asked);"
        f" single-chunk documents of ~800 characters, `{CHUNKER}`, {DIMS} dimensions. `uptime` at the start:"
        f" `{results['uptime_start']}`; at the end: `{results['uptime_end']}`.",
        "",
        "| rows | round | backfill s (total) | HNSW build s | backfill s without it | bare COPY s | bare / backfill |"
        " claim / chunk / embed / write / commit s (summed over workers) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for size, rounds in results["sizes"].items():
        for number, r in enumerate(rounds, 1):
            b, s = r["backfill"], r["backfill"]["stages"]
            stages = " / ".join(f"{s.get(k, 0):.2f}" for k in ("claim", "chunk", "embed", "write", "commit"))
            lines.append(
                f"| {int(size):,} | {number} | {b['seconds']:.2f} | {b['index_seconds']:.2f} |"
                f" {b['without_index_s']:.2f} | {r['bare_copy']['seconds']:.2f} | {r['ratio']:.2f} | {stages} |"
            )
    lines.append("")
    for size, rounds in results["sizes"].items():
        ratio = statistics.median(r["ratio"] for r in rounds)
        rate = statistics.median(r["backfill"]["rows_written"] / r["backfill"]["without_index_s"] for r in rounds)
        lines.append(
            f"- {int(size):,} rows: backfill without the HNSW build / bare COPY **{ratio:.2f}×** (median of"
            f" {len(rounds)} rounds; target ≥ 0.5), {rate:,.0f} rows/s."
        )
        if all("pgai" in r for r in rounds):
            default = statistics.median(r["pgai"]["rows_per_s"] for r in rounds)
            tuned = statistics.median(r["pgai_tuned"]["rows_per_s"] for r in rounds)
            lines.append(
                f"- {int(size):,} rows, pgai 0.12.1 vectorizer worker (`pgai vectorizer worker --once`, its own"
                f" virtual environment, same server): {default:,.0f} rows/s with its defaults, {tuned:,.0f} rows/s"
                f" with batch 500 and concurrency 4; toolkit backfill / pgai: **{rate / default:.1f}×** /"
                f" {rate / tuned:.1f}×."
            )
    if "real" in results:
        real = results["real"]
        runs = ", ".join(f"{r:.1f}" for r in real["bare_runs"])
        lines.append(
            f"- A real local model, `sentence-transformers:all-MiniLM-L6-v2`, {real['rows']} rows: backfill (without"
            f" the HNSW build) {real['backfill_rows_per_s']:.1f} rows/s, the same embedder's bare `embed_documents`"
            f" on the same texts {real['bare_rows_per_s']:.1f} rows/s (runs {runs}): **{real['ratio']:.2f}×**"
            " (target ≥ 0.9)."
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rows", default="20000", help="comma-separated corpus sizes (documents = rows)")
    parser.add_argument(
        "--rounds", default="3", help="paired rounds of backfill and bare COPY per size (one number, or one per size)"
    )
    parser.add_argument(
        "--backfill-option", action="append", default=[], help="an extra `toolkit backfill` option (repeatable)"
    )
    parser.add_argument(
        "--pgai-venv",
        type=Path,
        help="also run pgai's vectorizer worker from this virtual environment (made if missing)",
    )
    parser.add_argument("--real-rows", type=int, default=300, help="rows for the real-model row (0: skip it)")
    parser.add_argument("--repeats", type=int, default=2, help="bare embed_documents runs, half before, half after")
    parser.add_argument("--write", action="store_true", help="update the section in docs/benchmarks.md")
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    args.rows = [int(x) for x in args.rows.split(",")]
    args.rounds = [int(x) for x in args.rounds.split(",")]
    if len(args.rounds) == 1:
        args.rounds *= len(args.rows)
    if len(args.rounds) != len(args.rows):
        parser.error("--rounds takes one number, or one per size in --rows")
    results = run(args)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "backfill.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    section = render(results, args)
    print()
    print(section)
    if args.write:
        from report import write_section

        write_section(ROOT / "docs" / "benchmarks.md", SECTION, section)


if __name__ == "__main__":
    main()
