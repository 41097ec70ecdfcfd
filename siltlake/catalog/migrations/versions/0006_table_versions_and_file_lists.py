"""Open tables: a table-wide version counter, each partition version's table version, and the key of the
manifest listing exactly the data files of the version (live versions included).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tables") as batch:
        batch.add_column(sa.Column("version", sa.BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("partition_versions") as batch:
        batch.add_column(sa.Column("table_version", sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("file_list_key", sa.Text, nullable=True))
    # Versions published before this revision: one table version per distinct commit time of the table (a
    # publish run stamps all its versions with one time), in time order. Their file lists stay unwritten:
    # readers compute those versions' files from the catalog, as before.
    connection = op.get_bind()
    v = sa.table(
        "partition_versions",
        sa.column("id", sa.Integer),
        sa.column("partition_id", sa.Integer),
        sa.column("created_at", sa.DateTime),
        sa.column("table_version", sa.BigInteger),
        sa.column("manifest_key", sa.Text),
        sa.column("live_watermark", sa.BigInteger),
        sa.column("covered_upper", sa.BigInteger),
        sa.column("file_list_key", sa.Text),
    )
    p = sa.table("partitions", sa.column("id", sa.Integer), sa.column("table_id", sa.Integer))
    t = sa.table("tables", sa.column("id", sa.Integer), sa.column("version", sa.BigInteger))
    rows = connection.execute(
        sa.select(p.c.table_id, v.c.id, v.c.created_at)
        .select_from(v.join(p, p.c.id == v.c.partition_id))
        .order_by(p.c.table_id, v.c.created_at)
    ).all()
    numbers: dict[int, dict] = {}
    for row in rows:
        table_id, version_id, created_at = row.table_id, row.id, row.created_at  # by name: typed as the columns
        times = numbers.setdefault(table_id, {})
        number = times.setdefault(created_at, len(times) + 1)
        connection.execute(v.update().where(v.c.id == version_id).values(table_version=number))
    for table_id, times in numbers.items():
        connection.execute(t.update().where(t.c.id == table_id).values(version=len(times)))
    # A merged or updated version's manifest already lists exactly its files.
    connection.execute(
        v.update()
        .where(
            v.c.manifest_key.is_not(None), sa.or_(v.c.live_watermark.is_(None), v.c.live_watermark == v.c.covered_upper)
        )
        .values(file_list_key=v.c.manifest_key)
    )


def downgrade() -> None:
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35 has it): a batch rebuild of `tables` would drop a
    # table other rows reference, which SQLite's foreign keys refuse once the catalog holds tables.
    op.drop_column("partition_versions", "file_list_key")
    op.drop_column("partition_versions", "table_version")
    op.drop_column("tables", "version")
