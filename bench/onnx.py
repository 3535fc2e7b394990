"""The runtimes of all-MiniLM-L6-v2 (torch, ONNX Runtime fp32, ONNX Runtime int8): speed, memory, vectors and
retrieval quality, measured to pick the default (docs/embedding.md, "Runtimes").

    .venv/bin/python bench/onnx.py speed [--out FILE]    # chunks/s, peak RSS: fresh processes, paired, median of 3
    .venv/bin/python bench/onnx.py quality [--out FILE]  # recall@5, span recall per runtime: sample, bench/data/plain
    .venv/bin/python bench/onnx.py cold [--out FILE]     # the first query of a fresh process: seconds, peak RSS
    .venv/bin/python bench/onnx.py search [--out FILE]   # a cold `toolkit search` per runtime: seconds, peak RSS

speed: each run is a fresh Python process that loads the runtime, embeds the same texts (the ~1000 METADATA
paragraphs of bench/embedding.py) once to warm up on 16 of them, then all of them once; the runtimes take turns in
each round (paired), rounds rotate the order. First the defaults (threads as each library chooses), then one thread
(chunks per CPU-second). The ONNX export must be cached already (a first use makes it; it is not timed here).
quality: ``toolkit eval``'s evaluation (recursive:128:64, k = 5, hybrid retrieval, the recommended one) on the
bundled sample set and on bench/data/plain, against a throwaway embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RUNTIMES = ("torch", "onnx", "onnx-int8")
MODEL = "sentence-transformers:all-MiniLM-L6-v2"
SECTION = "## Local model runtimes"


# -- one measured process ------------------------------------------------------------------------------------------
def child(runtime: str, threads: int | None, limit: int, sort: bool) -> None:
    """Runs in a fresh process: load, warm up, embed ``limit`` paragraphs; one JSON line on stdout."""
    import resource

    started = time.perf_counter()
    from toolkit.embedding import get_embedder

    options = {"runtime": runtime, "batch_size": 32}
    if threads and runtime == "torch":
        import torch

        torch.set_num_threads(threads)
    elif threads:
        options["threads"] = threads
    embedder = get_embedder(MODEL, **options)
    if not sort and embedder._onnx is not None:
        embed = embedder._onnx.embed
        embedder._onnx.embed = lambda texts, batch_size, sort=True: embed(texts, batch_size, sort=False)
    load = time.perf_counter() - started
    from embedding import paragraphs  # bench/embedding.py's corpus

    texts = [t for t in paragraphs(limit=limit + 200) if embedder.count_tokens(t) <= embedder.max_input_tokens][:limit]
    embedder.embed_documents(texts[:16])
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = embedder.embed_documents(texts)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = Path(os.environ["BENCH_VECTORS"]) if os.environ.get("BENCH_VECTORS") else None
    if out:
        import numpy as np

        np.save(out, vectors)
    print(
        json.dumps(
            {
                "runtime": runtime,
                "texts": len(texts),
                "chunks_per_s": len(texts) / wall,
                "chunks_per_cpu_s": len(texts) / cpu,
                "peak_rss_mb": peak,
                "load_s": load,
                "torch_imported": "torch" in sys.modules,
            }
        )
    )


def spawn(runtime: str, threads: int | None, limit: int, sort: bool = True, vectors: Path | None = None) -> dict:
    env = dict(os.environ, BENCH_VECTORS=str(vectors) if vectors else "")
    command = [sys.executable, __file__, "child", runtime, str(threads or 0), str(limit), "1" if sort else "0"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{runtime} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def speed(repeats: int, limit: int) -> str:
    import tempfile

    import numpy as np
    from report import cpu_name

    from toolkit.embedding import get_embedder

    for runtime in ("onnx", "onnx-int8"):  # the export is made (once) outside the timed runs
        get_embedder(MODEL, runtime=runtime)
    load_before = os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="bench-onnx-"))
    setups = [(runtime, None, True) for runtime in RUNTIMES]
    setups += [(runtime, 1, True) for runtime in RUNTIMES]
    setups += [("onnx", None, False)]  # onnx-int8 runs each text alone: no padding to save
    results: dict[tuple, list[dict]] = {setup: [] for setup in setups}
    for round_ in range(repeats):
        shift = round_ % len(RUNTIMES)
        for group in (setups[0:3], setups[3:6], setups[6:]):
            ordered = group[shift % len(group) :] + group[: shift % len(group)]
            for setup in ordered:
                runtime, threads, sort = setup
                keep = scratch / f"{runtime}.npy" if round_ == 0 and threads is None and sort else None
                found = spawn(runtime, threads, limit, sort, keep)
                results[setup].append(found)
                print(f"{runtime} threads={threads or 'default'} sort={sort}: {found}", flush=True)
    torch_vectors, fp32, int8 = (np.load(scratch / f"{runtime}.npy") for runtime in RUNTIMES)
    fp32_gap = float((1 - (torch_vectors * fp32).sum(1)).max())
    int8_cos = (fp32 * int8).sum(1)
    texts = results[setups[0]][0]["texts"]

    def median(setup, key):
        return statistics.median(run[key] for run in results[setup])

    base = median(("torch", None, True), "chunks_per_s")
    base_cpu = median(("torch", 1, True), "chunks_per_cpu_s")
    lines = [
        SECTION,
        "",
        f"Command: `.venv/bin/python bench/onnx.py speed` ({time.strftime('%Y-%m-%d')}). {texts} prose "
        f"paragraphs (bench/embedding.py's corpus), embedded as documents in one call after a 16-text warm-up; each "
        f"run a fresh process, the runtimes taking turns (paired), median of {repeats}. Machine: {cpu_name()}, "
        f"{os.cpu_count()} cores shared with other work (1-minute load {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after).",
        "",
        "| runtime | threads | length-sorted batches | chunks/s (wall) | vs torch | chunks per CPU-second | "
        "peak RSS (MB) | load (s) | torch imported |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for setup in setups:
        runtime, threads, sort = setup
        rate = median(setup, "chunks_per_s")
        ratio = rate / base if threads is None else median(setup, "chunks_per_cpu_s") / base_cpu
        lines.append(
            f"| `{runtime}` | {threads or 'default'} | {'yes' if sort else 'no'} | {rate:.1f} | {ratio:.2f}× | "
            f"{median(setup, 'chunks_per_cpu_s'):.1f} | {median(setup, 'peak_rss_mb'):.0f} | "
            f"{median(setup, 'load_s'):.1f} | {'yes' if results[setup][0]['torch_imported'] else 'no'} |"
        )
    lines += [
        "",
        f"Vectors on these {texts} texts: fp32 ONNX against torch, max 1 − cos = {fp32_gap:.1e}; int8 against fp32, "
        f'cosine mean {int8_cos.mean():.4f}, min {int8_cos.min():.4f}. "vs torch" compares wall-clock rates for '
        "the default threads and CPU-second rates for one thread. sentence-transformers sorts by length itself, "
        "so torch has no unsorted row; onnx-int8 embeds each text alone (its vectors must not depend on the batch), "
        "so it has no padding either.",
        "",
    ]
    return "\n".join(lines)


# -- retrieval quality ---------------------------------------------------------------------------------------------
def quality() -> str:
    from toolkit.embedding import get_embedder
    from toolkit.evaluation.baseline import _lexical_database
    from toolkit.evaluation.offline import evaluate
    from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

    sets = {
        "sample (toolkit/data/sample)": (SAMPLE_DOCS, SAMPLE_QUERIES),
        "bench/data/plain": (ROOT / "bench/data/plain/docs", ROOT / "bench/data/plain/queries.jsonl"),
    }
    config, k, retrieval = "recursive:128:64", 5, "hybrid"
    rows = []
    with _lexical_database() as conn:
        for label, (docs, queries) in sets.items():
            for runtime in ("onnx", "onnx-int8"):  # torch's vectors are fp32 ONNX's (bench/onnx.py speed)
                started = time.perf_counter()
                report = evaluate(
                    docs,
                    queries,
                    [config],
                    embedder=get_embedder(MODEL, runtime=runtime),
                    k=k,
                    retrieval=retrieval,
                    conn=conn,
                )
                (result,) = report.configs
                rows.append((label, runtime, report.queries, result, time.perf_counter() - started))
                print(label, runtime, result.recall, result.span_recall, flush=True)
    lines = [
        "### Retrieval quality by runtime",
        "",
        f"Command: `.venv/bin/python bench/onnx.py quality` ({time.strftime('%Y-%m-%d')}): `toolkit eval`'s "
        f"evaluation with `{config}`, k = {k}, `{retrieval}` retrieval (the recommended one), each runtime's own "
        "vectors (`--model sentence-transformers:all-MiniLM-L6-v2:runtime=R`).",
        "",
        "| set | runtime | queries | recall@5 | span recall | span IoU | MRR | seconds |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, runtime, queries, result, seconds in rows:
        lines.append(
            f"| {label} | `{runtime}` | {queries} | {result.recall:.4f} | {result.span_recall:.4f} | "
            f"{result.span_iou:.4f} | {result.mrr:.4f} | {seconds:.0f} |"
        )
    lines.append("")
    return "\n".join(lines)


# -- cold start ----------------------------------------------------------------------------------------------------
COLD = """
import resource, sys, time
started = time.perf_counter()
from toolkit.embedding import get_embedder
vector = get_embedder({model!r}, runtime={runtime!r}).embed_query("how do I reset my password")
print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "torch" in sys.modules)
"""


def cold(repeats: int) -> str:
    """The first query embedding of a fresh process (what a cold `toolkit search` pays before its SQL)."""
    results: dict[str, list[tuple[float, float, bool]]] = {runtime: [] for runtime in RUNTIMES}
    for round_ in range(repeats):
        for runtime in RUNTIMES[round_ % 3 :] + RUNTIMES[: round_ % 3]:
            code = COLD.format(model=MODEL, runtime=runtime)
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            seconds, rss, torch_imported = done.stdout.split()
            results[runtime].append((float(seconds), float(rss), torch_imported == "True"))
            print(runtime, results[runtime][-1], flush=True)
    lines = [
        "### Cold start: the first query of a process",
        "",
        f"Command: `.venv/bin/python bench/onnx.py cold` ({time.strftime('%Y-%m-%d')}): a fresh Python "
        f"process imports the toolkit, builds the embedder and embeds one query; median of {repeats}, load "
        f"{os.getloadavg()[0]:.1f}.",
        "",
        "| runtime | seconds | peak RSS (MB) | torch imported |",
        "| --- | ---: | ---: | --- |",
    ]
    for runtime, runs in results.items():
        lines.append(
            f"| `{runtime}` | {statistics.median(r[0] for r in runs):.2f} | "
            f"{statistics.median(r[1] for r in runs):.0f} | {'yes' if runs[0][2] else 'no'} |"
        )
    lines.append("")
    return "\n".join(lines)


# Runs one command and prints its peak RSS (kB): RUSAGE_CHILDREN of a process with that one child.
MEASURE = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def cold_search(repeats: int) -> str:
    """A cold `toolkit search --version N` per runtime, N a version of that runtime's model, on a throwaway
    embedded PostgreSQL holding 8 sample documents: wall time and peak RSS of the whole command."""
    import shutil
    import tempfile

    from toolkit import backfill
    from toolkit.db import connection, migrate, server
    from toolkit.evaluation.queries import SAMPLE_DOCS
    from toolkit.ingest import ingest
    from toolkit.store.models import register_model

    directory = Path(tempfile.mkdtemp(prefix="bench-onnx-search-"))
    directory.chmod(0o755)
    corpus = directory / "docs"
    corpus.mkdir()
    for path in sorted(SAMPLE_DOCS.rglob("*.md"))[:8]:
        shutil.copy(path, corpus / path.name)
    results: dict[str, list[tuple[float, float]]] = {runtime: [] for runtime in RUNTIMES}
    try:
        db = server.start_embedded(directory / "pg")
        migrate.upgrade(db.url)
        with connection.connect(db.url, autocommit=True) as conn:
            for runtime in RUNTIMES:
                register_model(conn, runtime, "sentence-transformers", "all-MiniLM-L6-v2", options={"runtime": runtime})
            ingest(conn, [corpus], "bench")
        versions = {runtime: backfill.backfill(db.url, runtime, "recursive:128:64").version for runtime in RUNTIMES}
        toolkit = str(Path(sys.executable).with_name("toolkit"))
        for round_ in range(repeats):
            for runtime in RUNTIMES[round_ % 3 :] + RUNTIMES[: round_ % 3]:
                command = [toolkit, "--database-url", db.url, "search", "how do I configure the server?"]
                command += ["--tenant", "bench", "--version", str(versions[runtime])]
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True)
                seconds = time.perf_counter() - started
                if done.returncode:
                    raise SystemExit(f"toolkit search failed:\n{done.stderr[-2000:]}")
                results[runtime].append((seconds, int(done.stdout.split()[-1]) / 1024))
                print(runtime, results[runtime][-1], flush=True)
    finally:
        server.stop_embedded(directory / "pg")
        shutil.rmtree(directory, ignore_errors=True)
    lines = [
        "### Cold `toolkit search`",
        "",
        f"Command: `.venv/bin/python bench/onnx.py search` ({time.strftime('%Y-%m-%d')}): `toolkit search "
        "--version N` in a fresh process, N a version of a model registered with that runtime (8 sample documents, "
        f"throwaway embedded PostgreSQL); median of {repeats}, load {os.getloadavg()[0]:.1f}.",
        "",
        "| runtime | seconds | peak RSS (MB) |",
        "| --- | ---: | ---: |",
    ]
    for runtime, runs in results.items():
        seconds, peak = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        lines.append(f"| `{runtime}` | {seconds:.2f} | {peak:.0f} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        runtime, threads, limit, sort = sys.argv[2:6]
        child(runtime, int(threads) or None, int(limit), sort == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["speed", "quality", "cold", "search"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=1000, help="paragraphs embedded per run (speed)")
    parser.add_argument("--out", help="also write the table (markdown) to this file, for docs/benchmarks.md")
    args = parser.parse_args()
    if args.what == "speed":
        text = speed(args.repeats, args.limit)
    elif args.what == "quality":
        text = quality()
    elif args.what == "cold":
        text = cold(args.repeats)
    else:
        text = cold_search(args.repeats)
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
