"""The rules a Citus cluster needs to distribute the toolkit's tables by tenant (docs/scaling.md), checked on the
catalog of a migrated database with chunk tables created in the test, and shown to catch a table that breaks them.

A table with a ``tenant`` column is distributed by it (co-located with the others), unless it is listed below as a
reference table; a table without one is a reference table (copied to every node). The rules:
1. every primary key and unique index of a distributed table includes ``tenant`` (a shard checks uniqueness alone);
2. a foreign key from a distributed table points at a reference table, or at a distributed one through ``tenant``
   (co-located rows); a reference table has no foreign key to a distributed table;
3. no distributed table has a sequence-generated column (identity or ``nextval`` default): each node would
   hand out values from its own range, and keys made that way could collide or depend on the node.
"""

from __future__ import annotations

from support import ready_version

from toolkit import cutover
from toolkit.store import versions

DISTRIBUTION_COLUMN = "tenant"
# Tables that carry a tenant column and are still copied to every node: the audit log of deletions (it names the
# tenant a deletion was for, and must outlive the tenant's rows; small, written once per request).
REFERENCE_WITH_TENANT: frozenset[str] = frozenset({"deletions"})

TABLES = """
SELECT c.oid, c.relname,
       EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = c.oid AND a.attname = %s AND NOT a.attisdropped) AS has_tenant
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""
UNIQUE_INDEXES = """
SELECT i.indexrelid::regclass::text, i.indisprimary,
       EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = i.indrelid AND a.attname = %s AND a.attnum = ANY (i.indkey))
FROM pg_catalog.pg_index AS i WHERE i.indrelid = %s AND i.indisunique
"""
FOREIGN_KEYS = """
SELECT k.conname, k.confrelid, t.relname,
       EXISTS (SELECT FROM unnest(k.conkey, k.confkey) AS pair (here, there)
               INNER JOIN pg_catalog.pg_attribute AS a ON a.attrelid = k.conrelid AND a.attnum = pair.here
               INNER JOIN pg_catalog.pg_attribute AS b ON b.attrelid = k.confrelid AND b.attnum = pair.there
               WHERE a.attname = %s AND b.attname = %s)
FROM pg_catalog.pg_constraint AS k INNER JOIN pg_catalog.pg_class AS t ON t.oid = k.confrelid
WHERE k.conrelid = %s AND k.contype = 'f'
"""
GENERATED_KEYS = """
SELECT a.attname, a.attidentity <> '' AS identity
FROM pg_catalog.pg_attribute AS a
LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
  AND (a.attidentity <> '' OR pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE '%%nextval(%%')
"""


def placement(conn, schema: str = "toolkit") -> dict[str, str]:
    """Each table of ``schema`` as "distributed" or "reference", by the rule in the module docstring."""
    rows = conn.execute(TABLES, (DISTRIBUTION_COLUMN, schema)).fetchall()
    return {
        name: "distributed" if has_tenant and name not in REFERENCE_WITH_TENANT else "reference"
        for _, name, has_tenant in rows
    }


def distribution_violations(conn, schema: str = "toolkit") -> list[str]:
    """One sentence per broken rule, naming the table and what to change."""
    rows = conn.execute(TABLES, (DISTRIBUTION_COLUMN, schema)).fetchall()
    kind = placement(conn, schema)
    problems = []
    for oid, name, _ in rows:
        distributed = kind[name] == "distributed"
        if distributed:
            for index, primary, has_tenant in conn.execute(UNIQUE_INDEXES, (DISTRIBUTION_COLUMN, oid)):
                if not has_tenant:
                    what = "primary key" if primary else "unique index"
                    problems.append(f"{name}: {what} {index} does not include {DISTRIBUTION_COLUMN}")
            for column, identity in conn.execute(GENERATED_KEYS, (oid,)):
                how = "an identity column" if identity else "a nextval() default"
                problems.append(
                    f"{name}: {column} is {how}; distributed rows need keys that do not come from a sequence"
                )
        for constraint, _, target, through_tenant in conn.execute(
            FOREIGN_KEYS, (DISTRIBUTION_COLUMN, DISTRIBUTION_COLUMN, oid)
        ):
            target_kind = kind.get(target, "outside the schema")
            if distributed and target_kind == "distributed" and not through_tenant:
                problems.append(
                    f"{name}: foreign key {constraint} to {target} does not go through {DISTRIBUTION_COLUMN}"
                )
            elif distributed and target_kind not in ("distributed", "reference"):
                problems.append(f"{name}: foreign key {constraint} points at {target}, {target_kind}")
            elif not distributed and target_kind == "distributed":
                problems.append(f"{name}: foreign key {constraint} from a reference table to distributed {target}")
    return problems


def test_every_toolkit_table_follows_the_distribution_rules(conn, make_model):
    make_model("m1", 8)
    make_model("m2", 16)
    v1 = ready_version(conn, "m1", 8, {"a": 3})
    versions.create_version(conn, "m2", "fixed:5:0", "fixed:5:0@1", storage="halfvec")
    cutover.activate_version(conn, v1, force=True)

    kind = placement(conn)
    chunk_tables = sorted(name for name in kind if name.startswith("chunks_v"))
    assert len(chunk_tables) == 2
    assert all(kind[name] == "distributed" for name in chunk_tables)
    assert kind["documents"] == "distributed"
    # The registry, keyed by alias or version, is copied to every node (docs/scaling.md).
    for name in ("models", "versions", "version_transitions", "evaluations", "cutovers"):
        assert kind[name] == "reference", name
    assert distribution_violations(conn) == []


def test_the_rules_catch_a_table_that_breaks_them(conn):
    with conn.transaction(force_rollback=True):
        conn.execute("CREATE SCHEMA wrong")
        conn.execute(
            "CREATE TABLE wrong.documents (tenant text NOT NULL, doc_id text NOT NULL, PRIMARY KEY (tenant, doc_id))"
        )
        conn.execute("CREATE TABLE wrong.labels (label text PRIMARY KEY)")
        # Keyed by a sequence, unique without the tenant, and pointing at documents without the tenant.
        conn.execute(
            "CREATE TABLE wrong.notes (note_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " tenant text NOT NULL, doc_id text UNIQUE, serial_no bigserial,"
            " label text REFERENCES wrong.labels (label))"
        )
        conn.execute(
            "CREATE TABLE wrong.links (tenant text NOT NULL, doc_id text NOT NULL, PRIMARY KEY (tenant, doc_id),"
            " FOREIGN KEY (doc_id) REFERENCES wrong.notes (doc_id))"
        )
        conn.execute("ALTER TABLE wrong.labels ADD COLUMN doc_id text, ADD COLUMN t text")
        conn.execute(
            "ALTER TABLE wrong.labels ADD CONSTRAINT labels_documents FOREIGN KEY (t, doc_id)"
            " REFERENCES wrong.documents (tenant, doc_id)"
        )
        problems = distribution_violations(conn, "wrong")
    assert sorted(problems) == sorted(
        [
            "notes: primary key wrong.notes_pkey does not include tenant",
            "notes: unique index wrong.notes_doc_id_key does not include tenant",
            "notes: note_id is an identity column; distributed rows need keys that do not come from a sequence",
            "notes: serial_no is a nextval() default; distributed rows need keys that do not come from a sequence",
            "links: foreign key links_doc_id_fkey to notes does not go through tenant",
            "labels: foreign key labels_documents from a reference table to distributed documents",
        ]
    )
