"""What a test's database costs: ``CREATE DATABASE … TEMPLATE`` of the migrated toolkit schema, then ``DROP
DATABASE``, as tests/conftest.py does once per database test, on a cluster in the temporary directory (ext4 here)
and on one in /dev/shm (tmpfs). CPU is read from the cluster's processes in /proc (the postmaster's children are
counted as they run), wall time around each statement.

    .venv/bin/python bench/clone_database.py              # 20 pairs per strategy and place: print the table
    .venv/bin/python bench/clone_database.py --pairs 5    # a smoke test

Each cluster runs with the tests' throwaway settings (fsync, synchronous_commit and full_page_writes off) and is
stopped and removed at the end. Results go to docs/benchmarks.md ("The test suite") by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import THROWAWAY_SETTINGS, with_database

from toolkit.db import migrate, server


def cluster_cpu_seconds() -> float:
    """User and system CPU of every running postgres process (the backends of this benchmark's cluster and any
    other's: run it on a quiet machine)."""
    ticks = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def measure(root: str | None, pairs: int) -> dict[str, tuple[float, float]]:
    directory = Path(tempfile.mkdtemp(prefix="toolkit-bench-clone-", dir=root))
    directory.chmod(0o755)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            url = server.embedded_server(directory).get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            for name, value in THROWAWAY_SETTINGS.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE DATABASE bench_template")
        migrate.upgrade(with_database(url, "bench_template"))
        results = {}
        with psycopg.connect(url, autocommit=True) as conn:
            for strategy in ("WAL_LOG", "FILE_COPY"):
                cpu = wall = 0.0
                for _ in range(pairs):
                    name = sql.Identifier(f"bench_{uuid.uuid4().hex[:10]}")
                    before_cpu, before = cluster_cpu_seconds(), time.perf_counter()
                    conn.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE bench_template STRATEGY {}").format(
                            name, sql.SQL(strategy)
                        )
                    )
                    conn.execute(sql.SQL("DROP DATABASE {}").format(name))
                    wall += time.perf_counter() - before
                    cpu += cluster_cpu_seconds() - before_cpu
                results[strategy] = (cpu / pairs, wall / pairs)
        return results
    finally:
        server.stop_embedded(directory)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20, help="create/drop pairs per strategy and place")
    args = parser.parse_args()
    places = {"temporary directory": None}
    if Path("/dev/shm").is_dir():
        places["/dev/shm (tmpfs)"] = "/dev/shm"
    print("| cluster in | strategy | CPU per create + drop (s) | wall (s) |")
    print("| --- | --- | ---: | ---: |")
    for label, root in places.items():
        for strategy, (cpu, wall) in measure(root, args.pairs).items():
            print(f"| {label} | {strategy} | {cpu:.3f} | {wall:.3f} |")


if __name__ == "__main__":
    main()
