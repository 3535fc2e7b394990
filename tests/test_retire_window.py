"""Retire cannot drop the rollback target: the rollback window is a setting SQL enforces (retiring the standby a
rollback returns to inside it needs --version N --force), retire is a dry run unless --yes, and retiring by age
never picks a ready version awaiting verification."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner
from support import ready_version

from toolkit import cutover
from toolkit.cli import main
from toolkit.errors import StateError


def run(url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def table_exists(conn, version: int) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"toolkit.chunks_v{version}",)).fetchone()[0]


@pytest.fixture
def two_cutovers(conn, make_model):
    """v1 cut over, then v2: v1 is the rollback target; v3 is ready (awaiting verification)."""
    conn.execute("SELECT toolkit.set_rollback_window('7 days')")  # the default (the test template sets 0)
    make_model("m1", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 10}, chunker="fixed:10:0")
    v2 = ready_version(conn, "m1", 8, {"a": 10}, chunker="fixed:20:0")
    v3 = ready_version(conn, "m1", 8, {"a": 10}, chunker="fixed:30:0")
    cutover.activate_version(conn, v1, force=True)
    cutover.activate_version(conn, v2, force=True)
    return v1, v2, v3


def test_the_rollback_target_is_kept_inside_the_window_unless_forced(conn, database_url, two_cutovers):
    v1, v2, v3 = two_cutovers
    shown = run(database_url, "rollback-window")
    assert "The rollback window is 7 days" in shown.output and f"Version {v1} is the rollback target" in shown.output
    # one version by number: refused by SQL's rule, with or without --yes, the table kept
    for extra in ([], ["--yes"]):
        refused = run(database_url, "retire", "--version", str(v1), *extra, code=1)
        assert f"Version {v1} is the rollback target, inside the rollback window of 7 days" in refused.output
        assert "--force" in refused.output and table_exists(conn, v1)
    with pytest.raises(StateError, match="rollback target"):
        cutover.retire_version(conn, v1)  # the library too: the rule is SQL's
    # by age: never the rollback target, never the ready v3
    planned = json.loads(run(database_url, "retire", "--older-than", "0m", "--format", "json").stdout)
    assert planned["would_retire"] == [] and planned["kept"][0]["version"] == v1
    assert "Nothing to retire" in run(database_url, "retire", "--older-than", "0m", "--yes").output
    assert table_exists(conn, v1) and table_exists(conn, v3)
    # the rollback still works, then forward again
    cutover.rollback_version(conn)
    cutover.activate_version(conn, v2, force=True)
    # --force retires it now, audited as forced
    done = run(database_url, "retire", "--version", str(v1), "--force", "--yes")
    assert f"Retired: {v1}." in done.output and not table_exists(conn, v1)
    forced = conn.execute(
        "SELECT forced FROM toolkit.cutovers WHERE action = 'retire' AND from_version = %s", (v1,)
    ).fetchone()
    assert forced == (True,)


def test_retire_is_a_dry_run_unless_yes_and_skips_ready_versions(conn, database_url, two_cutovers):
    v1, v2, v3 = two_cutovers
    run(database_url, "rollback-window", "0m")  # the window is over at once
    planned = run(database_url, "retire")  # default window: the setting
    assert f"Would retire: {v1}." in planned.output and "run again with --yes" in planned.output
    assert table_exists(conn, v1)
    done = run(database_url, "retire", "--yes")
    assert f"Retired: {v1}." in done.output and not table_exists(conn, v1)
    assert table_exists(conn, v3)  # ready: awaiting verification, never chosen by age
    assert f"Would retire: {v3}." in run(database_url, "retire", "--version", str(v3)).output
    refused = run(database_url, "retire", "--version", str(v2), "--yes", code=1)
    assert f"Version {v2} is active and cannot be retired" in refused.output
    assert "--force retires one version" in run(database_url, "retire", "--force", code=1).output


def test_only_the_owner_sets_the_window(conn, database_url, two_cutovers):
    deployer = f"deploy_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {deployer} LOGIN IN ROLE toolkit_deployer")
    try:
        parts = urlsplit(database_url)
        url = urlunsplit(parts._replace(netloc=f"{deployer}@{parts.netloc.split('@')[-1]}"))
        assert "The rollback window is 7 days" in run(url, "rollback-window").output
        refused = run(url, "rollback-window", "1h", code=1)
        assert "permission denied" in refused.output
        assert conn.execute("SELECT toolkit.rollback_window()").fetchone()[0].days == 7
        assert "The rollback window is now 1:00:00" in run(database_url, "rollback-window", "1h").output
        invalid = run(database_url, "rollback-window", "-1h", code=2)
        assert "Traceback" not in invalid.output
    finally:
        conn.execute(f"DROP OWNED BY {deployer}")
        conn.execute(f"DROP ROLE {deployer}")
