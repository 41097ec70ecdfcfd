"""Staging expiry: reap prunes processed staging rows past stream.staging_retention, keeps what they counted
per table, and records per staging root the arrival time below which rows may be gone. Indexes for the pruning
and for the metric history's per-slot sums of processed objects.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_staging_objects_receive_time", "staging_objects", ["receive_time"])
    op.create_index("ix_staging_objects_processed_time", "staging_objects", ["processed_time"])
    op.create_table(
        "pruned_staging_totals",
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("objects", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("records_in", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bad_records", sa.BigInteger, nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_pruned_staging_totals_table_id"),
        sa.PrimaryKeyConstraint("table_id", name="pk_pruned_staging_totals"),
    )
    with op.batch_alter_table("discovery_cursors") as batch:
        batch.add_column(sa.Column("expired_before", sa.DateTime, nullable=True))
        batch.add_column(sa.Column("expired_recorded", sa.DateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("discovery_cursors") as batch:
        batch.drop_column("expired_recorded")
        batch.drop_column("expired_before")
    op.drop_table("pruned_staging_totals")
    op.drop_index("ix_staging_objects_processed_time", table_name="staging_objects")
    op.drop_index("ix_staging_objects_receive_time", table_name="staging_objects")
