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
    figure = draw_frontier(report)
    try:
        figure.savefig(path, format="png")
    except OSError as error:
        raise InputError(f"Cannot write the plot to {str(path)!r} ({error.strerror}); check the folder.") from None
    finally:
        plt.close(figure)
    return path


# Where a label may go around its point, in points: right, left, above, below, then the diagonals further out.
_LABEL_OFFSETS = [(7, 5), (7, -12), (-7, 5), (-7, -12), (0, 12), (0, -18), (14, 18), (14, -26), (-14, 18),
                  (-14, -26), (7, 30), (7, -40), (-7, 30), (-7, -40)]  # fmt: skip


def draw_frontier(report: EvalReport):
    """The frontier figure (matplotlib, Agg): axes around the data (a margin on every side, not from 0), each label
    beside its point where it overlaps no other label and stays inside the axes."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=110)
    configs = sorted(report.configs, key=lambda r: (r.retrieved_tokens, -r.recall))
    for result in configs:
        axes.scatter(result.retrieved_tokens, result.recall, s=60, color="tab:blue" if result.pareto else "tab:gray",
                     zorder=3)  # fmt: skip
    frontier = sorted((r for r in configs if r.pareto), key=lambda r: r.retrieved_tokens)
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
    axes.set_xlim(*_around([r.retrieved_tokens for r in configs], 0.25, floor=0.0))
    axes.set_ylim(*_around([r.recall for r in configs], 0.2, floor=0.0, ceiling=1.0))
    figure.tight_layout()
    _place_labels(figure, axes, configs)
    return figure


def _around(values: list[float], margin: float, floor: float | None = None, ceiling: float | None = None):
    """Limits from the smallest to the largest value with ``margin`` of their spread on each side (labels need the
    room), at least 3 % of the largest value (two close points are not blown up into a difference that looks
    large); kept within ``floor`` and ``ceiling`` (recall is 0 to 1)."""
    if not values:
        return (0.0, 1.0)
    low, high = min(values), max(values)
    pad = max((high - low) * margin, abs(high) * 0.03) or 0.05
    low, high = low - pad, high + pad
    if floor is not None and low < floor <= min(values):
        low = floor
    if ceiling is not None and high > ceiling >= max(values):
        high = ceiling + pad * 0.25  # a point at recall 1 keeps a little room above it
    return low, high


def _place_labels(figure, axes, configs) -> list:
    """Annotate each point at the first offset whose label box overlaps no earlier label, no other point and stays
    inside the axes; when none does, the offset that overlaps least. Returns the annotations."""
    renderer = figure.canvas.get_renderer()
    frame = axes.get_window_extent(renderer)
    points = [axes.transData.transform((r.retrieved_tokens, r.recall)) for r in configs]
    boxes: list = []
    labels = []
    for index, result in enumerate(configs):
        # One annotation per point, moved from place to place (its box measured at each) and left at the best.
        label = axes.annotate(
            result.name, (result.retrieved_tokens, result.recall), textcoords="offset points", xytext=_LABEL_OFFSETS[0],
            fontsize=8, va="center",
        )  # fmt: skip
        best = None
        for dx, dy in _LABEL_OFFSETS:
            label.xyann = (dx, dy)
            label.set_horizontalalignment("left" if dx >= 0 else "right")
            box = label.get_window_extent(renderer)
            cost = sum(_overlap(box, other) for other in boxes)
            cost += sum(box.contains(px, py) * 100.0 for i, (px, py) in enumerate(points) if i != index)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            cost += 0 if inside else 1e6
            if best is None or cost < best[0]:
                best = (cost, (dx, dy), box)
            if cost == 0:
                break
        label.xyann = best[1]
        label.set_horizontalalignment("left" if best[1][0] >= 0 else "right")
        boxes.append(best[2])
        labels.append(label)
    return labels


def _overlap(a, b) -> float:
    """The area two display boxes share (0 when apart)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width * height if width > 0 and height > 0 else 0.0
