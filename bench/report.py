"""What the benchmarks share: the machine's CPU name, an embedded server with the shared_buffers a benchmark asks for,
and replacing one section of docs/benchmarks.md without touching the others."""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path


def start_server(data_dir: Path, shared_buffers: str) -> str:
    """Starts the embedded PostgreSQL in ``data_dir`` with ``shared_buffers`` (set, then restarted: it takes effect
    only at start); returns its URL."""
    import warnings

    from toolkit.db import connection, server

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = server.start_embedded(data_dir)
        with connection.connect(db.url, autocommit=True, register_vector=False) as conn:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
        server.stop_embedded(data_dir)
        return server.start_embedded(data_dir).url


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the section that starts with the line ``heading`` in ``path`` (or append it), up to the next
    ``## `` heading, leaving the other sections untouched."""
    if not path.exists():
        path.write_text("# Benchmarks\n\n" + section, encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    start = text.find(heading + "\n")
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + section, encoding="utf-8")
        return
    following = re.search(r"^## ", text[start + len(heading) :], flags=re.MULTILINE)
    end = start + len(heading) + following.start() if following else len(text)
    path.write_text(text[:start] + section + ("\n" + text[end:] if following else ""), encoding="utf-8")


def copy_chunk_rows(conn, table: str, rows: list[dict], vectors, tenants, batch: int) -> float:
    """Writes generated chunk rows (dicts with chunk_id, doc_id, position, start, end, text, tokens and gap) into a
    version's table by binary COPY, in statements of ``batch`` rows, each its own transaction (as ingest writes);
    ``tenants`` is one tenant for every row or one per row. Each row keeps the whitespace before it (gap_before)
    where the table has the column, as ingest writes it. Returns the seconds it took."""
    columns = "tenant, chunk_id, doc_id, position, start_offset, end_offset, text, content_hash, token_count"
    types = ["text", "text", "text", "int4", "int4", "int4", "text", "text", "int4"]
    gaps = conn.execute(
        "SELECT count(*) > 0 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'gap_before'"
        " AND NOT attisdropped",
        (table,),
    ).fetchone()[0]
    if gaps:
        columns, types = columns + ", gap_before", [*types, "text"]
    copying = f"COPY {table} ({columns}, embedding) FROM STDIN (FORMAT BINARY)"
    started = time.perf_counter()
    for start in range(0, len(rows), batch):
        with conn.transaction(), conn.cursor() as cur, cur.copy(copying) as copy:
            copy.set_types([*types, "vector"])
            for i in range(start, min(len(rows), start + batch)):
                c = rows[i]
                tenant = tenants if isinstance(tenants, str) else tenants[i]
                ids = (tenant, c["chunk_id"], c["doc_id"], c["position"], c["start"], c["end"])
                copy.write_row((*ids, c["text"], "h", c["tokens"], *([c["gap"]] if gaps else []), vectors[i]))
    return time.perf_counter() - started


def check_tree(tree: Path) -> dict:
    """In a worker process that imports one source tree's toolkit (PYTHONPATH=<tree>): where its toolkit, SQL and
    migrations come from (refusing any from elsewhere), the tree's commit and how many of those files differ from
    it."""
    import subprocess

    import toolkit
    from toolkit.db.sql_files import migrations_dir, sql_dir

    found = {"toolkit": str(Path(toolkit.__file__).resolve()), "sql_dir": str(sql_dir().resolve())}
    found["migrations_dir"] = str(migrations_dir().resolve())
    for name, path in found.items():
        if not Path(path).is_relative_to(tree):
            raise RuntimeError(f"{name} is {path}, not under {tree}: PYTHONPATH did not win")
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "toolkit", "sql", "migrations"],
        capture_output=True,
        text=True,
    )
    return found | {"commit": head.stdout.decode().strip(), "changed_files": len(dirty.stdout.splitlines())}
