"""A downgraded schema is noticed: after `toolkit migrate REV --downgrade` to every earlier revision, every command
that opens the database (but `toolkit db url`, which warns and prints the URL) says at which revision the schema is
and to run `toolkit migrate`, with no traceback and nothing written; `toolkit migrate` brings it back."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from support import ready_version

from toolkit import cutover
from toolkit.cli import main
from toolkit.db import migrate
from toolkit.db.connection import connect

EARLIER = migrate.revisions()[:-1]

# Every command that opens the database, with arguments it would accept on a current schema.
COMMANDS = [
    ["status"],
    ["ingest", "{docs}", "--tenant", "acme"],
    ["backfill", "--model", "m1", "--chunker", "fixed:50:0"],
    ["search", "a question", "--tenant", "a"],
    ["verify", "--model", "m1", "--queries", "{queries}"],
    ["cutover", "--model", "m1", "--force"],
    ["rollback"],
    ["retire", "--older-than", "1d"],
    ["canary", "--model", "m1", "--percent", "10"],
    ["query-log", "--sample-rate", "1"],
    ["tenant", "grant", "somebody", "a"],
    ["tenant", "list"],
    ["model", "add", "m2", "--provider", "hashing", "--name", "8"],
    ["model", "list"],
]  # `toolkit db url` prints the URL anyway, with a warning (tests/test_dba_day.py)

WRITTEN = """
    SELECT (SELECT count(*) FROM toolkit.documents), (SELECT count(*) FROM toolkit.models),
           (SELECT string_agg(version || ':' || state, ',' ORDER BY version) FROM toolkit.versions),
           (SELECT count(*) FROM toolkit.cutovers), (SELECT count(*) FROM toolkit.chunks_v1),
           obj_description('toolkit'::regnamespace, 'pg_namespace')"""


@pytest.mark.parametrize("revision", EARLIER)
def test_every_command_refuses_a_downgraded_schema_naming_its_revision(
    conn, database_url, make_model, tmp_path, revision
):
    make_model("m1", 8)
    version = ready_version(conn, "m1", 8, {"a": 20})
    cutover.activate_version(conn, version, force=True)
    conn.execute(
        "INSERT INTO toolkit.documents (tenant, doc_id, source, raw_text, content_hash)"
        " VALUES ('a', 'd', 's', 't', 'h')"
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text about row security.\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "row security", "answers": [{"doc_id": "a.md"}]}\n')
    runner = CliRunner()
    done = runner.invoke(main, ["--database-url", database_url, "migrate", revision, "--downgrade", "--force"])
    assert done.exit_code == 0, done.output
    with connect(database_url, autocommit=True, register_vector=False) as c:
        before = c.execute(WRITTEN).fetchone()
    head = migrate.head_revision()
    for command in COMMANDS:
        args = [a.format(docs=docs, queries=queries) for a in command]
        result = runner.invoke(main, ["--database-url", database_url, *args])
        assert result.exit_code == 1, (command, result.output)
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
        assert f"at revision {revision}" in result.output and f"older than this toolkit ({head})" in result.output, (
            command,
            result.output,
        )
        assert "run `toolkit migrate`" in result.output
    with connect(database_url, autocommit=True, register_vector=False) as c:
        assert c.execute(WRITTEN).fetchone() == before  # nothing written
    upgraded = runner.invoke(main, ["--database-url", database_url, "migrate"])
    assert upgraded.exit_code == 0 and f"Upgraded from {revision} to {head}" in upgraded.output
    status = runner.invoke(main, ["--database-url", database_url, "status"])
    assert status.exit_code == 0, status.output


def test_an_upgrade_that_stops_below_head_is_refused_too(empty_database_url):
    previous = migrate.revisions()[-2]
    migrate.upgrade(empty_database_url, previous)
    result = CliRunner().invoke(main, ["--database-url", empty_database_url, "status"])
    assert result.exit_code == 1 and f"at revision {previous}" in result.output and "toolkit migrate" in result.output


def test_a_schema_newer_than_the_toolkit_is_named(database_url):
    with connect(database_url, autocommit=True, register_vector=False) as c:
        c.execute("COMMENT ON SCHEMA toolkit IS 'toolkit schema; SQL fingerprint 0000'")
        c.execute("UPDATE public.toolkit_alembic_version SET version_num = '0099'")
    result = CliRunner().invoke(main, ["--database-url", database_url, "status"])
    assert result.exit_code == 1 and "revision 0099, newer than this toolkit" in result.output
