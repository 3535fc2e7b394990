"""The lock-holder scenario of issue 28 item 3: a reader keeps a transaction open on ``toolkit.live_chunks`` while a
backfill marks its version ready (which rebuilds the view). Measured: how long other ``live_chunks`` readers wait
meanwhile (they must not queue behind the change for the holder's whole transaction), how long the change takes
once the holder lets go, and the process's peak memory. Before this release the readers waited as long as the
holder held (32.6 s of a 40 s hold in the red team's run); now the change waits for its lock only ``lock_timeout``
(100 ms) at a time and retries.

It runs its own embedded PostgreSQL in a temporary directory (nothing else is touched):

    .venv/bin/python bench/lock_holder.py                  # 3 trials, 3 s holds
    .venv/bin/python bench/lock_holder.py --trials 1 --hold 1
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

RESULTS = ROOT / "bench" / "results" / "lock_holder.json"


def as_user(url: str, user: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


def trial(conn, url: str, reader: str, writer: str, hold: float, seed: int) -> dict:
    import psycopg
    from support import fill_version

    from toolkit.db.connection import connect
    from toolkit.store import versions

    version = versions.create_version(conn, "m1", "fixed:40:0", f"fixed:40:0@1#{seed}")
    fill_version(conn, version, 8, {"a": 200}, seed=seed)
    versions.create_version_index(conn, version, maintenance_work_mem="64MB")
    held, release, done = threading.Event(), threading.Event(), threading.Event()
    timing: dict[str, float] = {}

    def hold_view() -> None:
        with psycopg.connect(reader) as holder:
            holder.execute("SELECT 1 FROM toolkit.live_chunks LIMIT 0")
            held.set()
            release.wait(timeout=600)
            timing["released"] = time.perf_counter()
            holder.rollback()

    def mark_ready() -> None:
        began = time.perf_counter()
        with connect(writer) as w:
            versions.mark_version_ready(w, version)
        timing["mark_seconds"] = time.perf_counter() - began
        timing["marked"] = time.perf_counter()
        done.set()

    holder = threading.Thread(target=hold_view)
    holder.start()
    held.wait(timeout=60)
    marker = threading.Thread(target=mark_ready)
    marker.start()
    waits = []
    started = time.perf_counter()
    with psycopg.connect(reader, autocommit=True) as r:
        r.execute("SET toolkit.tenant = 'a'")
        while time.perf_counter() - started < hold:
            began = time.perf_counter()
            r.execute("SELECT count(*) FROM toolkit.live_chunks").fetchone()
            waits.append(time.perf_counter() - began)
    release.set()
    holder.join()
    marker.join()
    return {
        "version": version,
        "reads_during_hold": len(waits),
        "read_p50_ms": round(statistics.median(waits) * 1000, 2),
        "read_p95_ms": round(statistics.quantiles(waits, n=20)[-1] * 1000, 2) if len(waits) > 1 else None,
        "read_max_ms": round(max(waits) * 1000, 2),
        "mark_ready_seconds": round(timing["mark_seconds"], 3),
        "mark_ready_after_release_seconds": round(timing["marked"] - timing["released"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--hold", type=float, default=3.0, help="Seconds the reader holds live_chunks per trial.")
    args = parser.parse_args()

    import psycopg

    from toolkit import cutover
    from toolkit.db import migrate, server
    from toolkit.db.connection import connect
    from toolkit.store.models import Model, insert_model

    data_dir = Path(tempfile.mkdtemp(prefix="toolkit-bench-lock-"))
    data_dir.chmod(0o755)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            postgres = server.embedded_server(data_dir)
        admin = postgres.get_uri()
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute("CREATE DATABASE lock_bench")
        url = (
            admin.rsplit("/", 1)[0] + "/lock_bench" if "?" not in admin else admin.replace("/postgres?", "/lock_bench?")
        )
        migrate.upgrade(url)
        suffix = uuid.uuid4().hex[:6]
        results = []
        with connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE reader_{suffix} LOGIN IN ROLE toolkit_reader")
            conn.execute(f"CREATE ROLE writer_{suffix} LOGIN IN ROLE toolkit_writer")
            insert_model(conn, Model("m1", "hashing", "8", 8, 8192))
            from support import ready_version

            first = ready_version(conn, "m1", 8, {"a": 200}, seed=1)
            cutover.activate_version(conn, first, force=True)
            for i in range(args.trials):
                results.append(
                    trial(
                        conn, url, as_user(url, f"reader_{suffix}"), as_user(url, f"writer_{suffix}"), args.hold, i + 2
                    )
                )
                print(json.dumps(results[-1]))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        summary = {
            "hold_seconds": args.hold,
            "trials": results,
            "read_max_ms": max(r["read_max_ms"] for r in results),
            "peak_rss_mb": round(peak, 1),
            "date": time.strftime("%Y-%m-%d"),
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
        print(
            f"{args.trials} trials, reader holding live_chunks {args.hold} s: other readers waited at most "
            f"{summary['read_max_ms']} ms; peak memory {summary['peak_rss_mb']} MB"
        )
    finally:
        server.stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
