"""The statements of serving: which version a request is served from (``toolkit.serving_model``), the model a pinned
version's questions use (``toolkit.version_model``), the canary (``toolkit.canary_status`` / ``set_canary``), and the
reader's transaction every search and serving question runs in (``as_reader``). Rows come back as dataclasses
(``psycopg.rows.class_row``): the names are SQL's result columns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal

import psycopg
from psycopg.rows import class_row

from toolkit.db.connection import translate_errors

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

    def __post_init__(self) -> None:
        object.__setattr__(self, "percent", float(self.percent))  # numeric(5, 2) arrives as a Decimal
        object.__setattr__(self, "tenants", list(self.tenants or ()))

    def as_dict(self) -> dict:
        return asdict(self)


def may_take_role(conn: psycopg.Connection, role: str) -> bool:
    """Whether the connected login may ``SET ROLE`` to ``role`` (the one reader check: search, verify and serving
    take toolkit_reader when they can, so RLS and the label policies apply as to an application)."""
    return conn.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,)).fetchone()[0]


def take_role(conn: psycopg.Connection, role: str | None = READER_ROLE) -> bool:
    """``SET LOCAL ROLE role`` inside the caller's transaction when the login may; returns whether it did."""
    if not role or not may_take_role(conn, role):
        return False
    conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(psycopg.sql.Identifier(role)))
    return True


def labels_apply(conn: psycopg.Connection, role: str | None = READER_ROLE) -> bool:
    """Whether what this login searches is filtered by access labels: True when it may take ``role`` (the reader), or
    is no service role (writer, owner) that sees every labelled chunk of its tenant."""
    with conn.transaction():
        if role and may_take_role(conn, role):
            return True
        return not conn.execute("SELECT toolkit._is_service_role()").fetchone()[0]


@contextlib.contextmanager
def as_reader(
    conn: psycopg.Connection, tenant: str, principals: Sequence[str] | None = (), role: str | None = READER_ROLE
) -> Iterator[None]:
    """A read-only transaction as ``role`` (when the connected user may take it), the tenant and principals set.
    Rolled back at the end: the role and settings end with it, even inside a transaction of the caller's (SET
    LOCAL would otherwise last until the caller's transaction ends)."""
    with conn.transaction(force_rollback=True):
        take_role(conn, role)
        conn.execute("SELECT toolkit.set_tenant(%s)", (tenant,))
        conn.execute("SELECT toolkit.set_principals(%s)", (list(principals or []),))
        yield


def select_serving_model(
    conn: psycopg.Connection, tenant: str, request_key: str | None, role: str | None = READER_ROLE
) -> ServingModel | None:
    with translate_errors(), as_reader(conn, tenant, role=role):
        cursor = conn.cursor(row_factory=class_row(ServingModel))
        return cursor.execute("SELECT * FROM toolkit.serving_model(%s)", (request_key,)).fetchone()


def select_version_model(conn: psycopg.Connection, version: int) -> ServingModel | None:
    with translate_errors(), conn.transaction():
        cursor = conn.cursor(row_factory=class_row(ServingModel))
        return cursor.execute("SELECT * FROM toolkit.version_model(%s)", (version,)).fetchone()


def select_canary(conn: psycopg.Connection) -> Canary | None:
    with translate_errors(), conn.transaction():
        return conn.cursor(row_factory=class_row(Canary)).execute("SELECT * FROM toolkit.canary_status()").fetchone()


def write_canary(
    conn: psycopg.Connection, version: int, share: Decimal, tenants: list[str], force: bool, reason: str | None
) -> None:
    with translate_errors(), conn.transaction():
        conn.execute("SELECT toolkit.set_canary(%s, %s, %s, %s, %s)", (version, share, tenants, force, reason))
