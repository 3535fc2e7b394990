"""`toolkit serve` under load through a cutover and a rollback, against calling ``search()`` in process.

Two versions of the bundled sample corpus (hashing embedders of 384 and 256 dimensions, so the cost measured is the
serving path's, not a model's), the first active. Phase 1: 8 threads call ``toolkit.search.search`` directly, each
on its own connection, for DURATION seconds. Phase 2: 8 HTTP clients (httpx, keep-alive) post the same questions to
``toolkit serve`` (a separate process, ``--pool-size 8``) for DURATION seconds. In both phases the first version is
cut over to the second at a third of the time and rolled back at two thirds. Reported per phase: requests, errors,
answers whose rows were not all from the version named (the header for HTTP, the hits' own for direct calls),
versions seen, and p50 / p95 latency.

    .venv/bin/python bench/serve.py            # print the results
    .venv/bin/python bench/serve.py --write    # also replace the "## toolkit serve" section of docs/benchmarks.md

It runs its own embedded PostgreSQL in a temporary directory under /tmp and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest import Server, load_average  # noqa: E402 - bench/ingest.py: the embedded server
from report import cpu_name, write_section  # noqa: E402

SECTION = "## toolkit serve"
CLIENTS = 8
DURATION = 30.0
TENANT = "acme"
K = 5
SAMPLE = ROOT / "toolkit" / "data" / "sample"


def questions() -> list[str]:
    lines = (SAMPLE / "queries.jsonl").read_text().splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def prepare(url: str) -> tuple[int, int]:
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest
    from toolkit.store.models import Model, insert_model

    with connect(url, autocommit=True) as conn:
        for alias, dims, seed in (("hash-a", 384, 1), ("hash-b", 256, 2)):
            insert_model(
                conn,
                Model(
                    alias=alias,
                    provider="hashing",
                    model_name=str(dims),
                    dimensions=dims,
                    max_input_tokens=8192,
                    options={"seed": seed},
                    query_prefix="query: ",
                ),
            )
        ingest(conn, [SAMPLE / "docs"], TENANT)
    first = backfill(url, "hash-a", "recursive:200:0").version
    second = backfill(url, "hash-b", "fixed:128:0").version
    with connect(url, autocommit=True) as conn:
        cutover.activate_version(conn, first, force=True)
    return first, second


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


class Phase:
    def __init__(self, name: str):
        self.name = name
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.mixed = 0
        self.versions: dict[int, int] = {}
        self.lock = threading.Lock()

    def record(self, seconds: float, versions: set[int], named: int | None) -> None:
        with self.lock:
            self.latencies.append(seconds * 1000)
            if len(versions) > 1 or (named is not None and versions and versions != {named}):
                self.mixed += 1
            for v in versions:
                self.versions[v] = self.versions.get(v, 0) + 1

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)

    def row(self) -> dict:
        return {
            "path": self.name,
            "requests": len(self.latencies) + len(self.errors),
            "errors": len(self.errors),
            "mixed": self.mixed,
            "versions": ", ".join(f"v{v}: {n}" for v, n in sorted(self.versions.items())),
            "p50_ms": percentile(self.latencies, 0.5),
            "p95_ms": percentile(self.latencies, 0.95),
        }


def run_phase(phase: Phase, url: str, versions: tuple[int, int], work) -> None:
    """``work(index, question)`` -> (versions of the rows, version named or None), by CLIENTS threads for DURATION
    seconds, with a cutover at a third and a rollback at two thirds."""
    from toolkit import cutover
    from toolkit.db.connection import connect

    asked = questions()
    stop = threading.Event()

    def client(index: int) -> None:
        n = index
        while not stop.is_set():
            question = asked[n % len(asked)]
            n += CLIENTS
            began = time.perf_counter()
            try:
                got, named = work(index, question)
            except Exception as error:  # every failure counts; the benchmark reports them
                phase.fail(f"{type(error).__name__}: {error}")
                continue
            phase.record(time.perf_counter() - began, got, named)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    with connect(url, autocommit=True) as conn:
        time.sleep(DURATION / 3)
        cutover.activate_version(conn, versions[1], force=True)
        time.sleep(DURATION / 3)
        cutover.roll_back(conn)
        time.sleep(DURATION / 3)
    stop.set()
    for thread in threads:
        thread.join()


def direct(url: str, versions: tuple[int, int]) -> Phase:
    from toolkit.db.connection import connect
    from toolkit.search import search

    phase = Phase("search() in process")
    connections = [connect(url, autocommit=True) for _ in range(CLIENTS)]

    def work(index: int, question: str):
        hits = search(connections[index], question, TENANT, K)
        return {h.version for h in hits}, None

    try:
        run_phase(phase, url, versions, work)
    finally:
        for conn in connections:
            conn.close()
    return phase


def over_http(url: str, versions: tuple[int, int]) -> Phase:
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolkit",
            "--database-url",
            url,
            "serve",
            "--port",
            str(port),
            "--pool-size",
            str(CLIENTS),
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    phase = Phase("HTTP POST /search")
    try:
        deadline = time.monotonic() + 60
        while True:  # ready when /health answers
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("toolkit serve did not start") from None
                time.sleep(0.1)
        clients = [httpx.Client(base_url=base, timeout=30) for _ in range(CLIENTS)]

        def work(index: int, question: str):
            answer = clients[index].post("/search", json={"question": question, "tenant": TENANT, "k": K})
            if answer.status_code != 200:
                raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
            named = answer.headers.get("X-Toolkit-Version")
            return {hit["version"] for hit in answer.json()}, int(named) if named else None

        run_phase(phase, url, versions, work)
        for client in clients:
            client.close()
    finally:
        server.terminate()
        server.wait(30)
    return phase


def table(rows: list[dict]) -> str:
    lines = [
        "| path | requests | errors | answers not from the version named | versions seen (answers) | p50 ms | p95 ms |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['requests']:,} | {r['errors']} | {r['mixed']} | {r['versions']} | "
            f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args()
    with Server("toolkit-bench-serve-") as server:
        versions = prepare(server.url)
        rows = [direct(server.url, versions).row(), over_http(server.url, versions).row()]
    load = load_average()
    section = (
        f"{SECTION}\n\n"
        f"`.venv/bin/python bench/serve.py --write` — {CLIENTS} clients for {DURATION:.0f} s per path, a cutover "
        f"(v{versions[0]} → v{versions[1]}) at a third and a rollback at two thirds; the bundled sample corpus, two "
        f"hashing embedders (384 and 256 dimensions), k = {K}, the default retrieval of `search()`; one embedded "
        f"PostgreSQL on the same machine ({cpu_name()}, {os.cpu_count()} cores shared with other work, load "
        f"average {load:.1f}; Python {platform.python_version()}). HTTP: `toolkit serve --pool-size {CLIENTS}` in its "
        "own process, httpx clients with keep-alive; an answer counts as not from the version named when a row's "
        "version differs from `X-Toolkit-Version` (HTTP) or from the other rows' (in process).\n\n"
        f"{table(rows)}\n"
    )
    print(section)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, section)


if __name__ == "__main__":
    main()
