"""Serving across a migration: which version (and model) a request's question is embedded for and searched in
(``toolkit.serving_model``: the active version, or the canary candidate for a share of request keys and for whole
tenants), and the canary that sets that share. SQL holds the split and its audit; this module calls it. Also what
the commands that change or show what is served call: ``change_canary``, ``cut_over`` and ``roll_back`` (which
version serves, reported as dataclasses), ``configure_query_log``, and ``overview`` (``toolkit status``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta

import psycopg

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError, StateError

READER_ROLE = "toolkit_reader"


@dataclass(frozen=True)
class ServingModel:
    """What ``toolkit.serving_model(request_key)`` returns: the version a request's question is embedded for and
    searched in, its model, and whether it serves as the active version or as the canary."""

    version: int
    model_alias: str
    provider: str
    model_name: str
    revision: str
    dimensions: int
    distance: str
    storage: str
    chunker_version: str
    query_prefix: str
    serving: str

    def as_dict(self) -> dict:
        return asdict(self)


@contextlib.contextmanager
def as_reader(
    conn: psycopg.Connection, tenant: str, principals: Sequence[str] | None = (), role: str | None = READER_ROLE
) -> Iterator[None]:
    """A read-only transaction as ``role`` (when the connected user may take it), the tenant and principals set.
    Rolled back at the end: the role and settings end with it, even inside a transaction of the caller's (SET
    LOCAL would otherwise last until the caller's transaction ends)."""
    with conn.transaction(force_rollback=True):
        if role and conn.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,)).fetchone()[0]:
            conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(psycopg.sql.Identifier(role)))
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        conn.execute("SELECT toolkit.set_principals(%s)", (list(principals or []),))
        yield


def serving_model(
    conn: psycopg.Connection, tenant: str, request_key: str | None = None, *, role: str | None = READER_ROLE
) -> ServingModel:
    """The version (and model) that serves this request: ``toolkit.serving_model(request_key)`` in ``tenant`` (the
    canary candidate for its share of request keys and for its tenants, else the active version)."""
    if not isinstance(tenant, str) or not tenant:
        raise InputError("A search needs a tenant: pass --tenant (the tenant the documents were ingested for).")
    with translate_errors(), as_reader(conn, tenant, role=role):
        row = conn.execute("SELECT * FROM toolkit.serving_model(%s)", (request_key,)).fetchone()
    if row is None:
        raise StateError("No version is active, so there is nothing to search. Activate one with toolkit cutover.")
    return ServingModel(*row)


def version_model(conn: psycopg.Connection, version: int) -> ServingModel:
    """The model a given version's questions are embedded with (for a search pinned to that version)."""
    with translate_errors(), conn.transaction():
        row = conn.execute("SELECT * FROM toolkit.version_model(%s)", (version,)).fetchone()
    if row is None:
        raise InputError(f"There is no version {version}. Run toolkit status to list them.")
    return ServingModel(*row)


@dataclass(frozen=True)
class Canary:
    """The canary, when one runs (``toolkit.canary_status()``)."""

    candidate: int
    model_alias: str
    percent: float
    tenants: list[str]
    forced: bool
    evaluation_id: int | None
    started_at: object
    changed_at: object

    def as_dict(self) -> dict:
        return asdict(self)


def canary_status(conn: psycopg.Connection) -> Canary | None:
    with translate_errors(), conn.transaction():
        row = conn.execute("SELECT * FROM toolkit.canary_status()").fetchone()
    if row is None:
        return None
    candidate, alias, percent, tenants, *rest = row
    return Canary(candidate, alias, float(percent), list(tenants), *rest)


def set_canary(
    conn: psycopg.Connection,
    version: int,
    percent: float,
    tenants: Sequence[str] = (),
    *,
    force: bool = False,
    reason: str | None = None,
) -> Canary | None:
    """Sends ``percent`` of request keys (0 to 100, to 0.01) and the listed tenants to the candidate ``version``;
    ``percent`` 0 with no tenants ends the canary. Refuses a candidate without a passing verification newer than
    its last change unless ``force`` (audited). Returns the canary now running (None when ended)."""
    from decimal import Decimal, InvalidOperation

    try:
        share = Decimal(str(percent))
    except InvalidOperation:
        raise InputError(f"--percent must be a number from 0 to 100, not {percent!r}.") from None
    if not share.is_finite() or not 0 <= share <= 100:
        raise InputError(f"--percent must be a number from 0 to 100, not {percent!r}.")
    tenants = [t.strip() for t in tenants if t.strip()]
    with translate_errors(), conn.transaction():
        conn.execute("SELECT toolkit.set_canary(%s, %s, %s, %s, %s)", (version, share, tenants, force, reason))
    return canary_status(conn)


def end_canary(conn: psycopg.Connection, *, reason: str | None = None) -> int:
    """Ends the canary (all traffic back to the active version); returns the candidate it sent traffic to."""
    current = canary_status(conn)
    if current is None:
        raise StateError("No canary is running: nothing to stop.")
    set_canary(conn, current.candidate, 0, (), reason=reason)
    return current.candidate


@dataclass(frozen=True)
class CanaryChange:
    """What ``change_canary`` did: ``action`` is "ended" (the canary of ``version`` was stopped), "shown" (nothing
    asked to change) or "set" (``version`` is the candidate named); ``canary`` is the canary running now, if any."""

    action: str
    canary: Canary | None
    version: int | None = None


def change_canary(
    conn: psycopg.Connection,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    *,
    percent: float | None = None,
    tenants: str | Sequence[str] | None = None,
    off: bool = False,
    force: bool = False,
    reason: str | None = None,
) -> CanaryChange:
    """Ends the canary (``off``), shows it (no percent and no tenants), or sets it for the version named by model
    (and chunker) or number (``set_canary``; percent 0 with no tenants ends it). ``tenants`` is a list or "A,B"."""
    if off:
        return CanaryChange("ended", None, end_canary(conn, reason=reason))
    if percent is None and tenants is None:
        return CanaryChange("shown", canary_status(conn))
    from toolkit.store.versions import resolve_version

    target = resolve_version(conn, model_alias, chunker_spec, version, action="canary")
    names = tenants.split(",") if isinstance(tenants, str) else list(tenants or ())
    chosen = [t for t in names if t.strip()]
    return CanaryChange("set", set_canary(conn, target, percent or 0, chosen, force=force, reason=reason), target)


@dataclass(frozen=True)
class QueryLogChange:
    """The query log after ``configure_query_log``, and how many questions it pruned (None if not asked)."""

    status: object  # toolkit.store.query_log.QueryLogStatus
    pruned: int | None = None

    def as_dict(self) -> dict:
        return {**self.status.as_dict(), "pruned": self.pruned}


def configure_query_log(
    conn: psycopg.Connection,
    *,
    sample_rate: float | None = None,
    retention: str | timedelta | None = None,
    off: bool = False,
    prune: bool = False,
) -> QueryLogChange:
    """Sets the query log's sample rate (``off``: 0; unchanged when only ``retention`` is given) and retention (a
    timedelta or a duration such as 30d), prunes it if asked, and returns its status."""
    from toolkit.store.query_log import prune_query_log, query_log_status, set_query_log
    from toolkit.validation import parse_duration

    pruned = None
    if off or sample_rate is not None or retention is not None:
        rate = 0.0 if off else (sample_rate if sample_rate is not None else query_log_status(conn).sample_rate)
        keep = parse_duration(retention) if isinstance(retention, str) else retention
        set_query_log(conn, rate, keep)
    if prune:
        pruned = prune_query_log(conn)
    return QueryLogChange(query_log_status(conn), pruned)
