"""External catalogs: what each publish target was last told about tables and partitions.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "external_tables",
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("database_name", sa.String(128), nullable=False),
        sa.Column("table_name", sa.String(128), nullable=False),
        sa.Column("columns", sa.Text, nullable=False),
        sa.Column("sync_time", sa.DateTime, nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_external_tables_table_id", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("target", "table_id", name="pk_external_tables"),
    )
    op.create_table(
        "external_partitions",
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("manifest_key", sa.Text, nullable=True),  # the shown version's manifest; null: live objects
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("sync_time", sa.DateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["partition_id"], ["partitions.id"], name="fk_external_partitions_partition_id", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("target", "partition_id", name="pk_external_partitions"),
    )


def downgrade() -> None:
    op.drop_table("external_partitions")
    op.drop_table("external_tables")
