"""Checks on the SQL source tree that need no database: names, numbering, frozen files, routine anatomy."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from toolkit.db import sql_files

NAME = re.compile(r"^(\d{3})-[a-z0-9]+(-[a-z0-9]+)*\.sql$")


def test_file_names_are_numbered_lower_case():
    for path in sql_files.incremental_files() + sql_files.idempotent_files():
        assert NAME.match(path.name), f"{path} is not named NNN-lower-case-name.sql"


def test_incremental_files_are_numbered_consecutively():
    numbers = [int(p.name[:3]) for p in sql_files.incremental_files()]
    assert numbers == list(range(1, len(numbers) + 1))


def test_grants_are_the_last_idempotent_file():
    assert sql_files.idempotent_files()[-1].name.endswith("-grants.sql")


def test_released_snapshots_of_earlier_releases_are_frozen():
    """What a downgrade re-applies (sql/releases/REVISION/) is the SQL those releases shipped: never edited."""
    frozen_file = sql_files.sql_dir() / "incremental" / "frozen.txt"
    frozen = dict(reversed(line.split()) for line in frozen_file.read_text().splitlines() if line.strip())
    releases = sorted((sql_files.sql_dir() / "releases").glob("*/*.sql"))
    assert releases
    for path in releases:
        name = f"releases/{path.parent.name}/{path.name}"
        assert name in frozen, f"{name} is not in frozen.txt"
        assert sql_files.file_hash(path) == frozen[name], f"{name} was edited after release"


def test_released_incremental_files_are_frozen():
    """An incremental file is never edited once released: frozen.txt pins every one by hash."""
    frozen_file = sql_files.sql_dir() / "incremental" / "frozen.txt"
    frozen = dict(reversed(line.split()) for line in frozen_file.read_text().splitlines() if line.strip())
    for path in sql_files.incremental_files():
        assert path.name in frozen, f"{path.name} is not in frozen.txt: add its sha256 when it is released"
        assert sql_files.file_hash(path) == frozen[path.name], f"{path.name} was edited after release"
    assert all(name.startswith("releases/") or (sql_files.sql_dir() / "incremental" / name).exists() for name in frozen)


def _revision_incrementals() -> list[str]:
    names = []
    for path in sorted((sql_files.migrations_dir() / "versions").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INCREMENTAL" for t in node.targets):
                names.extend(ast.literal_eval(node.value))
    return names


def test_revisions_apply_every_incremental_file_once_in_order():
    assert _revision_incrementals() == [p.name for p in sql_files.incremental_files()]


def test_incremental_files_never_call_idempotent_functions():
    defined = set()
    for path in sql_files.idempotent_files():
        defined.update(re.findall(r"CREATE OR REPLACE FUNCTION (toolkit\.\w+)\(", path.read_text()))
    assert defined
    for path in sql_files.incremental_files():
        # dropping an old signature (run-once, before the idempotent files create the current one) is not a call
        text = re.sub(r"DROP FUNCTION IF EXISTS toolkit\.\w+\([^)]*\);", "", path.read_text())
        used = sorted(name for name in defined if re.search(re.escape(name) + r"\s*\(", text))
        assert not used, f"{path.name} calls {used}: incremental files must not depend on idempotent ones"


def _routines(text: str) -> list[tuple[list[str], str]]:
    """(header comment lines, routine text) for each CREATE FUNCTION/PROCEDURE."""
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"CREATE (OR REPLACE )?(FUNCTION|PROCEDURE)", line):
            end = next(j for j in range(i, len(lines)) if lines[j].startswith("AS $$"))
            body = "\n".join(lines[i : end + 1])
            start = i
            while start > 0 and lines[start - 1].startswith("--"):
                start -= 1
            found.append((lines[start:i], body))
    return found


def test_every_routine_has_header_volatility_security_and_search_path():
    for path in sql_files.idempotent_files():
        for header, body in _routines(path.read_text()):
            name = body.split("(")[0]
            assert header, f"{path.name}: {name} has no one-line header comment"
            if "SECURITY DEFINER" in body:
                reasons = [line for line in header if line.startswith("-- Definer: ")]
                assert len(reasons) == 1 and len(reasons[0]) > len("-- Definer: ") + 10, (
                    f"{path.name}: {name} runs as the owner; say why in one '-- Definer: ...' header line"
                )
            assert re.search(r"\bLANGUAGE (sql|plpgsql)\b", body), f"{name}: no explicit language"
            assert re.search(r"\b(IMMUTABLE|STABLE|VOLATILE)\b", body), f"{name}: no explicit volatility"
            assert re.search(r"SECURITY (INVOKER|DEFINER)", body), f"{name}: no explicit security"
            assert "SET search_path = pg_catalog, pg_temp" in body, f"{name}: search_path not pinned"


def test_sqlfluff_config_targets_postgres():
    config = Path(sql_files.sql_dir().parent / ".sqlfluff").read_text()
    assert "dialect = postgres" in config
