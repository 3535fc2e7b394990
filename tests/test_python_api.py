"""docs/python.md (issue 26, item 3): its example runs as written against a fresh database, and toolkit.api exports
what the page's table lists, as the functions the CLI calls."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "python.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    return next(b for b in blocks if "api.backfill" in b)


def test_the_documented_example_runs(database_url, monkeypatch, conn):
    monkeypatch.setenv("TOOLKIT_DATABASE_URL", database_url)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example(), str(PAGE), "exec"), {"__name__": "example"})
    out = printed.getvalue()
    assert "7 documents ingested" in out and "deleted" in out
    # What it did is in the database: the first version active again, the second rolled back (ready), indexes.md
    # gone.
    states = dict(conn.execute("SELECT version, state FROM toolkit.versions ORDER BY 1").fetchall())
    assert list(states.values()) == ["active", "ready"]
    assert conn.execute("SELECT count(*) FROM toolkit.documents WHERE doc_id = 'indexes.md'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM toolkit.deletions").fetchone()[0] == 1


def test_the_api_is_the_cli_s_functions():
    from toolkit import api, backfill, cutover, deletion, ingest, search

    # Each verb is the command's function, wrapped only to raise the library's errors (toolkit.api._typed).
    assert api.ingest.__wrapped__ is ingest.ingest and api.backfill.__wrapped__ is backfill.backfill
    assert api.search.__wrapped__ is search.search and api.erase_tenant.__wrapped__ is deletion.erase_tenant
    assert api.delete_documents.__wrapped__ is deletion.delete_documents
    documented = set(re.findall(r"^\| [^|]+ \| `(\w+)\(", PAGE.read_text(), re.M))
    assert documented <= set(api.__all__), documented - set(api.__all__)
    assert all(hasattr(api, name) for name in api.__all__)
    # The wrappers call what the commands call.
    assert "cut_over(" in Path(api.__file__).read_text() and cutover.cut_over.__module__ == "toolkit.cutover"
