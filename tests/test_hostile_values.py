"""Hostile values (issue 28, items 7 and 8, the Python side): each test is one attack of the red-team pass, named for
it, on the real database where one is involved. Commands that could hang (a FIFO, /dev/zero) run as real processes
and the test waits for them to exit; ``subprocess.run``'s timeout only turns a hang (what main did) into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from toolkit import validation
from toolkit.cli import main
from toolkit.db.connection import connect
from toolkit.errors import InputError

HANG = 120


def toolkit(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "toolkit", *(["--database-url", url] if url else []), *args]
    env = {**os.environ, "TOOLKIT_DATA_DIR": "/nonexistent/no-embedded-server"}
    return subprocess.run(command, capture_output=True, text=True, timeout=HANG, env=env)


def cli(url: str | None, *args: str):
    env = {"TOOLKIT_DATA_DIR": "/nonexistent/no-embedded-server"}
    return CliRunner().invoke(main, [*(["--database-url", url] if url else []), *args], env=env)


def one_sentence(output: str) -> str:
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output[-2000:]
    assert errors[0].rstrip().endswith("."), errors[0]
    return errors[0]


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.md").write_text(f"# Topic {i}\n\nHello from document {i}, which explains rule {i}.\n")
    return folder


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({"query": "hello rule 1", "answers": [{"doc_id": "doc1.md", "text": "rule 1"}]}))
    return path


@pytest.fixture
def served(database_url, make_model, corpus):
    """Version 1 active and version 2 ready, for tenant acme's three documents."""
    from toolkit import backfill, cutover
    from toolkit.ingest import ingest

    make_model("h", 16)
    with connect(database_url, autocommit=True) as conn:
        ingest(conn, [corpus], "acme")
    first = backfill.backfill(database_url, "h", "markdown:40:0")
    backfill.backfill(database_url, "h", "fixed:40:0")
    with connect(database_url, autocommit=True) as conn:
        cutover.activate_version(conn, first.version, force=True, reason="test setup")
    return database_url


def count(url: str, query: str) -> int:
    with connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchone()[0]


# -- files that are not files ---------------------------------------------------------------------------------


def test_a_fifo_in_an_ingested_folder_is_skipped_and_does_not_block(corpus, database_url, make_model):
    os.mkfifo(corpus / "pipe.md")  # nothing ever writes to it: open() for reading would block forever
    make_model("h", 8)
    result = toolkit("ingest", str(corpus), "--tenant", "acme", url=database_url)
    assert result.returncode == 1, result.stderr
    assert "pipe.md: is a named pipe (FIFO), not a regular file" in result.stderr
    assert count(database_url, "SELECT count(*) FROM toolkit.documents") == 3


def test_a_fifo_does_not_block_chunk(corpus):
    os.mkfifo(corpus / "pipe.md")
    result = toolkit("chunk", str(corpus))
    assert result.returncode == 1 and "pipe.md: is a named pipe (FIFO)" in result.stderr
    assert {json.loads(line)["doc_id"] for line in result.stdout.splitlines()} == {"doc0.md", "doc1.md", "doc2.md"}


def test_a_fifo_as_the_query_file_of_verify_does_not_block(served, tmp_path):
    pipe = tmp_path / "queries.jsonl"
    os.mkfifo(pipe)
    result = toolkit("verify", "--version", "2", "--queries", str(pipe), url=served)
    assert result.returncode == 1, result.stderr
    assert "is a named pipe (FIFO), not a regular file" in one_sentence(result.stderr)
    assert count(served, "SELECT count(*) FROM toolkit.evaluations") == 0


@pytest.mark.parametrize("command", ["chunk", "ingest"])
def test_dev_zero_as_an_argument_is_refused_without_reading_it(command, database_url, make_model):
    make_model("h", 8)
    args = ["chunk", "/dev/zero"] if command == "chunk" else ["ingest", "/dev/zero", "--tenant", "acme"]
    result = toolkit(*args, url=database_url if command == "ingest" else None)
    assert result.returncode == 1, result.stderr
    assert "/dev/zero: is a character device, not a regular file" in result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr


def test_a_symlink_to_dev_zero_in_a_folder_is_skipped_and_the_good_files_are_stored(corpus, database_url, make_model):
    (corpus / "zero.md").symlink_to("/dev/zero")
    make_model("h", 8)
    result = toolkit("ingest", str(corpus), "--tenant", "acme", url=database_url)
    assert result.returncode == 1, result.stderr
    assert "zero.md: is a symbolic link to a character device, not a regular file" in result.stderr
    assert count(database_url, "SELECT count(*) FROM toolkit.documents") == 3


def test_a_file_over_the_size_limit_is_skipped_and_the_others_are_stored(corpus, database_url, make_model):
    (corpus / "big.md").write_text("# Big\n\n" + "word " * 1000)
    make_model("h", 8)
    result = cli(database_url, "ingest", str(corpus), "--tenant", "acme", "--max-file-size", "1kB")
    assert result.exit_code == 1, result.output
    assert "big.md: is 5,007 bytes, over the limit of 1,000 bytes (--max-file-size)" in result.output
    assert count(database_url, "SELECT count(*) FROM toolkit.documents") == 3


@pytest.mark.parametrize("command", ["eval", "shadow"])
def test_dev_zero_as_the_query_file_is_refused(command, served, corpus):
    if command == "eval":
        args = ["eval", "--corpus", str(corpus), "--configs", "fixed:40:0", "--model", "hashing:16", "--no-cache"]
    else:
        args = ["shadow", "--version", "2", "--tenant", "acme"]
    result = toolkit(*args, "--queries", "/dev/zero", url=served)
    assert result.returncode == 1, result.stderr
    assert "'/dev/zero' is a character device, not a regular file" in one_sentence(result.stderr)


@pytest.mark.parametrize("command", ["eval", "shadow"])
def test_a_deeply_nested_json_line_in_a_query_file_is_one_sentence(command, served, corpus, tmp_path):
    path = tmp_path / "nested.jsonl"
    path.write_text(
        '{"query": ' + "[" * 200_000 + "]" * 200_000 + "}\n"
    )  # a 400 kB line: json.loads raised RecursionError
    if command == "eval":
        args = ["eval", "--corpus", str(corpus), "--configs", "fixed:40:0", "--model", "hashing:16", "--no-cache"]
    else:
        args = ["shadow", "--version", "2", "--tenant", "acme"]
    result = cli(served, *args, "--queries", str(path))
    assert result.exit_code == 1, result.output
    assert "line 1: JSON nested too deeply to read" in one_sentence(result.output)


# -- numbers and words that meant something else -------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "typed"), [(["query-log", "--retention", "30"], "30"), (["retire", "--older-than", "7"], "7")]
)
def test_a_bare_number_is_not_a_duration(served, args, typed):
    before = count(served, "SELECT count(*) FROM toolkit.versions WHERE state = 'retired'")
    result = cli(served, *args)
    assert result.exit_code == 2, result.output
    assert f"has no unit; say {typed}d, {typed}h, {typed}m or {typed}s" in result.output
    assert count(served, "SELECT count(*) FROM toolkit.versions WHERE state = 'retired'") == before


def test_durations_with_units_and_zero_are_read():
    from datetime import timedelta

    from toolkit.validation import parse_duration

    assert parse_duration("7d") == timedelta(days=7) and parse_duration("45s") == timedelta(seconds=45)
    assert parse_duration("0") == timedelta(0)
    with pytest.raises(InputError, match="has no unit"):
        parse_duration("30")


def test_retiring_a_retired_version_is_refused_and_not_audited_again(served):
    first = cli(served, "retire", "--version", "2", "--yes")  # retire acts with --yes (a dry run otherwise)
    assert first.exit_code == 0, first.output
    audits = count(served, "SELECT count(*) FROM toolkit.cutovers")
    for args in (["retire", "--version", "2", "--yes"], ["retire", "--version", "2", "--dry-run"]):
        again = cli(served, *args)
        assert again.exit_code == 1, again.output
        assert "Version 2 is retired; there is nothing to retire." in one_sentence(again.output)
    assert count(served, "SELECT count(*) FROM toolkit.cutovers") == audits


def test_shadow_on_a_tenant_without_documents_fails(served, queries):
    result = cli(served, "shadow", "--version", "2", "--queries", str(queries), "--tenant", "nobody")
    assert result.exit_code == 1, result.output
    assert "neither version holds a chunk of tenant nobody" in one_sentence(result.output)


@pytest.mark.parametrize("typed", ["1e-400", "1e-310"])
def test_a_sample_rate_that_underflows_is_refused_not_read_as_off(served, typed):
    result = cli(served, "query-log", "--sample-rate", typed)
    assert result.exit_code == 2, result.output
    assert f"not '{typed}'" in result.output
    assert validation.SAMPLE_RATE.parse("0") == 0 and validation.SAMPLE_RATE.parse("0.0e5") == 0


def test_off_with_a_sample_rate_is_a_usage_error(served):
    result = cli(served, "query-log", "--off", "--sample-rate", "0.5")
    assert result.exit_code == 2 and "Give --off or --sample-rate, not both" in result.output


def test_an_unknown_code_language_is_refused(corpus):
    result = cli(None, "chunk", str(corpus / "doc0.md"), "--spec", "code:400:40:language=cobol")
    assert result.exit_code == 1, result.output
    assert "language=cobol, which the code strategy does not know" in one_sentence(result.output)
    assert cli(None, "chunk", str(corpus / "doc0.md"), "--spec", "code:400:40:language=Go").exit_code == 0


def test_canary_with_a_version_and_no_share_is_a_usage_error(served):
    result = cli(served, "canary", "--version", "2")
    assert result.exit_code == 2, result.output
    assert "Say what to do with the version" in result.output
    assert count(served, "SELECT count(*) FROM toolkit.cutovers WHERE action LIKE 'canary%'") == 0


@pytest.mark.parametrize("option", ["batch_size=0", "max_retries=-5", "timeout=0", "retry_base_delay=0"])
def test_a_zero_or_negative_provider_option_is_refused_not_replaced_by_the_default(database_url, option):
    result = cli(
        database_url,
        "model",
        "add",
        "r",
        "--provider",
        "openai",
        "--name",
        "test-model",
        "--base-url",
        "http://127.0.0.1:9/v1",  # never contacted: the option is refused first
        "--dims",
        "16",
        "--option",
        option,
    )
    assert result.exit_code == 1, result.output
    assert f"option {option.split('=')[0]} must be" in one_sentence(result.output)
    assert count(database_url, "SELECT count(*) FROM toolkit.models") == 0


@pytest.mark.parametrize("kind", ["file", "proc"])
def test_a_data_dir_that_cannot_be_one_is_refused(tmp_path, kind):
    target = tmp_path / "afile" if kind == "file" else "/proc/1"
    if kind == "file":
        target.write_text("not a cluster")
    result = CliRunner().invoke(main, ["--data-dir", str(target), "db", "status"], env={"TOOLKIT_DATABASE_URL": None})
    assert result.exit_code == 1, result.output
    assert "running" not in result.output
    message = one_sentence(result.output)
    assert "is a file, not a directory" in message or "holds other files and no PostgreSQL cluster" in message


# -- item 8: options, vectors, dimensions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ([{"api_key_env": "CI_DEPLOY_TOKEN"}], "not a list"),
        ({"extra": {"api_key": "sk-live-secret"}}, "option extra holds a nested object"),
        ({"timeout": float("nan")}, "must be a finite number"),
    ],
)
def test_model_options_that_are_not_a_flat_object_are_refused_before_sql(conn, options, words):
    from toolkit.store.models import Model, insert_model

    with pytest.raises(InputError, match=words):
        insert_model(conn, Model("h", "hashing", "8", 8, 8192, options=options))
    assert conn.execute("SELECT count(*) FROM toolkit.models").fetchone()[0] == 0


@pytest.mark.parametrize(
    ("vectors", "words"),
    [
        ([[True, False] * 8], "returned booleans"),
        (__import__("numpy").ones((1, 16), dtype=bool), "returned booleans"),
        ([[1e-45] * 16], "too small to have a direction in single precision"),
        ([[1e-20] * 16], "too small to have a direction in single precision"),
        ([[3e38] * 16], "too large to have a direction in single precision"),
        ([[0.0] * 16], "all-zero vector"),
        ([[float("nan")] * 16], "NaN or infinite"),
    ],
)
def test_vectors_without_a_direction_are_refused_before_they_are_stored(vectors, words):
    from toolkit.embedding.base import check_vectors
    from toolkit.errors import EmbeddingError

    with pytest.raises(EmbeddingError, match=words):
        check_vectors(vectors, 1, 16, source="hostile")
    assert check_vectors([[0.25] * 16], 1, 16, source="fine").shape == (1, 16)


@pytest.mark.parametrize(
    ("vector", "words"),
    [
        ([0.0] * 16, "is all zeros"),
        ([1e-45] * 16, "too small to have a direction"),
        ([True] * 16, "holds booleans"),
        ([[0.5] * 16], "one vector of numbers"),
        ([0.5] * 8, "has 8 dimensions; the version searched has 16"),
        ([float("inf")] + [0.5] * 15, "NaN or infinite"),
    ],
)
def test_a_degenerate_query_vector_is_refused_with_a_sentence(vector, words):
    with pytest.raises(InputError, match=words):
        validation.query_vector(vector, 16)
    assert validation.query_vector([0.5] * 16, 16).dtype.name == "float32"


def test_the_wrong_dimension_message_names_the_answer_under_two_workers(database_url, corpus, monkeypatch):
    from fault_server import FaultServer

    from toolkit.backfill import backfill
    from toolkit.errors import EmbeddingError
    from toolkit.ingest import ingest

    for i in range(3, 12):
        (corpus / f"doc{i}.md").write_text(f"# Topic {i}\n\nMore text from document {i}, on rule {i}.\n")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = FaultServer(dims=16)
    # This process's operator approves the local server for the key (TOOLKIT_API_KEY_URLS, docs/security.md).
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"OPENAI_API_KEY={server.url}")
    try:
        added = cli(
            database_url,
            *["model", "add", "r", "--provider", "openai", "--name", "test-model", "--base-url", server.url],
            *["--dims", "16", "--option", "batch_size=1"],
        )
        assert added.exit_code == 0, added.output
        with connect(database_url, autocommit=True) as conn:
            ingest(conn, [corpus], "acme")
        server.script({"dims": 7})  # the first answer is the wrong one; the other worker's answers are right
        with pytest.raises(EmbeddingError) as raised:
            backfill(database_url, "r", "markdown:40:0", workers=2, batch_size=1)
    finally:
        server.stop()
    assert "returned 7-dimensional vectors where 16 were declared" in str(raised.value)


# -- what a terminal would obey is printed, not obeyed --------------------------------------------------------


def test_terminal_escapes_in_a_file_name_and_a_question_are_printed_escaped(served, tmp_path):
    title = "\x1b]0;PWNED-TITLE\x07 FAKE: gate passed, promote now \u202egpj.exe"
    bad = tmp_path / "files"
    bad.mkdir()
    (bad / f"{title}.md").write_bytes(b"\x00binary")
    result = cli(served, "ingest", str(bad), "--tenant", "acme")
    assert result.exit_code == 1
    assert "\x1b" not in result.output and "\u202e" not in result.output and "\x07" not in result.output
    assert "\\x1b]0;PWNED-TITLE\\x07" in result.output and "\\u202egpj.exe" in result.output
    questions = tmp_path / "questions.txt"
    questions.write_text(f"hello rule 1 {title}\n")
    shadow = cli(served, "shadow", "--version", "2", "--queries", str(questions), "--tenant", "acme")
    assert shadow.exit_code == 0, shadow.output
    assert "\x1b" not in shadow.output and "\u202e" not in shadow.output
    assert "\\x1b]0;PWNED-TITLE" in shadow.output


def test_json_output_is_unchanged_by_the_escaping(served):
    result = cli(served, "status", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.output)
    from toolkit.cli._output import printable

    assert (
        printable("tab\tand\nnewline stay; é, 日本 and emoji 🙂 stay")
        == "tab\tand\nnewline stay; é, 日本 and emoji 🙂 stay"
    )
    assert printable("\x9b2J\u2066x") == "\\x9b2J\\u2066x"
