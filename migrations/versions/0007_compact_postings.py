"""Keyword search at the cost of an index: packed full-text postings per tenant and label set, built in bulk when a
version becomes ready; each chunk's ordinal; the chunk tables' unused GIN index dropped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from alembic import op

from toolkit.db.migration_guard import restore_release
from toolkit.db.sql_files import apply_incremental

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["012-compact-postings.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    # The packed postings go with their triggers (0006 builds its own, row by row, for every live version when its
    # files are applied below); each version table gets its GIN index back. The ordinal column stays (0006 writes
    # rows without it, and its default numbers them; the next upgrade finds it).
    rows = connection.execute(
        "SELECT v.version, to_regclass(toolkit._chunk_table(v.version))::text,"
        " quote_ident(toolkit._version_table(v.version) || '_fts_idx') FROM toolkit.versions AS v ORDER BY 1"
    ).fetchall()
    for version, chunks, index in rows:
        connection.execute("SELECT toolkit._drop_text_postings(%s)", (version,))
        if chunks is not None:
            connection.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {chunks} USING gin (fts)")  # names from SQL
    connection.execute("RESET ROLE")
    # _search_stage_text_hits kept its argument types but renamed one (candidates -> matches): 0006's cannot replace it.
    restore_release(connection, "0006", replaced=["toolkit._search_stage_text_hits(text, boolean, text)"])
