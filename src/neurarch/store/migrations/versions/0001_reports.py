"""reports and permalinks: the web app's result cache

Revision ID: 0001_reports
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_reports"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reports",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(512), nullable=False),
        sa.Column("revision", sa.String(255), nullable=False),
        sa.Column("options_hash", sa.String(64), nullable=False),
        sa.Column("code_fingerprint", sa.String(64), nullable=False),
        sa.Column("library_versions", sa.String(255), nullable=False),
        sa.Column("resolved_revision", sa.String(255), nullable=True),
        sa.Column("options_json", sa.Text(), nullable=False),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.Column("compute_seconds", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("source", "revision", "options_hash", "code_fingerprint", "library_versions", name="uq_reports_key"),
    )
    op.create_table(
        "permalinks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("config_json", sa.Text(), nullable=False),
        sa.Column("options_json", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("permalinks")
    op.drop_table("reports")
