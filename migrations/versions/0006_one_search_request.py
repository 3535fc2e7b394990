"""One search request: toolkit.search(toolkit.search_request(...)) and its types, chunks that keep the whitespace
before them (passages without reading the document).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-07
"""

from alembic import op

from toolkit.db.migration_guard import restore_release
from toolkit.db.sql_files import apply_incremental

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["011-search-request.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # The functions, views, policies and grants of the release at 0005. No signature or result of 0005's changed:
    # search_chunks, hybrid_search_chunks, search_context and search_passages are replaced in place by 0005's bodies.
    # The request and hit types, toolkit.search and its stages stay, unused, as does each chunk's gap_before (0005
    # writes chunks without it; the next upgrade fills what is missing).
    restore_release(op.get_bind().connection.driver_connection, "0005", replaced=[])
