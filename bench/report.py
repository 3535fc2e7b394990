"""What the benchmarks share: the machine's CPU name, an embedded server with the shared_buffers a benchmark asks for,
and replacing one section of docs/benchmarks.md without touching the others."""

from __future__ import annotations

import platform
import re
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
