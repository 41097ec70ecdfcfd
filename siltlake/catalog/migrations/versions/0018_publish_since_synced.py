"""Publish targets read what is new (docs/design.md): each partition version names its table (an index of a table's
versions by table version), external tables record the table version a target is synced up to, partitions
reap removed from a target wait in external_removals, and tables count their switched partitions.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partition_versions") as batch:
        batch.add_column(sa.Column("table_id", sa.Integer, nullable=True))
    op.execute(
        "UPDATE partition_versions SET table_id = "
        "(SELECT p.table_id FROM partitions p WHERE p.id = partition_versions.partition_id)"
    )
    with op.batch_alter_table("partition_versions") as batch:
        batch.alter_column("table_id", existing_type=sa.Integer, nullable=False)
        batch.create_foreign_key("fk_partition_versions_table_id", "tables", ["table_id"], ["id"])
    op.create_index("ix_partition_versions_table_id_table_version", "partition_versions", ["table_id", "table_version"])
    op.add_column("external_tables", sa.Column("synced_version", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("external_tables", sa.Column("syncing_version", sa.BigInteger, nullable=False, server_default="0"))
    op.create_table(
        "external_removals",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("partition_date", sa.Date, nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_external_removals_table_id", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_external_removals"),
    )
    op.create_index("ix_external_removals_target_table_id", "external_removals", ["target", "table_id"])
    op.add_column("tables", sa.Column("switched_partitions", sa.BigInteger, nullable=False, server_default="0"))
    op.execute(
        "UPDATE tables SET switched_partitions = (SELECT count(*) FROM partitions p "
        "WHERE p.table_id = tables.id AND p.switched)"
    )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35): a batch rebuild of `tables` is refused once rows
    # reference it.
    op.drop_column("tables", "switched_partitions")
    op.drop_index("ix_external_removals_target_table_id", table_name="external_removals")
    op.drop_table("external_removals")
    op.drop_column("external_tables", "syncing_version")
    op.drop_column("external_tables", "synced_version")
    op.drop_index("ix_partition_versions_table_id_table_version", table_name="partition_versions")
    with op.batch_alter_table("partition_versions") as batch:
        batch.drop_constraint("fk_partition_versions_table_id", type_="foreignkey")
        batch.drop_column("table_id")
