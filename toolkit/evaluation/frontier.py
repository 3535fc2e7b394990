"""The recall / retrieved-tokens frontier of evaluated configurations: which are Pareto-optimal, and its plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.errors import InputError

if TYPE_CHECKING:  # offline imports this module: only the types, not a cycle
    from toolkit.evaluation.report import ConfigResult, EvalReport


def mark_pareto(results: Sequence[ConfigResult]) -> None:
    """Mark the configurations no other one beats on both recall (higher) and retrieved tokens (fewer)."""
    for result in results:
        result.pareto = not any(
            other is not result
            and other.recall >= result.recall
            and other.retrieved_tokens <= result.retrieved_tokens
            and (other.recall > result.recall or other.retrieved_tokens < result.retrieved_tokens)
            for other in results
        )


def plot_path(path: str | Path) -> Path:
    """Where a plot may be written: a name ending in .png, not a folder, in a folder that exists (a typo in the folder
    is refused, not created: a tree of folders made from a mistyped path is a plot nobody finds). Checked before the
    evaluation runs, and again when writing."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InputError(f"The plot file {str(path)!r} must end in .png (the plot is written as a PNG).")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(
            f"The plot's folder {str(folder)!r} {what}; nothing was created. Create it first, or name a file in an "
            "existing folder."
        )
    if path.is_dir():
        raise InputError(f"The plot file {str(path)!r} is a folder; name a file in it, e.g. {str(path / 'f.png')!r}.")
    return path


def plot_frontier(report: EvalReport, path: str | Path) -> Path:
    """Draw recall@k against retrieved tokens per query, one labelled point per configuration, the Pareto
    frontier joined by a line; write a PNG to ``path`` (``plot_path``: its folder must exist)."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot needs matplotlib, which is not installed; pip install matplotlib.") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = plot_path(path)
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=110)
    width = max((r.retrieved_tokens for r in report.configs), default=1.0) or 1.0
    placed: list[tuple[float, float]] = []
    for result in sorted(report.configs, key=lambda r: (r.retrieved_tokens, -r.recall)):
        x, y = result.retrieved_tokens, result.recall
        axes.scatter(x, y, s=60, color="tab:blue" if result.pareto else "tab:gray", zorder=3)
        # Labels of points close together are stacked downwards instead of printed over each other.
        near = sum(1 for px, py in placed if abs(px - x) < 0.15 * width and abs(py - y) < 0.03)
        placed.append((x, y))
        # By chunker and retrieval: two retrievals of one chunker are two points that must be told apart.
        axes.annotate(result.name, (x, y), textcoords="offset points", xytext=(6, 4 - 11 * near), fontsize=8)
    frontier = sorted((r for r in report.configs if r.pareto), key=lambda r: r.retrieved_tokens)
    if frontier:
        axes.step(
            [r.retrieved_tokens for r in frontier],
            [r.recall for r in frontier],
            where="post",
            color="tab:blue",
            linewidth=1.2,
            label="Pareto frontier (no configuration has more recall for fewer tokens)",
            zorder=2,
        )
        axes.legend(loc="lower right", fontsize=8)
    axes.set_xlabel(f"retrieved tokens per query (k = {report.k})")
    axes.set_ylabel(f"recall@{report.k} (whole answer inside one retrieved chunk)")
    what = report.model if report.scorer == "embedding" else "bag-of-words scorer"
    axes.set_title(f"{report.queries} queries, {report.documents} documents, {what}: a frontier, not a winner",
                   fontsize=9)  # fmt: skip
    axes.grid(True, alpha=0.3)
    top = max((r.recall for r in report.configs), default=1.0)
    axes.set_ylim(0, min(1.05, top + 0.1) if top > 0 else 1.0)
    axes.set_xlim(left=0, right=width * 1.6)
    figure.tight_layout()
    try:
        figure.savefig(path, format="png")
    except OSError as error:
        raise InputError(f"Cannot write the plot to {str(path)!r} ({error.strerror}); check the folder.") from None
    finally:
        plt.close(figure)
    return path
