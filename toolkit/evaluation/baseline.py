"""The eval baseline check: `make test` evaluates the bundled sample set with the recommended chunker and the default
local model, and fails when recall@k or span IoU falls more than a stated tolerance below the baseline committed in
``toolkit/data/sample/eval_baseline.json``. (Not `toolkit verify`'s gate, which keeps a candidate version that scores
worse than the live one from going live: this check is about the toolkit's own chunking and retrieval code.)

The baseline file holds the configuration too (``config``: one line to change, then a new baseline), so the check
always measures what the baseline was recorded with. Updating it (``python -m toolkit.evaluation.baseline --update``)
is a reviewed change with its figures in CHANGELOG.md. Everything is embedded once per run, in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from toolkit.errors import InputError, ToolkitError
from toolkit.evaluation.queries import SAMPLE_DOCS, SAMPLE_QUERIES

BASELINE_PATH = Path(__file__).resolve().parents[1] / "data" / "sample" / "eval_baseline.json"
METRICS = ("recall", "span_iou")  # as named in toolkit.evaluation.offline.ConfigResult
LABELS = {"recall": "recall@k", "span_iou": "span IoU"}


@dataclass(frozen=True)
class Baseline:
    """What the check measures and the figures it must keep (within ``tolerance``, absolute, per metric)."""

    config: str
    model: str
    k: int
    metrics: dict[str, float]
    tolerance: dict[str, float]
    sample: str  # sha256 of the sample documents and queries the figures were measured on
    recorded_with: dict = field(default_factory=dict)  # chunker version, queries, seconds: for the reviewer
    retrieval: str = "vector"  # toolkit eval --retrieval: how the chunks are ranked and handed over


@dataclass
class CheckResult:
    passed: bool
    measured: dict[str, float]
    lines: list[str]
    seconds: float = 0.0


def sample_fingerprint(docs: Path = SAMPLE_DOCS, queries: Path = SAMPLE_QUERIES) -> str:
    """A hash of the sample documents and the query file: a baseline holds only for the set it was measured on."""
    digest = hashlib.sha256()
    for path in [*sorted(docs.rglob("*.md")), queries]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_baseline(path: Path = BASELINE_PATH) -> Baseline:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Baseline(**data)
    except (OSError, ValueError, TypeError) as error:
        raise InputError(
            f"The eval baseline {path} cannot be read ({error}); restore it from git, or record one with "
            "python -m toolkit.evaluation.baseline --update."
        ) from None


def check(measured: dict[str, float], baseline: Baseline) -> CheckResult:
    """Compares measured figures with the baseline: fails when one is lower by more than its tolerance."""
    lines, passed = [], True
    for metric in METRICS:
        value, base, allowed = measured[metric], baseline.metrics[metric], baseline.tolerance[metric]
        drop = base - value
        verdict = "ok"
        if drop > allowed + 1e-12:
            passed = False
            verdict = f"FAIL: {drop:.4f} below the baseline, more than the tolerance of {allowed:.4f}"
        elif -drop > allowed:
            verdict = "ok, above the baseline by more than the tolerance: record a new baseline (--update)"
        lines.append(f"{LABELS[metric]:<9} {value:.4f}  baseline {base:.4f} ± {allowed:.4f}  {verdict}")
    return CheckResult(passed, dict(measured), lines)


@contextlib.contextmanager
def _lexical_database() -> Iterator:
    """A throwaway embedded PostgreSQL with the toolkit schema, for full-text ranking and passages (its to_tsvector
    and retrieval settings make them the ones SQL serves); stopped and removed afterwards."""
    from toolkit.db import connection, migrate, server

    directory = Path(tempfile.mkdtemp(prefix="toolkit-eval-baseline-"))
    directory.chmod(0o755)  # as root, the server runs as another user that must reach it
    try:
        db = server.start_embedded(directory / "pg")
        migrate.upgrade(db.url)
        with connection.connect(db.url) as conn:
            yield conn
    finally:
        server.stop_embedded(directory / "pg")
        shutil.rmtree(directory, ignore_errors=True)


def measure(config: str, model: str, k: int, retrieval: str = "vector") -> tuple[dict[str, float], dict]:
    """Evaluates ``config`` on the sample set with ``model`` and ``retrieval``; returns the checked figures and what the
    reviewer of a new baseline wants to see beside them."""
    from toolkit.embedding import get_embedder
    from toolkit.evaluation.offline import evaluate
    from toolkit.evaluation.retrieval import split_retrievals

    needs_database = any(r.needs_settings for r in split_retrievals(retrieval))
    with _lexical_database() if needs_database else contextlib.nullcontext() as conn:
        report = evaluate(
            SAMPLE_DOCS, SAMPLE_QUERIES, [config], embedder=get_embedder(model), k=k, retrieval=retrieval, conn=conn
        )
    (result,) = report.configs
    measured = {metric: round(getattr(result, metric), 4) for metric in METRICS}
    details = {
        "chunker_version": result.chunker_version,
        "queries": report.queries,
        "chunks": result.chunks,
        "mrr": round(result.mrr, 4),
        "ndcg": round(result.ndcg, 4),
    }
    return measured, details


def run_check(baseline: Baseline, *, config: str | None = None) -> CheckResult:
    """Measures the baseline's configuration (or ``config``, to see what another would do) and checks it."""
    if baseline.sample != sample_fingerprint():
        return CheckResult(
            False,
            {},
            [
                "The sample documents or queries changed since the baseline was recorded, so its figures no longer "
                "apply; record a new one with python -m toolkit.evaluation.baseline --update and review the figures."
            ],
        )
    started = time.perf_counter()
    measured, _ = measure(config or baseline.config, baseline.model, baseline.k, baseline.retrieval)
    result = check(measured, baseline)
    result.seconds = time.perf_counter() - started
    return result


def update_baseline(path: Path = BASELINE_PATH, *, config: str | None = None, retrieval: str | None = None) -> Baseline:
    """Measures and writes a new baseline (keeping the tolerance and, unless given, the configuration and the
    retrieval)."""
    old = load_baseline(path)
    config = config or old.config
    retrieval = retrieval or old.retrieval
    started = time.perf_counter()
    measured, details = measure(config, old.model, old.k, retrieval)
    details["seconds"] = round(time.perf_counter() - started, 1)
    new = Baseline(config, old.model, old.k, measured, old.tolerance, sample_fingerprint(), details, retrieval)
    path.write_text(json.dumps(asdict(new), indent=2) + "\n", encoding="utf-8")
    return new


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.evaluation.baseline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="Evaluate this chunker spec instead of the baseline's (it must still pass).")
    parser.add_argument("--baseline", type=Path, default=BASELINE_PATH, help="The baseline file.")
    parser.add_argument("--update", action="store_true", help="Measure and write a new baseline (a reviewed change).")
    parser.add_argument("--retrieval", help="With --update: the retrieval mode to record (toolkit eval --retrieval).")
    args = parser.parse_args(argv)
    try:
        if args.update:
            new = update_baseline(args.baseline, config=args.config, retrieval=args.retrieval)
            print(f"eval baseline: new baseline for {new.config} with {new.model}: {new.metrics} -> {args.baseline}")
            return 0
        baseline = load_baseline(args.baseline)
        config = args.config or baseline.config
        result = run_check(baseline, config=args.config)
    except ToolkitError as error:
        print(f"eval baseline: {error}", file=sys.stderr)
        return 1
    print(
        f"eval baseline: {config} with {baseline.model}, {baseline.retrieval} retrieval, k = {baseline.k}, on the"
        " bundled sample set"
    )
    for line in result.lines:
        print(f"  {line}")
    outcome = "passed" if result.passed else "FAILED (see docs/evaluation.md, The eval baseline check)"
    print(f"eval baseline: {outcome} in {result.seconds:.0f} s")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
