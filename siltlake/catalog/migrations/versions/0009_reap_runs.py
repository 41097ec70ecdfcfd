"""Incremental reap: completed reap runs, and indexes on the times that say which partitions changed.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_INDEXES = (
    ("ix_partitions_create_time", "partitions", "create_time"),
    ("ix_merge_job_log_end_time", "merge_job_log", "end_time"),
    ("ix_merge_ranges_update_time", "merge_ranges", "update_time"),
    ("ix_partition_versions_created_at", "partition_versions", "created_at"),
)


def upgrade() -> None:
    op.create_table(
        "reap_runs",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("run_time", sa.DateTime, nullable=False),
        sa.Column("full_sweep", sa.Boolean, nullable=False),
        sa.Column("retention", sa.Integer, nullable=False),
        sa.Column("max_small_object_id", sa.BigInteger, nullable=False),
        sa.Column("finished_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reap_runs"),
    )
    op.create_index("ix_reap_runs_run_time", "reap_runs", ["run_time"])
    for name, table, column in _INDEXES:
        op.create_index(name, table, [column])


def downgrade() -> None:
    for name, table, _ in _INDEXES:
        op.drop_index(name, table_name=table)
    op.drop_index("ix_reap_runs_run_time", table_name="reap_runs")
    op.drop_table("reap_runs")
