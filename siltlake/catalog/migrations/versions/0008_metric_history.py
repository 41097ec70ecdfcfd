"""The metric history the dashboard charts: one sample per table and slot, written by the daemons.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_history",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("sample_time", sa.DateTime, nullable=False),
        sa.Column("table_name", sa.String(127), nullable=False),
        sa.Column("pending_objects", sa.BigInteger, nullable=True),
        sa.Column("pending_bytes", sa.BigInteger, nullable=True),
        sa.Column("unmerged_objects", sa.BigInteger, nullable=True),
        sa.Column("unmerged_bytes", sa.BigInteger, nullable=True),
        sa.Column("merged_objects", sa.BigInteger, nullable=True),
        sa.Column("merged_bytes", sa.BigInteger, nullable=True),
        sa.Column("records_loaded", sa.BigInteger, nullable=True),
        sa.Column("bad_records", sa.BigInteger, nullable=True),
        sa.Column("freshness_p50_seconds", sa.Float, nullable=True),
        sa.Column("freshness_p99_seconds", sa.Float, nullable=True),
        sa.Column("freshness_max_seconds", sa.Float, nullable=True),
        sa.Column("jobs_waiting", sa.Integer, nullable=True),
        sa.Column("jobs_running", sa.Integer, nullable=True),
        sa.Column("jobs_failed", sa.Integer, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_metric_history"),
        sa.UniqueConstraint("sample_time", "table_name", name="uq_metric_history_sample_time_table_name"),
    )
    op.create_index("ix_metric_history_sample_time", "metric_history", ["sample_time"])


def downgrade() -> None:
    op.drop_index("ix_metric_history_sample_time", table_name="metric_history")
    op.drop_table("metric_history")
