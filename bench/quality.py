"""The retrieval-quality sweep of docs/evaluation.md: chunkers x sizes x context x retrieval modes, on the bundled
sample set (PostgreSQL manual, 260 template questions) and the plain-text set (bench/data/plain: licences and the
Python reference, 59 hand-written questions), with MiniLM and e5, k = 5, through `toolkit.evaluation.offline` exactly as
`toolkit eval` runs it (exact cosine, BM25 over PostgreSQL's lexemes, passages as toolkit.search_passages makes
them: k x passage_chunks mean chunks of tokens).

Prints one Markdown table per model and set (span recall and IoU as Chroma's report defines them, recall@5,
tokens and passages per query), the frontier plot (docs/frontier.png), the chunking cost of the embedding
strategies, and the full report as JSON. Embeddings go through the on-disk cache, so a rerun embeds nothing new.
Full text needs PostgreSQL: an embedded server is started in a temporary folder (or pass --database-url).

    nice -n 10 .venv/bin/python bench/quality.py                          # the documented sweep
    .venv/bin/python bench/quality.py --models hashing:64 --sets plain     # a quick dry run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAIN = ROOT / "bench" / "data" / "plain"
MODELS = ["sentence-transformers:all-MiniLM-L6-v2", "e5:multilingual-e5-small"]
# Sizes within MiniLM's 256 word pieces (and a 256 row to show what larger chunks cost); overlap 0 or half.
CONFIGS = [
    "fixed:128:64",
    "sentence:128:0",
    "recursive:100:50",
    "recursive:128:0",
    "recursive:128:64",
    "recursive:128:64:context=title",
    "recursive:200:0",
    "recursive:200:100",
    "recursive:256:0",
    "markdown:128:0",
    "markdown:128:0:context=title",
    "markdown:200:0",
    "cluster:128:0",
]
E5_CONFIGS = ["recursive:128:0", "recursive:128:64", "recursive:200:100"]
RETRIEVALS = "vector,hybrid:assemble=off,hybrid:rrf_k=60,hybrid"


def sets(names: list[str]) -> dict:
    from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

    known = {"sample": (SAMPLE_DOCS, SAMPLE_QUERIES), "plain": (PLAIN / "docs", PLAIN / "queries.jsonl")}
    return {name: known[name] for name in names}


def markdown_table(report) -> str:
    lines = [
        "| configuration | retrieval | chunks | span recall | IoU | recall@5 | tokens / query | passages | frontier |",
        "|" + " --- |" * 9,
    ]
    for r in sorted(report.configs, key=lambda r: (-r.span_recall, r.retrieved_tokens)):
        lines.append(
            f"| `{r.spec}` | {r.retrieval} | {r.chunks:,} | {100 * r.span_recall:.1f} | {100 * r.span_iou:.2f} "
            f"| {r.recall:.3f} | {r.retrieved_tokens:,.0f} | {r.passages:.1f} | {'yes' if r.pareto else ''} |"
        )
    return "\n".join(lines)


def mark_span_frontier(results) -> None:
    """Pareto on span recall (higher) against IoU (higher): the trade-off the issue's goal is stated in."""
    for r in results:
        r.pareto = not any(
            o is not r
            and o.span_recall >= r.span_recall
            and o.span_iou >= r.span_iou
            and (o.span_recall > r.span_recall or o.span_iou > r.span_iou)
            for o in results
        )


def plot(reports: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(reports), figsize=(6.5 * len(reports), 5.5), dpi=100, squeeze=False)
    for axis, ((model, name), report) in zip(axes[0], reports.items(), strict=True):
        colours = {"vector": "tab:gray", "hybrid:assemble=off": "tab:orange", "hybrid:rrf_k=60": "tab:green",
                   "hybrid": "tab:blue"}  # fmt: skip
        for retrieval, colour in colours.items():
            points = [r for r in report.configs if r.retrieval == retrieval]
            axis.scatter([100 * r.span_iou for r in points], [100 * r.span_recall for r in points], s=28,
                         color=colour, label=retrieval, alpha=0.85)  # fmt: skip
        for r in report.configs:
            if r.pareto:
                axis.annotate(r.spec, (100 * r.span_iou, 100 * r.span_recall), xytext=(4, 3),
                              textcoords="offset points", fontsize=6.5)  # fmt: skip
        axis.axhline(85, color="tab:red", linewidth=0.8, linestyle=":")
        axis.axvline(7, color="tab:red", linewidth=0.8, linestyle=":")
        axis.set_xlabel("span IoU (%)")
        axis.set_ylabel("span recall (%)")
        axis.set_title(f"{name}: {report.queries} questions, {model.split(':')[-1]}, k = {report.k}", fontsize=9)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="lower left")
    figure.suptitle("span recall against IoU (Chroma's definitions); dotted: recall 85, IoU 7", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)


def chunking_cost(model_ref: str) -> list[str]:
    """Seconds per MB and per piece (sentence) for the strategies that embed while chunking, cold (no cache), on
    two chapters of the sample."""
    from toolkit.chunking import get_chunker
    from toolkit.chunking.document import Document, Span
    from toolkit.chunking.sentence import sentence_spans
    from toolkit.chunking.split import split_range
    from toolkit.embedding import get_embedder
    from toolkit.evaluation.queries import read_sample_documents

    embedder = get_embedder(model_ref)
    # Two chapters (70 KB): the cost is per piece and per byte, and cold embedding of all 492 KB takes minutes.
    documents = {d: t for d, t in read_sample_documents().items() if d in ("row-security.md", "concurrency-control.md")}
    megabytes = sum(len(t.encode()) for t in documents.values()) / 1e6
    lines = []
    for spec in ("semantic:128:0", "cluster:128:0", "recursive:128:64"):
        chunker = get_chunker(spec, embedder=embedder)
        if spec.startswith("semantic"):
            units = sum(len(sentence_spans(t)) for t in documents.values())
        elif spec.startswith("cluster"):
            units = sum(
                len(split_range(Document(t, chunker.tokenizer, "tokens"), Span(0, len(t)), chunker.piece))
                for t in documents.values()
            )
        else:
            units = 0
        started = time.perf_counter()
        chunks = sum(len(chunker.chunk(t, d)) for d, t in documents.items())
        seconds = time.perf_counter() - started
        per_unit = f"{1000 * seconds / units:.1f} ms per embedded piece ({units:,})" if units else "no embedding"
        lines.append(f"| `{spec}` | {chunks:,} | {seconds:.1f} | {seconds / megabytes:.1f} | {per_unit} |")
    return ["| strategy | chunks | seconds | seconds / MB | per piece |", "|" + " --- |" * 5, *lines]


LEXICAL_SPEC = "recursive:128:64"
LEXICAL_RETRIEVALS = (
    "vector:assemble=off,hybrid:assemble=off,vector,text,hybrid,hybrid:rrf_k=60,hybrid:rrf_k=30,hybrid:rrf_k=2,hybrid:candidates=20,hybrid:candidates=100,"
    "hybrid:b=0,hybrid:b=0.3,hybrid:k1=0.9,hybrid:k1=2,hybrid:config=simple"
)


def legacy_text_ranks(conn, chunks, questions, config: str = "english", depth: int = 50) -> list[list[int]]:
    """The full-text ranking hybrid_search_chunks used before BM25: chunks holding every term of
    websearch_to_tsquery first, then any term, by ts_rank_cd(fts, query, 1), ties by chunk id; computed by
    PostgreSQL itself on a temporary table of the chunks."""
    with conn.transaction():
        conn.execute("CREATE TEMP TABLE legacy (n integer, chunk_id text, fts tsvector) ON COMMIT DROP")
        conn.execute(
            "INSERT INTO legacy SELECT t.n, t.id, to_tsvector(%s::regconfig, toolkit.chunk_search_text(t.c, t.b))"
            " FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t (id, c, b, n)",
            (config, [c.chunk_id for c in chunks], [c.context for c in chunks], [c.text for c in chunks]),
        )
        ranks = []
        for question in questions:
            rows = conn.execute(
                "WITH q AS (SELECT websearch_to_tsquery(%s::regconfig, %s) AS all_terms),"
                " a AS (SELECT q.all_terms, CASE WHEN strpos(q.all_terms::text, '!') = 0"
                "  THEN replace(q.all_terms::text, ' & ', ' | ')::tsquery ELSE q.all_terms END AS any_term FROM q)"
                " SELECT l.n FROM legacy AS l, a WHERE l.fts @@ a.any_term"
                " ORDER BY l.fts @@ a.all_terms DESC, ts_rank_cd(l.fts, a.any_term, 1) DESC, l.chunk_id LIMIT %s",
                (config, question, depth),
            ).fetchall()
            ranks.append([n - 1 for (n,) in rows])
    return ranks


def lexical_study(conn, embedder, cache, name, docs, queries) -> list[str]:
    """The lexical side on one configuration: BM25's k1 and b, the text search configuration, RRF's k, the
    candidates per list, full text alone, and the ranking used before BM25 (ts_rank_cd), each with assembly."""
    from toolkit.chunking import get_chunker
    from toolkit.evaluation.offline import evaluate, read_corpus
    from toolkit.evaluation.queries import load_queries
    from toolkit.evaluation.retrieval import cosine_distances, fuse, order_by, passage_budget
    from toolkit.evaluation.scoring import score_config

    report = evaluate(docs, queries, LEXICAL_SPEC, embedder=embedder, k=5, cache=cache, retrieval=LEXICAL_RETRIEVALS,
                      conn=conn)  # fmt: skip
    rows = [(r.retrieval, r) for r in report.configs]
    # The ranking before BM25, fused the same way (RRF k = 60, its default then, and 10).
    documents = read_corpus(docs)
    labelled = load_queries(queries, documents)
    chunker = get_chunker(LEXICAL_SPEC, embedder=embedder)
    chunks = [c for d, t in documents.items() for c in chunker.chunk(t, d)]
    ids = [c.chunk_id for c in chunks]
    vectors = cache.embed_documents(embedder, [c.embed_text for c in chunks])
    distances = cosine_distances(cache.embed_queries(embedder, [q.query for q in labelled]), vectors)
    vector_orders = [order_by(row, ids, descending=False)[:50] for row in distances]
    legacy = legacy_text_ranks(conn, chunks, [q.query for q in labelled])
    for rrf_k in (60, 10):
        hits = [[chunks[i] for i in fuse(v, t, ids, 20, rrf_k)] for v, t in zip(vector_orders, legacy, strict=True)]
        result = score_config(LEXICAL_SPEC, chunker.version, chunks, None, hits, documents, labelled, 5, 2.0,
                              budget=passage_budget(5, [c.token_count for c in chunks], 1.5))  # fmt: skip
        rows.append((f"hybrid with ts_rank_cd (before BM25), rrf_k={rrf_k}", result))
    lines = [f"| retrieval ({name}, `{LEXICAL_SPEC}`) | span recall | IoU | recall@5 | tokens / query |",
             "|" + " --- |" * 5]  # fmt: skip
    for label, r in rows:
        lines.append(f"| {label} | {100 * r.span_recall:.1f} | {100 * r.span_iou:.2f} | {r.recall:.3f} "
                     f"| {r.retrieved_tokens:,.0f} |")  # fmt: skip
    return lines


def main() -> None:
    from toolkit.db import migrate
    from toolkit.db.connection import connect
    from toolkit.db.server import start_embedded, stop_embedded
    from toolkit.embedding import get_embedder
    from toolkit.embedding.cache import EmbeddingCache, default_cache_dir
    from toolkit.evaluation.offline import evaluate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--sets", default="sample,plain")
    parser.add_argument("--e5-sets", default=None, help="the sets for the models other than MiniLM (default: --sets)")
    parser.add_argument("--configs", default=None, help="chunker specs (default: the documented grid)")
    parser.add_argument("--retrievals", default=RETRIEVALS)
    parser.add_argument("--plot", default=str(ROOT / "docs" / "frontier.png"))
    parser.add_argument("--json", default="/tmp/toolkit-quality.json")
    parser.add_argument("--cache-dir", default=str(default_cache_dir()))
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--no-cost", action="store_true", help="skip the chunking-cost timings")
    parser.add_argument("--lexical-study", action="store_true", help="only the study of the lexical side (MiniLM)")
    args = parser.parse_args()

    data_dir = None
    url = args.database_url
    if url is None:
        data_dir = Path(tempfile.mkdtemp(prefix="toolkit-quality-pg-"))
        data_dir.chmod(0o755)
        url = start_embedded(data_dir).url
    migrate.upgrade(url)
    started = time.monotonic()
    reports = {}
    if args.lexical_study:
        try:
            with connect(url, autocommit=True) as conn, EmbeddingCache(args.cache_dir) as cache:
                embedder = get_embedder(args.models.split(",")[0])
                for name, (docs, queries) in sets(args.sets.split(",")).items():
                    print("\n".join(lexical_study(conn, embedder, cache, name, docs, queries)), "\n", flush=True)
        finally:
            if data_dir is not None:
                stop_embedded(data_dir)
                shutil.rmtree(data_dir, ignore_errors=True)
        return
    try:
        with connect(url, autocommit=True) as conn, EmbeddingCache(args.cache_dir) as cache:
            for model_ref in args.models.split(","):
                embedder = get_embedder(model_ref)
                small = "MiniLM" in model_ref or "hashing" in model_ref
                grid = args.configs or ",".join(CONFIGS if small else E5_CONFIGS)
                chosen = args.sets if small or not args.e5_sets else args.e5_sets
                for name, (docs, queries) in sets(chosen.split(",")).items():
                    t0 = time.monotonic()
                    report = evaluate(docs, queries, grid, embedder=embedder, k=5, cache=cache, progress=True,
                                      retrieval=args.retrievals, conn=conn)  # fmt: skip
                    mark_span_frontier(report.configs)
                    reports[(model_ref, name)] = report
                    print(
                        f"\n### {name} set, {model_ref} ({report.queries} questions, {report.documents} documents, "
                        f"k = 5; {report.embedded_texts:,} texts embedded, {time.monotonic() - t0:.0f} s)\n"
                    )
                    print(markdown_table(report), flush=True)
    finally:
        if data_dir is not None:
            stop_embedded(data_dir)
            shutil.rmtree(data_dir, ignore_errors=True)
    plot(reports, Path(args.plot))
    Path(args.json).write_text(
        json.dumps({f"{m} | {s}": r.to_dict() for (m, s), r in reports.items()}, indent=1), encoding="utf-8"
    )
    if not args.no_cost:
        print("\nChunking cost on two chapters of the sample (70 KB; cold, no cache):\n")
        print("\n".join(chunking_cost(args.models.split(",")[0])))
    print(f"\n{time.monotonic() - started:.0f} s wall clock; machine: {platform.platform()}, {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}; plot {args.plot}; report {args.json}")  # fmt: skip


if __name__ == "__main__":
    main()
