"""The documented least-privilege setup works end to end: a login role in toolkit_writer ingests and backfills, one
in toolkit_deployer verifies and cuts over, one in toolkit_reader searches; each is refused the others' work. (The
other tests mostly run as the migrating superuser, which row-level security does not apply to.)"""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from toolkit.cli import main


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.split("@")[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@pytest.fixture
def logins(conn):
    suffix = uuid.uuid4().hex[:8]
    writer, deployer, reader = f"ingest_{suffix}", f"deploy_{suffix}", f"app_{suffix}"
    conn.execute(f"CREATE ROLE {writer} LOGIN IN ROLE toolkit_writer")
    conn.execute(f"CREATE ROLE {deployer} LOGIN IN ROLE toolkit_deployer")
    conn.execute(f"CREATE ROLE {reader} LOGIN IN ROLE toolkit_reader")
    yield writer, deployer, reader
    conn.execute(f"DROP OWNED BY {writer}, {deployer}, {reader}")
    conn.execute(f"DROP ROLE {writer}, {deployer}, {reader}")


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_writer_and_reader_logins_run_the_lifecycle(database_url, logins, tmp_path):
    writer, deployer, reader = (as_user(database_url, name) for name in logins)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "codes.md").write_text(
        "# Errors\n\n## ERR-4021\n\nThe parcel scanner rejected the label because the barcode was damaged.\n\n"
        "## ERR-5000\n\nThe refund service timed out while contacting the payment provider.\n"
    )
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        json.dumps(
            {
                "query": "barcode damaged label rejected",
                "answers": [
                    {
                        "doc_id": "codes.md",
                        "text": "The parcel scanner rejected the label because the barcode was damaged.",
                    }
                ],
            }
        )
        + "\n"
    )
    run(writer, "model", "add", "h", "--provider", "hashing", "--name", "32")
    run(writer, "ingest", str(docs), "--tenant", "acme", "--acl", "support")
    built = json.loads(run(writer, "backfill", "--model", "h", "--chunker", "markdown:40:0", "--format", "json").stdout)
    assert built["state"] == "ready" and built["rows_embedded"] >= 1
    # the ingest job may not verify or cut over: that is the deployer's
    assert "toolkit_deployer" in run(writer, "cutover", "--model", "h", "--force", code=1).output
    run(deployer, "verify", "--model", "h", "--queries", str(queries), "--min-recall", "1.0", "--min-queries", "1")
    run(deployer, "cutover", "--model", "h")
    assert "toolkit_writer" in run(deployer, "ingest", str(docs), "--tenant", "acme", code=1).output
    # a document edited by the writer is re-embedded through the row-security-checked path too
    (docs / "codes.md").write_text((docs / "codes.md").read_text() + "\n## ERR-6000\n\nA new code.\n")
    report = json.loads(
        run(writer, "ingest", str(docs), "--tenant", "acme", "--acl", "support", "--format", "json").stdout
    )
    assert report["changed"] == 1 and report["chunks_written"]

    found = json.loads(
        run(
            reader, "search", "barcode damaged", "--tenant", "acme", "--principal", "support", "--format", "json"
        ).stdout
    )
    assert found and "barcode" in json.dumps(found)
    hidden = json.loads(run(reader, "search", "barcode damaged", "--tenant", "acme", "--format", "json").stdout)
    assert hidden == []
    other = json.loads(
        run(
            reader, "search", "barcode damaged", "--tenant", "globex", "--principal", "support", "--format", "json"
        ).stdout
    )
    assert other == []
    denied = run(reader, "ingest", str(docs), "--tenant", "acme", code=1)
    assert "toolkit_writer" in denied.output
