"""Logins bound to tenants (optional per login, off by default): a bound login sees only its tenants whatever it
sets ``toolkit.tenant`` to. SQL holds the bindings (by role OID) and enforces them in ``toolkit.current_tenant()``
(failing closed for a bound login that became a service role); only the owner (the DBA) may change them."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from toolkit.db.connection import translate_errors
from toolkit.errors import InputError
from toolkit.validation import check_tenant


def _tenants(tenants: Sequence[str]) -> list[str]:
    names = [t.strip() if isinstance(t, str) else t for t in tenants]
    if not names:
        raise InputError("Give one or more non-empty tenant names.")
    return sorted({check_tenant(name) for name in names})


def bind_tenants(conn: psycopg.Connection, login: str, tenants: Sequence[str]) -> list[str]:
    """Binds ``login`` to ``tenants`` (added to those it has); returns all of its tenants."""
    with translate_errors(), conn.transaction():
        return list(conn.execute("SELECT toolkit.bind_tenants(%s, %s)", (login, _tenants(tenants))).fetchone()[0])


def unbind_tenants(conn: psycopg.Connection, login: str, tenants: Sequence[str] | None = None) -> list[str]:
    """Removes bindings (all of the login's when ``tenants`` is None); returns the tenants it keeps (none: the login
    chooses its tenant again)."""
    chosen = None if tenants is None else _tenants(tenants)
    with translate_errors(), conn.transaction():
        return list(conn.execute("SELECT toolkit.unbind_tenants(%s, %s)", (login, chosen)).fetchone()[0])


def tenant_bindings(conn: psycopg.Connection) -> list[dict]:
    with translate_errors(), conn.transaction():
        cur = conn.execute("SELECT * FROM toolkit.list_tenant_bindings()")
        names = [c.name for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def relink_tenant_bindings(conn: psycopg.Connection) -> list[dict]:
    """Re-links bindings whose role OID names no role to the role of the name they were bound under (after a restore
    into another cluster); returns what it did per login."""
    with translate_errors(), conn.transaction():
        cur = conn.execute("SELECT * FROM toolkit.relink_tenant_bindings()")
        names = [c.name for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
