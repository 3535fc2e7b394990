"""The red team's attacks on the query log's bounds (issue 39 item 4), each run on the real database as a real reader
login, and named for the attack. Each failed on the main branch it was written against: the rate per login was
counted per transaction, a row could hold ~101 kB, and a request key over 256 bytes failed the search it logged."""

from __future__ import annotations

import hashlib
import threading
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb
from support import ready_version

from toolkit import cutover
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.search import search

RATE = 20  # questions a minute per login, set for these tests (the default is 600)
ROW_BYTES = 9_500  # the documented bound on a logged row's data (docs/security.md, "The query log's limits")


@pytest.fixture
def reader(conn, database_url):
    """A reader login's URL; dropped afterwards."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE toolkit_reader')
    parts = urlsplit(database_url)
    yield urlunsplit(parts._replace(netloc=f"{name}@{parts.netloc.split('@')[-1]}"))
    conn.execute(f'DROP OWNED BY "{name}"')
    conn.execute(f'DROP ROLE "{name}"')


@pytest.fixture
def logging_on(conn, make_model):
    """An active version with 20 rows in tenant a, every question logged, at most RATE a minute per login."""
    make_model("m1", 8)
    active = ready_version(conn, "m1", 8, {"a": 20}, seed=1)
    cutover.activate_version(conn, active, force=True)
    conn.execute("SELECT * FROM toolkit.set_query_log(1.0)")
    conn.execute("SELECT * FROM toolkit.set_query_log_bounds(NULL, %s)", (RATE,))
    return active


def _logged(conn) -> int:
    return conn.execute("SELECT count(*) FROM toolkit.query_log").fetchone()[0]


def _log(session, active: int, question: str, results=(), request_key=None) -> bool:
    return session.execute(
        "SELECT toolkit.log_query(%s, %s, 5, %s, 1.0, %s)", (question, active, Jsonb(list(results)), request_key)
    ).fetchone()[0]


def test_ten_sessions_of_one_login_in_open_transactions_log_no_more_than_its_rate(conn, reader, logging_on):
    active = logging_on
    sessions = 10
    opened = threading.Barrier(sessions)  # every session's transaction is open before any logs
    logged_all = threading.Barrier(sessions)  # and none commits before every one has logged
    errors: list[BaseException] = []

    def flood(n: int) -> None:
        try:
            with psycopg.connect(reader) as session:  # not autocommit: one transaction until the block ends
                session.execute("SELECT toolkit.set_tenant('a')")
                opened.wait(timeout=60)
                for i in range(RATE):  # each one the whole rate, as if it were the login's only transaction
                    _log(session, active, f"flood {n}-{i}")
                logged_all.wait(timeout=60)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            opened.abort()
            logged_all.abort()

    threads = [threading.Thread(target=flood, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert _logged(conn) == RATE  # 10 transactions of the login, one login's minute: RATE rows, not 10 x RATE
    with psycopg.connect(reader, autocommit=True) as later:  # and the committed minute still counts
        later.execute("SELECT set_config('toolkit.tenant', 'a', false)")
        assert _log(later, active, "one more") is False
    assert _logged(conn) == RATE
    assert conn.execute("SELECT skipped_over_rate FROM toolkit.query_log_status()").fetchone()[0] >= 1


def test_a_repeatable_read_snapshot_taken_before_another_sessions_flood_cannot_log_past_the_rate(
    conn, reader, logging_on
):
    active = logging_on
    with psycopg.connect(reader) as stale, psycopg.connect(reader) as flooder:
        stale.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        stale.execute("SELECT toolkit.set_tenant('a')")  # the transaction's snapshot is taken here
        flooder.execute("SELECT toolkit.set_tenant('a')")
        assert [_log(flooder, active, f"flood {i}") for i in range(RATE + 5)] == [True] * RATE + [False] * 5
        flooder.commit()
        # The stale snapshot cannot see the flooder's rows: counting them it would log RATE more.
        assert not any(_log(stale, active, f"stale {i}") for i in range(RATE))
        stale.commit()
    assert _logged(conn) == RATE


def test_a_huge_question_and_huge_results_log_at_most_the_row_bound(conn, reader, logging_on):
    active = logging_on
    question = "\U0001d11e" + uuid.uuid4().hex * 3_000 + "\U0001d11e" * 20_000  # ~96,000 characters, ~176 kB
    results = [
        {"doc_id": f"doc-{i}-" + "\u00e9" * 1_900, "start": i, "end": i + 400, "rank": i + 1, "score": 0.5}
        for i in range(1_000)
    ]  # ~3.9 kB an entry, ~3.9 MB in all
    tiny = [{"rank": i} for i in range(1_000)]  # small entries take more bytes as jsonb than as text
    tenant = "\U0001d11e" * 200  # the longest tenant the toolkit accepts: 200 characters, here 800 bytes
    with psycopg.connect(reader, autocommit=True) as session:
        session.execute("SELECT set_config('toolkit.tenant', %s, false)", (tenant,))
        assert _log(session, active, question, results, "k" * 256) is True
        assert _log(session, active, question, tiny, "k" * 256) is True
    rows = conn.execute(  # the bytes uncompressed (these compress well; questions and doc ids at random may not)
        "SELECT octet_length(q.tenant) + octet_length(q.request_key) + octet_length(q.question)"
        " + octet_length(q.model_alias) + pg_column_size(q.results::text::jsonb) + pg_column_size(q.logged_by)"
        " + 16 + 8 + 4 + 4 + 8, pg_column_size(q.*), octet_length(q.question), q.question, q.results"
        " FROM toolkit.query_log AS q ORDER BY jsonb_array_length(q.results)"
    ).fetchall()
    for data, stored, kept, leading, _ in rows:
        assert data <= ROW_BYTES and stored <= ROW_BYTES, (data, stored)
        assert kept <= 4_096 and question.startswith(leading) and len(leading) > 1_000  # the leading 4,096 bytes
    big, small = rows[0][4], rows[1][4]
    assert 0 < len(big) < len(results) and big == results[: len(big)]  # the leading entries, each whole
    assert 100 < len(small) < len(tiny) and small == tiny[: len(small)]


def test_a_ten_thousand_character_request_key_is_searched_and_logged_in_its_bounded_form(conn, reader, logging_on):
    key = "user-" + "\u00e9" * 9_995  # 10,000 characters, as toolkit serve accepts
    with connect(reader) as app:
        hits = search(app, "How do I create an index?", "a", k=3, request_key=key)
    assert len(hits) == 3
    result = CliRunner().invoke(
        main, ["--database-url", reader, "search", "another question", "--tenant", "a", "--request-key", key]
    )
    assert result.exit_code == 0, result.output
    stored = [row[0] for row in conn.execute("SELECT request_key FROM toolkit.query_log ORDER BY logged_at")]
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert len(stored) == 2 and all(len(k.encode()) <= 256 for k in stored), (stored, result.output)
    assert all(k.startswith("user-\u00e9") and k.endswith(f"\u2026sha256:{digest}") for k in stored)


def test_a_failing_log_does_not_fail_the_search_or_its_transaction(conn, reader, logging_on):
    """The log's table held by another session (a VACUUM FULL, a migration) past the reader's lock timeout: the
    INSERT fails, the search is served, and the caller's transaction goes on."""
    with connect(reader) as app:
        app.execute("SET lock_timeout = '200ms'")
        app.execute("SELECT 1")  # the caller's own transaction is open: the log is a savepoint in it
        conn.execute("BEGIN")
        conn.execute("LOCK TABLE toolkit.query_log IN ACCESS EXCLUSIVE MODE")
        try:
            hits = search(app, "How do I create an index?", "a", k=3, request_key="user-7")
        finally:
            conn.execute("ROLLBACK")
        assert len(hits) == 3
        assert app.execute("SELECT toolkit.active_version()").fetchone()[0] == logging_on
        app.commit()
    assert _logged(conn) == 0


def test_a_reader_holding_a_transaction_open_after_logging_does_not_hang_the_owner_or_status(
    conn, reader, logging_on, database_url
):
    """Its log pruned (or counted a skipped question), so its transaction holds the log's settings row: the owner's
    change is refused naming it instead of waiting for it, and toolkit status goes on without pruning."""
    active = logging_on
    deployer = f"deployer_{uuid.uuid4().hex[:8]}"
    conn.execute(f'CREATE ROLE "{deployer}" LOGIN IN ROLE toolkit_deployer')
    conn.execute("SET statement_timeout = '30s'")  # on the code before, the owner waited for the reader
    try:
        with psycopg.connect(reader) as app:
            app.execute("SELECT toolkit.set_tenant('a')")
            assert _log(app, active, "first question of the minute")  # prunes: takes the settings row
            with pytest.raises(psycopg.errors.LockNotAvailable, match=f"pid {app.info.backend_pid} "):
                conn.execute("SELECT * FROM toolkit.set_query_log(0)")
            parts = urlsplit(database_url)
            url = urlunsplit(parts._replace(netloc=f"{deployer}@{parts.netloc.split('@')[-1]}"))
            result = CliRunner().invoke(main, ["--database-url", url, "status", "--format", "json"])
            assert result.exit_code == 0, result.output
            app.commit()
        assert conn.execute("SELECT * FROM toolkit.set_query_log(0)").fetchone()[0] == 0
    finally:
        conn.execute("RESET statement_timeout")
        conn.execute(f'DROP OWNED BY "{deployer}"')
        conn.execute(f'DROP ROLE "{deployer}"')
