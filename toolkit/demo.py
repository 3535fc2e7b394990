"""The demo: the whole model-migration lifecycle on the embedded database and the bundled sample corpus.

Chapters of the PostgreSQL manual are ingested, embedded with all-MiniLM-L6-v2 (v1) and cut over; then
multilingual-e5-small (v2) is backfilled beside it, verified against the labelled queries, cut over, searched
and rolled back. Both models give 384 dimensions; the demo shows that their vectors still cannot be mixed.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolkit import backfill, cutover
from toolkit.db import migrate
from toolkit.db.connection import DATABASE_NAME, connect, start_embedded
from toolkit.db.server import recreate_database
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES, load_queries
from toolkit.ingest import ingest
from toolkit.store import versions
from toolkit.store.models import embedder_for_model, get_model, register_model
from toolkit.verify import MIN_QUERIES, tenant_documents, verify

DEMO_DATABASE = "toolkit_demo"
CHUNKER = "markdown:200:20"
TENANT = "demo"
QUESTION = "Which index type can speed up a query on an expression like lower(col1)?"
# The first version's gate: there is no live version to compare with, so it must reach this recall@5 on its own.
DEMO_MIN_RECALL = 0.5
# Five of the seven bundled chapters (261 KB, 123 labelled queries): the demo stays under five minutes on
# two cores with two real models. The full sample is used by the evaluation sweep (docs/evaluation.md).
DEMO_CHAPTERS = ("concurrency-control.md", "indexes.md", "performance-tips.md", "row-security.md", "sql-syntax.md")


def _demo_sample(directory: Path, chapters: tuple[str, ...]) -> tuple[Path, Path]:
    """Copies the demo chapters and their labelled queries into ``directory``."""
    docs = directory / "docs"
    docs.mkdir()
    for name in chapters:
        shutil.copyfile(SAMPLE_DOCS / name, docs / name)
    queries = directory / "queries.jsonl"
    lines = [
        line
        for line in SAMPLE_QUERIES.read_text(encoding="utf-8").splitlines()
        if line.strip() and all(a["doc_id"] in chapters for a in json.loads(line)["answers"])
    ]
    queries.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return docs, queries


def run_demo(
    data_dir: str | None = None,
    say: Callable[[str], None] = print,
    chapters: tuple[str, ...] = DEMO_CHAPTERS,
    min_queries: int = MIN_QUERIES,
) -> dict:
    """Runs every step and returns the figures it printed (for tests, which run it on fewer chapters and so fewer
    labelled questions than the gate's default minimum)."""
    started = time.perf_counter()
    figures: dict = {}

    def step(title: str) -> None:
        say(f"\n== {title}  [{time.perf_counter() - started:5.1f} s]")

    step("1. Start the embedded PostgreSQL 18 + pgvector and migrate a fresh demo database")
    db = start_embedded(data_dir)
    url = db.url.replace(f"/{DATABASE_NAME}?", f"/{DEMO_DATABASE}?")
    recreate_database(db.url, DEMO_DATABASE)
    migrate.upgrade(url)
    say(f"data directory {db.data_dir}; database {DEMO_DATABASE} at schema revision {migrate.head_revision()}")

    conn = connect(url)
    workdir = tempfile.TemporaryDirectory(prefix="toolkit-demo-")
    docs, queries_path = _demo_sample(Path(workdir.name), chapters)
    try:
        step("2. Register two real embedding models (both 384 dimensions, different vector spaces)")
        for alias, provider, name in (
            ("v1", "sentence-transformers", "all-MiniLM-L6-v2"),
            ("v2", "e5", "multilingual-e5-small"),
        ):
            model = register_model(conn, alias, provider, name)
            say(f"{alias}: {provider}:{name}, {model.dimensions} dims, input limit {model.max_input_tokens} tokens")

        step("3. Ingest the sample corpus (chapters of the PostgreSQL manual) for tenant 'demo'")
        report = ingest(conn, [docs], TENANT)
        say(f"{report.documents} documents stored with their raw text; no version exists yet, so no chunks")

        step(f"4. Backfill v1 with chunker {CHUNKER}, verify it, and make it live")
        v1 = _backfill(url, "v1", say)
        # No version is live yet, so there is nothing to compare with: the gate needs an absolute floor.
        result = verify(conn, v1, queries_path, k=5, tenant=TENANT, min_recall=DEMO_MIN_RECALL, min_queries=min_queries)
        say(
            f"v1 recall@5 {result.candidate.metrics.recall:.3f}, MRR {result.candidate.metrics.mrr:.3f} "
            f"on {result.candidate.metrics.queries} labelled queries: gate {'passed' if result.passed else 'FAILED'}"
        )
        cutover.activate_version(conn, v1, reason="demo: first version")
        figures["v1_recall"] = result.candidate.metrics.recall
        say(f"toolkit.active_chunks now reads version {v1}'s table")

        step("5. Backfill v2 (e5) beside it; the application keeps reading v1")
        v2 = _backfill(url, "v2", say)

        step("6. Ingest a new document during the migration: it lands in both versions (dual-write)")
        extra = _extra_document(conn)
        say(f"new document written to versions {extra}")

        step("7. Verify v2 against the live v1 through the SQL applications use (the recall gate)")
        result = verify(conn, v2, queries_path, k=5, tenant=TENANT, min_queries=min_queries)
        base = result.baseline.metrics
        cand = result.candidate.metrics
        say(f"{'':10}{'recall@5':>10}{'MRR':>8}{'nDCG@5':>8}{'span IoU':>10}")
        say(f"{'v1 live':10}{base.recall:>10.3f}{base.mrr:>8.3f}{base.ndcg:>8.3f}{base.span_iou:>10.3f}")
        say(f"{'v2':10}{cand.recall:>10.3f}{cand.mrr:>8.3f}{cand.ndcg:>8.3f}{cand.span_iou:>10.3f}")
        say(
            f"v2 wins {len(result.wins)} queries and loses {len(result.losses)}; gate "
            + ("PASSED" if result.passed else "FAILED: " + "; ".join(result.reasons))
        )
        figures.update(v2_recall=cand.recall, gate_passed=result.passed)

        step("8. Why the model is part of the version: query v2's index with a v1 (MiniLM) query vector")
        # By vector alone (retrieval="vector"): full text would rescue part of the ranking and hide the point.
        # The questions' vectors are the ones verify just embedded with each model (once per model).
        mixed = _vector_recall(conn, v2, result.question_vectors["v1"], queries_path=queries_path)
        right = _vector_recall(conn, v2, result.question_vectors["v2"], queries_path=queries_path)
        say(
            f"e5 chunks searched by vector with MiniLM query vectors: recall@5 {mixed:.3f} (same 384 dimensions, no "
            f"error, nonsense ranking) vs {right:.3f} with e5 query vectors"
        )
        figures.update(mixed_recall=mixed, v2_vector_recall=right)

        step("9. Cut over to v2 (one transaction; readers never see an error or a mix)")
        if result.passed:
            cutover.activate_version(conn, v2, reason="demo: gate passed")
        else:
            say("the gate failed, so the demo forces the cutover to show it (recorded as forced)")
            cutover.activate_version(conn, v2, force=True, reason="demo: forced")
        say(f"active version {versions.active_version(conn)}; v1 is on standby for rollback")

        step("10. Search as an application would: serving_model() -> embed with that model -> pinned passages")
        served, rows = _app_search(conn, QUESTION)
        say(f"  serving_model() says version {served}; the search is pinned to it (a cutover cannot change that)")
        for rank, (heading, doc_id, start, end, text) in enumerate(rows, 1):
            say(f"  {rank}. {doc_id} [{start}:{end}] {heading}")
            say(f"     {' '.join(text.split())[:150]}…")

        step("11. Roll back to v1 in one transaction")
        cutover.rollback_version(conn, reason="demo: rollback")
        say(f"active version {versions.active_version(conn)}; v2 is ready and needs a new verification to go live")
        for s in versions.version_status(conn):
            say(f"  version {s.version}: {s.model_alias:3} {s.chunker_version:22} {s.state:9} rows {s.total_rows}")
    finally:
        conn.close()
        workdir.cleanup()
    figures["seconds"] = time.perf_counter() - started
    say(
        f"\nDone in {figures['seconds']:.0f} s. The demo wrote to a database of its own, {DEMO_DATABASE}, not to "
        f"the {DATABASE_NAME} database the other commands use, so a plain `toolkit status` shows none of it. "
        "Look at it with:"
    )
    say(f'  toolkit --database-url "{url}" status')
    say(f'  psql "{url}"')
    if shutil.which("toolkit") is None:
        say(next_steps_hint())
    return figures


def toolkit_command() -> str:
    """How to run ``toolkit`` from here: the bare name when it is on PATH, else the script beside this Python
    (``.venv/bin/toolkit`` after ``make demo``, which installs into .venv and activates nothing)."""
    if shutil.which("toolkit") is not None:
        return "toolkit"
    script = Path(sys.executable).parent / "toolkit"
    return str(script.relative_to(Path.cwd())) if script.is_relative_to(Path.cwd()) else str(script)


def next_steps_hint() -> str:
    """The sentence a newcomer needs after ``make demo``: the command is installed in the virtualenv, not on PATH."""
    command = toolkit_command()
    activate = Path(command).parent / "activate"
    return (
        f"\n`toolkit` is not on your PATH: it is installed in the virtualenv. Run it as {command} (e.g. "
        f"`{command} --help`), or `source {activate}` once per shell and then type `toolkit`."
    )


def _backfill(url: str, alias: str, say) -> int:
    from toolkit.progress import Progress

    report = backfill.backfill(url, alias, CHUNKER, progress=Progress(f"backfill {alias}", unit="chunks"))
    say(
        f"version {report.version}: {report.rows_embedded} chunks embedded in {report.seconds:.1f} s "
        f"({report.rows_embedded / max(report.seconds, 1e-9):.1f} chunks/s), HNSW index built after the load "
        f"in {report.index_seconds:.2f} s; state {report.state}"
    )
    return report.version


def _extra_document(conn) -> list[int]:
    import tempfile
    from pathlib import Path

    text = (
        "# Demo note\n\nThe toolkit keeps every live version complete: a document ingested while a new "
        "version is being built is chunked and embedded into both, so the cutover loses nothing.\n"
    )
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / "demo-note.md").write_text(text)
        report = ingest(conn, [directory], TENANT)
    return sorted(report.chunks_written)


def _vector_recall(conn, version: int, vectors: dict, queries_path: Path) -> float:
    """recall@5 of a version searched by vector with a model's question vectors (``vectors``: question -> vector;
    pinned to the version: with another model's vectors SQL cannot tell two 384-dimension models apart, which is
    why the application must embed with serving_model())."""
    from toolkit.evaluation.metrics import aggregate, score_query
    from toolkit.search import search

    documents = tenant_documents(conn, TENANT)
    queries = load_queries(queries_path, documents)
    scores = []
    for q in queries:
        hits = search(conn, vectors[q.query], TENANT, 5, version=version, log=False, retrieval="vector")
        scores.append(score_query([(h.doc_id, h.start, h.end) for h in hits], q.answers, 5))
    return aggregate(scores, 5).recall


def _app_search(conn, question: str):
    """The documented application pattern, in SQL: which version serves this request, embed the question with its
    model, search that version (pinned) as the reader with the tenant set."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        version, alias = conn.execute(
            "SELECT version, model_alias FROM toolkit.serving_model(%s)", ("demo-user-1",)
        ).fetchone()
    vector = embedder_for_model(get_model(conn, alias)).embed_query(question)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL ROLE toolkit_reader")
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        rows = conn.execute(
            "SELECT array_to_string(heading_path, ' > '), doc_id, start_offset, end_offset, text"
            " FROM toolkit.search_passages(%s, %s, 3, query_version => %s)",
            (question, vector, version),
        ).fetchall()
    return version, rows
