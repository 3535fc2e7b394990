"""The toolkit as a Python API: the lifecycle verbs with typed arguments and result records, the same functions the
CLI calls (each command is a thin layer over one of them). Documented in docs/python.md; names here are stable.

Every verb takes a psycopg connection first (``connect(url)``), except ``backfill``, which opens its own (its
workers write in parallel) and takes the URL. Errors are ``toolkit.errors`` exceptions whose message is one
sentence with the fix: ``InputError`` (bad input, nothing changed), ``StateError`` (not now: e.g. a gate not passed),
``VersionUnavailableError`` (retry), ``DatabaseError``. A database error no verb translated itself (e.g. permission
denied to a login without the verb's role) is a ``DatabaseError`` worded as the CLI words it
(``toolkit.db.errors.describe_database_error``), the psycopg error as its ``__cause__``: every verb here is the
command's function wrapped by ``_typed`` (``verb.__wrapped__`` is that function).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import psycopg

from toolkit.backfill import BackfillReport, backfill
from toolkit.cutover import Cutover, Rollback, cut_over, retire_old_versions, retire_version
from toolkit.db.errors import describe_database_error
from toolkit.deletion import DeletionReport, Removed, delete_documents, erase_tenant
from toolkit.errors import (
    DatabaseError,
    InputError,
    ModelMismatchError,
    StateError,
    ToolkitError,
    VersionUnavailableError,
)
from toolkit.ingest import IngestReport, ingest
from toolkit.question import QuestionVectors, embed_questions
from toolkit.search import SearchHit, search
from toolkit.search_options import SearchOptions
from toolkit.serving import Canary, CanaryChange, ServingModel, change_canary, serving_model
from toolkit.store.models import Model, register_model
from toolkit.validation import parse_duration
from toolkit.verify import VerifyReport, verify_version

__all__ = [
    "BackfillReport",
    "Canary",
    "CanaryChange",
    "Cutover",
    "DatabaseError",
    "DeletionReport",
    "IngestReport",
    "InputError",
    "Model",
    "ModelMismatchError",
    "QuestionVectors",
    "Removed",
    "Rollback",
    "SearchHit",
    "SearchOptions",
    "ServingModel",
    "StateError",
    "ToolkitError",
    "VerifyReport",
    "VersionUnavailableError",
    "backfill",
    "canary",
    "connect",
    "cutover",
    "delete_documents",
    "embed_questions",
    "erase_tenant",
    "ingest",
    "register_model",
    "retire",
    "rollback",
    "search",
    "serving_model",
    "verify",
]


def connect(database_url: str | None = None, *, data_dir: str | None = None) -> psycopg.Connection:
    """A connection to the database as the CLI opens it: ``database_url`` (or TOOLKIT_DATABASE_URL), else the
    embedded server in ``data_dir`` (started and migrated when needed). Use it as ``with connect(url) as conn:``."""
    import os

    from toolkit.db.schema import open_database

    _, conn = open_database(database_url or os.environ.get("TOOLKIT_DATABASE_URL"), data_dir)
    return conn


def verify(
    conn: psycopg.Connection,
    queries: str | Path,
    *,
    version: int | None = None,
    model: str | None = None,
    chunker: str | None = None,
    tenant: str | None = None,
    k: int = 5,
    min_recall: float | None = None,
    max_drop: float = 0.0,
    min_queries: int = 50,
) -> VerifyReport:
    """``toolkit verify``: scores the candidate (``version``, or ``model`` [and ``chunker``]) against the active
    version on the labelled ``queries`` (JSONL) in SQL, which records the result and applies the gate
    (``report.passed``; ``report.reasons`` when it fails). With no version active, ``min_recall`` is required."""
    return verify_version(
        conn,
        queries,
        model_alias=model,
        chunker_spec=chunker,
        version=version,
        k=k,
        tenant=tenant,
        min_recall=min_recall,
        max_drop=max_drop,
        min_queries=min_queries,
    )


def canary(
    conn: psycopg.Connection,
    *,
    version: int | None = None,
    model: str | None = None,
    chunker: str | None = None,
    percent: float | None = None,
    tenants: Sequence[str] | None = None,
    off: bool = False,
    force: bool = False,
    reason: str | None = None,
) -> CanaryChange:
    """``toolkit canary``: serves the candidate to ``percent`` of request keys and to whole ``tenants``; ``off``
    ends it; with neither, reports it (``change.canary`` is None when none runs)."""
    return change_canary(
        conn, model, chunker, version, percent=percent, tenants=tenants, off=off, force=force, reason=reason
    )


def cutover(
    conn: psycopg.Connection,
    *,
    version: int | None = None,
    model: str | None = None,
    chunker: str | None = None,
    force: bool = False,
    reason: str | None = None,
) -> Cutover:
    """``toolkit cutover``: makes the version active in one transaction (the previous one goes to standby). Needs a
    passing verification newer than the version's last change, unless ``force`` (audited)."""
    return cut_over(conn, model, chunker, version, force=force, reason=reason)


def rollback(conn: psycopg.Connection, *, reason: str | None = None) -> Rollback:
    """``toolkit rollback``: ends a canary, or else makes the standby version active again."""
    from toolkit.cutover import roll_back

    return roll_back(conn, reason=reason)


def retire(
    conn: psycopg.Connection,
    *,
    version: int | None = None,
    older_than: timedelta | str = "7d",
    dry_run: bool = False,
    reason: str | None = None,
) -> list[int]:
    """``toolkit retire``: drops the tables of standby and abandoned versions whose state is older than
    ``older_than`` (or of one ``version`` now; never the active one). Returns the versions retired (or, with
    ``dry_run``, that would be)."""
    if version is None:
        window = parse_duration(older_than) if isinstance(older_than, str) else older_than
        return retire_old_versions(conn, window, dry_run=dry_run)
    if dry_run:
        from toolkit.store.versions import active_version

        if version == active_version(conn):
            raise StateError(f"Version {version} is active and cannot be retired.")
        return [version]
    retire_version(conn, version, reason=reason or "toolkit.api.retire")
    return [version]


def _typed(verb: Callable) -> Callable:
    """``verb`` raising the library's errors only: a psycopg error it let through becomes a DatabaseError with the
    sentence the CLI prints for it (one mapping for both, ``describe_database_error``)."""

    @functools.wraps(verb)
    def typed(*args, **kwargs):
        try:
            return verb(*args, **kwargs)
        except psycopg.Error as error:
            raise DatabaseError(describe_database_error(error)) from error

    return typed


# The library boundary: every verb of __all__ (the record classes and exceptions stay as they are).
for _name in __all__:
    _value = globals()[_name]
    if callable(_value) and not isinstance(_value, type):
        globals()[_name] = _typed(_value)
del _name, _value
