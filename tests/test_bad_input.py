"""The bad-input matrix: every CLI parameter that takes a value, times every kind of bad value.

The parameters are enumerated from the click command tree itself, and every one must have a row in ``ROWS``
saying, for each kind of value in ``VALUES``, what must happen:

- ``USAGE``: refused where the command line is read (exit 2), nothing opened;
- ``REFUSED``: refused by the library (exit 1) before anything is written;
- ``READ``: a legal value of a command that only reads: it runs (exit 0);
- ``WRITE``: a legal value of a command that writes: not run here (the injection test below stores the hostile
  strings on purpose and checks they arrive verbatim).

Every case that runs checks: the exit code, no ``Traceback`` anywhere, a refusal is one line ending in a full
stop (no raw multi-line libpq text), and that no embedded server was started. Then, by where the case can reach:

- at the parser (``test_bad_value_at_the_parser``): a usage error, a command that never opens a database (chunk,
  estimate) and the root group's own rows (no --database-url is given): the command line names a
  listening socket as its database, and nothing may have connected to it;
- at the database (``test_bad_value``): every other case runs against a real database, and a snapshot of every
  toolkit table (row counts and checksums) must be identical to the one taken when the database was built.

A new option without a row fails ``test_every_parameter_has_a_row``.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import subprocess
import sys
from dataclasses import dataclass, field

import click
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from support import create_database, drop_database, with_database

from toolkit import validation
from toolkit.cli import main
from toolkit.errors import InputError

USAGE, REFUSED, READ, WRITE = "usage (exit 2)", "refused (exit 1)", "runs (read only)", "legal (writes)"
EXIT = {USAGE: 2, REFUSED: 1, READ: 0}

VALUES = {
    "negative": "-5",
    "zero": "0",
    "nan": "nan",
    "inf": "inf",
    "huge": "9" * 30,
    "empty": "",
    "non_utf8": "bad\udcff\udcfe",  # how Python hands over the bytes b"bad\xff\xfe" of an argument or file name
    "quotes": 'it\'s "quoted"',
    "sql": "'; DROP TABLE toolkit.documents; --",
    "nul": "a\x00b",
    "long": "x" * 100_000,
}
HOSTILE = ("quotes", "sql", "nul", "long")


def expect(default: str, **overrides: str) -> dict[str, str]:
    outcome = dict.fromkeys(VALUES, default)
    outcome.update(overrides)
    return outcome


def number(**overrides):
    """A numeric option: every kind of bad value is a usage error; overrides name the legal ones."""
    return expect(USAGE, **overrides)


def choice():
    return expect(USAGE)


def named(default: str, **overrides):
    """A text parameter: what is empty, not UTF-8, holds a NUL byte or is over 10,000 characters is refused
    where the command line is read; every other kind is ``default`` unless overridden."""
    return {**expect(default, empty=USAGE, non_utf8=USAGE, nul=USAGE, long=USAGE), **overrides}


def path(default: str, **overrides):
    """A file or directory: any bytes may name one (a name that is not UTF-8 is the file's business), but
    never a NUL byte, an empty string or 10,000 characters."""
    return {**expect(default, nul=USAGE, long=USAGE, empty=USAGE), **overrides}


@dataclass(frozen=True)
class Row:
    command: str  # "ingest", "model add", "" for the root group
    param: str  # the option as typed ("--batch-size"), or the argument's name ("paths")
    args: tuple[str, ...]  # the whole command line after `toolkit --database-url URL`; "{}" is the value
    outcomes: dict = field(hash=False)
    url: bool = True  # pass --database-url (the root group's own rows do not)
    database: bool = True  # the command may open the database (False: chunk, estimate, eval on files)


def row(command, param, args, outcomes, **kw):
    return Row(command, param, tuple(args.split()) if isinstance(args, str) else tuple(args), outcomes, **kw)


V = "{}"
ING = f"ingest {{corpus}} --tenant acme {V}"
SEARCH = "search hello --tenant acme"
EST = "estimate --tokens 1M --chunk 400"
EVAL_CORPUS, EVAL_QUERIES, EVAL_CONFIG = (
    "--corpus {corpus}",
    "--queries {queries}",
    "--configs fixed:40:0 --model hashing:16",
)
EVAL = f"eval {EVAL_CORPUS} {EVAL_QUERIES} {EVAL_CONFIG} --no-cache"
VERIFY = "verify --version 1 --queries {queries}"
ADD = "model add h2 --provider hashing --name 16"
NOT_A_MODEL = named(REFUSED)

ROWS = [
    # the root group (its options come before the command)
    row("", "--database-url", ["--database-url", V, "status"], named(REFUSED), url=False),
    row("", "--data-dir", ["--data-dir", V, "db", "status"], named(READ), url=False),
    # ingest
    row("ingest", "paths", ["ingest", V, "--tenant", "acme"], path(REFUSED, negative=USAGE)),
    row(
        "ingest",
        "--tenant",
        "ingest {corpus} --tenant {}",
        named(WRITE),
    ),
    row("ingest", "--acl", "ingest {corpus} --tenant acme --acl {}", named(WRITE)),
    # every value is read as typed (not KEY=VALUE, an empty VALUE, JSON nested too deep): refused at the parser
    row("ingest", "--metadata", "ingest {corpus} --tenant acme --metadata {}", named(USAGE)),
    row("ingest", "--batch-size", "ingest {corpus} --tenant acme --batch-size {}", number()),
    row("ingest", "--format", "ingest {corpus} --tenant acme --format {}", choice()),
    # what one file may cost to read (sizes like 100MB, seconds, counts): every bad value is a usage error
    row("ingest", "--max-file-size", "ingest {corpus} --tenant acme --max-file-size {}", number()),
    row("ingest", "--pdf-timeout", "ingest {corpus} --tenant acme --pdf-timeout {}", number()),
    row("ingest", "--pdf-memory", "ingest {corpus} --tenant acme --pdf-memory {}", number()),
    row("ingest", "--pdf-max-pages", "ingest {corpus} --tenant acme --pdf-max-pages {}", number()),
    row("ingest", "--pdf-max-glyphs", "ingest {corpus} --tenant acme --pdf-max-glyphs {}", number()),
    # backfill (a refusal must not leave a new building version behind: the snapshot would show it)
    row("backfill", "--model", "backfill --model {}", NOT_A_MODEL),
    row("backfill", "--chunker", "backfill --model h --chunker {}", named(REFUSED)),
    row("backfill", "--batch-size", "backfill --model h --batch-size {}", number()),
    row("backfill", "--rate", "backfill --model h --rate {}", number()),
    row("backfill", "--tpm", "backfill --model h --tpm {}", number()),
    row("backfill", "--max-cost", "backfill --model h --max-cost {}", number(zero=WRITE)),
    row("backfill", "--workers", "backfill --model h --workers {}", number()),
    row("backfill", "--storage", "backfill --model h --storage {}", choice()),
    row("backfill", "--dims", "backfill --model h --dims {}", number()),
    row("backfill", "--format", "backfill --model h --format {}", choice()),
    # chunk (no database)
    row("chunk", "paths", ["chunk", V], path(REFUSED, negative=USAGE)),
    row("chunk", "--spec", "chunk {file} --spec {}", named(REFUSED)),
    row("chunk", "--strategy", "chunk {file} --strategy {}", choice()),
    row("chunk", "--size", "chunk {file} --size {}", number()),
    row("chunk", "--overlap", "chunk {file} --size 40 --overlap {}", number(zero=READ)),
    row("chunk", "--embedder", "chunk {file} --strategy semantic --embedder {}", named(REFUSED)),
    row("chunk", "--format", "chunk {file} --format {}", choice()),
    row("chunk", "--max-file-size", "chunk {file} --max-file-size {}", number()),
    row("chunk", "--pdf-timeout", "chunk {file} --pdf-timeout {}", number()),
    row("chunk", "--pdf-memory", "chunk {file} --pdf-memory {}", number()),
    row("chunk", "--pdf-max-pages", "chunk {file} --pdf-max-pages {}", number()),
    row("chunk", "--pdf-max-glyphs", "chunk {file} --pdf-max-glyphs {}", number()),
    # canary (version 2 is ready; a legal value would start a canary)
    row("canary", "--model", "canary --percent 10 --model {}", NOT_A_MODEL),
    row("canary", "--chunker", "canary --percent 10 --model h --chunker {}", named(REFUSED)),
    row("canary", "--version", "canary --percent 10 --force --version {}", number()),
    row("canary", "--percent", "canary --version 2 --force --percent {}", number(zero=WRITE)),
    row("canary", "--tenants", "canary --version 2 --force --tenants {}", named(WRITE)),
    row("canary", "--reason", "canary --version 2 --force --percent 10 --reason {}", named(WRITE)),
    row("canary", "--format", "canary --format {}", choice()),
    # cutover (version 1 is active; a legal reason would write an audit row)
    row("cutover", "--model", "cutover --model {}", NOT_A_MODEL),
    row("cutover", "--chunker", "cutover --model h --chunker {}", named(REFUSED)),
    row("cutover", "--version", "cutover --version {}", number()),
    row("cutover", "--reason", "cutover --version 1 --reason {}", named(WRITE)),
    row("cutover", "--format", "cutover --version 2 --force --format {}", choice()),
    # delete and tenant erase: dry runs without --yes (read only); an unknown document or tenant is refused
    row("delete", "doc_ids", ["delete", "--tenant", "acme", V], named(REFUSED, negative=USAGE)),
    row("delete", "--tenant", "delete --tenant {} doc0.md", named(REFUSED)),
    row("delete", "--reason", "delete --tenant acme doc0.md --reason {}", named(READ)),
    row("delete", "--format", "delete --tenant acme doc0.md --format {}", choice()),
    row("tenant erase", "name", ["tenant", "erase", V], named(REFUSED, negative=USAGE)),
    row("tenant erase", "--reason", "tenant erase acme --reason {}", named(READ)),
    row("tenant erase", "--format", "tenant erase acme --format {}", choice()),
    # diff and show (read only)
    row("diff", "--version", "diff --version 1 --doc doc0.md --version {}", number()),
    row("diff", "--doc", "diff --version 1 --version 2 --doc {}", named(REFUSED)),
    row("diff", "--tenant", "diff --version 1 --version 2 --doc doc0.md --tenant {}", named(REFUSED)),
    row("diff", "--format", "diff --version 1 --version 2 --doc doc0.md --format {}", choice()),
    row("show", "--version", "show --version {}", number()),
    row("show", "--doc", "show --version 1 --doc {}", named(REFUSED)),
    row("show", "--tenant", "show --version 1 --tenant {}", named(READ)),
    row("show", "--format", "show --version 1 --format {}", choice()),
    # embed (read only)
    row("embed", "question", ["embed", V, "--tenant", "acme"], named(READ, negative=USAGE)),
    row("embed", "--tenant", "embed hello --tenant {}", named(READ)),
    row("embed", "--request-key", "embed hello --tenant acme --request-key {}", named(READ)),
    row("embed", "--format", "embed hello --tenant acme --format {}", choice()),
    # serve (no legal case may start a server: a host that is not loopback is refused before anything opens)
    row("serve", "--host", "serve --host {}", named(REFUSED)),
    row("serve", "--port", "serve --host 192.0.2.1 --port {}", number(zero=REFUSED)),
    row("serve", "--tenant", "serve --host 192.0.2.1 --tenant {}", named(REFUSED)),
    row("serve", "--pool-size", "serve --host 192.0.2.1 --pool-size {}", number()),
    row("serve", "--allowed-host", "serve --host 192.0.2.1 --allowed-host {}", named(REFUSED)),
    # db
    row("db status", "--format", "db status --format {}", choice()),
    row("db start", "--port", "db start --port {}", number(), url=False),
    row("db start", "--standby-of", "db start --standby-of {}", named(REFUSED), url=False),
    # (a legal name writes a dump file in the current directory: not run, it would be a path the other rows read)
    row("db dump", "file", ["db", "dump", V], path(WRITE, negative=USAGE)),
    row("db dump", "--format", "db dump --format {} out.dump", choice()),
    # restore (the database holds data: refused, whether the file exists or not)
    row("db restore", "file", ["db", "restore", V], path(REFUSED, negative=USAGE)),
    row("db restore", "--format", "db restore --format {} {file}", choice()),
    # db psql: ARGS go to the bundled psql as they are (-c: it never waits on stdin); a value psql itself refuses
    # (-5: an unknown option) is its message, then one sentence naming its exit status
    row("db psql", "args", ["db", "psql", "-X", "-c", "SELECT 1", V], named(READ, negative=REFUSED)),
    # cache purge (no database; every bad --format is refused where the command line is read)
    row("cache purge", "--format", "cache purge --format {}", choice(), database=False),
    # estimate (no database)
    row("estimate", "--tokens", "estimate --chunk 400 --tokens {}", named(USAGE, zero=READ)),
    row("estimate", "--words", "estimate --chunk 400 --words {}", named(USAGE, zero=READ)),
    row("estimate", "--pages", "estimate --chunk 400 --pages {}", named(USAGE, zero=READ)),
    row("estimate", "--chunks", "estimate --chunk 400 --chunks {}", named(USAGE, zero=READ)),
    row("estimate", "--words-per-page", "estimate --chunk 400 --pages 10 --words-per-page {}", number()),
    row("estimate", "--tokens-per-word", "estimate --chunk 400 --words 10 --tokens-per-word {}", number()),
    row("estimate", "--corpus", "estimate --chunker fixed:40:0 --corpus {}", path(USAGE)),
    row("estimate", "--chunker", "estimate --corpus {corpus} --chunker {}", named(REFUSED)),
    row("estimate", "--embedder", "estimate --corpus {corpus} --chunker fixed:40:0 --embedder {}", named(REFUSED)),
    row("estimate", "--chunk", "estimate --tokens 1M --chunk {}", number()),
    row("estimate", "--overlap", "estimate --tokens 1M --chunk 400 --overlap {}", named(USAGE, zero=READ)),
    row("estimate", "-k", f"{EST} -k {{}}", number()),
    row("estimate", "--dims", f"{EST} --dims {{}}", number()),
    row("estimate", "--storage", f"{EST} --storage {{}}", choice()),
    row("estimate", "--embed-price", f"{EST} --embed-price {{}}", number(zero=READ)),
    row("estimate", "--input-price", f"{EST} --input-price {{}}", number(zero=READ)),
    row("estimate", "--queries-per-day", f"{EST} --queries-per-day {{}}", named(USAGE, zero=READ)),
    row("estimate", "--system-prompt-tokens", f"{EST} --system-prompt-tokens {{}}", number(zero=READ)),
    row("estimate", "--question-tokens", f"{EST} --question-tokens {{}}", number(zero=READ)),
    row("estimate", "--format", f"{EST} --format {{}}", choice()),
    row("estimate", "--memory", f"{EST} --memory {{}}", named(USAGE)),
    row("estimate", "--hnsw-m", f"{EST} --hnsw-m {{}}", number()),
    # eval (reads only; the database only for an alias or --version)
    row("eval", "--corpus", f"eval {EVAL_QUERIES} {EVAL_CONFIG} --corpus {{}}", path(USAGE)),
    row("eval", "--queries", f"eval {EVAL_CORPUS} {EVAL_CONFIG} --queries {{}}", path(REFUSED)),
    row("eval", "--configs", f"eval {EVAL_CORPUS} {EVAL_QUERIES} --model hashing:16 --configs {{}}", named(REFUSED)),
    row("eval", "--model", f"eval {EVAL_CORPUS} {EVAL_QUERIES} --configs fixed:40:0 --model {{}}", named(REFUSED)),
    row("eval", "-k", f"{EVAL} -k {{}}", number()),
    row("eval", "--scorer", f"{EVAL} --scorer {{}}", choice()),
    row("eval", "--retrieval", f"{EVAL} --retrieval {{}}", named(REFUSED)),
    # a plot path is checked at the parser (a .png in a folder that exists), before the evaluation runs
    row("eval", "--plot", f"{EVAL} --plot {{}}", path(USAGE)),
    row("eval", "--input-price", f"{EVAL} --input-price {{}}", number(zero=READ)),
    row("eval", "--cache-dir", f"eval {EVAL_CORPUS} {EVAL_QUERIES} {EVAL_CONFIG} --cache-dir {{}}", path(READ)),
    row("eval", "--version", f"eval {EVAL_QUERIES} --version {{}}", number()),
    row("eval", "--tenant", f"eval {EVAL_QUERIES} --version 1 --tenant {{}}", named(REFUSED)),
    row("eval", "--format", f"{EVAL} --format {{}}", choice()),
    # migrate (the revision is looked up before anything runs)
    row("migrate", "revision", ["migrate", V], named(REFUSED, negative=USAGE)),
    row("migrate", "--max-stall", "migrate --max-stall {}", number()),
    row("migrate", "--lock-timeout", "migrate --lock-timeout {}", number()),
    # (0: end blockers at once; at head with this SQL the migration has nothing to do, so it reads only)
    row("migrate", "--terminate-blockers-after", "migrate --terminate-blockers-after {}", number(zero=READ)),
    # model add / list
    row(
        "model add",
        "alias",
        ["model", "add", V, "--provider", "hashing", "--name", "16"],
        named(WRITE, negative=USAGE, quotes=REFUSED, sql=REFUSED),
    ),
    row("model add", "--provider", "model add h2 --name 16 --provider {}", choice()),
    row("model add", "--name", "model add h2 --provider hashing --name {}", named(REFUSED)),
    row("model add", "--dims", f"{ADD} --dims {{}}", number()),
    row("model add", "--base-url", f"{ADD} --base-url {{}}", named(REFUSED)),
    row("model add", "--query-prefix", f"{ADD} --query-prefix {{}}", named(WRITE, empty=WRITE)),
    row("model add", "--document-prefix", f"{ADD} --document-prefix {{}}", named(WRITE, empty=WRITE)),
    row("model add", "--max-input-tokens", f"{ADD} --max-input-tokens {{}}", number()),
    row("model add", "--distance", f"{ADD} --distance {{}}", choice()),
    row("model add", "--option", f"{ADD} --option {{}}", named(REFUSED)),
    row("model add", "--price", f"{ADD} --price {{}}", number(zero=WRITE)),
    row("model list", "--format", "model list --format {}", choice()),
    # query-log (a legal value changes the log's settings)
    row("query-log", "--sample-rate", "query-log --sample-rate {}", number(zero=WRITE)),
    row("query-log", "--retention", "query-log --retention {}", named(USAGE, zero=WRITE)),
    row("query-log", "--format", "query-log --format {}", choice()),
    row("query-log", "--max-rows", "query-log --max-rows {}", number()),
    row("query-log", "--max-per-minute", "query-log --max-per-minute {}", number()),
    # retire (--dry-run: reads only)
    row("retire", "--older-than", "retire --dry-run --older-than {}", named(USAGE, zero=READ)),
    row("retire", "--version", "retire --dry-run --version {}", number()),
    row("retire", "--format", "retire --dry-run --format {}", choice()),
    # rollback-window (a legal value changes the setting)
    row("rollback-window", "duration", "rollback-window {}", named(USAGE, zero=WRITE)),
    row("rollback-window", "--format", "rollback-window --format {}", choice()),
    # rollback (nothing is on standby; a legal reason would be recorded by a rollback)
    row("rollback", "--reason", "rollback --reason {}", named(WRITE)),
    row("rollback", "--format", "rollback --format {}", choice()),
    # search (reads only)
    row(
        "search",
        "question",
        ["search", V, "--tenant", "acme"],
        named(READ, negative=USAGE),
    ),
    row("search", "--tenant", "search hello --tenant {}", named(READ)),
    row("search", "-k", f"{SEARCH} -k {{}}", number()),
    row("search", "--expand", f"{SEARCH} --expand {{}}", named(REFUSED)),
    row("search", "--retrieval", f"{SEARCH} --retrieval {{}}", choice()),
    row("search", "--max-tokens", f"{SEARCH} --max-tokens {{}}", number()),
    # each filter is read as typed (a known KEY=VALUE, a value after the =): refused at the parser
    row("search", "--filter", f"{SEARCH} --filter {{}}", named(USAGE)),
    row("search", "--min-score", f"{SEARCH} --min-score {{}}", number(zero=READ)),
    row("search", "--diversity", f"{SEARCH} --diversity {{}}", number(zero=READ)),
    row("search", "--principal", f"{SEARCH} --principal {{}}", named(READ)),
    row("search", "--ef-search", f"{SEARCH} --ef-search {{}}", number()),
    row("search", "--request-key", f"{SEARCH} --request-key {{}}", named(READ)),
    row("search", "--version", f"{SEARCH} --version {{}}", number()),
    # a question is embedded with the serving model: any other alias is refused by the library (a model mismatch)
    row("search", "--query-model", f"{SEARCH} --query-model {{}}", named(REFUSED)),
    # the text full-text ranking searches for: any text reads
    row("search", "--query-text", f"{SEARCH} --query-text {{}}", named(READ)),
    # shadow (replays questions on version 1 and the candidate, version 2; reads only)
    row("shadow", "--model", "shadow --queries {queries} --model {}", NOT_A_MODEL),
    row("shadow", "--chunker", "shadow --queries {queries} --model h --chunker {}", named(REFUSED)),
    row("shadow", "--version", "shadow --queries {queries} --version {}", number()),
    row("shadow", "--queries", "shadow --version 2 --queries {}", path(USAGE)),
    # the query log is empty: a legal --since finds nothing to replay
    row("shadow", "--since", "shadow --version 2 --from-log --since {}", named(USAGE, zero=REFUSED)),
    row("shadow", "--max-questions", "shadow --version 2 --from-log --max-questions {}", number()),
    # a tenant without documents has nothing to compare: refused (it printed blanks and exit 0)
    row("shadow", "--tenant", "shadow --version 2 --queries {queries} --tenant {}", named(REFUSED)),
    row("shadow", "-k", "shadow --version 2 --queries {queries} -k {}", number()),
    row("shadow", "--format", "shadow --version 2 --queries {queries} --format {}", choice()),
    row("search", "--format", f"{SEARCH} --format {{}}", choice()),
    # status
    row("status", "--format", "status --format {}", choice()),
    # tenant (bindings of logins; matrix_reader exists)
    row("tenant grant", "login", ["tenant", "grant", V, "acme"], named(REFUSED, negative=USAGE)),
    # (a tenant without documents is refused unless --allow-empty)
    row("tenant grant", "tenants", ["tenant", "grant", "matrix_reader", V], named(REFUSED, negative=USAGE)),
    # revoking from a login that does not exist (and was never bound) is refused, naming it
    row("tenant revoke", "login", ["tenant", "revoke", V, "acme"], named(REFUSED, negative=USAGE)),
    row("tenant revoke", "tenants", ["tenant", "revoke", "matrix_reader", V], named(WRITE, negative=USAGE)),
    row("tenant list", "--format", "tenant list --format {}", choice()),
    row("tenant relink", "--format", "tenant relink --format {}", choice()),
    # verify (a run records an evaluation: legal values write)
    row("verify", "--model", "verify --queries {queries} --model {}", NOT_A_MODEL),
    row("verify", "--chunker", "verify --queries {queries} --model h --chunker {}", named(REFUSED)),
    row("verify", "--version", "verify --queries {queries} --version {}", number()),
    row("verify", "--queries", "verify --version 1 --queries {}", path(USAGE)),
    row("verify", "-k", f"{VERIFY} -k {{}}", number()),
    row("verify", "--tenant", f"{VERIFY} --tenant {{}}", named(REFUSED)),
    row("verify", "--min-recall", f"{VERIFY} --min-recall {{}}", number(zero=WRITE)),
    row("verify", "--max-drop", f"{VERIFY} --max-drop {{}}", number(zero=WRITE)),
    row("verify", "--min-queries", f"{VERIFY} --min-queries {{}}", number()),
    row("verify", "--format", f"{VERIFY} --format {{}}", choice()),
]


# Commands that never open a database, whatever the value (the sentinel below proves it for every case). eval
# is not one: given a --database-url, it opens the database even for files.
NO_DATABASE = {"chunk", "estimate"}
ROWS = [Row(r.command, r.param, r.args, r.outcomes, r.url, database=r.command not in NO_DATABASE) for r in ROWS]


def value_parameters(group: click.Group = main, prefix: str = ""):
    """(command path, parameter as typed) for every parameter of the tree that takes a value."""
    for param in group.params:
        if isinstance(param, click.Option) and (param.is_flag or param.count or not param.expose_value):
            continue
        yield prefix, param.opts[0] if isinstance(param, click.Option) else param.name
    for name, command in sorted(getattr(group, "commands", {}).items()):
        yield from value_parameters(command, f"{prefix} {name}".strip())


def test_every_parameter_has_a_row():
    rows = {(r.command, r.param) for r in ROWS}
    parameters = set(value_parameters())
    missing = sorted(parameters - rows)
    assert not missing, f"parameters with no row in tests/test_bad_input.py ROWS: {missing}"
    assert not sorted(rows - parameters), "rows for parameters that no longer exist"
    for r in ROWS:
        assert set(r.outcomes) == set(VALUES), (r.command, r.param)


# -- the database every case runs against -------------------------------------------------------------------


def snapshot(url: str) -> dict:
    """Row count and checksum of every table in the toolkit schema, and the schema's tables and views."""
    with psycopg.connect(url, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'toolkit' AND c.relkind IN ('r', 'p', 'v') ORDER BY c.relname"
        ).fetchall()
        state = {"relations": relations}
        for name, kind in relations:
            if kind == "v":
                continue
            table = sql.Identifier("toolkit", name)
            state[name] = conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {} AS t"
                ).format(table)
            ).fetchone()
        state["revision"] = conn.execute("SELECT version_num FROM public.toolkit_alembic_version").fetchall()
    return state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Files for the commands to read, and a directory to run in; a data directory no case may touch."""
    root = tmp_path_factory.mktemp("bad-input")
    corpus = root / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.md").write_text(f"# Topic {i}\n\nHello from document {i}, which explains rule {i}.\n")
    queries = root / "queries.jsonl"
    queries.write_text(json.dumps({"query": "hello rule 1", "answers": [{"doc_id": "doc1.md", "text": "rule 1"}]}))
    places = {"corpus": str(corpus), "queries": str(queries), "file": str(corpus / "doc0.md")}
    return {"root": root, "places": places, "corpus": corpus}


@pytest.fixture(scope="module")
def world(pg_admin_url, migrated_template, files):
    """A database with a hashing model `h`, three documents for tenant acme, version 1 built and active, and its
    snapshot."""
    from toolkit import backfill, cutover
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest
    from toolkit.store.models import Model, insert_model

    name = create_database(pg_admin_url, migrated_template)
    url = with_database(pg_admin_url, name)
    with connect(url, autocommit=True) as conn:
        insert_model(conn, Model("h", "hashing", "16", 16, 8192))
        ingest(conn, [files["corpus"]], "acme")
    report = backfill.backfill(url, "h", "markdown:40:0")
    backfill.backfill(url, "h", "fixed:40:0")  # version 2: ready, a candidate for a canary or a shadow
    with connect(url, autocommit=True) as conn:
        cutover.activate_version(conn, report.version, force=True, reason="test setup")
        conn.execute("CREATE ROLE matrix_reader LOGIN IN ROLE toolkit_reader")
    yield {**files, "url": url, "snapshot": snapshot(url)}
    drop_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS matrix_reader")


class Sentinel:
    """A listening TCP socket named as the database: a client that connects is queued by the kernel, and
    ``contacted()`` sees it (and clears it for the next case). The URL's short timeout makes such a client give
    up instead of waiting for a server that never answers."""

    def __init__(self):
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.setblocking(False)
        port = self.socket.getsockname()[1]
        self.url = f"postgresql://nobody@127.0.0.1:{port}/nothing?connect_timeout=2"

    def contacted(self) -> int:
        count = 0
        while select.select([self.socket], [], [], 0)[0]:
            client, _ = self.socket.accept()
            client.close()
            count += 1
        return count


@pytest.fixture(scope="module")
def sentinel():
    listener = Sentinel()
    yield listener
    listener.socket.close()


def _cases(at_the_parser: bool):
    for r in ROWS:
        for kind, outcome in r.outcomes.items():
            if outcome != WRITE and (outcome == USAGE or not r.database or not r.url) == at_the_parser:
                yield pytest.param(r, kind, id=f"{r.command or 'toolkit'} {r.param}={kind}")


def _command_line(r: Row, value: str, places: dict) -> list[str]:
    line = [value if part == V else part.format(**places) if "{" in part else part for part in r.args]
    return line


def check_one_sentence(result) -> None:
    output = result.output
    assert "Traceback" not in output
    if result.exit_code == 0:
        return
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output[-2000:]
    message = errors[0]
    assert len(message) < 600, message[:600]
    assert message.rstrip().endswith((".", ".'")), message
    assert "\t" not in output, "raw multi-line libpq text"


def run_case(r: Row, kind: str, url: str, root, places: dict, monkeypatch, cwd):
    outcome = r.outcomes[kind]
    # Nothing may fall back to the user's own embedded server or write into the source tree. Each case runs in an
    # empty directory of its own: a legal value may create a file or directory named by the value there (--plot,
    # --cache-dir), which another case would then find (the suite in a shuffled order showed it).
    monkeypatch.chdir(cwd)
    env = {"TOOLKIT_DATA_DIR": str(root / "no-server-here"), "TOOLKIT_DATABASE_URL": None}
    line = _command_line(r, VALUES[kind], places)
    args = (["--database-url", url] if r.url else []) + line
    result = CliRunner().invoke(main, args, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: show it
    check_one_sentence(result)
    assert result.exit_code == EXIT[outcome], f"expected {outcome}, got exit {result.exit_code}: {result.output[-800:]}"
    assert not (root / "no-server-here").exists(), "a case started the embedded server"


@pytest.mark.parametrize(("r", "kind"), list(_cases(at_the_parser=True)))
def test_bad_value_at_the_parser(files, sentinel, monkeypatch, tmp_path, r: Row, kind: str):
    sentinel.contacted()
    run_case(r, kind, sentinel.url, files["root"], files["places"], monkeypatch, tmp_path)
    assert sentinel.contacted() == 0, "the case connected to the database it was given"


@pytest.mark.parametrize(("r", "kind"), list(_cases(at_the_parser=False)))
def test_bad_value(world, monkeypatch, tmp_path, r: Row, kind: str):
    run_case(r, kind, world["url"], world["root"], world["places"], monkeypatch, tmp_path)
    # Every case leaves the database as it was built (a case that changed it fails, and the next compare with what
    # it left).
    before, world["snapshot"] = world["snapshot"], snapshot(world["url"])
    assert world["snapshot"] == before, "the database changed"


# -- legal hostile strings are stored verbatim; nothing they spell is executed ------------------------------


def test_hostile_but_legal_strings_are_stored_verbatim(world, database_url, tmp_path):
    from toolkit.db.connection import connect

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.\n")
    runner = CliRunner()
    hostile = VALUES["sql"]
    for args in (
        ["model", "add", "h", "--provider", "hashing", "--name", "8", "--query-prefix", hostile],
        ["ingest", str(corpus), "--tenant", hostile, "--acl", VALUES["quotes"]],
        ["backfill", "--model", "h", "--chunker", "markdown:40:0"],
        ["cutover", "--version", "1", "--force", "--reason", hostile],
        ["search", hostile, "--tenant", hostile, "--principal", VALUES["quotes"]],
    ):
        result = runner.invoke(main, ["--database-url", database_url, *args])
        assert result.exit_code == 0, result.output
    with connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT query_prefix FROM toolkit.models").fetchone()[0] == hostile
        assert conn.execute("SELECT tenant, access_labels FROM toolkit.documents").fetchone() == (
            hostile,
            [VALUES["quotes"]],
        )
        assert conn.execute("SELECT reason FROM toolkit.cutovers ORDER BY 1 DESC LIMIT 1").fetchone()[0] == hostile
        assert conn.execute("SELECT to_regclass('toolkit.documents') IS NOT NULL").fetchone()[0]


# -- bytes that are not UTF-8, from a real shell and from a real directory ----------------------------------


def test_a_non_utf8_argument_from_a_real_process_is_a_usage_error(world):
    env = {**os.environ, "TOOLKIT_DATA_DIR": str(world["root"] / "no-server-here")}
    command = [sys.executable, "-m", "toolkit", "--database-url", world["url"], "search", "hello", "--tenant"]
    result = subprocess.run([os.fsencode(c) for c in command] + [b"acme\xff"], capture_output=True, env=env)
    assert result.returncode == 2, result.stderr
    assert b"is not valid UTF-8 (byte 0xff at character 5)" in result.stderr and b"Traceback" not in result.stderr


def test_a_file_whose_name_is_not_utf8_is_skipped_and_the_others_are_stored(database_url, tmp_path, make_model):
    from toolkit.db.connection import connect

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(11):
        (corpus / f"good{i:02d}.md").write_text(f"# Good {i}\n\nText {i}.\n")
    with open(os.fsencode(corpus) + b"/bad\xff\xfe.md", "wb") as file:
        file.write(b"# Bad name\n\nGood text.\n")
    make_model("h", 8)
    result = CliRunner().invoke(main, ["--database-url", database_url, "ingest", str(corpus), "--tenant", "acme"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "bad\\udcff\\udcfe.md: has a path that is not valid UTF-8 (byte 0xff" in result.output
    with connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 11


# -- the library refuses the same values, before the first write --------------------------------------------


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("batch_size", 0),
        ("batch_size", -5),
        ("requests_per_minute", -1.0),
        ("requests_per_minute", 0.0),
        ("tokens_per_minute", math.nan),
        ("max_cost", math.inf),
        ("workers", 0),
        ("dimensions", 10**30),
    ],
)
def test_backfill_refuses_a_bad_value_before_it_creates_the_version(conn, database_url, make_model, keyword, value):
    from toolkit.backfill import backfill

    make_model("h", 8)
    with pytest.raises(InputError, match=r"must be (a whole number|a number)"):
        backfill(database_url, "h", "markdown:40:0", **{keyword: value})
    assert conn.execute("SELECT count(*) FROM toolkit.versions").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("price_per_million_tokens", math.nan), ("price_per_million_tokens", -1.0), ("max_input_tokens", 0)],
)
def test_model_registration_refuses_nan_prices_and_zero_limits(conn, keyword, value):
    from toolkit.store.models import register_model

    with pytest.raises(InputError, match="must be"):
        register_model(conn, "h", "hashing", "8", **{keyword: value})
    assert conn.execute("SELECT count(*) FROM toolkit.models").fetchone()[0] == 0


def test_ingest_refuses_a_zero_batch_before_reading_anything(conn, tmp_path):
    from toolkit.ingest import ingest

    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    with pytest.raises(InputError, match=r"ingest batch size .* must be a whole number from 1 to 10,000, not 0\."):
        ingest(conn, [tmp_path], "acme", batch_documents=0)
    assert conn.execute("SELECT count(*) FROM toolkit.documents").fetchone()[0] == 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "5", 2.5, -1, 10**20])
def test_a_whole_number_rule_refuses_what_is_not_one(value):
    with pytest.raises(InputError, match=r"^The backfill batch size \(rows per embedding batch\) must be a whole"):
        validation.BATCH_ROWS.check(value)


def test_rules_accept_their_bounds_and_return_whole_numbers_as_int():
    assert validation.BATCH_ROWS.check(1) == 1 and validation.BATCH_ROWS.check(10_000.0) == 10_000
    assert isinstance(validation.BATCH_ROWS.check(64.0), int)
    assert validation.COST_LIMIT.check(0.0) == 0.0
    with pytest.raises(InputError, match="above 0"):
        validation.REQUESTS_PER_MINUTE.check(0)


# -- the embedding server answers nonsense: one sentence, nothing stored -------------------------------------
# The fault server's modes for these are added on the `throughput` branch (tests/fault_server.py documents
# each mode's name in its docstring). A mode this file names but the fault server does not document yet is
# skipped with that reason; when merging, align the names below with the docstring.

FAULT_MODES = {
    "a 200 whose body is not JSON": {"not_json": True},
    "vectors without index fields": {"no_index": True},
    "vectors in shuffled order without indexes": {"shuffle": True, "no_index": True},
    "an all-zero vector": {"zero": True},
    "numbers sent as strings": {"strings": True},
}


def _documented(fault: dict) -> bool:
    import fault_server

    return all(f"{{{json.dumps(key)}" in fault_server.__doc__ for key in fault)


@pytest.fixture(scope="module")
def fault_server_process():
    from fault_server import FaultServer

    server = FaultServer(dims=16)
    yield server
    server.stop()


@pytest.mark.parametrize("scenario", list(FAULT_MODES))
def test_an_embedding_server_answering_nonsense_stores_nothing(
    scenario, fault_server_process, database_url, tmp_path, monkeypatch
):
    fault = FAULT_MODES[scenario]
    if not _documented(fault):
        pytest.skip(f"tests/fault_server.py documents no {sorted(fault)} mode yet (added on the throughput branch)")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"OPENAI_API_KEY={fault_server_process.url}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(5):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\nParagraph {i} of a test document.\n")
    runner = CliRunner()
    base = ["--database-url", database_url]
    added = runner.invoke(
        main,
        [
            *base,
            "model",
            "add",
            "r",
            "--provider",
            "openai",
            "--name",
            "test-model",
            "--base-url",
            fault_server_process.url,
            "--dims",
            "16",
        ],
    )
    assert added.exit_code == 0, added.output
    built = runner.invoke(main, [*base, "backfill", "--model", "r", "--chunker", "markdown:40:0"])
    assert built.exit_code == 0, built.output
    before = snapshot(database_url)
    fault_server_process.script(*[fault] * 8)
    result = runner.invoke(main, [*base, "ingest", str(corpus), "--tenant", "acme"])
    fault_server_process.reset()
    check_one_sentence(result)
    assert result.exit_code == 1, result.output
    assert snapshot(database_url) == before
