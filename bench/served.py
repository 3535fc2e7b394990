"""Is what `toolkit eval` reports what applications get? For each labelled set, the default configuration is
evaluated twice with the same model: offline, as `toolkit eval` does by default (hybrid passages assembled in Python,
SQL's lexemes and settings), and from the application's side: the corpus ingested and backfilled into a real database,
every question sent through `search()` with its defaults (`toolkit.search_passages`, as the reader, on the HNSW
index) and the passages it returns scored with the same metrics (`toolkit eval --version`). Prints one Markdown
table; the two rows of a set should agree within half a point.

    nice -n 10 .venv/bin/python bench/served.py                   # sample and plain, MiniLM, recursive:128:64
    .venv/bin/python bench/served.py --model hashing:64 --sets plain   # a quick dry run
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    from toolkit import backfill
    from toolkit.db import migrate
    from toolkit.db.connection import connect
    from toolkit.db.server import start_embedded, stop_embedded
    from toolkit.embedding import get_embedder
    from toolkit.evaluation.offline import evaluate
    from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES
    from toolkit.evaluation.stored import score_stored_version
    from toolkit.ingest import ingest
    from toolkit.store.models import register_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers:all-MiniLM-L6-v2")
    parser.add_argument("--spec", default="recursive:128:64")
    parser.add_argument("--sets", default="sample,plain")
    args = parser.parse_args()
    known = {"sample": (SAMPLE_DOCS, SAMPLE_QUERIES), "plain": (PLAIN / "docs", PLAIN / "queries.jsonl")}
    provider, name = args.model.split(":", 1)
    directory = Path(tempfile.mkdtemp(prefix="toolkit-bench-served-"))
    directory.chmod(0o755)
    lines = [
        f"| set | path ({args.model.split(':')[-1]}, `{args.spec}`, k = 5) | recall@5 | span recall | span IoU "
        "| tokens / query |",
        "|" + " --- |" * 6,
    ]
    embedder = get_embedder(args.model)
    for tenant in args.sets.split(","):
        docs, queries = known[tenant]
        data_dir = directory / tenant  # a database of its own per set: the backfill embeds only this corpus
        try:
            db = start_embedded(data_dir)
            migrate.upgrade(db.url)
            with connect(db.url) as conn:
                conn.autocommit = True
                register_model(conn, "m", provider, name)
                offline = evaluate(docs, queries, [args.spec], embedder=embedder, k=5, conn=conn).configs[0]
                ingest(conn, [docs], tenant)
                started = time.perf_counter()
                version = backfill.backfill(db.url, "m", args.spec).version
                print(f"{tenant}: version {version} built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
                served = score_stored_version(conn, version, queries, k=5, tenant=tenant).configs[0]
        finally:
            stop_embedded(data_dir)
        for label, r in (("`toolkit eval` (offline, default)", offline), ("`search()` defaults", served)):
            lines.append(
                f"| {tenant} | {label} | {r.recall:.3f} | {100 * r.span_recall:.1f} | {100 * r.span_iou:.2f}"
                f" | {r.retrieved_tokens:,.0f} |"
            )
    shutil.rmtree(directory, ignore_errors=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
