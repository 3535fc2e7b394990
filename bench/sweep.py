"""The chunking sweep of docs/evaluation.md: six chunker configurations on the bundled sample corpus (seven
PostgreSQL manual chapters, 260 labelled queries), embedded with a real model, through `toolkit.evaluation.offline`.

Prints the table as Markdown, writes the frontier plot (/tmp/toolkit-sweep.png by default; docs/frontier.png is
bench/quality.py's) and the full report as JSON. Vector ranking, k chunks per question: the chunkers alone.
Embeddings go through the on-disk cache (~/.cache/toolkit), so a second run embeds nothing.

    .venv/bin/python bench/sweep.py                                   # e5, the six configurations
    .venv/bin/python bench/sweep.py --model hashing:64 --plot /tmp/x.png   # a quick dry run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [
    "fixed:200:0",
    "sentence:200:1",
    "recursive:400:0",
    "markdown:400:40",
    "markdown:200:20",
    "sentence:100:0:parent=markdown,800,0",
]


def markdown_table(report) -> str:
    header = (
        "| configuration | chunks | tokens / chunk | cut answers | recall@5 | MRR | nDCG@5 | span recall "
        "| span precision | IoU | precision-Ω | tokens / query | $ / query | frontier |"
    )
    lines = [header, "|" + " --- |" * 14]
    for r in report.configs:
        chunks = f"{r.chunks:,}" if r.parents is None else f"{r.chunks:,} (+{r.parents:,} parents)"
        lines.append(
            f"| `{r.spec}` | {chunks} | {r.mean_chunk_tokens:.0f} | {r.cut_answers}/{r.answers} | {r.recall:.3f} "
            f"| {r.mrr:.3f} | {r.ndcg:.3f} | {r.span_recall:.3f} | {r.span_precision:.3f} | {r.span_iou:.3f} "
            f"| {r.precision_omega:.3f} | {r.retrieved_tokens:,.0f} | {r.input_cost_per_query:.4f} "
            f"| {'yes' if r.pareto else ''} |"
        )
    return "\n".join(lines)


def recall_by_kind(report, queries_path: Path) -> str:
    """recall@k of each configuration per query kind (the sample set's `kind`: heading, definition, ...)."""
    kinds = {}
    for number, line in enumerate(queries_path.read_text().splitlines(), start=1):
        if line.strip():
            kinds[number] = json.loads(line).get("kind", "-")
    order = list(dict.fromkeys(kinds.values()))
    counts = {kind: sum(1 for k in kinds.values() if k == kind) for kind in order}
    lines = ["| configuration | " + " | ".join(f"{kind} ({counts[kind]})" for kind in order) + " |"]
    lines.append("|" + " --- |" * (len(order) + 1))
    for r in report.configs:
        cells = []
        for kind in order:
            ranks = [rank for rank, number in zip(r.ranks, kinds, strict=True) if kinds[number] == kind]
            cells.append(f"{sum(rank is not None for rank in ranks) / len(ranks):.3f}")
        lines.append(f"| `{r.spec}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    from toolkit.embedding import get_embedder
    from toolkit.embedding.cache import EmbeddingCache, default_cache_dir
    from toolkit.evaluation.frontier import plot_frontier
    from toolkit.evaluation.offline import evaluate
    from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="e5:multilingual-e5-small")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--plot", default="/tmp/toolkit-sweep.png")
    parser.add_argument("--json", default="/tmp/toolkit-sweep.json", help="where the full report is written")
    parser.add_argument("--cache-dir", default=str(default_cache_dir()))
    args = parser.parse_args()

    started = time.monotonic()
    embedder = get_embedder(args.model)
    with EmbeddingCache(args.cache_dir) as cache:
        report = evaluate(
            SAMPLE_DOCS,
            SAMPLE_QUERIES,
            args.configs,
            embedder=embedder,
            k=args.k,
            cache=cache,
            progress=True,
            retrieval="vector:assemble=off",  # the chunkers alone, k chunks (bench/quality.py measures the rest)
        )
    elapsed = time.monotonic() - started
    plot_frontier(report, args.plot)
    Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    print(markdown_table(report))
    print()
    print(recall_by_kind(report, Path(SAMPLE_QUERIES)))
    print()
    print(
        f"{report.queries} queries, {report.documents} documents, model {report.model} "
        f"(revision {getattr(embedder, 'revision', None)}), k = {report.k}; {report.embedded_texts:,} texts embedded, "
        f"{report.cache_hits:,} cache hits; {elapsed:.0f} s wall clock"
    )
    print("seconds per configuration:", ", ".join(f"{r.spec} {r.seconds:.0f}" for r in report.configs))
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"plot: {args.plot}; report: {args.json}")


if __name__ == "__main__":
    main()
