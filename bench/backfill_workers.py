"""A real local model (all-MiniLM-L6-v2) through ``backfill()`` with 1 and with 2 workers, alternately, each right
after a bare ``embed_documents`` of the same texts (the paired check behind docs/benchmarks.md's note on the real
model's ratio). Uses bench/backfill.py's documents and its embedded server.

    .venv/bin/python bench/backfill_workers.py [--rows 300] [--rounds 3]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import backfill as B  # noqa: E402 - bench/backfill.py
from ingest import Server  # noqa: E402

from toolkit.backfill import backfill  # noqa: E402
from toolkit.chunking import get_chunker  # noqa: E402
from toolkit.db.connection import connect  # noqa: E402
from toolkit.store.models import embedder_for_model, register_model  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--rows", type=int, default=300)
parser.add_argument("--rounds", type=int, default=3, help="rounds of one 1-worker and one 2-worker backfill")
args = parser.parse_args()

with Server("toolkit-exp-") as pg:
    docs = B.documents(args.rows, seed=1)
    results = {1: [], 2: []}
    bare_rates = []
    embedder = None
    for round_ in range(args.rounds):
        for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
            url = pg.new_database(f"exp_{round_}_{workers}")
            B.store(url, docs)
            with connect(url) as conn:
                model = register_model(conn, "minilm", "sentence-transformers", "all-MiniLM-L6-v2")
                conn.commit()
            if embedder is None:
                embedder = embedder_for_model(model)
                embedder.embed_documents(["warm up"] * 16)
                chunker = get_chunker(B.CHUNKER, embedder=embedder)
                texts = [c.embed_text for d, t in docs for c in chunker.chunk(t, doc_id=d) if not c.is_parent]
            started = time.perf_counter()
            embedder.embed_documents(texts)
            bare_rates.append(len(texts) / (time.perf_counter() - started))
            report = backfill(url, "minilm", B.CHUNKER, embedder=embedder, workers=workers)
            rate = report.rows_written / (report.seconds - (report.index_seconds or 0.0))
            results[workers].append(rate)
            print(workers, round(rate, 1), "bare", round(bare_rates[-1], 1), flush=True)
    bare = statistics.median(bare_rates)
    for w in (1, 2):
        rate = statistics.median(results[w])
        runs = [round(r, 1) for r in bare_rates]
        print(f"workers {w}: median {rate:.1f} rows/s, ratio {rate / bare:.2f} (bare median {bare:.1f}, runs {runs})")
