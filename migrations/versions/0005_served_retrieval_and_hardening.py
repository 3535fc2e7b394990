"""The third wave: the served retrieval owned by SQL, roles and inputs hardened, operations a DBA trusts.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from alembic import op

from toolkit.db.migration_guard import restore_release, withdraw
from toolkit.db.sql_files import apply_incremental

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The incremental SQL files this revision applies, once, in order.
INCREMENTAL = [
    "006-roles-and-query-log-bounds.sql",
    "007-operations-settings.sql",
    "008-deletions.sql",
    "009-document-metadata-keys.sql",
    "010-drop-old-signatures.sql",
]


def upgrade() -> None:
    apply_incremental(op.get_bind().connection.driver_connection, INCREMENTAL)


def downgrade() -> None:
    connection = op.get_bind().connection.driver_connection
    connection.execute("SET LOCAL ROLE toolkit_owner")
    connection.execute("DROP TABLE IF EXISTS toolkit.settings")  # 007: the rollback window (a setting, no data)
    # 009: the metadata filters' keys (derived from documents.metadata, no data of their own) and their trigger
    connection.execute("DROP TRIGGER IF EXISTS sync_metadata_keys ON toolkit.documents")
    connection.execute("DROP TABLE IF EXISTS toolkit.document_metadata_keys")
    connection.execute("RESET ROLE")
    # The functions, views, policies and grants of the release at 0004. Functions whose signature or result type
    # this release changed are listed in ``replaced`` (with their argument types, as 0004 declared them).
    restore_release(
        connection,
        "0004",
        replaced=[
            "toolkit.list_tenant_bindings()",  # 0005 added status and bound_as
            "toolkit.query_log_status()",  # 0005 added the bounds and their counters
            "toolkit.logged_questions(timestamptz, text, integer)",  # 0005 added max_questions
            "toolkit.retire_version(integer, text, boolean)",  # ops: gained force
            "toolkit.version_status()",  # 0005 added verification
            # 0005 added min_score and diversity (this release's signatures: 0004's are created again)
            "toolkit.search_chunks(vector, integer, jsonb, text, integer, double precision, double precision)",
            "toolkit.hybrid_search_chunks(text, vector, integer, jsonb, text, integer, integer, integer,"
            " double precision, double precision)",
        ],
    )
    # search_passages (this release's served retrieval) stays for the applications still calling it, but cannot
    # work on 0004's schema: it needs this release's hybrid_search_chunks options and chunk-table names, which 0004's
    # functions replaced. Those calls get a sentence instead of "permission denied" or "does not exist".
    withdraw(
        connection,
        ["search_passages"],
        revision="0004",
        instead="toolkit.hybrid_search_chunks or toolkit.search_context",
    )
