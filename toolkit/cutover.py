"""Choosing versions by model alias for verify, cutover and retire, and retiring past the rollback window."""

from __future__ import annotations

import re
from datetime import timedelta

import psycopg

from toolkit import versions
from toolkit.database import translate_errors
from toolkit.errors import InputError


def resolve_version(
    conn: psycopg.Connection,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    *,
    states: tuple[str, ...] = ("building", "ready", "verified", "standby"),
) -> int:
    """The one live, non-active version for a model (and chunker), or the version given by number."""
    if version is not None and (model_alias or chunker_spec):
        raise InputError(
            f"Name the version one way: --version {version}, or --model (and --chunker), not both; they could "
            "name different versions."
        )
    if version is not None:
        with conn.transaction():
            row = conn.execute("SELECT state FROM toolkit.versions WHERE version = %s", (version,)).fetchone()
        if row is None:
            raise InputError(f"There is no version {version}. Run toolkit status to list them.")
        return version
    if not model_alias:
        raise InputError("Name the version: --model ALIAS (and --chunker SPEC if it has several), or --version N.")
    query = "SELECT version, chunker_spec FROM toolkit.versions WHERE model_alias = %s AND state = ANY(%s)"
    params: list = [model_alias, list(states)]
    if chunker_spec:
        from toolkit.chunking import get_chunker

        query += " AND chunker_version = %s"
        params.append(get_chunker(chunker_spec).version)
    with conn.transaction():
        rows = conn.execute(query + " ORDER BY version", params).fetchall()
    if not rows:
        raise InputError(
            f"No {'/'.join(states)} version uses the model {model_alias!r}"
            + (f" with chunker {chunker_spec}" if chunker_spec else "")
            + ". Build one with toolkit backfill, or check toolkit status."
        )
    if len(rows) > 1:
        listing = ", ".join(f"{v} ({spec})" for v, spec in rows)
        raise InputError(
            f"The model {model_alias!r} has several versions: {listing}. Pick one with --chunker or --version."
        )
    return rows[0][0]


def parse_duration(text: str) -> timedelta:
    """'7d', '12h', '30m', '0' → a timedelta."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", text or "")
    if not match:
        raise InputError(f"{text!r} is not a duration; write e.g. 7d, 12h, 30m or 0.")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return timedelta(**{{"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[unit]: value})


def retire_candidates(conn: psycopg.Connection, older_than: timedelta) -> list[tuple[int, str]]:
    """Standby and abandoned (building/ready/verified) versions whose state is older than the window, as SQL decides
    (``toolkit.retire_candidates``): a building version whose rows were written within the window is a backfill
    still running, and a canary candidate is serving; both are kept."""
    with translate_errors(), conn.transaction():
        return [tuple(r) for r in conn.execute("SELECT * FROM toolkit.retire_candidates(%s)", (older_than,))]


def retire_old_versions(conn: psycopg.Connection, older_than: timedelta, *, dry_run: bool = False) -> list[int]:
    """Retires every candidate; the active version is never among them."""
    retired = []
    for version, state in retire_candidates(conn, older_than):
        if not dry_run:
            versions.retire_version(conn, version, reason=f"{state} for longer than {older_than}")
        retired.append(version)
    return retired
