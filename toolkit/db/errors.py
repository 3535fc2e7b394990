"""What a PostgreSQL or libpq error means, in one line: what went wrong and what to do.

libpq's own text spans several lines (``connection to server … failed: Connection refused\\n\\tIs the server
running…``) and says nothing about the toolkit; after a crash a user meets it first. Every path that shows a
database error (``connect``, ``translate_errors`` in the library, the CLI's last resort) asks
``describe_database_error``, so the same failure reads the same everywhere.
"""

from __future__ import annotations

import re

import psycopg

START_OR_URL = "start it (toolkit db start for the embedded server) or check --database-url / TOOLKIT_DATABASE_URL"
RUN_AGAIN = "run the command again once the server is up (toolkit db start for the embedded server)"

# The server end of a connection: 'on socket "/tmp/.s.PGSQL.5432"' or 'at "127.0.0.1", port 5432'.
_WHERE = re.compile(r'connection to server (on socket "[^"]+"|at "[^"]+"(?:(?: \([^)]*\))?, port \d+)?)')

# (pattern in libpq's or the server's text, what it means). The first match wins; patterns are matched
# against the whole text, case-insensitively.
_MEANINGS: list[tuple[re.Pattern, str]] = [
    (
        re.compile(
            r"server closed the connection unexpectedly|terminating connection|connection is lost|"
            r"consuming input failed|the connection is closed|server conn crashed|"
            r"no connection to the server|SSL SYSCALL error: EOF"
        ),
        "The database server closed the connection (it stopped, crashed or was restarted); the unfinished "
        "transaction was rolled back and nothing of it was kept; " + RUN_AGAIN + ".",
    ),
    (
        re.compile(
            r"the database system is (starting up|in recovery mode|not yet accepting connections|"
            r"not accepting connections)"
        ),
        "The database server is starting up or recovering after a crash; run the command again in a few seconds.",
    ),
    (
        re.compile(r"the database system is shutting down"),
        "The database server is shutting down; " + RUN_AGAIN + ".",
    ),
    (
        re.compile(r"Connection refused"),
        "Could not connect to the database: nothing accepts connections {where} (the server is not running, or "
        "was just stopped or crashed); " + START_OR_URL + ".",
    ),
    (
        re.compile(r"No such file or directory"),
        "Could not connect to the database: no server is running {where}; " + START_OR_URL + ".",
    ),
    (
        re.compile(r'password authentication failed for user "([^"]+)"|no password supplied'),
        "Could not connect to the database: the server refused the login{user}; check the user and password in "
        "--database-url / TOOLKIT_DATABASE_URL.",
    ),
    (
        re.compile(r'role "([^"]+)" does not exist'),
        "Could not connect to the database: the server has no role {quoted}; check the user in --database-url / "
        "TOOLKIT_DATABASE_URL.",
    ),
    (
        re.compile(r'database "([^"]+)" does not exist'),
        "Could not connect to the database: the server has no database {quoted}; create it or check "
        "--database-url / TOOLKIT_DATABASE_URL.",
    ),
    (
        re.compile(r"failed to resolve host '([^']+)'|could not translate host name \"([^\"]+)\""),
        "Could not connect to the database: the host {quoted} cannot be found; check the host in --database-url / "
        "TOOLKIT_DATABASE_URL.",
    ),
    (
        re.compile(r"timeout expired|Connection timed out"),
        "Could not connect to the database: the server did not answer in time{where_suffix}; check that it runs "
        "and that the network reaches it.",
    ),
    (
        re.compile(r"too many clients|remaining connection slots are reserved"),
        "The database server has no free connection slot; close idle sessions or raise max_connections, then run "
        "the command again.",
    ),
]

_POSTMASTER_DIED = re.compile(r"unexpected postmaster exit|postmaster exited")

# Server errors whose SQLSTATE says enough on its own.
_BY_SQLSTATE = {
    "57P01": "The database server ended the session (an administrator shut it down or terminated it); "
    + RUN_AGAIN
    + ".",
    "57P02": "The database server crashed and ended every session; the unfinished transaction was rolled back; "
    + RUN_AGAIN
    + ".",
    "57P03": "The database server is starting up or recovering after a crash; run the command again in a few seconds.",
    "40P01": "The database detected a deadlock with another session and rolled this transaction back; run the "
    "command again.",
    "40001": "The database could not serialize this transaction with a concurrent one and rolled it back; run the "
    "command again.",
    "55P03": "A lock the command needs is held by another session; run it again when that session is done.",
    # 57014 is a class-57 error but not a connection failure: the server is up, one statement ran too long.
    "57014": "The database cancelled the statement: it ran past the statement_timeout (or was cancelled by an "
    "administrator); nothing of it was kept. Run it again, with a larger statement_timeout if it needs longer.",
}


def one_line(text, limit: int = 300) -> str:
    """libpq's several lines (tabs, blank lines, ``DETAIL:`` and ``HINT:`` parts) as one line, at most
    ``limit`` characters (a server quotes a whole bad URL or value back)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _where(text: str) -> str:
    match = _WHERE.search(text)
    return match.group(1) if match else "there"


def _sentence(text: str) -> str:
    text = one_line(text).rstrip(".")
    return (text[:1].upper() + text[1:] + ".") if text else ""


def describe_database_error(error: BaseException) -> str:
    """One line for a database error nobody translated more specifically: its meaning and the fix."""
    text = str(error)
    sqlstate = getattr(error, "sqlstate", None)
    if _POSTMASTER_DIED.search(text):  # said with 57P01, like an administrator's shutdown
        return (
            "The database server crashed (its main process died) and ended this session; the unfinished "
            "transaction was rolled back and nothing of it was kept; " + RUN_AGAIN + "."
        )
    if sqlstate in _BY_SQLSTATE:
        return _BY_SQLSTATE[sqlstate]
    # Client-side failures carry no SQLSTATE; the server's own connection errors are in classes 08, 53 and 57.
    connection_level = sqlstate is None or sqlstate[:2] in ("08", "53", "57")
    for pattern, meaning in _MEANINGS if connection_level else ():
        match = pattern.search(text)
        if match is None:
            continue
        name = next((g for g in match.groups() if g), None)
        where = _where(text)
        return meaning.format(
            where=where,
            where_suffix="" if where == "there" else f" {where}",
            user=f' for user "{name}"' if name else "",
            quoted=f'"{name}"' if name else "named",
        )
    diag = getattr(error, "diag", None)
    message = one_line(diag.message_primary) if diag is not None and diag.message_primary else ""
    message = message or one_line(text.splitlines()[0] if text.strip() else type(error).__name__)
    hint = f" {_sentence(diag.message_hint)}" if diag is not None and diag.message_hint else ""
    if sqlstate == "42501":
        return (
            f"The database refused: {message.rstrip('.')}. Connect as a role with the toolkit privileges: a member of "
            "toolkit_writer for ingest and backfill, of toolkit_deployer for verify, canary, cutover, rollback and "
            "retire, of toolkit_reader for search (see docs/security.md)."
        )
    if sqlstate == "42P01":
        return (
            f"The database says: {message.rstrip('.')}. A version may have been retired meanwhile; run toolkit status."
        )
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return f"The database connection failed: {message.rstrip('.')}; " + START_OR_URL + "."
    if isinstance(error, psycopg.ProgrammingError) and sqlstate is None:
        return (
            f"The database URL or request is not valid: {message.rstrip('.')}; write the URL as "
            "postgresql://user:password@host:port/database."
        )
    return f"The database failed ({sqlstate or type(error).__name__}): {message.rstrip('.')}.{hint}"
