"""revision tracker: tracked repos, revisions read, file ids, typed changes

Revision ID: 0002_changes
Revises: 0001_reports
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_changes"
down_revision = "0001_reports"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tracked_repos",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("url", sa.String(1024), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("notes_json", sa.Text(), nullable=False),
        sa.Column("last_read_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("source", "name", name="uq_tracked_repos_source_name"),
    )
    op.create_table(
        "repo_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer(), sa.ForeignKey("tracked_repos.id", ondelete="CASCADE"), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("author", sa.String(512), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("notes_json", sa.Text(), nullable=False),
        sa.Column("vanished", sa.Boolean(), nullable=False),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo_id", "commit", name="uq_repo_revisions_commit"),
    )
    op.create_index("ix_repo_revisions_repo_id", "repo_revisions", ["repo_id"])
    op.create_table(
        "repo_files",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("revision_id", sa.Integer(), sa.ForeignKey("repo_revisions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("blob", sa.String(64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("lfs_sha256", sa.String(64), nullable=True),
        sa.UniqueConstraint("revision_id", "path", name="uq_repo_files_path"),
    )
    op.create_index("ix_repo_files_revision_id", "repo_files", ["revision_id"])
    op.create_table(
        "repo_changes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer(), sa.ForeignKey("tracked_repos.id", ondelete="CASCADE"), nullable=False),
        sa.Column("osv_id", sa.String(64), nullable=False, unique=True),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("file", sa.String(1024), nullable=False),
        sa.Column("date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("fixed", sa.String(64), nullable=True),
        sa.Column("vanished", sa.Boolean(), nullable=False),
        sa.Column("change_json", sa.Text(), nullable=False),
        sa.UniqueConstraint("repo_id", "commit", "file", "kind", name="uq_repo_changes_key"),
    )
    op.create_index("ix_repo_changes_repo_id", "repo_changes", ["repo_id"])


def downgrade() -> None:
    op.drop_index("ix_repo_changes_repo_id", table_name="repo_changes")
    op.drop_table("repo_changes")
    op.drop_index("ix_repo_files_revision_id", table_name="repo_files")
    op.drop_table("repo_files")
    op.drop_index("ix_repo_revisions_repo_id", table_name="repo_revisions")
    op.drop_table("repo_revisions")
    op.drop_table("tracked_repos")
