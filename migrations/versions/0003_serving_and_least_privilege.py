"""Serving across migrations and least privilege: the deployer role, private lock tables, the canary traffic
split, the query log, logins bound to tenants; stored secrets removed from the model registry.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op

from toolkit.db.migration_guard import refuse_data_loss, restore_release
from toolkit.db.sql_files import apply_incremental

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = ["004-serving-and-least-privilege.sql"]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    connection = op.get_bind().connection.driver_connection
    # The logged questions, the canary and its audit rows, and the tenant bindings would be lost: refused unless
    # forced (the counts are in the message).
    refuse_data_loss(
        connection,
        ["toolkit.query_log", "toolkit.traffic_split", "toolkit.tenant_bindings"],
        counts={"the audit log's canary entries": "SELECT count(*) FROM toolkit.cutovers WHERE action = 'canary'"},
    )
    connection.execute("SET LOCAL ROLE toolkit_owner")
    connection.execute(
        "DROP TABLE toolkit.query_log, toolkit.query_log_settings, toolkit.tenant_bindings, toolkit.traffic_split,"
        " toolkit.version_set_lock, toolkit.cutover_lock, toolkit.migration_lock CASCADE"
    )
    connection.execute("DELETE FROM toolkit.cutovers WHERE action = 'canary'")
    connection.execute("ALTER TABLE toolkit.cutovers DROP COLUMN details")
    connection.execute("ALTER TABLE toolkit.cutovers DROP CONSTRAINT cutovers_action_check")
    connection.execute(
        "ALTER TABLE toolkit.cutovers ADD CONSTRAINT cutovers_action_check"
        " CHECK (action IN ('activate', 'rollback', 'retire'))"
    )
    connection.execute("ALTER TABLE toolkit.versions DROP COLUMN secured_with")
    connection.execute("ALTER TABLE toolkit.models DROP CONSTRAINT models_price_is_a_number")
    for kind in ("TABLES", "FUNCTIONS", "SEQUENCES"):
        connection.execute(f"REVOKE ALL ON ALL {kind} IN SCHEMA toolkit FROM toolkit_deployer")
    connection.execute("REVOKE ALL ON SCHEMA toolkit FROM toolkit_deployer")
    connection.execute("RESET ROLE")
    # The functions, views, policies and grants of the release at 0002 (the deployer role itself stays: roles are
    # cluster-wide and other databases may use it). Its search functions have one argument less, and its
    # version_status fewer columns: those must go first.
    restore_release(
        connection,
        "0002",
        replaced=[
            "toolkit.search_chunks(vector, integer, jsonb, text, integer)",
            "toolkit.hybrid_search_chunks(text, vector, integer, jsonb, text, integer, integer, integer)",
            "toolkit.search_context(vector, integer, text, text, jsonb, text, integer)",
            "toolkit.version_status()",
            "toolkit._search_target(vector, text, integer)",
        ],
        dropped_views=["toolkit.live_chunks"],
    )
