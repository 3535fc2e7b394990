"""The canary: a share of request keys (a stable hash) and whole tenants served by a verified candidate; audited,
shown in status, refused for an unverified candidate unless forced, ended by cutover (promote) or rollback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from support import ready_version

from toolkit import cutover, serving
from toolkit.cli import main
from toolkit.errors import StateError
from toolkit.store import versions


@pytest.fixture
def two(conn, make_model):
    make_model("m1", 8)
    make_model("m2", 8, model_name="8", options={"seed": 3})
    active = ready_version(conn, "m1", 8, {"a": 20, "b": 20, "c": 20}, seed=1)
    candidate = ready_version(conn, "m2", 8, {"a": 20, "b": 20, "c": 20}, seed=2)
    cutover.activate_version(conn, active, force=True)
    return active, candidate


def served(conn, key: str | None, tenant: str = "a") -> int:
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        return conn.execute("SELECT version FROM toolkit.serving_model(%s)", (key,)).fetchone()[0]


def shares(conn, keys: list[str]) -> dict[str, int]:
    """The version serving each key, in one statement (SQL computes the split: nothing is re-typed here)."""
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT toolkit.set_tenant('a')")
        rows = conn.execute(
            "SELECT k.key, s.version FROM unnest(%s::text[]) AS k (key), LATERAL toolkit.serving_model(k.key) AS s",
            (keys,),
        ).fetchall()
    return dict(rows)


def test_ten_percent_of_ten_thousand_keys_go_to_the_candidate_and_raising_it_moves_none_back(conn, two):
    active, candidate = two
    keys = [f"user-{i}" for i in range(10_000)]
    serving.set_canary(conn, candidate, 10, force=True)
    at_10 = shares(conn, keys)
    on_candidate = sum(v == candidate for v in at_10.values())
    assert 900 <= on_candidate <= 1100, on_candidate
    assert set(at_10.values()) == {active, candidate}
    # the same key twice gets the same version
    assert shares(conn, keys[:500]) == {k: at_10[k] for k in keys[:500]}
    assert all(served(conn, k) == at_10[k] for k in keys[:50])
    serving.set_canary(conn, candidate, 20, force=True)
    at_20 = shares(conn, keys)
    assert 1900 <= sum(v == candidate for v in at_20.values()) <= 2100
    moved_back = [k for k in keys if at_10[k] == candidate and at_20[k] != candidate]
    assert moved_back == []


def test_listed_tenants_are_served_by_the_candidate_exactly(conn, two):
    active, candidate = two
    serving.set_canary(conn, candidate, 0, ["b"], force=True)
    for key in ("x", "y", None):
        assert served(conn, key, "b") == candidate
        assert served(conn, key, "a") == active
        assert served(conn, key, "c") == active


def test_an_unverified_candidate_is_refused_unless_forced_and_every_change_is_audited(conn, two):
    active, candidate = two
    with pytest.raises(StateError, match="no passing verification"):
        serving.set_canary(conn, candidate, 10)
    assert serving.canary_status(conn) is None
    canary = serving.set_canary(conn, candidate, 10, ["c"], force=True, reason="try it")
    assert (canary.candidate, canary.percent, canary.tenants, canary.forced) == (candidate, 10.0, ["c"], True)
    serving.set_canary(conn, candidate, 25, force=True)
    serving.end_canary(conn, reason="enough")
    audit = conn.execute(
        "SELECT from_version, to_version, forced, reason, details FROM toolkit.cutovers WHERE action = 'canary'"
        " ORDER BY cutover_id"
    ).fetchall()
    assert [(a[0], a[1], a[2], a[3]) for a in audit] == [
        (active, candidate, True, "try it"),
        (active, candidate, True, None),
        (active, candidate, False, "enough"),
    ]
    assert [a[4]["percent"] for a in audit] == [10, 25, 0]
    assert audit[1][4]["was"] == {"percent": 10, "tenants": ["c"]}


def test_bad_shares_and_candidates_are_refused_before_anything_changes(conn, two):
    active, candidate = two
    for bad in (-1, 100.5, float("nan"), float("inf")):
        with pytest.raises(Exception, match="from 0 to 100"):
            serving.set_canary(conn, candidate, bad, force=True)
    with pytest.raises(StateError, match="cannot serve a canary"):
        serving.set_canary(conn, active, 10, force=True)
    with pytest.raises(StateError, match=r"serves no canary|No canary"):
        serving.end_canary(conn)
    assert serving.canary_status(conn) is None
    assert conn.execute("SELECT count(*) FROM toolkit.cutovers WHERE action = 'canary'").fetchone()[0] == 0


def test_a_cutover_promotes_the_canary_and_a_rollback_ends_it(conn, two):
    active, candidate = two
    serving.set_canary(conn, candidate, 30, force=True)
    with pytest.raises(StateError, match="serves a canary"):
        cutover.retire_version(conn, candidate)
    cutover.rollback_version(conn, reason="bad canary")
    assert serving.canary_status(conn) is None
    assert versions.active_version(conn) == active  # the active version stayed
    serving.set_canary(conn, candidate, 30, force=True)
    cutover.activate_version(conn, candidate, force=True)
    assert serving.canary_status(conn) is None
    assert versions.active_version(conn) == candidate
    details = conn.execute(
        "SELECT details FROM toolkit.cutovers WHERE action = 'activate' ORDER BY cutover_id DESC LIMIT 1"
    ).fetchone()[0]
    assert details["canary_promoted"]["percent"] == 30


def test_toolkit_canary_and_status_show_the_split(conn, database_url, two):
    _, candidate = two
    runner = CliRunner()
    base = ["--database-url", database_url]
    refused = runner.invoke(main, [*base, "canary", "--version", str(candidate), "--percent", "10"])
    assert refused.exit_code == 1 and "no passing verification" in refused.output
    started = runner.invoke(main, [*base, "canary", "--version", str(candidate), "--percent", "10", "--force"])
    assert started.exit_code == 0, started.output
    assert f"Version {candidate} (m2) serves 10% of request keys" in started.output
    status = runner.invoke(main, [*base, "status", "--format", "json"])
    report = json.loads(status.stdout)
    assert report["canary"]["candidate"] == candidate and report["canary"]["percent"] == 10.0
    row = next(v for v in report["versions"] if v["version"] == candidate)
    assert row["serving"] == "canary 10%"
    table = runner.invoke(main, [*base, "status"])
    assert f"Canary: version {candidate} serves 10% of request keys" in table.output
    ended = runner.invoke(main, [*base, "canary", "--off"])
    assert ended.exit_code == 0 and "ended" in ended.output
