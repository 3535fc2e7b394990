"""What the benchmarks share for reporting: the machine's CPU name, and replacing one section of
docs/benchmarks.md without touching the others."""

from __future__ import annotations

import platform
import re
from pathlib import Path


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
