"""Partitions below the date: a partition is (table, date, values of the table's partition_by fields); a target's
removed partition is named so too.

Revision ID: 0027
Revises: 0026
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partitions") as batch:
        batch.add_column(sa.Column("partition_values", sa.Text, nullable=False, server_default=""))
        batch.drop_constraint("uq_partitions_table_id_partition_date", type_="unique")
        batch.create_unique_constraint(
            "uq_partitions_table_id_partition_date_partition_values",
            ["table_id", "partition_date", "partition_values"],
        )
    with op.batch_alter_table("external_removals") as batch:
        batch.add_column(sa.Column("partition_values", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("external_removals") as batch:
        batch.drop_column("partition_values")
    with op.batch_alter_table("partitions") as batch:
        batch.drop_constraint("uq_partitions_table_id_partition_date_partition_values", type_="unique")
        batch.create_unique_constraint("uq_partitions_table_id_partition_date", ["table_id", "partition_date"])
        batch.drop_column("partition_values")
