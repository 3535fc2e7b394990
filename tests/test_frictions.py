"""A newcomer's frictions (issue 37, item 5): heading paths from every chunker on Markdown and HTML sources, a
rolled-back version's verification named for what it is, a readable frontier plot, and how to run `toolkit` after
`make demo`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb
from support import ready_version

from toolkit import cutover
from toolkit.chunking import get_chunker
from toolkit.chunking.markdown import parse_sections as markdown_sections
from toolkit.cli import main
from toolkit.errors import StateError

MARKDOWN = (
    "Preamble before any heading, one sentence.\n\n"
    "# Guide\n\n" + "The guide opens with a paragraph of prose. " * 12 + "\n\n"
    "## Install\n\n" + "Run the installer and wait for it to finish. " * 30 + "\n\n"
    "### Linux\n\n" + "On Linux, use the package manager to install it. " * 25 + "\n\n"
    "## Use\n\n" + "Call the command with a file. " * 20 + "\n"
)
HTML = (
    "<html><body><p>Before the first heading.</p>\n<h1>Guide</h1>\n<p>"
    + "The guide opens with a paragraph of prose. " * 12
    + "</p>\n<h2>Install</h2>\n<p>"
    + "Run the installer and wait for it to finish. " * 30
    + "</p>\n<h3>Linux</h3>\n<p>"
    + "On Linux, use the package manager to install it. " * 25
    + "</p>\n<h2>Use</h2>\n<p>"
    + "Call the command with a file. " * 20
    + "</p></body></html>"
)
SPLITTING_STRATEGIES = ["recursive:128:64", "fixed:64:8", "sentence:64:1", "recursive:300:30:unit=chars"]


def _headings_at(starts_and_paths, offset):
    """The path of the last heading that starts at or before ``offset`` (written out here, not the toolkit's)."""
    path = ()
    for start, heading_path in starts_and_paths:
        if start <= offset:
            path = heading_path
    return path


# Where each heading starts in the sources above, and the path down to it, written out by hand.
MARKDOWN_HEADINGS = [
    (MARKDOWN.index("# Guide"), ("Guide",)),
    (MARKDOWN.index("## Install"), ("Guide", "Install")),
    (MARKDOWN.index("### Linux"), ("Guide", "Install", "Linux")),
    (MARKDOWN.index("## Use"), ("Guide", "Use")),
]
HTML_HEADINGS = [
    (HTML.index("<h1>"), ("Guide",)),
    (HTML.index("<h2>Install"), ("Guide", "Install")),
    (HTML.index("<h3>"), ("Guide", "Install", "Linux")),
    (HTML.index("<h2>Use"), ("Guide", "Use")),
]


@pytest.mark.parametrize("spec", SPLITTING_STRATEGIES)
@pytest.mark.parametrize(
    ("source", "doc_id", "headings"), [(MARKDOWN, "guide.md", MARKDOWN_HEADINGS), (HTML, "guide.html", HTML_HEADINGS)]
)
def test_every_chunker_records_the_headings_enclosing_each_chunk_start(spec, source, doc_id, headings):
    chunker = get_chunker(spec)
    chunks = chunker.chunk(source, doc_id)
    assert len(chunks) > 4
    for chunk in chunks:
        assert chunk.heading_path == _headings_at(headings, chunk.start), (chunk.start, chunk.text[:40])
        # The path is embedded above the body; the body keeps the strategy's size (the path comes on top).
        assert chunk.embed_text.startswith(" > ".join(chunk.heading_path) + "\n" if chunk.heading_path else "")
        if chunker.unit == "tokens" and not chunk.atomic:
            assert chunker.tokenizer.count(chunk.text) <= chunker.size
    assert {c.heading_path for c in chunks} >= {("Guide", "Install"), ("Guide", "Install", "Linux"), ("Guide", "Use")}
    assert chunker.version.endswith("@2")  # the chunk data changed: versions built with @1 are not mixed with it


def test_the_paths_agree_with_the_markdown_strategy_and_other_formats_get_none():
    # The split rule is the strategy's: the same spans as for a plain-text source, now with their paths.
    with_paths = get_chunker("recursive:128:64").chunk(MARKDOWN, "guide.md")
    without = get_chunker("recursive:128:64").chunk(MARKDOWN, "guide.txt")
    assert [(c.start, c.end) for c in with_paths] == [(c.start, c.end) for c in without]
    sections, _ = markdown_sections(MARKDOWN)
    assert [(s.heading_start, s.path) for s in sections if s.path] == MARKDOWN_HEADINGS
    plain = get_chunker("recursive:128:64").chunk(MARKDOWN, "guide.txt")
    assert {c.heading_path for c in plain} == {()}
    # The structure-aware strategies keep their own rule and version.
    assert get_chunker("markdown:128:16").version == "markdown:128:16@1"


def test_small_to_big_children_carry_the_outline_too():
    chunks = get_chunker("sentence:40:0:parent=recursive,160,0").chunk(MARKDOWN, "guide.md")
    children = [c for c in chunks if not c.is_parent]
    assert {c.heading_path for c in children} >= {("Guide", "Install", "Linux"), ("Guide", "Use")}
    parents = {c.chunk_id: c for c in chunks if c.is_parent}
    for child in children:  # a child is cut inside its parent and embeds the parent's path
        assert child.heading_path == _headings_at(MARKDOWN_HEADINGS, parents[child.parent_id].start)


@pytest.mark.parametrize("spec", ["recursive:128:64", "sentence:40:0:parent=recursive,160,0", "fixed:64:8:window=1"])
def test_a_version_built_before_the_outline_is_still_chunked_as_it_was_built(spec):
    # A version recorded at @1 (before every strategy read the outline) keeps receiving writes: ingest chunks it as
    # it was built (the same spans, no paths) instead of refusing, and the chunks say @1.
    from toolkit.chunking import chunker_for_version

    current = get_chunker(spec)
    recorded = current.version.rsplit("@", 1)[0] + "@1"
    before = chunker_for_version(spec, recorded)
    assert before.version == recorded and current.version.endswith("@2")
    old_chunks, plain = before.chunk(MARKDOWN, "guide.md"), current.chunk(MARKDOWN, "guide.txt")
    assert [(c.start, c.end, c.heading_path) for c in old_chunks] == [(c.start, c.end, ()) for c in plain]
    assert {c.chunker_version for c in old_chunks} == {recorded}
    # The version of this toolkit, and one no toolkit made, are returned as they are (the caller refuses a mix).
    assert chunker_for_version(spec, current.version).version == current.version
    assert chunker_for_version(spec, current.version.rsplit("@", 1)[0] + "@7").version == current.version


# --- a rolled-back version ---------------------------------------------------------------------------------------


def _record(conn, v: int, passed: bool = True) -> int:
    # The owner's private entry point, as tests/test_versions.py uses it (toolkit.evaluate_version computes real ones).
    return conn.execute(
        "SELECT toolkit._record_evaluation(%s, 'hash', 10, 5, %s, %s, NULL,"
        " jsonb_build_object('retrieval', toolkit.served_retrieval()))",
        (v, Jsonb({"recall": 0.9}), passed),
    ).fetchone()[0]


def _status_words(database_url) -> dict[int, tuple[str, str]]:
    result = CliRunner().invoke(main, ["--database-url", database_url, "status", "--format", "json"])
    assert result.exit_code == 0, result.output
    return {v["version"]: (v["state"], v["verification"]) for v in json.loads(result.stdout)["versions"]}


def test_a_rolled_back_version_is_called_rolled_back_and_needs_a_new_verification(conn, make_model, database_url):
    make_model("m1", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 20})
    v2 = ready_version(conn, "m1", 8, {"b": 20}, seed=1)
    _record(conn, v1)
    cutover.activate_version(conn, v1)
    _record(conn, v2)
    cutover.activate_version(conn, v2)
    assert _status_words(database_url)[v2] == ("active", "current")
    cutover.rollback_version(conn, reason="test")
    assert _status_words(database_url) == {v1: ("active", "current"), v2: ("ready", "rolled back")}
    text = CliRunner().invoke(main, ["--database-url", database_url, "status"]).output
    assert "rolled back" in text and "stale" not in text
    # Rolling forward needs a new verification (or --force), as documented.
    with pytest.raises(StateError, match="no passing verification"):
        cutover.activate_version(conn, v2)
    _record(conn, v2)
    assert _status_words(database_url)[v2] == ("verified", "current")
    cutover.activate_version(conn, v2)
    assert _status_words(database_url)[v2] == ("active", "current")


def test_contents_changed_after_a_rollback_is_stale(conn, make_model, database_url):
    make_model("m1", 8)
    v1 = ready_version(conn, "m1", 8, {"a": 20})
    v2 = ready_version(conn, "m1", 8, {"b": 20}, seed=1)
    _record(conn, v1)
    cutover.activate_version(conn, v1)
    _record(conn, v2)
    cutover.activate_version(conn, v2)
    cutover.rollback_version(conn)
    conn.execute("SELECT toolkit.touch_version(%s)", (v2,))
    assert _status_words(database_url)[v2] == ("ready", "stale")


# --- the frontier plot -------------------------------------------------------------------------------------------


def _config(name: str, retrieval: str, recall: float, tokens: float):
    from toolkit.evaluation.report import ConfigResult

    return ConfigResult(
        spec=name, chunker_version=f"{name}@2", chunks=100, parents=None, mean_chunk_tokens=100.0,
        mean_chunk_chars=400.0, answers=10, cut_answers=0, sentences=10, cut_sentences=0, recall=recall, mrr=0.5,
        ndcg=0.5, span_recall=0.5, span_precision=0.1, span_iou=0.05, precision_omega=None, retrieved_tokens=tokens,
        retrieved_chars=tokens * 4, input_cost_per_query=0.0, retrieval=retrieval,
    )  # fmt: skip


def test_the_frontier_plot_keeps_labels_apart_and_its_axes_around_the_data(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toolkit.evaluation.frontier import draw_frontier, mark_pareto, plot_frontier
    from toolkit.evaluation.report import EvalReport

    # Two retrievals of one chunker a few tokens and a point of recall apart: the picture drew their labels
    # over each other, in a corner of axes that started at 0.
    configs = [
        _config("recursive:128:64", "hybrid", 0.858, 612.0),
        _config("recursive:128:64", "vector", 0.851, 615.0),
        _config("markdown:400:40", "hybrid", 0.900, 1700.0),
        _config("markdown:400:40", "vector", 0.895, 1690.0),
        _config("sentence:200:1", "hybrid", 0.800, 900.0),
    ]
    mark_pareto(configs)
    report = EvalReport("sentence-transformers:all-MiniLM-L6-v2", "embedding", 5, 260, 7, 0.0, configs)
    figure = draw_frontier(report)
    try:
        axes = figure.axes[0]
        (x0, x1), (y0, y1) = axes.get_xlim(), axes.get_ylim()
        assert 300 < x0 < 612 and 1700 < x1 < 2100, (x0, x1)  # from around the cheapest to around the dearest
        assert 0.7 < y0 < 0.8 and 0.9 < y1 <= 1.0, (y0, y1)
        renderer = figure.canvas.get_renderer()
        frame = axes.get_window_extent(renderer)
        labels = {text.get_text(): text.get_window_extent(renderer) for text in axes.texts}
        assert set(labels) == {c.name for c in configs}
        names = sorted(labels)
        for i, a in enumerate(names):
            box = labels[a]
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, a
            for b in names[i + 1 :]:
                assert not box.overlaps(labels[b]), (a, b)
    finally:
        plt.close(figure)
    written = plot_frontier(report, tmp_path / "frontier.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- after make demo ---------------------------------------------------------------------------------------------


def test_the_demo_says_how_to_run_toolkit_when_it_is_not_on_path(monkeypatch, tmp_path):
    import sys
    from pathlib import Path

    from toolkit.demo import next_steps_hint, toolkit_command

    monkeypatch.setenv("PATH", str(tmp_path))  # a shell that never activated the virtualenv
    monkeypatch.chdir(Path(sys.executable).parent.parent.parent)
    command = toolkit_command()
    assert Path(command).name == "toolkit" and Path(command).resolve() == Path(sys.executable).parent / "toolkit"
    hint = next_steps_hint()
    assert f"Run it as {command}" in hint and f"source {Path(command).parent / 'activate'}" in hint
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert toolkit_command() == "toolkit"


def test_the_readme_says_how_to_run_toolkit_after_make_demo():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    assert ".venv/bin/toolkit" in readme and "source .venv/bin/activate" in readme
