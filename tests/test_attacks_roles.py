"""The red team's attacks on the roles (issue 28 items 1-5 and 8's SQL side, issue 23 item 3), each run as the role
that would exploit it on the real database, and named for the attack. Each failed on the main branch they were
written against."""

from __future__ import annotations

import json
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from support import ready_version

from toolkit import cutover, serving
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.errors import InputError, StateError
from toolkit.store import versions

ROLES = {
    "reader": "toolkit_reader",
    "writer": "toolkit_writer",
    "deployer": "toolkit_deployer",
    "owner": "toolkit_owner",
}


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.netloc.split('@')[-1]}"))


@pytest.fixture
def logins(conn, database_url):
    """One login per role: {role: (name, url)}; dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    made = {}
    for role, group in ROLES.items():
        name = f"{role}_{suffix}"
        conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE {group}')
        made[role] = (name, as_user(database_url, name))
    yield made
    for name, _ in made.values():
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def _passing(conn, version: int) -> None:
    """Records a passing evaluation as SQL's verification would (only the owner may call this directly)."""
    # As evaluate_version records one: with the retrieval it measured (the served one).
    conn.execute(
        "SELECT toolkit._record_evaluation(%s, 'test', 1, 1, '{}', true, NULL,"
        " jsonb_build_object('retrieval', toolkit.served_retrieval()))",
        (version,),
    )


@pytest.fixture
def live(conn, make_model):
    """An active version and a verified candidate with 20 rows per tenant a and b."""
    make_model("m1", 8)
    make_model("m2", 8, model_name="8", options={"seed": 3})
    active = ready_version(conn, "m1", 8, {"a": 20, "b": 20}, seed=1)
    cutover.activate_version(conn, active, force=True)
    candidate = ready_version(conn, "m2", 8, {"a": 20, "b": 20}, seed=2)
    _passing(conn, candidate)
    return active, candidate


def _state(conn, version: int) -> str:
    return conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (version,)).fetchone()[0]


def _status(conn, version: int):
    return next(v for v in versions.version_status(conn) if v.version == version)


# -- 1. the writer puts poisoned content live through an unforced cutover -----------------------------------------


def test_writer_direct_update_of_a_chunk_table_makes_the_verification_stale_and_unforced_cutover_refused(
    conn, logins, live
):
    writer = logins["writer"][1]
    active, candidate = live
    assert _status(conn, candidate).evaluation_current is True
    with psycopg.connect(writer) as w:
        updated = w.execute(f"UPDATE toolkit.chunks_v{candidate} SET text = 'POISONED' WHERE tenant = 'a'").rowcount
    assert updated == 20
    assert _state(conn, candidate) == "ready"
    row = _status(conn, candidate)
    assert row.evaluation_current is False and row.verification == "stale"
    with connect(logins["deployer"][1]) as deployer, pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(deployer, candidate)
    assert _state(conn, candidate) == "ready" and versions.active_version(conn) == active


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO toolkit.chunks_v{v} (tenant, chunk_id, doc_id, position, start_offset, end_offset, text,"
        " content_hash, token_count, embedding) SELECT tenant, chunk_id || '-x', doc_id, position, start_offset,"
        " end_offset, 'POISONED', content_hash, token_count, embedding FROM toolkit.chunks_v{v} LIMIT 1",
        "DELETE FROM toolkit.chunks_v{v} WHERE tenant = 'b'",
        "UPDATE toolkit.chunks_v{v} SET access_labels = '{{}}' WHERE false",
    ],
    ids=["insert", "delete", "update-of-no-rows"],
)
def test_writer_insert_or_delete_in_a_verified_version_makes_it_stale(conn, logins, live, statement):
    _, candidate = live
    assert _status(conn, candidate).evaluation_current is True
    with psycopg.connect(logins["writer"][1]) as w:
        w.execute(statement.format(v=candidate))
    assert _status(conn, candidate).evaluation_current is False


def test_status_and_cutover_agree_after_a_rollback_issue_23(conn, logins, live):
    """Issue 23 item 3: after cutover then rollback, status said current where cutover refused."""
    _, candidate = live
    cutover.activate_version(conn, candidate)
    assert _status(conn, candidate).evaluation_current is True
    cutover.rollback_version(conn)
    row = _status(conn, candidate)
    assert row.state == "ready" and row.evaluation_current is False
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, candidate)
    result = CliRunner().invoke(main, ["--database-url", conn.info.dsn, "status", "--format", "json"])
    shown = next(v for v in json.loads(result.stdout)["versions"] if v["version"] == candidate)
    assert shown["evaluation_current"] is False


def test_a_verification_waits_for_an_uncommitted_change_of_the_rows_it_vouches_for(conn, logins, live):
    """A writer's change made before a verification starts but committed after it would have been vouched for
    unseen: the verification waits for it instead (and gives up naming it)."""
    _, candidate = live
    writer = psycopg.connect(logins["writer"][1])
    try:
        writer.execute(f"UPDATE toolkit.chunks_v{candidate} SET text = 'POISONED' WHERE tenant = 'a'")  # open
        with pytest.raises(pg_errors.LockNotAvailable, match="not been committed") as caught:
            conn.execute("SELECT toolkit._await_version_changes(%s, '100ms')", (candidate,))
        assert f"pid {writer.info.backend_pid}" in str(caught.value)
        writer.commit()
        conn.execute("SELECT toolkit._await_version_changes(%s, '100ms')", (candidate,))
        # nothing is held afterwards: the writer can change the rows again at once
        writer.execute("SET lock_timeout = '100ms'")
        writer.execute(f"UPDATE toolkit.chunks_v{candidate} SET text = 'again' WHERE tenant = 'b'")
        writer.commit()
    finally:
        writer.close()


# -- 8. the writer ends a canary silently ------------------------------------------------------------------------


def test_writer_cannot_silently_end_a_canary_by_moving_its_candidate_back_to_building(conn, logins, live):
    _, candidate = live
    serving.set_canary(conn, candidate, 10)
    with psycopg.connect(logins["writer"][1]) as w, pytest.raises(pg_errors.ObjectNotInPrerequisiteState):
        w.execute("SELECT toolkit.mark_version_building(%s)", (candidate,))
    assert serving.canary_status(conn).candidate == candidate and _state(conn, candidate) == "verified"


def test_writer_touching_a_canary_candidate_leaves_an_audit_row_and_status_shows_it_unverified(conn, logins, live):
    _, candidate = live
    serving.set_canary(conn, candidate, 10)
    before = conn.execute("SELECT count(*) FROM toolkit.cutovers").fetchone()[0]
    with psycopg.connect(logins["writer"][1]) as w:
        w.execute("SELECT toolkit.touch_version(%s)", (candidate,))
    audit = conn.execute(
        "SELECT action, to_version, details FROM toolkit.cutovers ORDER BY cutover_id DESC LIMIT 1"
    ).fetchone()
    assert conn.execute("SELECT count(*) FROM toolkit.cutovers").fetchone()[0] == before + 1
    assert audit[0] == "canary" and audit[1] == candidate and audit[2]["verification"] == "stale"
    assert audit[2]["changed_by"] == logins["writer"][0]
    assert _status(conn, candidate).evaluation_current is False


# -- 5. tenant bindings that silently do not hold -----------------------------------------------------------------


@pytest.fixture
def tenanted(conn, make_model):
    make_model("m1", 8)
    v = ready_version(conn, "m1", 8, {"acme": 10, "beta": 6}, seed=1)
    cutover.activate_version(conn, v, force=True)
    return v


@pytest.fixture
def role_factory(conn, database_url):
    made: list[str] = []

    def make(sql_tail: str) -> tuple[str, str]:
        name = f"r_{uuid.uuid4().hex[:10]}"
        conn.execute(f'CREATE ROLE "{name}" {sql_tail}')
        made.append(name)
        return name, as_user(database_url, name)

    yield make
    for name in reversed(made):
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


def _rows_seen(url: str, tenant: str) -> int:
    # The setting itself, not set_tenant (which refuses a bound login another tenant): the policies must hide the rows.
    with psycopg.connect(url) as c:
        c.execute("SELECT set_config('toolkit.tenant', %s, false)", (tenant,))
        return c.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()[0]


def test_tenant_grant_on_a_group_role_is_refused_so_its_members_are_never_believed_bound(
    conn, database_url, tenanted, role_factory
):
    group, _ = role_factory("NOLOGIN IN ROLE toolkit_reader")
    member, _ = role_factory(f'LOGIN IN ROLE "{group}"')
    result = CliRunner().invoke(main, ["--database-url", database_url, "tenant", "grant", group, "acme"])
    assert result.exit_code != 0 and "group role" in result.output and "Traceback" not in result.output
    assert conn.execute("SELECT count(*) FROM toolkit.tenant_bindings").fetchone()[0] == 0
    assert member  # the member is unbound, and nothing claims otherwise


def test_tenant_grant_toolkit_reader_is_refused(conn, database_url, tenanted):
    result = CliRunner().invoke(main, ["--database-url", database_url, "tenant", "grant", "toolkit_reader", "acme"])
    assert result.exit_code != 0 and "toolkit's roles" in result.output
    assert conn.execute("SELECT count(*) FROM toolkit.tenant_bindings").fetchone()[0] == 0


def test_a_bound_login_renamed_stays_bound(conn, database_url, tenanted, role_factory):
    name, _ = role_factory("LOGIN IN ROLE toolkit_reader")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['acme'])", (name,))
    renamed = name + "_2"
    conn.execute(f'ALTER ROLE "{name}" RENAME TO "{renamed}"')
    url = as_user(database_url, renamed)
    try:
        assert _rows_seen(url, "beta") == 0
        assert _rows_seen(url, "acme") == 10
        listed = CliRunner().invoke(main, ["--database-url", database_url, "tenant", "list", "--format", "json"])
        rows = json.loads(listed.stdout)
        assert [(r["login"], r["tenant"], r["status"], r["bound_as"]) for r in rows] == [
            (renamed, "acme", "bound", name)
        ]
    finally:
        conn.execute(f'ALTER ROLE "{renamed}" RENAME TO "{name}"')


def test_a_bound_login_later_granted_a_service_role_is_refused_at_query_time(
    conn, database_url, tenanted, role_factory
):
    name, url = role_factory("LOGIN IN ROLE toolkit_reader")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['acme'])", (name,))
    for service in ("toolkit_writer", "toolkit_deployer"):
        conn.execute(f'GRANT {service} TO "{name}"')
        with psycopg.connect(url) as c:
            with pytest.raises(pg_errors.InsufficientPrivilege, match="bound to tenants but is now"):
                c.execute("SELECT toolkit.set_tenant('beta')")  # set_tenant asks the binding: refused already
            c.rollback()
            c.execute("SELECT set_config('toolkit.tenant', 'beta', false)")
            with pytest.raises(pg_errors.InsufficientPrivilege, match="bound to tenants but is now"):
                c.execute(f"SELECT count(*) FROM toolkit.chunks_v{tenanted}").fetchone()
        with psycopg.connect(url) as c, pytest.raises(pg_errors.InsufficientPrivilege, match="bound to tenants"):
            c.execute("SELECT toolkit.set_tenant('acme')")
            c.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()
        listed = {
            r["login"]: r["status"]
            for r in json.loads(
                CliRunner().invoke(main, ["--database-url", database_url, "tenant", "list", "--format", "json"]).stdout
            )
        }
        assert listed[name].startswith("refused at query time")
        conn.execute(f'REVOKE {service} FROM "{name}"')
    assert _rows_seen(url, "acme") == 10 and _rows_seen(url, "beta") == 0


def test_bindings_restored_under_other_oids_fail_closed_until_relinked(conn, database_url, tenanted, role_factory):
    """A dump restored into another cluster keeps the bindings' OIDs, which name other roles (or none) there."""
    name, url = role_factory("LOGIN IN ROLE toolkit_reader")
    conn.execute("SELECT toolkit.bind_tenants(%s, ARRAY['acme'])", (name,))
    conn.execute("UPDATE toolkit.tenant_bindings SET login_oid = 4000000000")  # as restored elsewhere
    with psycopg.connect(url) as c, pytest.raises(pg_errors.InsufficientPrivilege, match="relink"):
        c.execute("SELECT toolkit.set_tenant('beta')")
        c.execute("SELECT count(*) FROM toolkit.active_chunks").fetchone()
    result = CliRunner().invoke(main, ["--database-url", database_url, "tenant", "relink", "--format", "json"])
    assert json.loads(result.stdout) == [{"login": name, "tenants": ["acme"], "status": "re-linked"}]
    assert _rows_seen(url, "acme") == 10 and _rows_seen(url, "beta") == 0


# -- 4. the query log has no size limit ---------------------------------------------------------------------------


@pytest.fixture
def logging_on(conn, live):
    conn.execute("SELECT * FROM toolkit.set_query_log(1.0)")
    return live


def _log(url: str, *args, tenant: str = "a"):
    with psycopg.connect(url) as c:
        c.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        return c.execute("SELECT toolkit.log_query(%s, %s, %s, %s, %s, %s)", args).fetchone()[0]


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (("q", "{active}", 5, Jsonb([{"doc_id": "x" * 50_000_000}]), 1.0, None), "4,096 bytes"),
        (("q", "{retired}", 5, Jsonb([]), 1.0, None), "serves no questions"),
        (("q", 999, 5, Jsonb([]), 1.0, None), "serves no questions"),
        (("q", "{active}", -5, Jsonb([]), 1.0, None), "k must be"),
        (("q", "{active}", 5, Jsonb([]), float("nan"), None), "latency"),
        (("q", "{active}", 5, Jsonb([]), float("inf"), None), "latency"),
        (("q", "{active}", 5, Jsonb([]), -1.0, None), "latency"),
        (("q", "{active}", 2, Jsonb([{}] * 1001), 1.0, None), "at most 1000"),
        (("q", "{active}", 5, Jsonb({"a": 1}), 1.0, None), "JSON array"),
    ],
    ids=[
        "50MB-results",
        "retired-version",
        "unknown-version",
        "negative-k",
        "nan-latency",
        "infinite-latency",
        "negative-latency",
        "more-results-than-k",
        "results-not-an-array",
    ],
)
def test_reader_logging_junk_is_refused_and_nothing_is_stored(conn, logins, logging_on, args, refusal, make_model):
    active, _ = logging_on
    retired = ready_version(conn, "m1", 8, {"a": 2}, chunker="fixed:30:0")
    cutover.retire_version(conn, retired)
    values = [a.format(active=active, retired=retired) if isinstance(a, str) and "{" in a else a for a in args]
    values[1] = int(values[1])
    with pytest.raises(psycopg.Error, match=refusal):
        _log(logins["reader"][1], *values)
    assert conn.execute("SELECT count(*) FROM toolkit.query_log").fetchone()[0] == 0


def test_a_logged_search_of_a_thousand_results_is_kept_to_4_kb_not_refused(conn, logins, logging_on):
    active, _ = logging_on
    results = [
        {"doc_id": f"guide/chapter-{i:04d}.md", "start": i, "end": i + 400, "rank": i, "score": 0.5}
        for i in range(1000)
    ]
    assert len(json.dumps(results)) > 80_000
    assert _log(logins["reader"][1], "q", active, 1000, Jsonb(results), 1.0, None)
    size, kept, first = conn.execute(
        "SELECT octet_length(results::text), jsonb_array_length(results), results -> 0 ->> 'doc_id'"
        " FROM toolkit.query_log"
    ).fetchone()
    assert size <= 4096 and 20 < kept < 1000 and first == "guide/chapter-0000.md"


def test_a_logged_question_is_cut_to_4096_bytes(conn, logins, logging_on):
    active, _ = logging_on
    assert _log(logins["reader"][1], "x" * 50_000, active, 5, Jsonb([]), 1.0, "key")
    assert conn.execute("SELECT octet_length(question) FROM toolkit.query_log").fetchone()[0] == 4096


def test_reader_flooding_the_log_is_held_to_its_rate_per_login_and_counted(conn, logins, logging_on):
    active, _ = logging_on
    conn.execute("SELECT * FROM toolkit.set_query_log_bounds(NULL, 20)")
    with psycopg.connect(logins["reader"][1], autocommit=True) as c:
        c.execute("SET toolkit.tenant = 'a'")
        logged = [
            c.execute("SELECT toolkit.log_query(%s, %s, 5, '[]')", (f"q{i}", active)).fetchone()[0] for i in range(50)
        ]
    assert logged == [True] * 20 + [False] * 30
    status = conn.execute("SELECT questions, skipped_over_rate FROM toolkit.query_log_status()").fetchone()
    assert status == (20, 30)


def test_the_row_cap_holds_and_pruning_runs_with_logging_off(conn, logins, logging_on, database_url):
    active, _ = logging_on
    conn.execute(
        "INSERT INTO toolkit.query_log (tenant, question, version, model_alias, k, logged_at)"
        " SELECT 'a', 'q' || i, %s, 'm1', 5, clock_timestamp() - make_interval(secs => i)"
        " FROM generate_series(1, 300) AS i",
        (active,),
    )
    conn.execute(
        "INSERT INTO toolkit.query_log (tenant, question, version, model_alias, k, logged_at)"
        " SELECT 'a', 'old' || i, %s, 'm1', 5, clock_timestamp() - interval '90 days' FROM generate_series(1, 50) i",
        (active,),
    )
    conn.execute("SELECT * FROM toolkit.set_query_log_bounds(100, NULL)")
    conn.execute("SELECT * FROM toolkit.set_query_log(0)")  # logging off: log_query never prunes now
    result = CliRunner().invoke(main, ["--database-url", logins["deployer"][1], "status", "--format", "json"])
    assert result.exit_code == 0, result.output
    left = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE question LIKE 'old%') FROM toolkit.query_log"
    ).fetchone()
    assert left == (100, 0)
    kept = conn.execute("SELECT min(question::text) FROM toolkit.query_log WHERE question ~ '^q[0-9]$'").fetchone()[0]
    assert kept == "q1"  # the newest are kept


def test_shadow_from_log_replays_a_capped_sample_of_what_a_reader_logged(conn, logins, logging_on):
    from datetime import timedelta

    from toolkit.shadow import questions_from_log

    active, _ = logging_on
    conn.execute("SELECT * FROM toolkit.set_query_log_bounds(NULL, 100000)")
    with psycopg.connect(logins["reader"][1], autocommit=True) as c:
        c.execute("SET toolkit.tenant = 'a'")
        for i in range(300):
            c.execute("SELECT toolkit.log_query(%s, %s, 5, '[]')", (f"junk {i}", active))
    with connect(logins["deployer"][1]) as deployer:
        first = {q.text for q in questions_from_log(deployer, timedelta(days=1), max_questions=25)}
        second = {q.text for q in questions_from_log(deployer, timedelta(days=1), max_questions=25)}
    assert len(first) == 25 and len(second) == 25
    assert first != second  # a random sample (the same 25 of 300 twice: odds about 1e-37)


def test_shadow_prints_a_logged_questions_terminal_escapes_escaped(conn, logins, logging_on):
    active, candidate = logging_on
    evil = "\x1b]0;PWNED-TITLE\x07 \u202eFAKE: gate passed, promote now"
    with psycopg.connect(logins["reader"][1], autocommit=True) as c:
        c.execute("SET toolkit.tenant = 'a'")
        for question in (evil, "one", "two"):
            c.execute("SELECT toolkit.log_query(%s, %s, 5, '[]')", (question, active))
    result = CliRunner().invoke(
        main, ["--database-url", logins["deployer"][1], "shadow", "--version", str(candidate), "--from-log"]
    )
    assert result.exit_code == 0, result.output
    assert "PWNED-TITLE" in result.output  # shown, escaped
    assert "\x1b" not in result.output and "\u202e" not in result.output and "\x07" not in result.output
    assert "\\x1b]0;PWNED-TITLE\\x07 \\u202eFAKE" in result.output


# -- 2. the writer makes the deployer send its secret to the writer's server -------------------------------------


@pytest.fixture
def recording_server():
    """A real HTTP server on 127.0.0.1 that records the Authorization header of every request (and answers 500)."""
    import http.server

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    server.server_close()


SECRET = "ci-SECRET-deploy-token-42"


def test_writer_cannot_register_a_model_pointing_at_its_server_with_the_deployers_key_variable(
    conn, logins, recording_server
):
    url, seen = recording_server
    attempts = [
        (
            "SELECT toolkit.register_model('evil', 'openai', 'fake', 16, 512, base_url => %s,"
            ' options => \'{"api_key_env": "CI_DEPLOY_TOKEN"}\')',
            (url,),
        ),
        ("SELECT toolkit.register_model('evil', 'openai', 'fake', 16, 512, base_url => %s)", (url,)),
        (
            "SELECT toolkit.register_model('evil', 'openai', 'fake', 16, 512, options => %s)",
            (Jsonb({"base_url": url}),),
        ),
        (
            "SELECT toolkit.register_model('evil', 'openai', 'fake', 16, 512,"
            ' options => \'{"api_key_env": "CI_DEPLOY_TOKEN"}\')',
            (),
        ),
    ]
    for role in ("writer", "deployer"):
        with psycopg.connect(logins[role][1]) as c:
            for statement, params in attempts:
                with pytest.raises(pg_errors.InsufficientPrivilege, match="only the owner"), c.transaction():
                    c.execute(statement, params)
    from toolkit.store.models import Model, insert_model

    with connect(logins["writer"][1]) as writer, pytest.raises(InputError, match="Only the owner"):
        insert_model(writer, Model("evil", "openai", "fake", 16, 512, base_url=url))
    assert conn.execute("SELECT count(*) FROM toolkit.models").fetchone()[0] == 0
    assert seen == []


def test_a_process_never_sends_its_key_to_a_server_its_operator_did_not_approve(
    conn, logins, recording_server, monkeypatch
):
    """Even a model the owner registered (or one registered before this release) cannot take a process's key
    anywhere its own operator did not list in TOOLKIT_API_KEY_URLS."""
    from toolkit.store.models import Model, embedder_for_model, get_model, insert_model

    url, seen = recording_server
    insert_model(
        conn, Model("evil", "openai", "fake", 16, 512, base_url=url, options={"api_key_env": "CI_DEPLOY_TOKEN"})
    )
    insert_model(conn, Model("evil2", "openai", "fake", 16, 512, base_url=url))  # the default OPENAI_API_KEY
    monkeypatch.setenv("CI_DEPLOY_TOKEN", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("TOOLKIT_API_KEY_URLS", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with connect(logins["deployer"][1]) as deployer:
        for alias, variable in (("evil", "CI_DEPLOY_TOKEN"), ("evil2", "OPENAI_API_KEY")):
            with pytest.raises(InputError, match=f"{variable}.*TOOLKIT_API_KEY_URLS"):
                embedder_for_model(get_model(deployer, alias)).embed_query("hello")
        # an approval for another URL, or for another variable, approves nothing here
        monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"CI_DEPLOY_TOKEN=http://127.0.0.1:1/v1 OTHER_KEY={url}")
        with pytest.raises(InputError, match="CI_DEPLOY_TOKEN"):
            embedder_for_model(get_model(deployer, "evil")).embed_query("hello")
    assert [h for h in seen if h and SECRET in h] == [] and seen == []
    # the operator's approval lets it through (the server then answers 500: the key did go, as approved)
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"CI_DEPLOY_TOKEN={url}")
    from toolkit.errors import EmbeddingError

    with connect(logins["deployer"][1]) as deployer, pytest.raises(EmbeddingError):
        embedder = embedder_for_model(get_model(deployer, "evil"), max_retries=0)
        embedder.embed_query("hello")
    assert seen and all(h == f"Bearer {SECRET}" for h in seen)


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ([{"api_key": "sk-SECRET"}], "JSON object"),
        ({"extra": {"api_key": "sk-SECRET"}}, "extra.api_key"),
        ({"extra": [{"token": "sk-SECRET"}]}, "extra.token"),
    ],
    ids=["options-as-array", "nested-api-key", "key-in-a-nested-array"],
)
def test_a_secret_hidden_in_nested_options_or_options_not_an_object_is_refused_by_sql(conn, options, refusal):
    with pytest.raises(pg_errors.CheckViolation, match=refusal), conn.transaction():
        conn.execute("SELECT toolkit.register_model('k1', 'hashing', '16', 16, 512, options => %s)", (Jsonb(options),))
    assert conn.execute("SELECT count(*) FROM toolkit.models").fetchone()[0] == 0


def test_documented_token_limits_are_not_taken_for_secrets(conn):
    conn.execute(
        "SELECT toolkit.register_model('k1', 'hashing', '16', 16, 512,"
        ' options => \'{"max_batch_tokens": 1000, "max_input_tokens": 512}\')'
    )


# -- 8. a stopped --max-cost backfill's version keeps being embedded into by ingest at the model's price ----------


def test_ingest_leaves_a_priced_building_versions_rows_to_its_backfill(conn, database_url, make_model, tmp_path):
    from toolkit.backfill import backfill
    from toolkit.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nRow security policies filter rows per tenant.\n")
    make_model("free", 16, model_name="16")
    make_model("priced", 16, model_name="16", options={"seed": 7}, price_per_million_tokens=100.0)
    ingest(conn, [docs], "acme")
    free = backfill(database_url, "free", "recursive:100:0").version
    stopped = backfill(database_url, "priced", "recursive:100:0", max_cost=0.0)
    assert stopped.stopped == "max-cost" and stopped.state == "building"
    (docs / "b.md").write_text("# B\n\nA second document about indexes and their upkeep.\n")
    report = ingest(conn, [docs], "acme")
    embedded = dict(
        conn.execute(
            f"SELECT 'free', count(*) FILTER (WHERE embedding IS NOT NULL) FROM toolkit.chunks_v{free}"
            f" WHERE doc_id = 'b.md' UNION ALL SELECT 'priced', count(*) FILTER (WHERE embedding IS NOT NULL)"
            f" FROM toolkit.chunks_v{stopped.version} WHERE doc_id = 'b.md'"
        ).fetchall()
    )
    assert embedded["free"] > 0 and embedded["priced"] == 0
    assert report.chunks_written[stopped.version] > 0  # its rows are there, waiting for the backfill
    resumed = backfill(database_url, "priced", "recursive:100:0", max_cost=1.0, resume=True)
    assert resumed.state == "ready"
    assert (
        conn.execute(
            f"SELECT count(*) FROM toolkit.chunks_v{stopped.version} WHERE embedding IS NULL AND NOT is_parent"
        ).fetchone()[0]
        == 0
    )


# -- 3. a reader holding toolkit.live_chunks stalls backfills and every other live_chunks reader -----------------


def test_a_reader_holding_live_chunks_does_not_queue_other_readers_behind_mark_version_ready(conn, logins, live):
    from support import fill_version

    candidate = versions.create_version(conn, "m1", "fixed:40:0", "fixed:40:0@1#9")
    fill_version(conn, candidate, 8, {"a": 10}, seed=9)
    versions.create_version_index(conn, candidate, maintenance_work_mem="64MB")
    held, release = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def hold() -> None:  # a reader's transaction left open on the view (ACCESS SHARE) until told to end
        with psycopg.connect(logins["reader"][1]) as holder:
            holder.execute("SELECT 1 FROM toolkit.live_chunks LIMIT 0")
            held.set()
            release.wait(timeout=120)
            holder.rollback()

    def mark_ready() -> None:
        try:
            with connect(logins["writer"][1]) as writer:
                versions.mark_version_ready(writer, candidate)
            outcome.append(None)
        except BaseException as error:  # reported below
            outcome.append(error)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(timeout=30)
    marker = threading.Thread(target=mark_ready)
    marker.start()
    try:
        # the change is now trying for the view's lock (a request that would queue every new reader behind it)
        deadline = time.monotonic() + 30
        while not conn.execute(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE relation = 'toolkit.live_chunks'::regclass AND NOT granted)"
        ).fetchone()[0]:
            assert time.monotonic() < deadline and marker.is_alive(), "mark_version_ready never asked for the lock"
        waits = []
        with psycopg.connect(logins["reader"][1], autocommit=True) as reader:
            reader.execute("SET statement_timeout = '5s'")  # on a queue behind the change: fail, do not hang
            reader.execute("SET toolkit.tenant = 'a'")
            for _ in range(20):
                began = time.perf_counter()
                reader.execute("SELECT count(*) FROM toolkit.live_chunks").fetchone()
                waits.append(time.perf_counter() - began)
        assert max(waits) < 1.0, waits  # one lock_timeout (100 ms) at most
        assert marker.is_alive() and not outcome  # still retrying: the holder has not let go
    finally:
        release.set()
        holder.join(timeout=60)
        marker.join(timeout=60)
    assert outcome == [None]
    assert _state(conn, candidate) == "ready"
    assert str(candidate) in conn.execute("SELECT obj_description('toolkit.live_chunks'::regclass)").fetchone()[0]


def test_a_failing_model_the_writer_registered_does_not_break_ingest_of_every_tenant(
    conn, database_url, logins, make_model, tmp_path, monkeypatch
):
    """The writer registers (through SQL, skipping the probe) a model that cannot work in the ingest job's process
    and creates a version of it: ingest goes on for every tenant, leaving that building version to its backfill."""
    from toolkit.backfill import backfill
    from toolkit.ingest import ingest

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nRow security policies filter rows per tenant.\n")
    make_model("good", 16, model_name="16")
    ingest(conn, [docs], "acme")
    good = backfill(database_url, "good", "recursive:100:0").version
    cutover.activate_version(conn, good, force=True)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with psycopg.connect(logins["writer"][1], autocommit=True) as w:
        w.execute("SELECT toolkit.register_model('broken', 'openai', 'no-such-model', 16, 512)")
        broken = w.execute(
            "SELECT toolkit.create_version('broken', 'recursive:100:0', 'recursive:100:0@1')"
        ).fetchone()[0]
    (docs / "b.md").write_text("# B\n\nA second document about indexes and their upkeep.\n")
    for tenant in ("acme", "beta"):
        result = CliRunner().invoke(main, ["--database-url", database_url, "ingest", str(docs), "--tenant", tenant])
        assert result.exit_code == 0, result.output
        assert f"Version {broken} (building) was left to its backfill" in result.output
    served = conn.execute(
        f"SELECT count(DISTINCT (tenant, doc_id)) FROM toolkit.chunks_v{good} WHERE embedding IS NOT NULL"
    ).fetchone()[0]
    assert served == 4  # a.md and b.md for both tenants, in the active version
    assert conn.execute(f"SELECT count(*) FROM toolkit.chunks_v{broken}").fetchone()[0] == 0
    # a served version's failure is still raised: it must not silently miss documents
    from toolkit.ingest import IngestReport, _usable
    from toolkit.store.chunk_table import LiveVersion
    from toolkit.store.models import get_model

    served = LiveVersion(broken, get_model(conn, "broken"), "recursive:100:0", "recursive:100:0@2", "vector", 16)
    with pytest.raises(InputError):
        _usable(served, [served], IngestReport(tenant="acme"))


def test_query_log_bounds_are_set_by_the_owner_and_shown(conn, database_url, logins):
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "query-log", "--max-rows", "5000", "--max-per-minute", "60"]
    )
    assert result.exit_code == 0, result.output
    assert "at most 5,000 questions kept and 60 a minute per login" in result.output
    refused = CliRunner().invoke(main, ["--database-url", logins["deployer"][1], "query-log", "--max-rows", "10"])
    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert conn.execute("SELECT max_rows, max_per_minute FROM toolkit.query_log_settings").fetchone() == (5000, 60)
