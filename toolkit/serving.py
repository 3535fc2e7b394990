"""Serving across a migration: which version (and model) a request's question is embedded for and searched in
(``toolkit.serving_model``: the active version, or the canary candidate for a share of request keys and for whole
tenants), and the canary that sets that share. SQL holds the split and its audit; the statements are in
``toolkit.store.serving``. Also what ``toolkit canary`` and ``toolkit query-log`` call: ``change_canary`` and
``configure_query_log`` (``cut_over`` / ``roll_back`` are in ``toolkit.cutover``, ``overview`` in
``toolkit.status``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import psycopg

from toolkit.errors import InputError, StateError
from toolkit.store.serving import (
    READER_ROLE,
    Canary,
    ServingModel,
    as_reader,
    select_canary,
    select_serving_model,
    select_version_model,
    write_canary,
)
from toolkit.validation import check_tenant

__all__ = ["READER_ROLE", "Canary", "ServingModel", "as_reader"]


def serving_model(
    conn: psycopg.Connection, tenant: str, request_key: str | None = None, *, role: str | None = READER_ROLE
) -> ServingModel:
    """The version (and model) that serves this request: ``toolkit.serving_model(request_key)`` in ``tenant`` (the
    canary candidate for its share of request keys and for its tenants, else the active version)."""
    check_tenant(tenant)
    row = select_serving_model(conn, tenant, request_key, role)
    if row is None:
        raise StateError("No version is active, so there is nothing to search. Activate one with toolkit cutover.")
    return row


def version_model(conn: psycopg.Connection, version: int) -> ServingModel:
    """The model a given version's questions are embedded with (for a search pinned to that version)."""
    row = select_version_model(conn, version)
    if row is None:
        raise InputError(f"There is no version {version}. Run toolkit status to list them.")
    return row


def canary_status(conn: psycopg.Connection) -> Canary | None:
    return select_canary(conn)


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
    write_canary(conn, version, share, tenants, force, reason)
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
