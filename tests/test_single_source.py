"""One source of truth: the rules SQL owns (version table names and those of their postings and statistics, lock
keys, which states an action accepts, the chunk tables' columns) are asked of SQL, never re-typed in Python or in a
second SQL routine. The scans fail on a hand-built name or list; the catalog checks fail when Python's copy of the
column list drifts from SQL's table."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support import ready_version

from toolkit.errors import InputError
from toolkit.store.chunk_table import _COPY_TYPES, CHUNK_COLUMNS, chunk_table_name
from toolkit.store.versions import create_version, resolve_version

ROOT = Path(__file__).resolve().parents[1]
STATES = r"(?:building|ready|verified|active|standby|retired)"
# Two or more state names in one literal list (a tuple, list, set or SQL IN / ARRAY list).
STATE_LIST = re.compile(rf"""['"]{STATES}['"]\s*,\s*['"]{STATES}['"]""")
# A version's chunk, postings or statistics table named by hand (chunks_vN, terms_vN, term_stats_vN).
HAND_BUILT_TABLE = re.compile(
    r"""\b(?:chunks|terms|term_stats)_v(?:\{|['"]\s*(?:\+|\|\|)|\d)|['"](?:chunks|terms|term_stats)_v%"""
)
LOCK_KEY = re.compile(r"toolkit\.version-(?:set|rows)|pg_advisory")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in listed.stdout.splitlines() if line]


def offenders(files: list[Path], pattern: re.Pattern, owner: str | None = None) -> list[str]:
    """Lines matching the pattern, except in ``owner``, the one file allowed to hold it."""
    found = []
    for path in files:
        relative = str(path.relative_to(ROOT))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and relative != owner:
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_the_scans_find_what_they_look_for():
    # Each pattern matches what it is meant to catch, so an empty result below means the code has none.
    assert STATE_LIST.search("""states=("ready", "verified")""")
    assert STATE_LIST.search("WHERE x.state IN ('standby', 'building')")
    assert HAND_BUILT_TABLE.search('f"toolkit.chunks_v{version}"')
    assert HAND_BUILT_TABLE.search("SELECT count(*) FROM toolkit.chunks_v1")
    assert HAND_BUILT_TABLE.search("'chunks_v' || version::text")
    assert HAND_BUILT_TABLE.search("'terms_v' || version::text")
    assert HAND_BUILT_TABLE.search('f"toolkit.term_stats_v{v}"')
    assert HAND_BUILT_TABLE.search("DELETE FROM toolkit.terms_v3 AS t")
    assert HAND_BUILT_TABLE.search("name = 'term_stats_v%s' % v")
    assert not HAND_BUILT_TABLE.search("the postings (terms_vN) and statistics (term_stats_vN)")
    assert LOCK_KEY.search("hashtext('toolkit.version-set')")
    assert not HAND_BUILT_TABLE.search("one ``chunks_vN`` per version")
    assert len(tracked("toolkit/*.py", "bench/*.py")) > 40
    assert len(tracked("sql/idempotent/*.sql")) > 10


def test_python_builds_no_table_name_lock_key_or_state_list():
    python = tracked("toolkit/*.py", "bench/*.py")
    assert offenders(python, HAND_BUILT_TABLE) == []
    # The one lock Python takes itself: the migration bootstrap, before the schema (and its lock tables) exist.
    assert offenders(python, LOCK_KEY, "toolkit/db/migration_locks.py") == []
    assert offenders(python, STATE_LIST) == []


def test_sql_routines_ask_the_one_state_list_and_table_name():
    files = tracked("sql/idempotent/*.sql")
    versions_sql = ROOT / "sql/idempotent/003-versions.sql"
    owner = versions_sql.read_text()
    # version_states owns the lists and _version_table the name: cut both out of their file, then scan everything;
    # likewise the postings' and statistics' bare names out of 011.
    for name in ("version_states", "_version_table"):
        owner = without_function(owner, name)
    lexical_sql = ROOT / "sql/idempotent/011-lexical.sql"
    lexical = without_function(without_function(lexical_sql.read_text(), "_terms_table"), "_term_stats_table")
    found = []
    for path in files:
        text = {versions_sql: owner, lexical_sql: lexical}.get(path) or path.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if STATE_LIST.search(line) or HAND_BUILT_TABLE.search(line):
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []


# A version's table in a statement is toolkit._chunk_table(v) (qualified and quoted); toolkit._version_table(v), the
# bare name, only starts a name derived from it (an index's: ``toolkit._version_table(v) || '_doc_idx'``) or is the
# bare relation a deletion reports (next to 'documents'). The same for its full-text postings and statistics:
# toolkit._postings_table(v) and toolkit._statistics_table(v) in a statement, the bare toolkit._terms_table(v) and
# toolkit._term_stats_table(v) only before ``||`` (the statistics' index name).
VERSION_TABLE_CALL = re.compile(r"toolkit\._version_table\(")
POSTINGS_NAME_CALL = re.compile(r"toolkit\._(?:terms|term_stats)_table\(")
BARE_NAME_CALL = re.compile(r"toolkit\._(?:version|terms|term_stats)_table\(")
BARE_NAME_USE = re.compile(
    r"toolkit\._(?:version|terms|term_stats)_table\([^()]*\)\s*\|\||relation := toolkit\._version_table\("
)


def chunk_table_offenders(text: str, name: str) -> list[str]:
    """Calls of a bare-name helper (toolkit._version_table, _terms_table, _term_stats_table) in SQL that are not a
    bare-name use (see BARE_NAME_USE)."""
    return [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if len(BARE_NAME_CALL.findall(line)) > len(BARE_NAME_USE.findall(line))
    ]


def without_function(text: str, name: str) -> str:
    start = text.index(f"CREATE OR REPLACE FUNCTION toolkit.{name}(")
    return text[:start] + text[text.index("$$;", text.index("$$", start) + 2) + 3 :]


def test_the_chunk_table_scans_find_a_second_spelling():
    assert chunk_table_offenders("tbl regclass := format('toolkit.%I', toolkit._version_table(target))::regclass;", "x")
    assert chunk_table_offenders("    chunks text := toolkit._version_table(target);", "x")
    # a multi-line format: the table's argument on its own line
    assert chunk_table_offenders("        toolkit._version_table(v.version)) INTO n USING target, ids;", "x")
    assert not chunk_table_offenders("    idx := toolkit._version_table(target) || '_embedding_idx';", "x")
    assert not chunk_table_offenders("    EXECUTE format('DROP TABLE %s', toolkit._chunk_table(target));", "x")
    assert VERSION_TABLE_CALL.search("\"SELECT format('toolkit.%%I', toolkit._version_table(%s))\"")
    # the postings and statistics
    assert chunk_table_offenders("    stats text := toolkit._term_stats_table(target);", "x")
    assert chunk_table_offenders("IF to_regclass(format('toolkit.%I', toolkit._terms_table(target))) IS NULL", "x")
    assert chunk_table_offenders("            ' ORDER BY t.chunk_id LIMIT $20', toolkit._terms_table(v));", "x")
    assert not chunk_table_offenders("    EXECUTE format('%I', toolkit._term_stats_table(target) || '_key_idx');", "x")
    assert not chunk_table_offenders("    terms text := toolkit._postings_table(target);", "x")
    assert not chunk_table_offenders("    stats text := toolkit._statistics_table(target);", "x")
    assert POSTINGS_NAME_CALL.search("\"SELECT format('toolkit.%%I', toolkit._term_stats_table(%s))\"")
    assert POSTINGS_NAME_CALL.search('"SELECT toolkit._terms_table(%s)"')


def test_sql_names_a_version_table_one_way():
    """Every routine names a chunk table with toolkit._chunk_table, its postings with toolkit._postings_table and its
    statistics with toolkit._statistics_table; only those helpers qualify the bare names."""
    owners = {
        "003-versions.sql": ("_version_table", "_chunk_table"),
        "011-lexical.sql": ("_terms_table", "_term_stats_table", "_postings_table", "_statistics_table"),
    }
    found = []
    for path in tracked("sql/idempotent/*.sql"):
        text = path.read_text()
        for helper in owners.get(path.name, ()):
            text = without_function(text, helper)
        found += chunk_table_offenders(text, path.name)
    assert found == []


def test_python_asks_sql_for_a_version_table():
    """Python (package and bench/) takes the name from SQL (toolkit._chunk_table, a version row's chunk_table),
    never qualifies the bare one itself; except the migration guard, which runs against older schemas that lack
    _chunk_table (its comment says so)."""
    python = tracked("toolkit/*.py", "bench/*.py")
    assert offenders(python, VERSION_TABLE_CALL, "toolkit/db/migration_guard.py") == []


def test_python_asks_sql_for_the_postings_and_statistics_tables():
    """Python (package, bench/ and the tests) names a version's postings and statistics with toolkit._postings_table
    and toolkit._statistics_table, never by qualifying the bare names (no exception: older schemas are never asked)."""
    python = tracked("toolkit/*.py", "bench/*.py", "tests/*.py")
    assert offenders(python, POSTINGS_NAME_CALL, "tests/test_single_source.py") == []


def test_chunk_table_is_the_qualified_version_table(conn, make_model):
    make_model("m", 8)
    version = create_version(conn, "m", "fixed:20:0", "fixed:20:0@one-name")
    name, bare, oid = conn.execute(
        "SELECT toolkit._chunk_table(%s), toolkit._version_table(%s), to_regclass(toolkit._chunk_table(%s))",
        (version, version, version),
    ).fetchone()
    assert name == f"toolkit.{bare}"
    assert oid is not None  # names the table create_version made
    assert chunk_table_name(conn, version).as_string(conn) == name


def test_postings_and_statistics_tables_are_the_qualified_bare_names(conn, make_model):
    make_model("m", 8)
    version = ready_version(conn, "m", 8, {"a": 3})  # the postings are built when a version becomes ready
    row = conn.execute(
        "SELECT toolkit._postings_table(%s), toolkit._terms_table(%s), to_regclass(toolkit._postings_table(%s)),"
        " toolkit._statistics_table(%s), toolkit._term_stats_table(%s), to_regclass(toolkit._statistics_table(%s))",
        (version,) * 6,
    ).fetchone()
    postings, terms, postings_oid, statistics, term_stats, statistics_oid = row
    assert postings == f"toolkit.{terms}" and statistics == f"toolkit.{term_stats}"
    assert postings != statistics
    assert postings_oid is not None and statistics_oid is not None  # name the tables mark_version_ready made


def test_chunk_columns_are_the_tables_columns(conn, make_model):
    """CHUNK_COLUMNS and their COPY types are exactly the columns a writer supplies to a version SQL created
    (all but the defaulted updated_at and the generated fts), in both storages."""
    make_model("m", 8)
    for storage, vector_type in (("vector", "vector(8)"), ("halfvec", "halfvec(8)")):
        version = create_version(conn, "m", "fixed:20:0", f"fixed:20:0@{storage}", storage=storage)
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a"
            " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''"
            " AND a.attname <> 'updated_at' ORDER BY a.attnum",
            (chunk_table_name(conn, version).as_string(conn),),
        ).fetchall()
        table = dict(rows)
        assert set(table) == set(CHUNK_COLUMNS), storage
        copy_types = dict(zip(CHUNK_COLUMNS, [*_COPY_TYPES, vector_type], strict=True))
        aliases = {"bool": "boolean", "int4": "integer", "int4[]": "integer[]"}
        assert {c: aliases.get(t, t) for c, t in copy_types.items()} == table, storage


def test_the_empty_view_has_the_columns_of_a_populated_one(conn, make_model):
    """active_chunks with no version (typed NULLs) and with one (the chunk table) expose the same columns."""
    query = (
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS a"
        " WHERE a.attrelid = 'toolkit.active_chunks'::regclass AND a.attnum > 0 ORDER BY a.attnum"
    )
    empty = conn.execute(query).fetchall()
    make_model("m", 8)
    from toolkit import cutover

    cutover.activate_version(conn, ready_version(conn, "m", 8, {"a": 3}), force=True)
    populated = conn.execute(query).fetchall()
    assert [name for name, _ in empty] == [name for name, _ in populated]
    # the vector column is typed by the version's dimensions once one is active
    assert [t for name, t in empty if name != "embedding"] == [t for name, t in populated if name != "embedding"]


def test_the_cli_lookup_accepts_what_the_sql_routine_accepts(conn, make_model):
    make_model("m", 8)
    version = ready_version(conn, "m", 8, {"a": 3})
    accepted = {
        action: conn.execute("SELECT %s = ANY (toolkit.version_states(%s))", ("ready", action)).fetchone()[0]
        for action in ("live", "serve", "verify", "activate", "shadow", "canary", "retire")
    }
    assert all(accepted.values())  # a ready version takes part in every action
    assert resolve_version(conn, "m", action="canary") == version
    from toolkit import cutover

    cutover.activate_version(conn, version, force=True)
    # active: SQL's activate and canary lists leave it out, so the lookup finds nothing to cut over to
    for action in ("activate", "canary", "shadow", "retire"):
        with pytest.raises(InputError, match=r"No .* version uses the model 'm'"):
            resolve_version(conn, "m", action=action)
    assert resolve_version(conn, "m", action="verify") == version
    with pytest.raises(Exception, match="no version action is called 'deploy'"):
        conn.execute("SELECT toolkit.version_states('deploy')")


# -- copies Python keeps of a rule SQL owns, tied to the catalog ------------------------------------------------


def function_source(conn, signature: str) -> str:
    return conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (signature,)).fetchone()[0]


def test_the_search_filter_keys_are_sqls(conn):
    """search.FILTER_KEYS (what the CLI and search() accept) is the list toolkit._search_filter_values checks."""
    from toolkit.search import FILTER_KEYS

    source = function_source(conn, "toolkit._search_filter_values(jsonb)")
    listed = re.search(r"filter_name NOT IN \(([^)]*)\)", source)
    assert listed, "the key list moved: update this test"
    assert tuple(re.findall(r"'(\w+)'", listed.group(1))) == FILTER_KEYS


def test_the_retrievals_are_the_ones_sql_runs(conn):
    """search_options.RETRIEVALS (what the CLI, serve and the retrievers accept, without a database) is the list
    toolkit.search checks."""
    from toolkit.search_options import RETRIEVALS

    source = function_source(conn, "toolkit.search(toolkit.search_request_v1)")
    listed = re.findall(r"retrieval IS DISTINCT FROM '(\w+)'", source)
    assert listed, "the retrieval check moved: update this test"
    assert sorted(listed) == sorted(RETRIEVALS)


def test_hits_per_context_is_search_contexts(conn):
    """The offline evaluation fetches HITS_PER_CONTEXT x k children per small-to-big context, as toolkit.search does
    for a request with expand."""
    from toolkit.evaluation.report import HITS_PER_CONTEXT

    source = function_source(conn, "toolkit.search(toolkit.search_request_v1)")
    found = re.findall(
        r"ELSIF mode IS NOT NULL THEN\s+plan\.hits := least\(request\.k \* (\d+), toolkit\.search_max_k\(\)\)", source
    )
    assert found and {int(n) for n in found} == {HITS_PER_CONTEXT}


def test_a_row_waiting_for_its_embedding_is_sqls_rule(conn):
    """store.contents.stored_chunks counts the rows still waiting for an embedding as version_pending_rows does."""
    import inspect

    from toolkit.store import contents

    rule = re.search(
        r"WHERE (embedding IS NULL AND NOT is_parent)", function_source(conn, "toolkit.version_pending_rows(integer)")
    )
    assert rule, "version_pending_rows changed its rule: update this test and stored_chunks"
    assert rule.group(1) in inspect.getsource(contents.stored_chunks)
