"""Cutover, rollback and retirement: the moves that change what is served, each one transaction in SQL
(``toolkit.activate_version``, ``rollback_version``, ``retire_version``), with a short lock timeout and retries so a
swap never queues readers for long; and choosing the version a command means (by model alias or number), and the
versions past the rollback window."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import errors as pg_errors

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError, StateError
from toolkit.store.chunk_table import version_table
from toolkit.store.versions import resolve_version
from toolkit.validation import parse_duration

# What a cutover, rollback or retirement must lock besides the toolkit's own (private) lock tables.
_SWAPPED = ("toolkit.active_chunks", "toolkit.live_chunks")


def _swap(
    conn: psycopg.Connection,
    query: str,
    params: tuple,
    lock_timeout_ms: int,
    attempts: int,
    tables: tuple[str, ...] = _SWAPPED,
):
    # The view swap needs an exclusive lock on the views (a retirement also on the version's table); waiting for it
    # would queue every new reader behind the swap, so wait briefly and retry instead.
    for attempt in range(attempts):
        try:
            with translate_errors(retry_locks=True), conn.transaction():
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_timeout_ms}ms",))
                return conn.execute(query, params).fetchone()[0]
        except pg_errors.LockNotAvailable:
            time.sleep(min(0.05 * 2**attempt, 1.0))
    raise StateError(
        f"The change could not take its lock in {attempts} attempts of {lock_timeout_ms} ms: "
        f"{_holders(conn, tables)}. Retry when that has finished (keep reader transactions short)."
    )


def _holders(conn: psycopg.Connection, tables: tuple[str, ...]) -> str:
    """Who holds the relations a swap waited for, as ``toolkit._lock_holders`` describes them."""
    described = []
    with conn.transaction():
        for table in tables:
            row = conn.execute(
                "SELECT CASE WHEN to_regclass(%s) IS NULL THEN NULL ELSE toolkit._lock_holders(to_regclass(%s)) END",
                (table, table),
            ).fetchone()
            if row[0] and row[0] != "a session that has just ended":
                described.append(f"{table} is held by {row[0]}")
    return "; ".join(described) or "the sessions that held the views have just ended"


def activate_version(
    conn: psycopg.Connection,
    version: int,
    *,
    force: bool = False,
    reason: str | None = None,
    lock_timeout_ms: int = 200,
    attempts: int = 20,
) -> int:
    """Swaps active_chunks to ``version``; the previous active version becomes standby."""
    return _swap(
        conn,
        "SELECT toolkit.activate_version(%s, %s, %s)",
        (version, force, reason),
        lock_timeout_ms,
        attempts,
    )


def rollback_version(
    conn: psycopg.Connection, *, reason: str | None = None, lock_timeout_ms: int = 200, attempts: int = 20
) -> int:
    """Swaps active_chunks back to the standby version the active one replaced."""
    return _swap(conn, "SELECT toolkit.rollback_version(%s)", (reason,), lock_timeout_ms, attempts)


def retire_version(conn: psycopg.Connection, version: int, *, reason: str | None = None, force: bool = False) -> int:
    """Drops a non-active version's table; its registry row and audit trail stay. The rollback target inside the
    rollback window needs ``force`` (SQL refuses it otherwise). A version in a state SQL does not retire from
    (``toolkit.version_states('retire')``: already retired, say) is refused, not audited again."""
    check_retirable(conn, version)
    table = version_table(conn, version).as_string(conn)
    return _swap(
        conn, "SELECT toolkit.retire_version(%s, %s, %s)", (version, reason, force), 1000, 5, (*_SWAPPED, table)
    )


def retire_refusal(conn: psycopg.Connection, version: int, *, force: bool = False) -> str | None:
    """Why ``retire_version`` would refuse ``version`` now (SQL's own rule, ``toolkit.retire_refusal``), or None."""
    with conn.transaction():
        row = conn.execute("SELECT message, hint FROM toolkit.retire_refusal(%s, %s)", (version, force)).fetchone()
    if row is None:
        return None
    return f"{row[0][0].upper()}{row[0][1:]}. {row[1]}"


def rollback_window(conn: psycopg.Connection) -> timedelta:
    """The rollback window (``toolkit.settings``): how long the version a cutover replaced is kept from retire."""
    with conn.transaction():
        return conn.execute("SELECT toolkit.rollback_window()").fetchone()[0]


def set_rollback_window(conn: psycopg.Connection, window: timedelta) -> timedelta:
    """Sets the rollback window; only the owner role (the DBA) may."""
    with translate_errors(), conn.transaction():
        return conn.execute("SELECT toolkit.set_rollback_window(%s)", (window,)).fetchone()[0]


@dataclass(frozen=True)
class ProtectedStandby:
    """The rollback target that retire keeps (unless forced) until the rollback window ends for it."""

    version: int
    standby_since: datetime
    protected_until: datetime


def protected_standby(conn: psycopg.Connection) -> ProtectedStandby | None:
    with conn.transaction():
        row = conn.execute("SELECT * FROM toolkit.protected_standby()").fetchone()
    return ProtectedStandby(*row) if row else None


@dataclass(frozen=True)
class LaggingStandby:
    """A standby streaming from this server that had not replayed, when retire looked, what was written before."""

    standby: str
    client: str
    state: str | None
    replay_lag: timedelta | None
    known: bool  # False: the owner role may not read the replay position (no pg_read_all_stats)

    def describe(self) -> str:
        lag = f", replay lag {self.replay_lag}" if self.replay_lag else ""
        seen = "" if self.known else " (its replay position cannot be read: grant pg_read_all_stats to toolkit_owner)"
        return f"standby {self.standby or '(unnamed)'} at {self.client} ({self.state or 'state unknown'}{lag}){seen}"


# How long retire waits for standby servers to replay what was written before it.
STANDBY_WAIT_SECONDS = 10.0


def wait_for_standbys(conn: psycopg.Connection, timeout: float | None = None) -> list[LaggingStandby]:
    """Waits (up to ``timeout`` seconds) until every standby streaming from this server has replayed what was
    written before this call: the last cutover among it, so the standby's readers have seen which version serves.
    Returns the standbys still behind (empty: none, or no standby)."""
    with conn.transaction():
        position = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + (STANDBY_WAIT_SECONDS if timeout is None else timeout)
    while True:
        with conn.transaction():
            rows = conn.execute(
                "SELECT standby, client, state, replay_lag, caught_up FROM toolkit.standby_replay(%s)", (position,)
            ).fetchall()
        behind = [LaggingStandby(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows if not r[4]]
        if not behind or all(not b.known for b in behind) or time.monotonic() > deadline:
            return behind
        time.sleep(0.05)  # polling the standbys' replay position, which no notification reports


def check_retirable(conn: psycopg.Connection, version: int) -> None:
    """Refuses (``InputError``) a version that does not exist or is in a state SQL does not retire from; the active
    version is left to SQL's own refusal."""
    with conn.transaction():
        state, retirable = conn.execute(
            "SELECT v.state, v.state = ANY (toolkit.version_states('retire')) FROM toolkit.versions AS v"
            " WHERE v.version = %s",
            (version,),
        ).fetchone() or (None, None)
    if state is None:
        raise InputError(f"There is no version {version}. Run toolkit status to list them.")
    if not retirable and state != "active":  # SQL words the active version's refusal itself
        raise InputError(f"Version {version} is {state}; there is nothing to retire.")


def retire_candidates(conn: psycopg.Connection, older_than: timedelta) -> list[tuple[int, str]]:
    """Standby and abandoned building versions whose state is older than the window, as SQL decides
    (``toolkit.retire_candidates``): a building version whose rows were written within the window is a backfill
    still running, a canary candidate is serving, the rollback target inside the rollback window is kept, and
    ready/verified versions (awaiting verification or cutover) are never chosen by age."""
    with translate_errors(), conn.transaction():
        return [tuple(r) for r in conn.execute("SELECT * FROM toolkit.retire_candidates(%s)", (older_than,))]


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
