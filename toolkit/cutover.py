"""Cutover, rollback and retirement as the commands do them: the version a command means (by model alias or number),
the versions past the rollback window, waiting for standby servers before a retirement, and what each move did.
The statements themselves (one SQL transaction each, with a short lock timeout and retries) are in
``toolkit.store.lifecycle``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import timedelta

import psycopg

from toolkit.errors import InputError, StateError
from toolkit.store.lifecycle import (
    LaggingStandby,
    ProtectedStandby,
    activate_version,
    check_retirable,
    protected_standby,
    retire_candidates,
    retire_refusal,
    retire_version,
    rollback_version,
    rollback_window,
    set_rollback_window,
    standby_replay,
    wal_position,
)
from toolkit.store.versions import resolve_version
from toolkit.validation import parse_duration

# What callers of the lifecycle reach through this module (the statements live in toolkit.store.lifecycle).
__all__ = [
    "Cutover",
    "LaggingStandby",
    "ProtectedStandby",
    "Retirement",
    "Rollback",
    "activate_version",
    "cut_over",
    "protected_standby",
    "retire_candidates",
    "retire_old_versions",
    "retire_refusal",
    "retire_version",
    "retire_versions",
    "roll_back",
    "rollback_version",
    "rollback_window",
    "set_rollback_window",
    "wait_for_standbys",
]

# How long retire waits for standby servers to replay what was written before it.
STANDBY_WAIT_SECONDS = 10.0


def wait_for_standbys(conn: psycopg.Connection, timeout: float | None = None) -> list[LaggingStandby]:
    """Waits (up to ``timeout`` seconds) until every standby streaming from this server has replayed what was
    written before this call: the last cutover among it, so the standby's readers have seen which version serves.
    Returns the standbys still behind (empty: none, or no standby)."""
    position = wal_position(conn)
    deadline = time.monotonic() + (STANDBY_WAIT_SECONDS if timeout is None else timeout)
    while True:
        behind = standby_replay(conn, position)
        if not behind or all(not b.known for b in behind) or time.monotonic() > deadline:
            return behind
        time.sleep(0.05)  # polling the standbys' replay position, which no notification reports


def retire_old_versions(conn: psycopg.Connection, older_than: timedelta, *, dry_run: bool = False) -> list[int]:
    """Retires every candidate; the active version is never among them."""
    retired = []
    for version, state in retire_candidates(conn, older_than):
        if not dry_run:
            retire_version(conn, version, reason=f"{state} for longer than {older_than}")
        retired.append(version)
    return retired


@dataclass(frozen=True)
class Retirement:
    """What toolkit retire did (``acted``) or would do: the versions, and the rollback target it kept."""

    versions: list[int]
    acted: bool
    kept: list[dict]


def retire_versions(
    conn: psycopg.Connection,
    *,
    older_than: str | timedelta | None = None,
    version: int | None = None,
    force: bool = False,
    act: bool = False,
    warn=None,
) -> Retirement:
    """`toolkit retire`: the versions past ``older_than`` (default: the rollback window) or the one ``version``;
    dropped only when ``act`` (else a dry run). SQL's rules decide (``retire_candidates``, ``retire_refusal``);
    before dropping, connected standbys are waited for (``wait_for_standbys``) and one still behind refuses the
    retirement unless ``force``. ``warn`` receives what cannot be checked."""
    if force and version is None:
        raise InputError(
            "--force retires one version: name it with --version N (retire by age never drops the rollback target)."
        )
    if older_than is not None and version is not None:
        raise InputError("Give --older-than (every old version) or --version N (that one), not both.")
    kept: list[dict] = []
    if version is None:
        window = rollback_window(conn) if older_than is None else older_than
        window = parse_duration(window) if isinstance(window, str) else window
        chosen = [v for v, _ in retire_candidates(conn, window)]
        protected = protected_standby(conn)
        if protected is not None:
            until = protected.protected_until.strftime("%Y-%m-%d %H:%M %Z")
            kept.append({"version": protected.version, "reason": f"rollback target until {until}"})
    else:
        check_retirable(conn, version)
        refusal = retire_refusal(conn, version, force=force)
        if refusal:
            raise StateError(refusal)
        chosen = [version]
    if not act or not chosen:
        return Retirement(chosen, act, kept)
    lagging = wait_for_standbys(conn)
    unknown = [s.describe() for s in lagging if not s.known]
    if unknown and warn:
        warn(f"cannot tell what {'; '.join(unknown)} has replayed.")
    behind = [s.describe() for s in lagging if s.known]
    if behind and not force:
        raise StateError(
            f"Nothing was retired: {'; '.join(behind)} has not replayed the last changes after "
            f"{STANDBY_WAIT_SECONDS:g} s; its readers may still use the version. Retry when it has caught up, or "
            "retire with --force."
        )
    reason = "toolkit retire --version" if version is not None else "toolkit retire (past the window)"
    for target in chosen:
        retire_version(conn, target, reason=reason, force=force)
    return Retirement(chosen, True, kept)


@dataclass(frozen=True)
class Cutover:
    """A cutover done: the version now active, the one put on standby (None if none was active), whether forced."""

    cutover_id: int
    active: int
    standby: int | None
    forced: bool

    def as_dict(self) -> dict:
        return asdict(self)


def cut_over(
    conn: psycopg.Connection,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    *,
    force: bool = False,
    reason: str | None = None,
) -> Cutover:
    """Activates the version named by model (and chunker) or number (``activate_version``; a canary
    of it is promoted); the active version becomes standby."""
    from toolkit.store.versions import active_version

    target = resolve_version(conn, model_alias, chunker_spec, version, action="activate")
    previous = active_version(conn)
    cutover_id = activate_version(conn, target, force=force, reason=reason)
    return Cutover(cutover_id, target, previous, force)


@dataclass(frozen=True)
class Rollback:
    """A rollback done: the version active now, the one that was (``rolled_back``), and the canary candidate that no
    longer serves anything when the rollback ended a canary (else None)."""

    cutover_id: int
    active: int | None
    rolled_back: int | None
    canary_ended: int | None

    def as_dict(self) -> dict:
        return asdict(self)


def roll_back(conn: psycopg.Connection, *, reason: str | None = None) -> Rollback:
    """Ends the canary if one runs, else swaps back to the standby version (``rollback_version``)."""
    from toolkit.serving import canary_status
    from toolkit.store.versions import active_version

    canary = canary_status(conn)
    current = active_version(conn)
    cutover_id = rollback_version(conn, reason=reason)
    return Rollback(cutover_id, active_version(conn), current, canary.candidate if canary else None)
