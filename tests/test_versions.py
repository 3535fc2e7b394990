"""The version state machine, the verification gate, rollback and retire, and hostile input."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from support import fill_version, ready_version

from toolkit import cutover
from toolkit.errors import InputError, StateError
from toolkit.store import versions
from toolkit.store.models import Model, insert_model, validate_alias


def state(conn, v: int) -> str:
    return conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (v,)).fetchone()[0]


def record(conn, v: int, passed: bool, retrieval: str | None = None) -> int:
    # The owner's private entry point (toolkit.evaluate_version computes and records real evaluations, with the
    # retrieval it measured: toolkit.served_retrieval()).
    return conn.execute(
        "SELECT toolkit._record_evaluation(%s, 'hash', 10, 5, %s, %s, NULL,"
        " jsonb_build_object('retrieval', coalesce(%s, toolkit.served_retrieval())))",
        (v, Jsonb({"recall": 0.9}), passed, retrieval),
    ).fetchone()[0]


def test_a_verification_of_another_retrieval_does_not_let_a_version_go_live(conn, make_model):
    """A version verified with one retrieval and served with another has a stale verification."""
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 30})
    record(conn, v, passed=True, retrieval="vector")
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v)
    current = conn.execute("SELECT evaluation_current FROM toolkit.version_status() WHERE version = %s", (v,))
    assert current.fetchone()[0] is False
    record(conn, v, passed=True)
    assert cutover.activate_version(conn, v) > 0


def test_create_version_makes_a_typed_table(conn, make_model):
    make_model("m1", 12)
    v = versions.create_version(conn, "m1", "markdown:400:40", "markdown:400:40@1")
    assert state(conn, v) == "building"
    column_type = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attname = 'embedding'",
        (f"toolkit.chunks_v{v}",),
    ).fetchone()[0]
    assert column_type.endswith("vector(12)")
    half = versions.create_version(conn, "m1", "fixed:100:0", "fixed:100:0@1", storage="halfvec")
    column_type = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attname = 'embedding'",
        (f"toolkit.chunks_v{half}",),
    ).fetchone()[0]
    assert column_type.endswith("halfvec(12)")


def test_hnsw_index_uses_the_configured_parameters_and_distance(conn, make_model):
    make_model("m1", 8, distance="l2")
    v = versions.create_version(conn, "m1", "fixed:10:0", "fixed:10:0@1", hnsw_m=24, hnsw_ef_construction=100)
    versions.create_version_index(conn, v)
    indexdef = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = %s", (f"chunks_v{v}_embedding_idx",)
    ).fetchone()[0]
    assert "USING hnsw (embedding vector_l2_ops)" in indexdef
    assert "m='24'" in indexdef and "ef_construction='100'" in indexdef


def test_unknown_model_is_a_clear_input_error(conn):
    with pytest.raises(InputError, match=r"No model is registered under the alias 'nope'\. Register it first"):
        versions.create_version(conn, "nope", "fixed:10:0", "fixed:10:0@1")


def test_shortened_embeddings_only_for_models_that_support_them(conn, make_model):
    make_model("plain", 16)
    make_model("matryoshka", 16, supports_shortening=True)
    with pytest.raises(InputError, match="not declared to support shortened embeddings"):
        versions.create_version(conn, "plain", "fixed:10:0", "fixed:10:0@1", dimensions=8)
    v = versions.create_version(conn, "matryoshka", "fixed:10:0", "fixed:10:0@1", dimensions=8)
    assert conn.execute("SELECT dimensions FROM toolkit.versions WHERE version = %s", (v,)).fetchone()[0] == 8


def test_wide_models_need_halfvec(conn, make_model):
    make_model("large", 3072)
    with pytest.raises(InputError, match="at most 2000 dimensions"):
        versions.create_version(conn, "large", "fixed:10:0", "fixed:10:0@1")
    assert versions.create_version(conn, "large", "fixed:10:0", "fixed:10:0@1", storage="halfvec")


def test_ready_requires_every_row_embedded_and_a_valid_index(conn, make_model):
    make_model("m1", 8)
    v = versions.create_version(conn, "m1", "fixed:10:0", "fixed:10:0@1")
    fill_version(conn, v, 8, {"a": 20})
    conn.execute(f"UPDATE toolkit.chunks_v{v} SET embedding = NULL WHERE position < 3")
    with pytest.raises(StateError, match="still has 3 rows without an embedding"):
        versions.mark_version_ready(conn, v)
    conn.execute(f"DELETE FROM toolkit.chunks_v{v} WHERE embedding IS NULL")
    with pytest.raises(StateError, match="no valid HNSW index"):
        versions.mark_version_ready(conn, v)
    versions.create_version_index(conn, v)
    versions.mark_version_ready(conn, v)
    assert state(conn, v) == "ready"


def test_cutover_requires_a_passing_verification_newer_than_the_last_change(conn, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"a": 30})
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v)
    record(conn, v, passed=False)
    assert state(conn, v) == "ready"
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v)
    record(conn, v, passed=True)
    assert state(conn, v) == "verified"
    conn.execute("SELECT toolkit.touch_version(%s)", (v,))  # contents changed after verification
    assert state(conn, v) == "ready"
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v)
    evaluation = record(conn, v, passed=True)
    cutover_id = cutover.activate_version(conn, v, reason="gate passed")
    assert state(conn, v) == "active"
    row = conn.execute(
        "SELECT action, to_version, forced, evaluation_id, reason FROM toolkit.cutovers WHERE cutover_id = %s",
        (cutover_id,),
    ).fetchone()
    assert row == ("activate", v, False, evaluation, "gate passed")


def test_force_is_recorded_and_never_activates_a_building_version(conn, make_model):
    make_model("m1", 8)
    building = versions.create_version(conn, "m1", "fixed:10:0", "fixed:10:0@1")
    with pytest.raises(StateError, match="building and cannot be activated, even with force"):
        cutover.activate_version(conn, building, force=True)
    v = ready_version(conn, "m1", 8, {"a": 10}, chunker="fixed:20:0")
    cutover_id = cutover.activate_version(conn, v, force=True)
    assert conn.execute("SELECT forced FROM toolkit.cutovers WHERE cutover_id = %s", (cutover_id,)).fetchone()[0]


def test_rollback_restores_the_previous_version_and_retire_never_drops_the_active(conn, make_model):
    make_model("m1", 8)
    make_model("m2", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 10})
    v2 = ready_version(conn, "m2", 8, {"a": 10}, seed=1)
    cutover.activate_version(conn, v1, force=True)
    cutover.activate_version(conn, v2, force=True)
    assert (state(conn, v1), state(conn, v2)) == ("standby", "active")
    cutover.rollback_version(conn, reason="bad answers")
    assert (state(conn, v1), state(conn, v2)) == ("active", "ready")
    assert conn.execute("SELECT DISTINCT version FROM toolkit.active_chunks").fetchall() == [(v1,)]
    with pytest.raises(StateError, match="replaced no version that is still on standby"):
        cutover.rollback_version(conn)
    with pytest.raises(StateError, match="is active and cannot be retired"):
        cutover.retire_version(conn, v1)
    assert state(conn, v1) == "active"
    cutover.retire_version(conn, v2)
    assert state(conn, v2) == "retired"
    assert conn.execute("SELECT to_regclass(%s)", (f"toolkit.chunks_v{v2}",)).fetchone()[0] is None
    actions = [r[0] for r in conn.execute("SELECT action FROM toolkit.cutovers ORDER BY cutover_id")]
    assert actions == ["activate", "activate", "rollback", "retire"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("building", "active"),
        ("building", "verified"),
        ("retired", "building"),
        ("active", "retired"),
        ("standby", "verified"),
    ],
)
def test_illegal_transitions_raise_a_named_error(conn, make_model, old, new):
    make_model("m1", 8)
    v = versions.create_version(conn, "m1", "fixed:10:0", "fixed:10:0@1")
    conn.execute("UPDATE toolkit.versions SET state = %s WHERE version = %s", (old, v))
    with pytest.raises(pg_errors.ObjectNotInPrerequisiteState, match=f"cannot move from {old} to {new}"):
        conn.execute("SELECT toolkit._set_version_state(%s, %s)", (v, new))
    assert state(conn, v) == old


HOSTILE = ['x"; DROP TABLE toolkit.models; --', "a'b", "v2; SELECT pg_sleep(10)", "", "x" * 80, "ünï"]


@pytest.mark.parametrize("alias", HOSTILE)
def test_hostile_model_aliases_are_rejected_in_python_and_in_sql(conn, alias):
    with pytest.raises(InputError, match="is not allowed"):
        validate_alias(alias)
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO toolkit.models (alias, provider, model_name, dimensions, max_input_tokens)"
            " VALUES (%s, 'hashing', 'h', 8, 10)",
            (alias,),
        )
    with pytest.raises(InputError):
        insert_model(conn, Model(alias=alias, provider="hashing", model_name="h", dimensions=8, max_input_tokens=9))
    assert conn.execute("SELECT to_regclass('toolkit.models')").fetchone()[0] is not None


def test_hostile_chunker_specs_and_tenants_are_stored_quoted_never_executed(conn, make_model):
    make_model("m1", 8)
    spec = "x'); DROP TABLE toolkit.models; --"
    v = versions.create_version(conn, "m1", spec, spec + "@1")
    assert conn.execute("SELECT chunker_spec FROM toolkit.versions WHERE version = %s", (v,)).fetchone()[0] == spec
    assert conn.execute("SELECT to_regclass('toolkit.models')").fetchone()[0] is not None
    tenant = "acme'; DELETE FROM toolkit.versions; --"
    fill_version(conn, v, 8, {tenant: 3})
    with conn.transaction():
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{v}").fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM toolkit.versions").fetchone()[0] == 1


def test_an_empty_tenant_is_refused(conn):
    with pytest.raises(pg_errors.InvalidParameterValue, match="non-empty"):
        conn.execute("SELECT toolkit.set_tenant('')")


def test_duplicate_alias_is_refused_not_repointed(conn, make_model):
    make_model("m1", 8)
    with pytest.raises(InputError, match="already registered"):
        make_model("m1", 16)
    assert conn.execute("SELECT dimensions FROM toolkit.models WHERE alias = 'm1'").fetchone()[0] == 8


def test_a_standby_version_goes_back_live_through_the_gate(conn, make_model):
    make_model("m1", 8)
    make_model("m2", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 10})
    v2 = ready_version(conn, "m2", 8, {"a": 10}, seed=1)
    cutover.activate_version(conn, v1, force=True)
    record(conn, v2, passed=True)
    cutover.activate_version(conn, v2)
    assert state(conn, v1) == "standby"
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v1)
    evaluation = record(conn, v1, passed=True)
    assert state(conn, v1) == "standby"
    cutover_id = cutover.activate_version(conn, v1)
    row = conn.execute("SELECT forced, evaluation_id FROM toolkit.cutovers WHERE cutover_id = %s", (cutover_id,))
    assert row.fetchone() == (False, evaluation)
    assert (state(conn, v1), state(conn, v2)) == ("active", "standby")
