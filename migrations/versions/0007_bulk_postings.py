"""Full-text postings built in bulk when a version becomes ready (a backfill loads the rows alone); the chunk
tables' GIN index over their tsvector, which no search reads, dropped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

from alembic import op

from toolkit.db.migration_guard import restore_release
from toolkit.db.sql_files import apply_incremental

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["012-bulk-postings.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    # Each version table gets its GIN index back (0006 creates one with every version).
    rows = connection.execute(
        "SELECT to_regclass(toolkit._chunk_table(v.version))::text,"
        " quote_ident(toolkit._version_table(v.version) || '_fts_idx') FROM toolkit.versions AS v ORDER BY 1"
    ).fetchall()
    for chunks, index in rows:
        if chunks is not None:
            connection.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {chunks} USING gin (fts)")  # names from SQL
    connection.execute("RESET ROLE")
    # 0006's functions (no signature or result changed); its 900-apply.sql builds the postings of every live version
    # that has none, a version being built among them (0006 keeps postings from a version's creation on).
    restore_release(connection, "0006", replaced=[])
