"""The package layout's import rules (docs/architecture.md): every import between toolkit's layers points down —
CLI → verbs (and the evaluation package) → store → chunking / embedding → db / text → base — and nothing but
``toolkit/__main__.py`` imports the CLI. Imports inside functions count as much as those at the top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "toolkit"
VERBS = {"ingest", "backfill", "verify", "cutover", "search", "serving", "shadow", "status", "estimate", "demo"}
# For applications (issue 26): verbs too, over the ones above.
VERBS |= {"api", "deletion", "question", "contents", "serve", "integrations"}
BASE = {"errors", "validation", "progress"}
# layer → the layers it may import (itself included)
ALLOWED = {
    "main": {"cli"},
    "cli": {"cli", "verbs", "store", "chunking", "embedding", "db", "text", "base", "root"},
    "verbs": {"verbs", "store", "chunking", "embedding", "db", "text", "base", "root"},
    "store": {"store", "chunking", "embedding", "db", "text", "base", "root"},
    "chunking": {"chunking", "text", "base", "root"},
    "embedding": {"embedding", "text", "base", "root"},
    "db": {"db", "base", "root"},
    "text": {"text", "base", "root"},
    "base": {"base", "root"},
    "data": {"data", "chunking", "text", "base", "root"},
    "root": {"root"},
}


def layer(module: str) -> str:
    parts = module.split(".")
    if parts == ["toolkit"]:
        return "root"
    head = parts[1]
    if head == "__main__":
        return "main"
    if head in VERBS or head == "evaluation":
        return "verbs"
    if head in BASE:
        return "base"
    if head not in ALLOWED:
        raise AssertionError(f"{module}: no layer; add it to docs/architecture.md and to this test")
    return head


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def submodule(package: str, name: str) -> str:
    """package.name if that is a module, else package (from toolkit import __version__)."""
    folder = ROOT.parent.joinpath(*package.split("."))
    is_module = (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()
    return f"{package}.{name}" if is_module else package


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "toolkit":  # from toolkit import cutover: the module toolkit.cutover
                found += [(node.lineno, submodule("toolkit", alias.name)) for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; write the absolute module")
    return [(line, name) for line, name in found if name == "toolkit" or name.startswith("toolkit.")]


def test_every_import_points_down_the_layers():
    modules = sorted(ROOT.rglob("*.py"))
    assert len(modules) > 60
    wrong = []
    seen = set()
    for path in modules:
        source = layer(module_name(path))
        for line, target in imports(path):
            seen.add((source, layer(target)))
            if layer(target) not in ALLOWED[source]:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {source} imports {target} ({layer(target)})")
    assert wrong == []
    # the scan saw the layers talk to each other (a walk that found no imports would pass the check above)
    assert {("cli", "verbs"), ("verbs", "store"), ("store", "db"), ("chunking", "text")} <= seen


def test_nothing_imports_the_cli():
    for path in ROOT.rglob("*.py"):
        if path.is_relative_to(ROOT / "cli") or path.name == "__main__.py":
            continue
        assert not [n for _, n in imports(path) if n == "toolkit.cli" or n.startswith("toolkit.cli.")], path


def test_the_rules_reject_an_upward_import():
    assert layer("toolkit.store.versions") == "store"
    assert "cli" not in ALLOWED["verbs"] and "verbs" not in ALLOWED["store"] and "store" not in ALLOWED["db"]
    assert layer("toolkit.evaluation.metrics") == "verbs" and layer("toolkit.errors") == "base"
