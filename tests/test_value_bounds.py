"""Value bounds with two homes: a CHECK constraint in SQL and a ``NumberRule`` in toolkit/validation.py that refuses
the same value earlier, with a sentence. The catalog is asked for each constraint's bounds, and Python's rule must be
the same range (a Python bound looser than SQL's would let a value through to a raw constraint error; a tighter one
would refuse what the database takes). A bound SQL does not have (no upper limit in the table) is Python's alone."""

from __future__ import annotations

import re

import pytest

from toolkit import validation

# (table, column) → the rule Python checks the value with before it reaches the table.
TIED = {
    ("models", "dimensions"): validation.DIMENSIONS,
    ("versions", "dimensions"): validation.DIMENSIONS,
    ("versions", "hnsw_m"): validation.HNSW_M,
    ("models", "max_input_tokens"): validation.MAX_INPUT_TOKENS,
    ("models", "price_per_million_tokens"): validation.PRICE,
    ("traffic_split", "percent"): validation.CANARY_PERCENT,
    ("query_log_settings", "sample_rate"): validation.SAMPLE_RATE,
}

_COMPARISON = re.compile(r"\(?(\w+) (>=|>|<=|<) \(?'?(-?[\d.]+)'?(?:::\w+)?\)?")


def sql_bounds(conn, table: str, column: str) -> tuple[float | None, float | None]:
    """(lowest allowed, highest allowed) from the CHECK constraints on ``toolkit.table.column``, None when open."""
    rows = conn.execute(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint AS c JOIN pg_attribute AS a"
        "  ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)"
        " WHERE c.contype = 'c' AND c.conrelid = to_regclass(%s) AND a.attname = %s",
        (f"toolkit.{table}", column),
    ).fetchall()
    assert rows, f"no CHECK constraint on toolkit.{table}.{column}"
    low = high = None
    for (definition,) in rows:
        between = re.search(rf"{column} >= \(?'?(-?[\d.]+)'?.*{column} <= \(?'?(-?[\d.]+)", definition)
        if between:
            low, high = float(between.group(1)), float(between.group(2))
            continue
        for name, operator, value in _COMPARISON.findall(definition):
            if name != column:
                continue
            number = float(value)
            if operator in (">=", ">"):
                # integers: > 0 allows 1 (floats keep "above", which the rule's above_minimum says)
                low = number
            else:
                high = number
    return low, high


@pytest.mark.parametrize(("table", "column"), sorted(TIED))
def test_python_checks_the_range_sql_allows(conn, table, column):
    rule = TIED[(table, column)]
    low, high = sql_bounds(conn, table, column)
    assert low is not None, f"toolkit.{table}.{column} has no lower bound in SQL"
    if rule.whole and low == 0 and rule.minimum == 1:
        low = 1  # CHECK (x > 0) on an integer column
    assert rule.minimum == low, f"{rule.what}: Python's minimum {rule.minimum}, SQL's {low}"
    if high is not None:
        assert rule.maximum == high, f"{rule.what}: Python's maximum {rule.maximum}, SQL's {high}"


def test_the_bound_reader_reads_what_the_catalog_says(conn):
    # both forms the catalog writes: BETWEEN (as >= AND <=) and a single comparison
    assert sql_bounds(conn, "models", "dimensions") == (1, 16000)
    assert sql_bounds(conn, "models", "max_input_tokens") == (0, None)
    with pytest.raises(AssertionError, match="no CHECK constraint"):
        sql_bounds(conn, "models", "alias_that_is_not_a_column")
