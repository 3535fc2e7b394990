"""Core schema: roles, the toolkit schema and the registry tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from alembic import op

from toolkit.schema import apply_incremental

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["001-roles-and-schema.sql", "002-registry-tables.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    # Drops every toolkit object, chunk tables included. The cluster-wide roles and the vector
    # extension stay: other databases may use them.
    op.get_bind().connection.driver_connection.execute("DROP SCHEMA IF EXISTS toolkit CASCADE")
