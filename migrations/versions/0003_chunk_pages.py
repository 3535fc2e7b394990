"""Chunks record the pages they came from (``pages integer[]`` on every chunks_vN; NULL without pages).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op
from psycopg import sql

from toolkit.schema import apply_incremental

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["004-chunk-pages.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # The page numbers are derived data (the documents' metadata keeps the page map): dropping them loses nothing
    # that a re-chunk cannot rebuild.
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    tables = connection.execute(
        "SELECT c.relname FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'toolkit'::regnamespace"
        " AND c.relkind = 'r' AND c.relname ~ '^chunks_v[0-9]+$' ORDER BY c.relname"
    ).fetchall()
    for (table,) in tables:
        connection.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS pages").format(sql.Identifier("toolkit", table))
        )
    connection.execute("RESET ROLE")
