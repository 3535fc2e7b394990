"""The progress line: silent off a terminal (and under --quiet), redrawn on time on one, counted in the unit of the
work, with rate and ETA from recent throughput; every long command draws it on stderr, never into JSON stdout."""

import io
import json
import re
import threading

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES
from toolkit.progress import Progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal and signals every write."""

    def __init__(self):
        super().__init__()
        self.writes = 0
        self.changed = threading.Condition()

    def isatty(self):
        return True

    def write(self, text):
        with self.changed:
            self.writes += 1
            self.changed.notify_all()
        return super().write(text)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_nothing_is_written_when_the_stream_is_not_a_terminal():
    stream = io.StringIO()
    progress = Progress("ingest", 10, unit="documents", stream=stream)
    progress.advance(5)
    progress.finish()
    assert stream.getvalue() == ""


def test_rate_and_eta_come_from_recent_work_not_the_whole_run():
    clock = Clock()
    progress = Progress("backfill", 1000, unit="documents", stream=io.StringIO(), clock=clock)
    for _ in range(10):  # a slow start: 100 documents in 300 s
        clock.now += 30
        progress.advance(10)
    for _ in range(30):  # then 10 a second
        clock.now += 1
        progress.advance(10)
    items, _ = progress.rate()
    assert 9.0 <= items <= 10.0  # the last 30 s, where the cumulative average is 400 / 330 s = 1.2/s
    assert 60 <= progress.eta() <= 67  # 600 left at ~10/s, not ~500 s
    assert "ETA 1m0" in progress.line()


def test_the_eta_is_measured_in_weight_when_items_differ_in_size():
    clock = Clock()
    progress = Progress("backfill", stream=io.StringIO(), clock=clock)
    progress.set_total(100, weight=10_000)
    clock.now += 10
    progress.advance(10, weight=100)
    clock.now += 10
    progress.advance(50, weight=1_000)  # half the documents since, a tenth of the bytes
    assert progress.eta() == 89.0  # 8,900 bytes left at 100 bytes/s (not 40 documents at 5/s: 8 s)
    assert "(11%)" in progress.line()


def test_no_eta_is_made_of_the_first_report_alone():
    """The first report's time holds the start (a model loading): a rate made of it is shown, not planned by."""
    clock = Clock()
    progress = Progress("backfill", 1000, unit="chunks", stream=io.StringIO(), clock=clock)
    clock.now += 84
    progress.advance(10)
    assert progress.eta() is None and "ETA" not in progress.line()
    assert "7.1 chunks/min" in progress.line()  # 10 in 84 s, with its unit


def _simulate(profile, total, *, weights=None):
    """Runs ``profile`` (a list of (seconds since the previous report, items) after the start) on an injected clock
    and returns (ETA shown, true seconds left) at every report from the first that completes 10 % of the work on,
    and half-way between reports (where the truth is half a report's interval nearer than at the last one)."""
    clock = Clock()
    progress = Progress("backfill", stream=io.StringIO(), clock=clock)
    whole = sum(weights) if weights else total
    progress.set_total(None if weights else total, weight=whole if weights else None)
    end = clock.now + sum(seconds for seconds, _ in profile)
    done, samples = 0, []
    for index, (seconds, items) in enumerate(profile):
        if done / whole >= 0.10 and seconds > 0:
            clock.now += seconds / 2
            samples.append((progress.eta(), end - clock.now, seconds / 2))
            clock.now += seconds / 2
        else:
            clock.now += seconds
        size = weights[index] if weights else None
        progress.advance(items, weight=size)
        done += size if weights else items
        if done / whole >= 0.10 and done < whole:
            samples.append((progress.eta(), end - clock.now, 0.0))
    return samples


def _within_twice(samples, name):
    for eta, left, between in samples:
        assert eta is not None, name
        # Between reports the progress cannot know that part of the next block is done: that half-interval aside,
        # the ETA is within 2x of the time really left.
        assert (left + between) / 2 <= eta + 1e-9 and eta <= 2 * (left + between), (name, eta, left, between)


@pytest.mark.parametrize(
    "name, profile, total",
    [
        # A model loads for 60 s (nothing done), then 20 chunks every 2 s.
        ("slow start", [(60.0, 20)] + [(2.0, 20)] * 99, 2000),
        # The e5 case: 90 s to load and embed the first block, then a steady 3.5 chunks/s in 10-chunk blocks.
        ("slow model", [(90.0, 10)] + [(10 / 3.5, 10)] * 172, 1730),
        # Fast for a quarter of the work (cached or short texts), then half the speed.
        ("slower later", [(1.0, 20)] * 25 + [(2.0, 20)] * 75, 2000),
    ],
)
def test_the_eta_is_within_twice_the_truth_once_a_tenth_is_done(name, profile, total):
    samples = _simulate(profile, total)
    assert len(samples) > 100, name
    _within_twice(samples, name)


def test_the_eta_in_bytes_holds_when_documents_differ_in_size():
    """Backfill reports each embedded block with its share of the batch's bytes: documents of very different sizes
    still give a steady byte rate, where a count of documents would jump."""
    sizes = [50_000, 400, 300, 120_000, 800, 60_000] * 10
    blocks = []
    for size in sizes:
        pieces = max(1, size // 10_000)
        blocks += [(size / pieces / 5_000, 1, size // pieces)] * pieces  # 5,000 bytes/s
    profile = [(30.0, 0)] + [(seconds, items) for seconds, items, _ in blocks]
    weights = [0] + [weight for *_, weight in blocks]
    samples = _simulate(profile, None, weights=weights)
    assert len(samples) > 100
    _within_twice(samples, "documents of different sizes")


def test_the_line_is_redrawn_on_time_between_reports_and_ends_with_a_newline():
    stream = Terminal()
    progress = Progress("ingest", 3, unit="documents", stream=stream, tick=0.01)
    progress.advance(1)  # one report, then nothing: the ticker keeps drawing
    with stream.changed:
        assert stream.changed.wait_for(lambda: stream.writes >= 3, timeout=60)
    progress.finish()
    output = stream.getvalue()
    assert output.count("\r\x1b[K") >= 3 and output.endswith("\n") and "1/3 documents (33%)" in output


# --- every long command draws it on stderr (forced on: the tests' stderr is not a terminal) -----------------------

LINE = re.compile(r"^(\w[\w ]*?|eval \S+: embedding): [\d,]+(/[\d,]+)? (\w+)( \(\d+%\))?, [\d.,]+ \3/(s|min), ")


def _cli(url, *args, env=None):
    result = CliRunner().invoke(main, ["--database-url", url, *args], env=env)
    assert result.exit_code == 0, result.output
    return result


def _progress_lines(stderr: str, label: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(label) and LINE.match(line)]


@pytest.fixture
def lifecycle(database_url, tmp_path):
    """Two hashing versions of the sample (v1 active, v2 a candidate) and 12 of its labelled questions."""
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(SAMPLE_QUERIES.read_text().splitlines(keepends=True)[:12]))
    quiet = {"TOOLKIT_PROGRESS": "never"}
    _cli(database_url, "model", "add", "h", "--provider", "hashing", "--name", "16", env=quiet)
    _cli(database_url, "model", "add", "h2", "--provider", "hashing", "--name", "24", env=quiet)
    _cli(database_url, "ingest", str(SAMPLE_DOCS), "--tenant", "acme", env=quiet)
    _cli(database_url, "backfill", "--model", "h", "--chunker", "recursive:128:64", env=quiet)
    _cli(database_url, "cutover", "--model", "h", "--force", env=quiet)
    return database_url, queries


VERIFY = "verify --model h2 --chunker recursive:128:64 --min-queries 5 --max-drop 1 --tenant acme --queries"
SHADOW = "shadow --model h2 --chunker recursive:128:64 --tenant acme --queries"
EVAL = "eval --configs fixed:200:0 --model hashing:16 --no-cache --corpus"


def _commands(url, queries):
    """(label, arguments) of each long command, in an order that leaves each one work to do."""
    return [
        ("ingest", ["ingest", str(SAMPLE_DOCS), "--tenant", "beta"]),
        ("backfill", ["backfill", "--model", "h2", "--chunker", "recursive:128:64"]),
        ("verify", [*VERIFY.split(), str(queries)]),
        ("shadow", [*SHADOW.split(), str(queries)]),
        ("eval", [*EVAL.split(), str(SAMPLE_DOCS), "--queries", str(queries)]),
    ]


UNITS = {"ingest": "documents", "backfill": "chunks", "verify": "questions", "shadow": "questions", "eval": "chunks"}


def test_each_long_command_draws_progress_in_its_unit_on_stderr_and_none_under_quiet(lifecycle, tmp_path):
    url, queries = lifecycle
    for label, arguments in _commands(url, queries):
        drawn = _cli(url, *arguments, "--format", "json", env={"TOOLKIT_PROGRESS": "always"})
        json.loads(drawn.stdout)  # stdout is the JSON alone
        lines = _progress_lines(drawn.stderr, label)
        assert lines, (label, drawn.stderr)
        assert LINE.match(lines[-1]).group(3) == UNITS[label], lines[-1]
        assert "(100%)" in lines[-1] or label == "backfill", lines[-1]
    backfilled = _progress_lines(_cli(url, "backfill", "--model", "h2", "--chunker", "fixed:64:0",
                                      env={"TOOLKIT_PROGRESS": "always"}).stderr, "backfill")  # fmt: skip
    assert re.search(r"backfill: [\d,]+ chunks \(100%\), .*documents 14/14", backfilled[-1]), backfilled
    # --quiet (even when forced on) and a stderr that is not a terminal (nothing forced) draw nothing.
    for label, arguments in _commands(url, queries):
        for chunker, options, env in (("fixed:80:0", ["--quiet"], "always"), ("fixed:96:0", [], "")):
            if label == "backfill":
                arguments = ["backfill", "--model", "h2", "--chunker", chunker]
            result = _cli(url, *arguments, *options, env={"TOOLKIT_PROGRESS": env})
            assert not _progress_lines(result.stderr, label), (label, options, result.stderr)
            assert label != "backfill" or "Version" in result.stdout  # it did the work


def test_migrate_draws_a_step_per_revision_and_sql_file(empty_database_url):
    from toolkit.db.migrate import revisions
    from toolkit.db.sql_files import idempotent_files

    migrated = _cli(empty_database_url, "migrate", env={"TOOLKIT_PROGRESS": "always"})
    lines = _progress_lines(migrated.stderr, "migrate")
    steps = len(revisions()) + len(idempotent_files())
    assert lines and lines[-1].startswith(f"migrate: {steps}/{steps} steps (100%), "), migrated.stderr
    quiet = _cli(
        empty_database_url, "migrate", revisions()[-2], "--downgrade", "--quiet", env={"TOOLKIT_PROGRESS": "always"}
    )
    assert not _progress_lines(quiet.stderr, "migrate")
    _cli(empty_database_url, "migrate", env={"TOOLKIT_PROGRESS": "never"})
    downgraded = _cli(empty_database_url, "migrate", revisions()[-2], "--downgrade", env={"TOOLKIT_PROGRESS": "always"})
    assert _progress_lines(downgraded.stderr, "migrate")[-1].startswith("migrate: 1/1 steps (100%), ")
