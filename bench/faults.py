"""A bad day, re-run on demand: every fault scenario of issue 15 and the earlier crash trials, with trials run,
failures and data lost, as the table of docs/reliability.md.

Crash trials compare with an uninterrupted run of the same work (rows, content hashes and vector bytes):

- kill -9 of a backfill at a random point of its progress, then ``--resume``;
- kill -9 of PostgreSQL's postmaster during an ingest and during a backfill, then ``toolkit db start`` (how many
  attempts it took) and the same command again; the crashed command's own last words are checked too (one line,
  no traceback);
- ``toolkit migrate`` run again and again (and a downgrade and upgrade of one revision) while reader threads query
  ``active_chunks`` as a reader login, half with prepared statements; two ``toolkit migrate`` at once; a
  downgrade to base of a database that holds documents; a downgrade to each earlier revision, then every command;
- the bad values of items 5-8, one by one, and the whole bad-input matrix (tests/test_bad_input.py);
- a Markdown file that is only a heading; the interrupted-ingest test run again and again (the flaky one);
- hostile PDFs (issue 28, item 6), each beside two good files in one `toolkit ingest`: a reference loop, a two-layer
  Flate bomb, a glyph bomb, 100,000 one-line pages (tests/pdfs.py builds them), and a good PDF alone as the
  baseline: wall time and peak memory of the command and the PDF reader it started (``wait4``'s ``ru_maxrss``
  covers the reaped children), what was stored and what was said.

It runs its own embedded PostgreSQL in a temporary directory under /tmp (and kills it on purpose), and the
toolkit's commands as child processes, as a user would.

    .venv/bin/python bench/faults.py                         # every scenario, the figures of docs/reliability.md
    .venv/bin/python bench/faults.py --write                 # also replace the table in docs/reliability.md
    .venv/bin/python bench/faults.py --backfill-kills 2 --postgres-kills 2 --migrations 2 --flaky-runs 0  # smoke
    .venv/bin/python bench/faults.py --hostile-pdfs-only --write  # the hostile-PDF table of docs/reliability.md
    .venv/bin/python bench/faults.py --serve-only            # toolkit serve's slow clients and large k (printed)
    .venv/bin/python bench/faults.py --migration-readers-only  # migration vs idle/turn-taking readers (printed)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from report import cpu_name  # noqa: E402

CHUNKER = "markdown:40:0"
TENANT = "acme"
DIMS = 32
RESULTS = ROOT / "bench" / "results" / "faults.json"
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- faults.py table: begin -->", "<!-- faults.py table: end -->"
PDF_BEGIN, PDF_END = "<!-- faults.py hostile-pdf table: begin -->", "<!-- faults.py hostile-pdf table: end -->"


@dataclass
class Scenario:
    """One line of the table: what was done, how often, how often it went wrong, and what was lost."""

    item: str
    scenario: str
    trials: int = 0
    failures: int = 0
    lost: str = "0"
    notes: list[str] = field(default_factory=list)

    def fail(self, note: str) -> None:
        self.failures += 1
        if note not in self.notes and len(self.notes) < 3:
            self.notes.append(note)


# -- the server and the databases ------------------------------------------------------------------------------


class Server:
    """The bench's own embedded PostgreSQL; ``kill`` is kill -9 of its postmaster, ``start`` is `toolkit db
    start` (counting the attempts it needs)."""

    def __init__(self):
        self.parent = Path(tempfile.mkdtemp(prefix="toolkit-faults-"))
        self.parent.chmod(0o755)
        self.data_dir = self.parent / "pg"
        attempts, _ = self.start()
        if attempts != 1:
            raise SystemExit("the embedded server did not start")

    def start(self, limit: int = 5) -> tuple[int, str]:
        """`toolkit db start` until it succeeds; the attempts it took and the first failure's message."""
        first_error = ""
        for attempt in range(1, limit + 1):
            run = toolkit("--data-dir", str(self.data_dir), "db", "start")
            if run.returncode == 0:
                self.admin_url = run.stdout.strip().splitlines()[-1].replace("/toolkit?", "/postgres?")
                return attempt, first_error
            first_error = first_error or last_line(run.stderr)
        return limit + 1, first_error

    def kill(self) -> None:
        pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)

    def url(self, database: str, user: str = "postgres", password: str = "") -> str:
        return self.admin_url.replace("/postgres?", f"/{database}?").replace(
            "postgresql://postgres:@", f"postgresql://{user}:{password}@"
        )

    def create(self, name: str, *, migrated: bool = True) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        url = self.url(name)
        if migrated:
            from toolkit.db import migrate

            migrate.upgrade(url)
        return url

    def stop(self) -> None:
        toolkit("--data-dir", str(self.data_dir), "db", "stop")
        shutil.rmtree(self.parent, ignore_errors=True)


def toolkit(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})},
    )


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def one_clear_line(stderr: str) -> bool:
    """What a failed command said is one `Error:` line and no traceback."""
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    return "Traceback" not in stderr and len(errors) == 1 and "\t" not in stderr


def write_corpus(root: Path, documents: int, paragraphs: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for d in range(documents):
        body = "\n\n".join(
            f"## Section {p}\n\nDocument {d} paragraph {p} explains rule {p * 7 + d} in a few plain words."
            for p in range(paragraphs)
        )
        (root / f"doc{d:03d}.md").write_text(f"# Document {d}\n\n{body}\n")
    return root


def register(url: str) -> None:
    from toolkit.db.connection import connect
    from toolkit.store.models import Model, insert_model

    with connect(url, autocommit=True) as conn:
        insert_model(conn, Model("h", "hashing", str(DIMS), DIMS, 8192))


def state(url: str) -> dict:
    """Everything a crash could lose or duplicate: documents and every version's rows with their vectors."""
    from toolkit.db.connection import connect

    with connect(url, autocommit=True) as conn:
        documents = set(conn.execute("SELECT tenant, doc_id, content_hash FROM toolkit.documents").fetchall())
        tables = conn.execute("SELECT version, chunk_table FROM toolkit.live_versions()").fetchall()
        rows = {}
        for version, table in tables:  # quoted by SQL
            rows[version] = conn.execute(f"SELECT tenant, chunk_id, content_hash, embedding FROM {table}").fetchall()
    return {"documents": documents, "rows": rows}


def compare(got: dict, expected: dict) -> tuple[int, int, int]:
    """(missing, duplicated or extra, different) rows and documents, over every version."""

    def keyed(rows):
        return {(r[0], r[1]): (r[2], None if r[3] is None else r[3].tobytes()) for r in rows}

    missing = len(expected["documents"] - got["documents"])
    extra = len(got["documents"] - expected["documents"])
    different = 0
    for version, rows in expected["rows"].items():
        want, have = keyed(rows), keyed(got["rows"].get(version, []))
        missing += len(want.keys() - have.keys())
        extra += len(have.keys() - want.keys()) + (len(got["rows"].get(version, [])) - len(have))
        different += sum(1 for key in want.keys() & have.keys() if want[key] != have[key])
    return missing, extra, different


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, timeout: float = 120) -> None:
    """Polls ``condition`` (a count in the database) until it holds or the process has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.005)


def count(url: str, query: str) -> int:
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(query).fetchone()[0]
    except psycopg.Error:
        return 0


def version_rows(url: str, version: int = 1) -> int:
    """Rows in a version's chunk table (0 while it does not exist yet)."""
    import psycopg

    from toolkit.store.chunk_table import chunk_table_name

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(sql_count(chunk_table_name(conn, version))).fetchone()[0]
    except psycopg.Error:
        return 0


def sql_count(table):
    from psycopg import sql

    return sql.SQL("SELECT count(*) FROM {}").format(table)


# -- crash trials --------------------------------------------------------------------------------------------


def backfill_kills(server: Server, corpus: Path, trials: int, rng: random.Random) -> Scenario:
    from toolkit import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    scenario = Scenario("earlier trials", "kill -9 of `toolkit backfill` at a random point, then `--resume`")

    def prepared(name: str) -> str:
        url = server.create(name)
        register(url)
        with connect(url, autocommit=True) as conn:
            ingest(conn, [corpus], TENANT)
        return url

    reference_url = prepared("faults_backfill_reference")
    backfill.backfill(reference_url, "h", CHUNKER)
    expected = state(reference_url)
    total = len(next(iter(expected["rows"].values())))
    for trial in range(trials):
        url = prepared(f"faults_backfill_{trial}")
        process = spawn("--database-url", url, "backfill", "--model", "h", "--chunker", CHUNKER, "--batch-size", "4")
        target = rng.randrange(0, total * 9 // 10)
        wait_for(lambda url=url: count(url, "SELECT count(*) FROM toolkit.versions") > 0, process)
        wait_for(lambda url=url, t=target: version_rows(url) >= t, process)
        process.send_signal(signal.SIGKILL)
        process.communicate()
        scenario.trials += 1
        try:
            backfill.backfill(url, "h", CHUNKER, resume=True)
        except Exception as error:  # a resume that fails is a failure of the trial
            scenario.fail(f"resume failed: {error}")
            continue
        missing, extra, different = compare(state(url), expected)
        if missing or extra or different:
            scenario.fail(f"{missing} missing, {extra} extra, {different} different rows")
            scenario.lost = str(int(scenario.lost) + missing)
    return scenario


def postgres_kills(server: Server, corpus: Path, trials: int, rng: random.Random) -> list[Scenario]:
    """kill -9 of the postmaster mid-ingest (even trials) and mid-backfill (odd ones)."""
    from toolkit import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    ingest_s = Scenario("earlier trials", "kill -9 of PostgreSQL during `toolkit ingest`, then the same command")
    backfill_s = Scenario("earlier trials", "kill -9 of PostgreSQL during `toolkit backfill`, then `--resume`")
    start_s = Scenario("15.4", "`toolkit db start` right after PostgreSQL was killed (succeeds the first time)")
    words_s = Scenario("15.4", "what the command that lost its server says: one line, no traceback")

    def with_version(name: str) -> str:
        url = server.create(name)
        register(url)
        backfill.backfill(url, "h", CHUNKER)  # an empty version: ingest writes every document into it
        return url

    def with_documents(name: str) -> str:
        url = server.create(name)
        register(url)
        with connect(url, autocommit=True) as conn:
            ingest(conn, [corpus], TENANT)
        return url

    ingest_reference = with_version("faults_pg_ingest_reference")
    with connect(ingest_reference, autocommit=True) as conn:
        ingest(conn, [corpus], TENANT)
    backfill_reference = with_documents("faults_pg_backfill_reference")
    backfill.backfill(backfill_reference, "h", CHUNKER)
    expected = {"ingest": state(ingest_reference), "backfill": state(backfill_reference)}
    documents = len(expected["ingest"]["documents"])
    rows = len(next(iter(expected["backfill"]["rows"].values())))
    for trial in range(trials):
        kind = "ingest" if trial % 2 == 0 else "backfill"
        scenario = ingest_s if kind == "ingest" else backfill_s
        name = f"faults_pg_{kind}_{trial}"
        url = with_version(name) if kind == "ingest" else with_documents(name)
        if kind == "ingest":
            command = ("ingest", str(corpus), "--tenant", TENANT, "--batch-size", "2")
            probe = lambda url=url: count(url, "SELECT count(*) FROM toolkit.documents")  # noqa: E731
            target = rng.randrange(1, documents * 9 // 10)
        else:
            command = ("backfill", "--model", "h", "--chunker", CHUNKER, "--batch-size", "4", "--resume")
            probe, target = (lambda url=url: version_rows(url)), rng.randrange(0, rows * 9 // 10)
        process = spawn("--database-url", url, *command)
        wait_for(lambda probe=probe, target=target: probe() >= target, process)
        server.kill()
        _out, err = process.communicate(timeout=120)
        scenario.trials += 1
        words_s.trials += 1
        if process.returncode == 0:
            words_s.trials -= 1  # it had finished before the kill landed: nothing to say
        elif not one_clear_line(err):
            words_s.fail(f"{kind}: {' '.join(err.split())[-200:]}")
        attempts, first_error = server.start()
        start_s.trials += 1
        if attempts != 1:
            start_s.fail(f"{attempts - 1} failed attempt(s) first: {first_error[:160]}")
        again = toolkit("--database-url", url, *command)
        if again.returncode != 0:
            scenario.fail(f"the same command failed again: {last_line(again.stderr)[:160]}")
            continue
        missing, extra, different = compare(state(url), expected[kind])
        if missing or extra or different:
            scenario.fail(f"{missing} missing, {extra} extra, {different} different rows or documents")
            scenario.lost = str(int(scenario.lost) + missing)
    return [ingest_s, backfill_s, start_s, words_s]


# -- migrations ---------------------------------------------------------------------------------------------


def migrations_next_to_readers(server: Server, corpus: Path, migrations: int, readers: int) -> Scenario:
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector

    from toolkit import backfill, cutover
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    scenario = Scenario(
        "15.1",
        f"{readers} reader threads (a reader login, half with prepared statements) through {migrations} "
        "`toolkit migrate` runs and a downgrade and upgrade of one revision",
    )
    url = server.create("faults_readers")
    register(url)
    with connect(url, autocommit=True) as conn:
        ingest(conn, [corpus], TENANT)
    version = backfill.backfill(url, "h", CHUNKER).version
    with connect(url, autocommit=True) as conn:
        cutover.activate_version(conn, version, force=True, reason="bench/faults.py")
        conn.execute("DROP ROLE IF EXISTS faults_reader")
        conn.execute("CREATE ROLE faults_reader LOGIN PASSWORD 'faults' IN ROLE toolkit_reader")
    reader_url = server.url("faults_readers", "faults_reader", "faults")
    stop = threading.Event()
    lock = threading.Lock()
    errors: dict[str, int] = {}
    queries = [0]

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        prepare = seed % 2 == 0
        try:
            with psycopg.connect(reader_url, autocommit=True) as rconn:
                register_vector(rconn)
                while not stop.is_set():
                    vector = rng.standard_normal(DIMS).astype(np.float32)
                    try:
                        with rconn.transaction():
                            rconn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,), prepare=prepare)
                            rconn.execute(
                                "SELECT chunk_id FROM toolkit.active_chunks ORDER BY embedding <=> %s LIMIT 5",
                                (vector,),
                                prepare=prepare,
                            ).fetchall()
                        with lock:
                            queries[0] += 1
                    except psycopg.Error as error:
                        key = f"{type(error).__name__}: {' '.join(str(error).split())[:120]}"
                        with lock:
                            errors[key] = errors.get(key, 0) + 1
        except BaseException as error:
            with lock:
                errors[f"reader died: {type(error).__name__}: {error}"[:160]] = 1

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(readers)]
    for thread in threads:
        thread.start()
    wait_until = time.monotonic() + 30
    while queries[0] < readers * 5 and time.monotonic() < wait_until:
        time.sleep(0.01)
    from toolkit.db import migrate as migrations_module

    revisions = migrations_module.revisions()
    runs = [("migrate",)] * migrations
    if len(revisions) >= 2:
        runs += [("migrate", revisions[-2], "--downgrade"), ("migrate",)]
    migrate_failures = []
    for run in runs:
        result = toolkit("--database-url", url, *run, timeout=300)
        scenario.trials += 1
        if result.returncode != 0:
            migrate_failures.append(last_line(result.stderr)[:160])
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    scenario.lost = "0"
    reader_errors = sum(errors.values())
    scenario.failures = reader_errors + len(migrate_failures)
    scenario.notes = [f"{queries[0]:,} reader queries, {reader_errors} reader errors"]
    scenario.notes += [f"{n} × {e}" for e, n in sorted(errors.items(), key=lambda kv: -kv[1])[:2]]
    scenario.notes += [f"migrate failed: {m}" for m in migrate_failures[:2]]
    return scenario


def concurrent_migrates(server: Server, trials: int) -> Scenario:
    scenario = Scenario("15.3", "two `toolkit migrate` at once on an empty database")
    for trial in range(trials):
        url = server.create(f"faults_concurrent_{trial}", migrated=False)
        first, second = (spawn("--database-url", url, "migrate") for _ in range(2))
        outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in (first, second)]
        first.stdout.close(), second.stdout.close(), first.stderr.close(), second.stderr.close()
        scenario.trials += 1
        failed = [err for code, err in outcomes if code != 0]
        if failed:
            scenario.fail(last_line(failed[0])[:160])
    return scenario


def downgrade_with_data(server: Server, corpus: Path) -> Scenario:
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    scenario = Scenario("15.2", "`toolkit migrate base --downgrade` of a database holding documents (no --force)")
    url = server.create("faults_downgrade")
    register(url)
    with connect(url, autocommit=True) as conn:
        ingest(conn, [corpus], TENANT)
        before = conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0]
    result = toolkit("--database-url", url, "migrate", "base", "--downgrade")
    after = count(url, "SELECT count(*) FROM toolkit.documents")
    scenario.trials = 1
    if after < before:
        scenario.fail(f"exit {result.returncode}: {last_line(result.stdout + result.stderr)[:160]}")
        scenario.lost = f"{before - after} documents"
    else:
        scenario.notes.append(f"refused (exit {result.returncode}): {last_line(result.stderr)[:160]}")
    return scenario


def downgrade_then_use(server: Server, corpus: Path) -> Scenario:
    """Issue 23.1: a documented downgrade to each earlier revision, then every command: each must refuse with one
    line naming the revision and `toolkit migrate`, and write nothing; `toolkit migrate` then brings it back."""
    from toolkit.db import migrate
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    scenario = Scenario("23.1", "downgrade to each earlier revision, then every command (refused, nothing written)")
    commands = [
        ["status"],
        ["ingest", str(corpus), "--tenant", TENANT],
        ["backfill", "--model", "h", "--chunker", CHUNKER],
        ["search", "rule 7", "--tenant", TENANT],
        ["cutover", "--model", "h", "--force"],
        ["rollback"],
        ["retire", "--older-than", "1d", "--yes"],
        ["model", "list"],
    ]
    written = "SELECT (SELECT count(*) FROM toolkit.documents) + (SELECT count(*) FROM toolkit.versions) * 1000000"
    for revision in migrate.revisions()[:-1]:
        url = server.create(f"faults_downgraded_{revision}")
        register(url)
        with connect(url, autocommit=True) as conn:
            ingest(conn, [corpus], TENANT)
        toolkit("--database-url", url, "migrate", revision, "--downgrade", "--force")
        before = count(url, written)
        for command in commands:
            result = toolkit("--database-url", url, *command)
            scenario.trials += 1
            said = result.stdout + result.stderr
            if result.returncode != 1 or not one_clear_line(result.stderr) or f"revision {revision}" not in said:
                scenario.fail(f"{command[0]} at {revision}: exit {result.returncode}: {last_line(said)[:120]}")
        if count(url, written) != before:
            scenario.lost = f"rows written at {revision}"
        if toolkit("--database-url", url, "migrate").returncode != 0:
            scenario.fail(f"toolkit migrate from {revision} failed")
        elif toolkit("--database-url", url, "status").returncode != 0:
            scenario.fail(f"toolkit status after migrating back from {revision} failed")
    if not scenario.failures:
        revisions = migrate.revisions()[:-1]
        scenario.notes.append(
            f"{len(revisions)} revisions ({', '.join(revisions)}) × {len(commands)} commands: each refused in one "
            "line naming the revision and `toolkit migrate`, nothing written; `toolkit migrate` then brought each "
            "back and `toolkit status` worked"
        )
    return scenario


# -- bad values ---------------------------------------------------------------------------------------------


def bad_values(server: Server, corpus: Path) -> list[Scenario]:
    """Items 5-8 one by one: the value, what the command did, and whether anything was written."""
    from toolkit.db.connection import connect

    url = server.create("faults_values")
    register(url)
    cases = [
        ("15.5", ["ingest", str(corpus), "--tenant", TENANT, "--batch-size", "-5"], "documents"),
        ("15.5", ["ingest", str(corpus), "--tenant", TENANT, "--batch-size", "0"], "documents"),
        ("15.6", ["backfill", "--model", "h", "--rate", "-1"], "versions"),
        ("15.6", ["backfill", "--model", "h", "--rate", "0"], "versions"),
        ("15.7", ["model", "add", "n", "--provider", "hashing", "--name", "8", "--price", "nan"], "models"),
        ("15.7", ["model", "add", "z", "--provider", "hashing", "--name", "8", "--max-input-tokens", "0"], "models"),
        ("15.8", ["search", "hello", "--tenant", "acme\udcff"], "documents"),
        ("15.8", ["cutover", "--version", "1", "--reason", "bad\udcff"], "cutovers"),
    ]
    scenarios = []
    for item, args, table in cases:
        before = count(url, f"SELECT count(*) FROM toolkit.{table}")
        result = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"toolkit", b"--database-url", url.encode(),
             *[os.fsencode(a) for a in args]],
            capture_output=True,
        )  # fmt: skip
        err = result.stderr.decode("utf-8", "backslashreplace")
        after = count(url, f"SELECT count(*) FROM toolkit.{table}")
        shown = " ".join(a if len(a) < 30 else a[:27] + "…" for a in args).replace("\udcff", "\\xff")
        scenario = Scenario(item, f"`toolkit {shown}`", trials=1)
        if result.returncode == 0 or after != before or not one_clear_line(err):
            scenario.fail(f"exit {result.returncode}, {after - before} {table} written: {last_line(err)[:120]}")
        else:
            scenario.notes.append(f"exit {result.returncode}: {last_line(err)[7:110]}…")
        scenarios.append(scenario)
    # A file whose name is not UTF-8 among 11 good ones.
    folder = server.parent / "names"
    write_corpus(folder, 11, 2)
    with open(os.fsencode(folder) + b"/bad\xff\xfe.md", "wb") as file:
        file.write(b"# Bad name\n\nGood text.\n")
    url = server.create("faults_names")
    result = toolkit("--database-url", url, "ingest", str(folder), "--tenant", TENANT)
    with connect(url, autocommit=True) as conn:
        stored = conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0]
    scenario = Scenario("15.8", "a file named `bad\\xff\\xfe.md` among 11 good ones", trials=1)
    if stored != 11 or "Traceback" in result.stderr:
        scenario.fail(f"{stored} of 11 good files stored; {last_line(result.stderr)[:120]}")
        scenario.lost = f"{11 - stored} documents"
    else:
        scenario.notes.append(f"11 stored, the bad one reported (exit {result.returncode})")
    scenarios.append(scenario)
    return scenarios


def matrix() -> Scenario:
    """The whole bad-input matrix (tests/test_bad_input.py), through pytest."""
    scenario = Scenario("15 (matrix)", "every CLI parameter × 11 kinds of bad value (tests/test_bad_input.py)")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/test_bad_input.py",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    summary = last_line(run.stdout)
    numbers = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", summary)}
    scenario.trials = sum(numbers.values())
    scenario.failures = numbers.get("failed", 0) + numbers.get("error", 0)
    scenario.notes.append(summary.strip("= "))
    return scenario


# -- the rest of issue 15 -------------------------------------------------------------------------------------


def heading_only(server: Server) -> Scenario:
    from toolkit import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest
    from toolkit.store.chunk_table import chunk_table_name

    scenario = Scenario("15.10", "a Markdown file that is only `# hello`, ingested into a `markdown:400:40` version")
    url = server.create("faults_heading")
    register(url)
    version = backfill.backfill(url, "h", "markdown:400:40").version
    folder = server.parent / "heading"
    folder.mkdir(exist_ok=True)
    (folder / "hello.md").write_text("# hello\n")
    with connect(url, autocommit=True) as conn:
        ingest(conn, [folder], TENANT)
        chunks = conn.execute(sql_count(chunk_table_name(conn, version))).fetchone()[0]
    scenario.trials = 1
    if chunks == 0:
        scenario.fail("stored with 0 chunks: it can never be retrieved")
    else:
        scenario.notes.append(f"{chunks} chunk(s)")
    return scenario


def flaky_test(runs: int) -> Scenario:
    name = "tests/test_ingest.py::test_an_interrupted_ingest_exits_at_once_and_keeps_the_batches_written"
    scenario = Scenario("15.11", f"`{name.split('::')[1]}` run again and again")
    for _ in range(runs):
        run = subprocess.run(
            [sys.executable, "-m", "pytest", name, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        scenario.trials += 1
        if run.returncode != 0:
            reason = next((line[1:].strip() for line in run.stdout.splitlines() if line.startswith("E ")), "")
            scenario.fail(reason[:160] or last_line(run.stdout)[:160])
    return scenario


# -- hostile PDFs (issue 28, item 6) ------------------------------------------------------------------------


def measured(*args: str, timeout: float = 900) -> tuple[int, float, float, str]:
    """Runs a toolkit command; (exit code, seconds, peak memory in MB of it and its reaped children, stderr)."""
    began = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "toolkit", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    timer = threading.Timer(timeout, process.kill)  # a hang becomes a failure of the trial, not of the bench
    timer.start()
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.monotonic() - began, usage.ru_maxrss / 1024, stderr


def hostile_pdfs(server: Server) -> list[Scenario]:
    sys.path.insert(0, str(ROOT / "tests"))
    import pdfs

    from toolkit import backfill

    url = server.create("faults_pdfs")
    register(url)
    backfill.backfill(url, "h", CHUNKER)
    cases = [
        ("a good 4-page PDF alone (the baseline)", None, (), "manual.pdf"),
        ("a 387-byte PDF whose page tree is a reference loop (7 0 R -> 8 0 R -> 7 0 R)", pdfs.write_reference_loop,
         (), "has a reference loop"),
        ("a 5 KB two-layer Flate bomb (decodes to 2 GB)", pdfs.write_flate_bomb, (), "needed more than"),
        ("a 9 KB glyph bomb (4,000,000 glyphs on one page)", pdfs.write_glyph_bomb, (), "draws more than"),
        ("a 14 MB PDF of 100,000 one-line pages", pdfs.write_many_pages, (), "has more than"),
    ]  # fmt: skip
    scenarios = []
    for number, (what, build, options, expected) in enumerate(cases):
        folder = server.parent / f"pdfs{number}"
        folder.mkdir()
        if build is None:
            pdfs.write_manual(folder / "manual.pdf")
            good = {"manual.pdf"}
        else:
            build(folder / "a-hostile.pdf")
            (folder / "b-notes.md").write_text("# Notes\n\nPlain notes beside a hostile PDF.\n")
            pdfs.write_manual(folder / "c-manual.pdf")
            good = {"b-notes.md", "c-manual.pdf"}
        tenant = f"pdf{number}"
        code, seconds, peak, stderr = measured(
            "--database-url", url, "ingest", str(folder), "--tenant", tenant, "--batch-size", "1", *options
        )
        stored = {r[0] for r in _rows(url, "SELECT doc_id FROM toolkit.documents WHERE tenant = %s", tenant)}
        flags = " ".join(options)
        beside = f", beside {len(good)} good files" if build is not None else ""
        scenario = Scenario("28.6", f"{what}{beside}: `toolkit ingest{' ' + flags if flags else ''}`")
        scenario.trials = 1
        said = next((line.split(": ", 2)[-1] for line in stderr.splitlines() if "a-hostile.pdf" in line), "")
        if (code != 0) != (build is not None) or stored != good or "Traceback" in stderr:
            scenario.fail(f"exit {code}, stored {sorted(stored)}: {last_line(stderr)[:120]}")
        elif build is not None and expected not in said:
            scenario.fail(f"said: {said[:120]}")
        scenario.notes.insert(
            0,
            f"{seconds:.1f} s, peak {peak:,.0f} MB; {len(stored)} of {len(good)} good stored"
            + (f"; said: {said[:90]}…" if said else ""),
        )
        scenario.lost = str(len(good - stored))
        scenarios.append(scenario)
        print(f"28.6 {seconds:6.1f} s {peak:7.0f} MB exit {code}  {what}", file=sys.stderr)
    return scenarios


# -- toolkit serve against hostile callers (issue 39, item 2) ---------------------------------------------------


def _served_store(server: Server, name: str, documents: int, paragraphs: int) -> str:
    """A database with one active version of a corpus of ``documents`` × ``paragraphs`` for tenant acme."""
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest

    url = server.create(name)
    register(url)
    corpus = write_corpus(server.parent / name, documents, paragraphs)
    with connect(url, autocommit=True) as conn:
        ingest(conn, [corpus], TENANT)
    version = backfill(url, "h", CHUNKER).version
    with connect(url, autocommit=True) as conn:
        cutover.activate_version(conn, version, force=True)
    return url


def _toolkit_serve(url: str, *options: str) -> tuple[subprocess.Popen, str]:
    """`toolkit serve` in its own process on a free port; its base URL once /health answers."""
    import socket

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "--database-url", url, "serve", "--port", str(port), *options],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                return process, base
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("toolkit serve did not start") from None
            time.sleep(0.1)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def serve_slow_clients(server: Server, sockets: int = 70, probes: int = 100) -> Scenario:
    """``sockets`` connections to `toolkit serve` that send nothing (six in seven) or half a request head, then
    ``probes`` ordinary searches one after another: every probe must be answered 200, and every idle socket must
    be closed by the server within its head timeout (5 s; counted as a failure if open after 30 s)."""
    import selectors
    import socket

    import httpx

    scenario = Scenario("39.2", f"toolkit serve: {sockets} idle or half-head sockets, then {probes} searches")
    url = _served_store(server, "faults_serve_slow", documents=12, paragraphs=40)
    process, base = _toolkit_serve(url, "--tenant", TENANT)
    opened: list[socket.socket] = []
    try:
        address = ("127.0.0.1", int(base.rsplit(":", 1)[1]))
        began = time.monotonic()
        for n in range(sockets):
            sock = socket.create_connection(address)
            if n % 7 == 0:
                sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
            opened.append(sock)
        latencies: list[float] = []

        def probe() -> None:  # beside the wait for the sockets to close, so each close is seen when it happens
            with httpx.Client(base_url=base, timeout=30) as client:
                for n in range(probes):
                    scenario.trials += 1
                    started = time.perf_counter()
                    answer = client.post("/search", json={"question": f"rule {n}", "k": 5})
                    latencies.append(time.perf_counter() - started)
                    if answer.status_code != 200:
                        scenario.fail(f"a probe got HTTP {answer.status_code}: {answer.text[:80]}")

        prober = threading.Thread(target=probe)
        prober.start()
        selector = selectors.DefaultSelector()
        for sock in opened:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        closed_after: list[float] = []
        waiting = set(opened)
        while waiting and time.monotonic() < began + 30:
            for key, _ in selector.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(key.fileobj)
                    waiting.discard(key.fileobj)
                    closed_after.append(time.monotonic() - began)
        prober.join()
        selector.close()
        scenario.trials += sockets
        for _ in waiting:
            scenario.fail(f"{len(waiting)} idle sockets still open after 30 s")
        closed = (
            f"idle sockets closed {min(closed_after):.1f}-{max(closed_after):.1f} s after they opened"
            if closed_after
            else "no idle socket closed"
        )
        scenario.notes.append(f"probes p50 {_median(latencies) * 1000:.0f} ms; {closed}")
    finally:
        for sock in opened:
            sock.close()
        process.terminate()
        process.wait(30)
    return scenario


def serve_large_k(server: Server, clients: int = 8, probes: int = 30) -> list[Scenario]:
    """What one search costs as k grows (``search()`` in process, the served default), then a small probe (k 5)
    alone and while ``clients`` clients ask the largest k serve takes (MAX_K) without a pause, and those clients
    asking k 1000 (refused: 400). The probe's p50 before and under load is the figure of docs/benchmarks.md."""
    import httpx

    from toolkit.db.connection import connect
    from toolkit.search import search
    from toolkit.serve import MAX_K

    url = _served_store(server, "faults_serve_k", documents=60, paragraphs=80)
    cost = Scenario("39.2", "one search's cost by k (search() in process, 3 runs each, median)")
    with connect(url, autocommit=True) as conn:
        search(conn, "rule 1", TENANT, 5)  # warm: the embedder and the plan
        for k in (5, 20, MAX_K, 250, 1000):
            runs = []
            for n in range(3):
                started = time.perf_counter()
                search(conn, f"Document {n} paragraph {k} explains rule", TENANT, k)
                runs.append(time.perf_counter() - started)
            cost.trials += 3
            cost.notes.append(f"k {k}: {_median(runs) * 1000:,.0f} ms")
    cost.notes = ["; ".join(cost.notes)]

    load_scenario = Scenario("39.2", f"toolkit serve: a k-5 probe beside {clients} clients asking k {MAX_K}")
    process, base = _toolkit_serve(url, "--tenant", TENANT, "--pool-size", "8")
    stop = threading.Event()
    heavy_answers: dict[int, int] = {}
    lock = threading.Lock()

    def probe_p50(client: httpx.Client) -> float:
        latencies = []
        for n in range(probes):
            started = time.perf_counter()
            answer = client.post("/search", json={"question": f"rule {n}", "k": 5})
            latencies.append(time.perf_counter() - started)
            load_scenario.trials += 1
            if answer.status_code != 200:
                load_scenario.fail(f"a probe got HTTP {answer.status_code}")
        return _median(latencies)

    def heavy(index: int, k: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            n = index
            while not stop.is_set():
                answer = client.post("/search", json={"question": f"Document {n} explains rule", "k": k})
                n += clients
                with lock:
                    heavy_answers[answer.status_code] = heavy_answers.get(answer.status_code, 0) + 1

    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            alone = probe_p50(client)
            threads = [threading.Thread(target=heavy, args=(i, MAX_K)) for i in range(clients)]
            for thread in threads:
                thread.start()
            time.sleep(2)  # let the heavy clients fill what they can
            loaded = probe_p50(client)
            stop.set()
            for thread in threads:
                thread.join()
            load_scenario.notes.append(
                f"probe p50 {alone * 1000:.0f} ms alone, {loaded * 1000:.0f} ms beside them; their answers "
                + ", ".join(f"HTTP {status}: {n}" for status, n in sorted(heavy_answers.items()))
            )
            refused = Scenario("39.2", f"toolkit serve: {clients} clients asking k 1000")
            for n in range(clients):
                answer = client.post("/search", json={"question": f"rule {n}", "k": 1000})
                refused.trials += 1
                if answer.status_code != 400:
                    refused.fail(f"HTTP {answer.status_code} instead of 400")
            if not refused.failures:
                refused.notes.append("each refused with HTTP 400 and a sentence")
    finally:
        stop.set()
        process.terminate()
        process.wait(30)
    return [cost, load_scenario, refused]


def migration_against_readers(server: Server, lock: Callable | None = None, timeout: float = 20) -> list[Scenario]:
    """Issue 39 item 6: the migration's locks (toolkit.db.migration_locks, taken and rolled back) next to two probe
    readers (short transactions, each timed: a stall is one over 0.1 s) and, in turn, one reader left idle in a
    transaction (without and with --terminate-blockers-after 5) and two readers taking 1.2 s turns that overlap by
    half (there is always a holder). ``lock``: another lock_for_migration to compare (an earlier release's)."""
    import psycopg

    from toolkit.db import migration_locks
    from toolkit.errors import DatabaseError

    url = server.create("faults_migration_readers")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS faults_reader")
        conn.execute("CREATE ROLE faults_reader LOGIN IN ROLE toolkit_reader")
    reader_url = server.url("faults_migration_readers", user="faults_reader")
    read = ("SELECT toolkit.set_tenant('acme')", "SELECT count(*) FROM toolkit.active_chunks")
    cases = [("one reader idle in a transaction", None), ("two readers taking 1.2 s turns overlapping by half", None)]
    if lock is None:
        cases.insert(1, ("one reader idle in a transaction, --terminate-blockers-after 5", 5.0))
    scenarios = []
    for case, terminate_after in cases:
        stop, durations, holders = threading.Event(), [], []

        def probe(stop: threading.Event, durations: list[float]) -> None:
            with psycopg.connect(reader_url, autocommit=True) as c:
                while not stop.is_set():
                    began = time.monotonic()
                    with c.transaction():
                        for statement in read:
                            c.execute(statement)
                    durations.append(time.monotonic() - began)
                    stop.wait(0.05)

        def turns(number: int, halves: list[threading.Event], stop: threading.Event) -> None:
            with psycopg.connect(reader_url, autocommit=True) as c:
                if number == 1:
                    halves[0].wait(5)  # its first turn starts halfway through the other's
                while not stop.is_set():
                    with c.transaction():
                        for statement in read:
                            c.execute(statement)
                        stop.wait(0.6)
                        halves[number].set()
                        halves[1 - number].clear()
                        stop.wait(0.6)
                    halves[1 - number].wait(5)

        threads = [threading.Thread(target=probe, args=(stop, durations)) for _ in range(2)]
        if "idle" in case:
            idle = psycopg.connect(reader_url, application_name="faults-idle-reader")
            for statement in read:
                idle.execute(statement)
            holders.append(idle)
        else:
            halves = [threading.Event(), threading.Event()]
            threads += [threading.Thread(target=turns, args=(n, halves, stop)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        time.sleep(1)  # the readers running before the migration starts
        notes: list[str] = []
        began = time.monotonic()
        try:
            with psycopg.connect(url) as conn:
                if lock is None:
                    policy = migration_locks.LockPolicy(timeout=timeout, terminate_after=terminate_after)
                    migration_locks.lock_for_migration(conn, say=notes.append, policy=policy)
                else:
                    lock(conn, say=notes.append)
                conn.rollback()
            outcome = "got its locks"
        except DatabaseError:
            outcome = "gave up"
        elapsed = time.monotonic() - began
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for holder in holders:
            holder.close()
        stalls = [d for d in durations if d > 0.1]
        scenario = Scenario(
            "39.6",
            f"migration locks next to {case}: {outcome} after {elapsed:.1f} s; the probe readers' stalls over 0.1 s: "
            f"{len(stalls)} of {len(durations)} transactions, longest {max(stalls, default=0):.2f} s, "
            f"{sum(stalls):.1f} s in all",
            trials=1,
            failures=int(outcome == "gave up" and "terminate" not in case),
        )
        print(scenario.scenario, file=sys.stderr)
        scenarios.append(scenario)
    return scenarios


def _rows(url: str, query: str, *params) -> list:
    from toolkit.db.connection import connect

    with connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


# -- the report ---------------------------------------------------------------------------------------------


def render(scenarios: list[Scenario], machine: dict) -> str:
    lines = [
        f"Produced by `{machine['command']}` on {machine['cpu']} ({machine['cores']} cores), "
        f"load average {machine['load_before']} before and {machine['load_after']} after, "
        f"in {machine['seconds']:.0f} s.",
        "",
        "| issue item | scenario | trials | failures | data lost | what happened |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for s in scenarios:
        notes = "; ".join(s.notes).replace("|", "\\|") if s.notes else ""
        lines.append(f"| {s.item} | {s.scenario} | {s.trials} | {s.failures} | {s.lost} | {notes} |")
    return "\n".join(lines) + "\n"


def write_table(table: str, begin: str = BEGIN, end_marker: str = END) -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(begin) + len(begin), text.index(end_marker)
    DOC.write_text(text[:start] + "\n" + table + text[end:], encoding="utf-8")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backfill-kills", type=int, default=16, help="kill -9 trials of a backfill")
    parser.add_argument("--postgres-kills", type=int, default=8, help="kill -9 trials of PostgreSQL (half ingest)")
    parser.add_argument("--migrations", type=int, default=10, help="`toolkit migrate` runs next to the readers")
    parser.add_argument("--readers", type=int, default=8, help="reader threads during the migrations")
    parser.add_argument("--concurrent", type=int, default=5, help="trials of two `toolkit migrate` at once")
    parser.add_argument("--flaky-runs", type=int, default=10, help="runs of the once-flaky interrupted-ingest test")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--write", action="store_true", help="replace the table in docs/reliability.md")
    parser.add_argument(
        "--hostile-pdfs-only", action="store_true", help="only the hostile-PDF scenarios (their own table)"
    )
    parser.add_argument(
        "--serve-only", action="store_true", help="only toolkit serve's slow-client and large-k scenarios (printed)"
    )
    parser.add_argument(
        "--migration-readers-only",
        action="store_true",
        help="only the migration next to an idle-in-transaction reader and turn-taking readers (printed)",
    )
    args = parser.parse_args()
    # Started in the background by a non-interactive shell (`nohup … &`), a process inherits SIGINT ignored, and
    # so would every command it runs: the Ctrl-C trials would then measure nothing but the launcher.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    rng = random.Random(args.seed)
    machine = {
        "command": " ".join(["python bench/faults.py", *(a for a in sys.argv[1:] if a != "--write")]),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_before": load(),
    }
    started = time.monotonic()
    server = Server()
    if args.migration_readers_only:
        try:
            scenarios = migration_against_readers(server)
        finally:
            server.stop()
        machine.update(load_after=load(), seconds=time.monotonic() - started)
        print(render(scenarios, machine))
        return
    if args.serve_only:
        try:
            scenarios = [serve_slow_clients(server), *serve_large_k(server)]
        finally:
            server.stop()
        machine.update(load_after=load(), seconds=time.monotonic() - started)
        print(render(scenarios, machine))
        return
    if args.hostile_pdfs_only:
        try:
            scenarios = hostile_pdfs(server)
        finally:
            server.stop()
        machine.update(load_after=load(), seconds=time.monotonic() - started)
        table = render(scenarios, machine)
        print(table)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.with_name("faults_pdfs.json").write_text(
            json.dumps({"machine": machine, "scenarios": [s.__dict__ for s in scenarios]}, indent=2)
        )
        if args.write:
            write_table(table, PDF_BEGIN, PDF_END)
        return
    corpus = write_corpus(server.parent / "corpus", documents=12, paragraphs=40)
    scenarios: list[Scenario] = []
    try:
        steps = [
            lambda: [backfill_kills(server, corpus, args.backfill_kills, rng)],
            lambda: postgres_kills(server, corpus, args.postgres_kills, rng),
            lambda: [migrations_next_to_readers(server, corpus, args.migrations, args.readers)],
            lambda: [concurrent_migrates(server, args.concurrent)],
            lambda: [downgrade_with_data(server, corpus)],
            lambda: [downgrade_then_use(server, corpus)],
            lambda: bad_values(server, corpus),
            lambda: [heading_only(server)],
            lambda: hostile_pdfs(server),
            lambda: [serve_slow_clients(server)],
            lambda: serve_large_k(server),
        ]
        for step in steps:
            done = step()
            scenarios += done
            for s in done:
                print(f"{s.item:12} {s.trials:4} trials {s.failures:4} failures  {s.scenario}", file=sys.stderr)
    finally:
        server.stop()
    scenarios.append(matrix())
    if args.flaky_runs:
        scenarios.append(flaky_test(args.flaky_runs))
    machine.update(load_after=load(), seconds=time.monotonic() - started)
    table = render(scenarios, machine)
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine, "scenarios": [s.__dict__ for s in scenarios]}, indent=2))
    if args.write:
        write_table(table)


if __name__ == "__main__":
    main()
