"""Issue 23's smaller items: `toolkit status` with documents but no version says how many and what to do next; an
unknown model alias is "no such model"; backfill's JSON rounds its seconds."""

from __future__ import annotations

import json

from click.testing import CliRunner

from toolkit.cli import main


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_status_without_a_version_counts_the_documents_and_says_what_next(database_url, tmp_path):
    assert "No documents yet: toolkit ingest" in run(database_url, "status").output
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.md", "b.md"):
        (docs / name).write_text(f"# {name}\n\nSome text about {name}.\n")
    run(database_url, "ingest", str(docs), "--tenant", "acme")
    shown = run(database_url, "status").output
    assert "No version yet; 2 documents in 1 tenant await one" in shown and "toolkit backfill --model" in shown
    assert json.loads(run(database_url, "status", "--format", "json").stdout)["documents"] == {
        "documents": 2,
        "tenants": 1,
    }
    run(database_url, "model", "add", "h", "--provider", "hashing", "--name", "16")
    built = json.loads(run(database_url, "backfill", "--model", "h", "--format", "json").stdout)
    assert built["seconds"] == round(built["seconds"], 3)
    unknown = run(database_url, "verify", "--model", "v3", "--queries", str(docs / "a.md"), code=1)
    assert "There is no model 'v3' (no such model alias)" in unknown.output
    assert "no such model" in run(database_url, "cutover", "--model", "v3", code=1).output


def test_the_progress_rate_has_its_unit_and_a_slow_one_is_per_minute():
    import io

    from toolkit.progress import Progress

    now = [0.0]
    progress = Progress("backfill", 7, unit="documents", stream=io.StringIO(), clock=lambda: now[0])
    assert "0 documents/s" in progress.line()
    now[0] = 12.0
    progress.advance(1)
    assert "5.0 documents/min" in progress.line()
    now[0] = 42.0
    progress.advance(6)
    assert "12 documents/min" in progress.line()  # 6 in the 30 s since the first report
    now[0] = 43.0
    progress.advance(20)
    assert "20 documents/s" in progress.line()  # the last 30 s: 20 in 1 s


def test_granting_a_tenant_without_documents_is_refused_unless_allow_empty(conn, database_url, tmp_path):
    login = "app_ops_small"
    conn.execute(f"CREATE ROLE {login} LOGIN IN ROLE toolkit_reader")
    try:
        conn.execute(
            "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
            " VALUES ('acme', 'd', 's', 't', 'h')"
        )
        refused = run(database_url, "tenant", "grant", login, "acme", "acme_typo", code=1)
        assert "No document has the tenant 'acme_typo'" in refused.output and "--allow-empty" in refused.output
        assert conn.execute("SELECT count(*) FROM toolkit.list_tenant_bindings()").fetchone()[0] == 0
        assert f"{login} is bound to acme" in run(database_url, "tenant", "grant", login, "acme").output
        run(database_url, "tenant", "grant", login, "beta", "--allow-empty")
        assert conn.execute("SELECT count(*) FROM toolkit.list_tenant_bindings()").fetchone()[0] == 2
    finally:
        conn.execute(f"DROP OWNED BY {login}")
        conn.execute("SELECT toolkit.unbind_tenants(%s)", (login,))
        conn.execute(f"DROP ROLE {login}")


def test_a_lookup_that_finds_only_a_building_version_says_it_is_building(conn, make_model):
    import pytest

    from toolkit.errors import InputError
    from toolkit.store import versions
    from toolkit.store.versions import resolve_version

    make_model("m", 8)
    building = versions.create_version(conn, "m", "fixed:10:0", "fixed:10:0@1#0")
    with pytest.raises(InputError, match=rf"\(it has version {building} building\)\. A building version is not comp"):
        resolve_version(conn, "m", action="canary")
