"""The query log's settings (opt-in, sampled, with a retention period): what ``toolkit query-log`` changes. The
questions are personal data; the log is off (sample rate 0) until an operator turns it on."""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from datetime import timedelta

import psycopg

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError, ToolkitError
from toolkit.validation import iso_duration

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryLogStatus:
    """``toolkit.query_log_status()``: the settings, the size, the bounds (row cap, rate per login) and what they kept
    out."""

    sample_rate: float
    retention: timedelta
    questions: int
    oldest: object
    max_rows: int
    max_per_minute: int
    skipped_over_rate: int
    pruned_over_cap: int
    last_pruned_at: object

    def as_dict(self) -> dict:
        values = asdict(self)
        values["retention"] = iso_duration(self.retention)  # ISO 8601 ("P30D"), as toolkit status gives it
        return values


def query_log_status(conn: psycopg.Connection) -> QueryLogStatus:
    with translate_errors(), conn.transaction():
        return QueryLogStatus(*conn.execute("SELECT * FROM toolkit.query_log_status()").fetchone())


def set_query_log(conn: psycopg.Connection, sample_rate: float, retention: timedelta | None = None) -> QueryLogStatus:
    """Logs ``sample_rate`` of the questions searched (0 turns it off) and keeps them for ``retention``."""
    if not isinstance(sample_rate, int | float) or not math.isfinite(sample_rate) or not 0 <= sample_rate <= 1:
        raise InputError(
            f"--sample-rate must be a share from 0 to 1 (0.1 logs one question in ten), not {sample_rate!r}."
        )
    if retention is not None and retention <= timedelta(0):
        raise InputError(f"--retention must be longer than zero, not {retention}.")
    with translate_errors(), conn.transaction():
        conn.execute("SELECT * FROM toolkit.set_query_log(%s, %s)", (float(sample_rate), retention))
    return query_log_status(conn)


def set_query_log_bounds(
    conn: psycopg.Connection, max_rows: int | None = None, max_per_minute: int | None = None
) -> QueryLogStatus:
    """Keeps at most ``max_rows`` questions (the oldest beyond are pruned) and logs at most ``max_per_minute`` per
    login (the rest are skipped and counted); None keeps a bound. Needs the owner role."""
    with translate_errors(), conn.transaction():
        conn.execute("SELECT * FROM toolkit.set_query_log_bounds(%s, %s)", (max_rows, max_per_minute))
    return query_log_status(conn)


def prune_query_log(conn: psycopg.Connection) -> int:
    """Deletes the questions older than the retention period, then the oldest beyond the row cap; returns how many."""
    with translate_errors(), conn.transaction():
        return conn.execute("SELECT toolkit.prune_query_log()").fetchone()[0]


def prune_if_permitted(conn: psycopg.Connection) -> int | None:
    """Prunes the query log when this role may (writer, deployer, owner) and the server is writable; None otherwise.
    Status and shadow call it, so expired questions go even when logging is off and nothing else prunes."""
    with conn.transaction():
        allowed = conn.execute(
            "SELECT has_function_privilege('toolkit.prune_query_log()', 'EXECUTE') AND NOT pg_is_in_recovery()"
        ).fetchone()[0]
    if not allowed:
        return None
    try:
        return prune_query_log(conn)
    except (ToolkitError, psycopg.Error):  # e.g. a read-only session: pruning waits for the next chance
        return None


def skipped_on_standby(conn: psycopg.Connection) -> int:
    """How many sampled questions this session could not log because it runs on a read-only hot standby
    (``toolkit.log_query`` skips them instead of failing the search)."""
    row = conn.execute("SELECT current_setting('toolkit.query_log_skipped', true)").fetchone()
    return int(row[0]) if row and row[0] else 0


def query_log_sample_rate(conn: psycopg.Connection) -> float:
    """The share of questions the log samples (``toolkit.query_log_sample_rate()``)."""
    with translate_errors(), conn.transaction():
        return conn.execute("SELECT toolkit.query_log_sample_rate()").fetchone()[0]


def write_logged_question(
    conn: psycopg.Connection,
    tenant: str,
    question: str,
    version: int,
    k: int,
    results: list[dict],
    latency_ms: float,
    request_key: str | None,
    role: str | None,
) -> bool:
    """``toolkit.log_query`` as ``role`` in ``tenant``; returns whether SQL logged it (a read-only standby, the
    per-login rate and another transaction of the login logging say no). Inside a caller's transaction this is a
    savepoint: the role and the tenant are put back as they were. The log never fails the search it records: an
    error here (the served version retired meanwhile, a timeout, a refused field) rolls back to the savepoint, is
    reported as a warning, and returns False, leaving the caller's transaction usable."""
    from psycopg.types.json import Jsonb

    from toolkit.store.serving import take_role

    try:
        with translate_errors(), conn.transaction():
            previous = conn.execute("SELECT current_setting('toolkit.tenant', true)").fetchone()[0]
            take_role(conn, role)
            conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
            logged = conn.execute(
                "SELECT toolkit.log_query(%s, %s, %s, %s, %s, %s)",
                (question, version, k, Jsonb(results), latency_ms, request_key),
            ).fetchone()[0]
            conn.execute("RESET ROLE")
            conn.execute("SELECT set_config('toolkit.tenant', %s, true)", (previous or "",))
    except (ToolkitError, psycopg.Error) as error:
        _log.warning("The query log did not record a question (the search was served): %s", error)
        return False
    return logged


def logged_questions(conn: psycopg.Connection, since, tenant: str | None, max_questions: int | None) -> list[tuple]:
    """(tenant, question) of the questions logged since ``since`` (of ``tenant``, or every tenant), at most
    ``max_questions`` (``toolkit.logged_questions``), for replay."""
    with translate_errors(), conn.transaction():
        return conn.execute(
            "SELECT tenant, question FROM toolkit.logged_questions(%s, %s, %s)", (since, tenant, max_questions)
        ).fetchall()
