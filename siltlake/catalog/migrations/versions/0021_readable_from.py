"""Time travel's readable range read from the table row: tables record the oldest table version every
partition can still show, moved forward by reap as it deletes versions, instead of a scan of every partition's
versions at each read of an older version (and at each Iceberg commit).

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tables", sa.Column("readable_from", sa.BigInteger, nullable=False, server_default="1"))
    # What reads computed until now: the newest of the first retained table versions of partitions whose earlier
    # versions were reaped (version 1 gone).
    bind = op.get_bind()
    reaped = bind.execute(
        sa.text(
            "SELECT table_id, max(table_version) FROM (SELECT table_id, min(version) AS version, min(table_version) AS "
            "table_version FROM partition_versions GROUP BY table_id, partition_id) firsts WHERE version > 1 "
            "GROUP BY table_id"
        )
    ).all()
    for table_id, readable_from in reaped:
        bind.execute(
            sa.text("UPDATE tables SET readable_from = :readable_from WHERE id = :table_id"),
            {"readable_from": readable_from, "table_id": table_id},
        )


def downgrade() -> None:
    op.drop_column("tables", "readable_from")
