"""Documents' raw text stored out of line without compression (faster ingest).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from alembic import op

from toolkit.db.sql_files import apply_incremental

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["003-documents-raw-text-external.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # Back to PostgreSQL's default for text; rows already stored keep their form until rewritten.
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    connection.execute("ALTER TABLE toolkit.documents ALTER COLUMN raw_text SET STORAGE EXTENDED")
    connection.execute("RESET ROLE")
