"""Chunks record the pages they came from (``pages integer[]`` on every chunks_vN; NULL without pages).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op

from toolkit.db.migration_guard import restore_release
from toolkit.db.sql_files import apply_incremental

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["005-chunk-pages.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # The column stays: the release at 0003 does not use it (its views and COPYs name their columns), a reader
    # that is inside a search function when the downgrade commits still finds it, and an upgrade adds it only where
    # it is missing. The views show it: they go first, and the release at 0003 re-creates them without it.
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    connection.execute("DROP VIEW IF EXISTS toolkit.active_chunks, toolkit.live_chunks")
    connection.execute("RESET ROLE")
    restore_release(
        connection,
        "0003",
        replaced=[
            "toolkit.search_chunks(vector, integer, jsonb, text, integer)",
            "toolkit.hybrid_search_chunks(text, vector, integer, jsonb, text, integer, integer, integer)",
            "toolkit.search_context(vector, integer, text, text, jsonb, text, integer)",
            "toolkit.live_versions()",  # 0004 added its chunk_table column
        ],
    )
