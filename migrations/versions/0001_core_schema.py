"""Core schema: roles, the toolkit schema and the registry tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from alembic import op

from toolkit.db.migration_guard import refuse_data_loss
from toolkit.db.sql_files import apply_incremental

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["001-roles-and-schema.sql", "002-registry-tables.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # Drops every toolkit object, chunk tables included: refused while any holds data, unless forced. The
    # cluster-wide roles and the vector extension stay: other databases may use them.
    connection = op.get_bind().connection.driver_connection
    refuse_data_loss(
        connection,
        ["toolkit.documents", "toolkit.models", "toolkit.versions", "toolkit.evaluations", "toolkit.cutovers"],
        chunk_rows=True,
    )
    connection.execute("DROP SCHEMA IF EXISTS toolkit CASCADE")
