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
# The search options record (issue 36): beside search, light enough for the CLI's --help.
VERBS |= {"search_options"}
BASE = {"errors", "validation", "progress", "private_files"}
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
            # from toolkit import cutover: the module toolkit.cutover;
            # from toolkit.embedding import PROVIDERS: the package
            found += [(node.lineno, submodule(node.module, alias.name)) for alias in node.names]
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


def module_graph() -> dict[str, set[str]]:
    """Module → the toolkit modules it imports (at the top or inside functions), a package counting as its
    ``__init__``."""
    modules = {module_name(path): path for path in ROOT.rglob("*.py")}
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for _, target in imports(path):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                graph[name].add(target)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


# Import circles not yet taken apart (docs/architecture.md, "Import rules"); the list may only shrink.
KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circles():
    assert import_circles(module_graph()) == KNOWN_CIRCLES


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    graph["c"] = set()
    assert import_circles(graph) == []
    # and it sees this tree's imports, function-level ones included
    assert "toolkit.store.versions" in module_graph()["toolkit.cutover"]


def test_every_strategy_in_the_table_loads_a_chunker_of_that_name():
    from toolkit.chunking import STRATEGY_TABLE, Chunker

    for name, strategy in STRATEGY_TABLE.items():
        cls = strategy.load()
        assert issubclass(cls, Chunker), name
        module = strategy.implementation.partition(":")[0]
        assert (ROOT.parent / (module.replace(".", "/") + ".py")).exists(), name


def test_every_provider_in_the_table_is_an_embedder_named_as_its_key():
    from toolkit.embedding import PROVIDERS, Embedder

    assert set(PROVIDERS) == {"openai", "sentence-transformers", "e5", "hashing"}
    for name, cls in PROVIDERS.items():
        assert issubclass(cls, Embedder) and cls.provider == name


def statement_calls(path: Path) -> int:
    """Calls of ``.execute``, ``.executemany`` and ``.copy`` (on a connection or a cursor) in one module."""
    return sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"execute", "executemany", "copy"}
        for node in ast.walk(ast.parse(path.read_text()))
    )


# Modules above store/ and db/ that still send their own statements (docs/architecture.md, "One door to SQL"):
# module → how many calls. The list may only shrink; a module not in it sends none.
KNOWN_STATEMENTS: dict[str, int] = {}

# The demo shows the application pattern in SQL as an application writes it (serving_model, then search_passages
# pinned, as the reader): its statements are the point, not a verb's door.
APPLICATION_SQL = {"toolkit.demo": 6}

# The evaluation's embedding cache is a local SQLite file, not the database: its statements are its own.
NOT_POSTGRES = {"toolkit.embedding.cache"}


def test_statements_go_through_the_store():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if layer(name) in {"store", "db"} or name in NOT_POSTGRES:
            continue
        if calls := statement_calls(path):
            found[name] = calls
    assert found == {**KNOWN_STATEMENTS, **APPLICATION_SQL}


def test_the_statement_counter_counts_calls():
    assert statement_calls(ROOT / "store" / "lifecycle.py") >= 5
    assert statement_calls(ROOT / "cutover.py") == 0 and statement_calls(ROOT / "serving.py") == 0


def test_one_tenant_rule():
    import pytest

    from toolkit import validation
    from toolkit.errors import InputError
    from toolkit.store import tenants

    # The callers that take a tenant from outside call the rule itself (no alias or copy of their own).
    for module in ("search.py", "ingest.py"):
        assert "validation.check_tenant(" in (ROOT / module).read_text(), module
    for bad in ("", "   ", "x" * 201, "a\x1bb", None, 7):
        with pytest.raises(InputError, match="tenant"):
            validation.check_tenant(bad)
        with pytest.raises(InputError, match="tenant"):
            tenants._tenants([bad])
    assert validation.check_tenant("acme") == "acme" and tenants._tenants([" acme ", "acme"]) == ["acme"]
