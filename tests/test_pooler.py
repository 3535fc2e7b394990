"""Behind a connection pooler (issue 37, item 1): a REAL PgBouncer (Debian's `pgbouncer`, run as its own OS user,
as the package runs it) in transaction mode in front of the embedded server, which it reaches the documented way —
TCP on 127.0.0.1 with password (scram-sha-256) logins (`toolkit db start --port`, docs/operations.md). Through it
run, at the same time, the application SQL of docs/sql.md (psycopg with ``prepare_threshold=None``, the tenant set
with set_tenant inside each transaction) and ``toolkit.search.search()``: 8 client threads, 2 tenants, a login bound
to its tenant and an unbound one, while the active version is cut over and back three times. No request may fail
and no row may come from the other tenant (every chunk carries its tenant's marker).

Where pgbouncer is not installed the test FAILS, saying to install it (.ci/run does): a missing pooler is not a
pass."""

from __future__ import annotations

import getpass
import os
import pwd
import re
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import psycopg
import pytest
from support import THROWAWAY_SETTINGS, insert_test_model, scratch_directory, wait_until

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.db import server
from toolkit.db.connection import connect
from toolkit.db.schema import ensure_schema
from toolkit.ingest import ingest
from toolkit.search import query_embedder, search
from toolkit.store.tenants import bind_tenants

# starts a PostgreSQL server and a PgBouncer of its own
pytestmark = pytest.mark.database

TENANTS = ("acme", "globex")
MARKER = {tenant: f"marker-{tenant}-only" for tenant in TENANTS}
QUESTION = "How do I create an index on an expression?"
PASSWORDS = {"app_bound": "bound-secret-1", "app_any": "unbound-secret-2"}
THREADS = 8
FLIPS = 6  # three cutovers and three cutovers back
SQL_MD = Path(__file__).resolve().parent.parent / "docs" / "sql.md"


def pooled_block() -> str:
    """docs/sql.md's Python block for a pooled connection (the one that names POOLED_URL), as it is written."""
    found = [b for b in re.findall(r"^```python\n(.*?)^```", SQL_MD.read_text(), re.M | re.S) if "POOLED_URL" in b]
    assert len(found) == 1, f"docs/sql.md: expected one python block naming POOLED_URL, found {len(found)}"
    return found[0]


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.fail(
            "PgBouncer is not installed, so the pooled path of docs/sql.md cannot be tested here: install it "
            "(apt-get install pgbouncer; .ci/run does) and run this test again."
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pooler_user() -> str | None:
    """The OS user PgBouncer runs as: the Debian package's (postgres) when this is root — PgBouncer refuses to run
    as root, and a packaged one never shares the embedded server's user — else this user (None: no switch)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.fail("Running as root, and neither a postgres nor a nobody user exists to run PgBouncer as.")


@pytest.fixture(scope="module")
def embedded_on_tcp():
    """An embedded server listening on 127.0.0.1 (scram-sha-256 for TCP), migrated, with two versions of two
    tenants' documents (version one active), two reader logins with passwords, one bound to acme."""
    directory = scratch_directory("toolkit-test-pooler-")
    data_dir = directory / "pg"
    try:
        database = server.start_embedded(data_dir, port=free_port())
        with psycopg.connect(database.url, autocommit=True) as conn:
            for name, value in THROWAWAY_SETTINGS.items():
                conn.execute(
                    psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        psycopg.sql.Identifier(name), psycopg.sql.Literal(value)
                    )
                )
            conn.execute("SELECT pg_reload_conf()")
        ensure_schema(database)
        docs = directory / "docs"
        with connect(database.url, autocommit=True) as conn:
            conn.execute("SELECT toolkit.set_rollback_window('0')")
            insert_test_model(conn, "one", 32, options={"seed": 1})
            insert_test_model(conn, "two", 48, options={"seed": 2})
            for tenant in TENANTS:
                folder = docs / tenant
                folder.mkdir(parents=True)
                for i in range(6):
                    (folder / f"doc{i}.md").write_text(
                        f"# Indexes {i}\n\n{MARKER[tenant]} An index on an expression such as lower(col) {i} "
                        f"helps a query that filters on it. {MARKER[tenant]}\n"
                    )
                ingest(conn, [folder], tenant)
            for login, password in PASSWORDS.items():
                conn.execute(
                    psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE toolkit_reader").format(
                        psycopg.sql.Identifier(login), psycopg.sql.Literal(password)
                    )
                )
            with conn.transaction():
                bind_tenants(conn, "app_bound", ["acme"])
        first = backfill(database.url, "one", "fixed:200:0").version
        second = backfill(database.url, "two", "fixed:200:0").version
        with connect(database.url, autocommit=True) as conn:
            cutover.activate_version(conn, first, force=True, reason="pooler test")
            # EMBED_WITH of docs/sql.md, the application's own call of a model (these have no query prefix).
            embedders = {
                alias: query_embedder(conn, {"model_alias": alias, "dimensions": dims})
                for alias, dims in (("one", 32), ("two", 48))
            }
        yield {
            "url": database.url,
            "port": server.server_settings(data_dir)["port"],
            "versions": (first, second),
            "embed_with": lambda alias, text: embedders[alias].embed_query(text),
            "directory": directory,
        }
    finally:
        server.stop_embedded(data_dir)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def pgbouncer(embedded_on_tcp):
    """PgBouncer in transaction mode on 127.0.0.1, with its own configuration and auth file in a directory of its
    own, as its own OS user; 3 server connections per login for 8 clients, so clients share server sessions."""
    binary = pgbouncer_binary()
    user = pooler_user()
    home = embedded_on_tcp["directory"] / "pgbouncer"
    home.mkdir()
    port = free_port()
    (home / "userlist.txt").write_text("".join(f'"{login}" "{pw}"\n' for login, pw in PASSWORDS.items()))
    (home / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"toolkit = host=127.0.0.1 port={embedded_on_tcp['port']} dbname=toolkit\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = scram-sha-256\nauth_file = {home / 'userlist.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 3\nmax_client_conn = 64\n"
        f"logfile = {home / 'pgbouncer.log'}\npidfile = {home / 'pgbouncer.pid'}\n"
    )
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (home, *home.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        (home / "userlist.txt").chmod(0o600)
    process = subprocess.Popen(
        [binary, str(home / "pgbouncer.ini")],
        user=user,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"postgresql://app_any:{PASSWORDS['app_any']}@127.0.0.1:{port}/toolkit"

    def answers() -> bool:
        if process.poll() is not None:
            log = (home / "pgbouncer.log").read_text() if (home / "pgbouncer.log").exists() else ""
            pytest.fail(f"PgBouncer exited ({process.returncode}): {process.stdout.read()} {log[-2000:]}")
        try:
            psycopg.connect(url, connect_timeout=2, prepare_threshold=None).close()
        except psycopg.OperationalError:
            return False  # not listening yet
        return True

    wait_until(answers, "PgBouncer accepts a login", timeout=30)
    yield {"port": port, "user": user or getpass.getuser(), "pid": process.pid}
    process.terminate()
    process.wait(timeout=30)


def pooled_url(port: int, login: str) -> str:
    return f"postgresql://{login}:{PASSWORDS[login]}@127.0.0.1:{port}/toolkit"


def documented_sql(url: str, embed_with):
    """docs/sql.md's pooled block, run as written on a connection of its own: (its connection, ask(tenant, key) ->
    (version, texts))."""
    namespace = {"POOLED_URL": url, "EMBED_WITH": embed_with}
    exec(compile(pooled_block(), "docs/sql.md", "exec"), namespace)

    def ask(tenant: str, key: str) -> tuple[int, list[str]]:
        version, rows = namespace["answer"](tenant, key, QUESTION)
        return version, [row[4] for row in rows]

    return namespace["conn"], ask


def library_search(url: str, embed_with):
    """toolkit.search.search() on a pooled connection with psycopg's defaults (prepare_threshold=5): search()
    prepares no statement, as docs/sql.md and docs/python.md say."""
    conn = psycopg.connect(url)

    def ask(tenant: str, key: str) -> tuple[int, list[str]]:
        hits = search(conn, QUESTION, tenant, 5, request_key=key)
        assert len({hit.version for hit in hits}) == 1, "one answer from two versions"
        return hits[0].version, [hit.text for hit in hits]

    return conn, ask


def test_documented_sql_and_search_through_pgbouncer_in_transaction_mode_across_cutovers(embedded_on_tcp, pgbouncer):
    first, second = embedded_on_tcp["versions"]
    # thread i: tenant, login (acme's even threads alternate the bound and the unbound login), how it asks
    plans = []
    for i in range(THREADS):
        tenant = TENANTS[i % 2]
        login = "app_bound" if tenant == "acme" and i % 4 == 0 else "app_any"
        plans.append((tenant, login, documented_sql if i < THREADS // 2 else library_search))
    answered = [0] * THREADS
    seen: list[set[int]] = [set() for _ in range(THREADS)]
    errors: list[str] = []
    foreign: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def client(i: int) -> None:
        tenant, login, how = plans[i]
        other = next(t for t in TENANTS if t != tenant)
        try:
            conn, ask = how(pooled_url(pgbouncer["port"], login), embedded_on_tcp["embed_with"])
        except psycopg.Error as error:
            errors.append(f"thread {i} connect: {error}")
            return
        with conn:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    version, texts = ask(tenant, f"user-{i}-{n}")
                except Exception as error:  # every failure counts, whatever its type
                    errors.append(f"thread {i} ({login}, {tenant}, {how.__name__}): {type(error).__name__}: {error}")
                    continue
                if not texts:
                    errors.append(f"thread {i}: an empty answer")
                foreign.extend(t for t in texts if MARKER[other] in t or MARKER[tenant] not in t)
                with lock:
                    seen[i].add(version)
                    answered[i] += 1

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(THREADS)]
    for worker in workers:
        worker.start()
    try:
        with connect(embedded_on_tcp["url"], autocommit=True) as owner:
            for flip in range(FLIPS):
                # Every client has answered twice since the last swap: its second answer began after it.
                with lock:
                    marks = list(answered)
                wait_until(
                    lambda marks=marks: errors or all(answered[i] >= marks[i] + 2 for i in range(THREADS)),
                    f"every client answering before swap {flip + 1}",
                    timeout=120,
                )
                if errors:
                    break
                target = second if flip % 2 == 0 else first
                cutover.activate_version(owner, target, force=True, reason=f"pooler test swap {flip + 1}")
            with lock:
                marks = list(answered)
            wait_until(
                lambda: errors or all(answered[i] >= marks[i] + 2 for i in range(THREADS)),
                "every client answering after the last swap",
                timeout=120,
            )
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
    assert errors == [], f"{len(errors)} failed requests through PgBouncer, first: {errors[:3]}"
    assert foreign == [], f"{len(foreign)} rows of another tenant: {foreign[:3]}"
    assert all(s == {first, second} for s in seen), f"each client saw both versions: {seen}"
    assert sum(answered) >= THREADS * 2 * (FLIPS + 1)


def test_pgbouncer_runs_as_its_own_user_and_reaches_the_server_over_tcp(embedded_on_tcp, pgbouncer):
    """What a packaged PgBouncer needs: a login with a password over TCP; not the data directory's Unix socket."""
    with psycopg.connect(pooled_url(pgbouncer["port"], "app_bound"), prepare_threshold=None) as conn:
        peer = conn.execute("SELECT host(inet_client_addr()), current_user").fetchone()
        # The bound login sees its tenant only, whatever it sets (through the pooler too).
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="bound to tenant acme"):
            conn.execute("SELECT toolkit.set_tenant('globex')")
    assert peer == ("127.0.0.1", "app_bound")  # PgBouncer's server connection: TCP on the loopback
    runs_as = psutil.Process(pgbouncer["pid"]).username()
    assert runs_as == pgbouncer["user"]
    if os.geteuid() == 0:  # not the embedded server's user: the data directory's socket is not its to reach
        assert runs_as not in ("root", "embedded_postgres")
    with pytest.raises(psycopg.OperationalError, match=r"SASL authentication failed|password"):
        psycopg.connect(f"postgresql://app_bound:wrong@127.0.0.1:{pgbouncer['port']}/toolkit", connect_timeout=5)
    assert Path(embedded_on_tcp["directory"], "pgbouncer", "pgbouncer.log").exists()
