"""Bounded periodic queries (docs/design.md): running staging totals per table (in place of pruned_staging_totals),
each table's newest version time, partial indexes for the partitions a publish run can change, and an index
for the history sample's freshness query.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_staging = sa.table(
    "staging_objects",
    sa.column("table_id", sa.Integer),
    sa.column("records_in", sa.BigInteger),
    sa.column("bad_records", sa.BigInteger),
)
_totals_columns = (
    sa.column("table_id", sa.Integer),
    sa.column("objects", sa.BigInteger),
    sa.column("records_in", sa.BigInteger),
    sa.column("bad_records", sa.BigInteger),
)
_totals = sa.table("staging_totals", *_totals_columns)
_pruned = sa.table("pruned_staging_totals", *(sa.column(c.name, c.type) for c in _totals_columns))


def _totals_table(name: str) -> None:
    op.create_table(
        name,
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("objects", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("records_in", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bad_records", sa.BigInteger, nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name=f"fk_{name}_table_id"),
        sa.PrimaryKeyConstraint("table_id", name=f"pk_{name}"),
    )


def _sums(source: sa.TableClause, sign: int = 1) -> sa.Select:
    return sa.select(
        source.c.table_id,
        (sign * sa.func.count()).label("objects"),
        (sign * sa.func.coalesce(sa.func.sum(source.c.records_in), 0)).label("records_in"),
        (sign * sa.func.coalesce(sa.func.sum(source.c.bad_records), 0)).label("bad_records"),
    ).group_by(source.c.table_id)


def _summed(both: sa.Subquery) -> sa.Select:
    return sa.select(
        both.c.table_id, sa.func.sum(both.c.objects), sa.func.sum(both.c.records_in), sa.func.sum(both.c.bad_records)
    ).group_by(both.c.table_id)


def upgrade() -> None:
    _totals_table("staging_totals")
    # What the rows present count, plus what pruned rows counted: the totals the metrics have shown so far.
    both = sa.union_all(
        _sums(_staging), sa.select(_pruned.c.table_id, _pruned.c.objects, _pruned.c.records_in, _pruned.c.bad_records)
    ).subquery()
    op.execute(_totals.insert().from_select(["table_id", "objects", "records_in", "bad_records"], _summed(both)))
    op.drop_table("pruned_staging_totals")
    op.add_column("tables", sa.Column("version_time", sa.DateTime, nullable=True))
    op.execute(
        "UPDATE tables SET version_time = (SELECT max(v.created_at) FROM partition_versions v "
        "JOIN partitions p ON p.id = v.partition_id WHERE p.table_id = tables.id)"
    )
    op.create_index(
        "ix_partitions_table_id_partition_date_open",
        "partitions",
        ["table_id", "partition_date"],
        sqlite_where=sa.text("last_live_object_id IS NULL"),
        postgresql_where=sa.text("last_live_object_id IS NULL"),
    )
    op.create_index(
        "ix_partitions_id_not_switched",
        "partitions",
        ["id"],
        sqlite_where=sa.text("switched IS 0"),
        postgresql_where=sa.text("switched IS false"),
    )
    op.create_index(
        "ix_partitions_id_behind",
        "partitions",
        ["id"],
        sqlite_where=sa.text("current_manifest_version < desired_manifest_version"),
        postgresql_where=sa.text("current_manifest_version < desired_manifest_version"),
    )
    op.create_index("ix_small_objects_upload_start_time", "small_objects", ["upload_start_time"])


def downgrade() -> None:
    op.drop_index("ix_small_objects_upload_start_time", table_name="small_objects")
    op.drop_index("ix_partitions_id_behind", table_name="partitions")
    op.drop_index("ix_partitions_id_not_switched", table_name="partitions")
    op.drop_index("ix_partitions_table_id_partition_date_open", table_name="partitions")
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35): a batch rebuild of `tables` is refused once rows
    # reference it.
    op.drop_column("tables", "version_time")
    _totals_table("pruned_staging_totals")
    # What was pruned: the running totals less what the rows present count.
    both = sa.union_all(
        sa.select(_totals.c.table_id, _totals.c.objects, _totals.c.records_in, _totals.c.bad_records),
        _sums(_staging, -1),
    ).subquery()
    op.execute(_pruned.insert().from_select(["table_id", "objects", "records_in", "bad_records"], _summed(both)))
    op.drop_table("staging_totals")
