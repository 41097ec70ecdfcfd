"""Initial catalog: tables, staging objects, partitions, small objects, merge queue, ranges, versions.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _partial(column_sql: str) -> dict:
    where = sa.text(column_sql)
    return {"sqlite_where": where, "postgresql_where": where}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.CreateSequence(sa.Sequence("small_object_id_seq")))

    op.create_table(
        "instances",
        sa.Column("instance_key", sa.String(32), nullable=False),
        sa.Column("is_self", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("storage_root", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("registered_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("instance_key", name="pk_instances"),
    )
    op.create_table(
        "tables",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("schema_name", sa.String(63), nullable=False),
        sa.Column("table_name", sa.String(63), nullable=False),
        sa.Column("physical_schema_name", sa.String(63), nullable=False),
        sa.Column("physical_table_name", sa.String(63), nullable=False),
        sa.Column("create_time", sa.DateTime, nullable=False),
        sa.Column("merge_interval", sa.Integer, nullable=False),
        sa.Column("time_column", sa.String(63), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("ttl_days", sa.Integer, nullable=True),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("dropped_time", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tables"),
        sa.UniqueConstraint(
            "physical_schema_name",
            "physical_table_name",
            name="uq_tables_physical_schema_name_physical_table_name",
        ),
        sa.CheckConstraint("merge_interval >= 0", name="ck_tables_merge_interval"),
    )
    op.create_index(
        "uq_tables_live_name",
        "tables",
        ["schema_name", "table_name"],
        unique=True,
        **_partial("dropped_time IS NULL"),
    )
    op.create_table(
        "staging_objects",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("uri", sa.Text, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("send_time", sa.DateTime, nullable=True),
        sa.Column("receive_time", sa.DateTime, nullable=False),
        sa.Column("processed_time", sa.DateTime, nullable=True),
        sa.Column("records_in", sa.BigInteger, nullable=True),
        sa.Column("bad_records", sa.BigInteger, nullable=True),
        sa.Column("error_uri", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_staging_objects"),
        sa.UniqueConstraint("uri", name="uq_staging_objects_uri"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_staging_objects_table_id"),
    )
    op.create_index("ix_staging_objects_pending", "staging_objects", ["id"], **_partial("processed_time IS NULL"))
    op.create_table(
        "unknown_staging_objects",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("uri", sa.Text, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=True),
        sa.Column("size", sa.BigInteger, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("detect_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_unknown_staging_objects"),
        sa.UniqueConstraint("uri", name="uq_unknown_staging_objects_uri"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_unknown_staging_objects_table_id"),
    )
    op.create_table(
        "partitions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("partition_date", sa.Date, nullable=False),
        sa.Column("current_manifest_version", sa.BigInteger, nullable=False, server_default="-1"),
        sa.Column("desired_manifest_version", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_live_object_id", sa.BigInteger, nullable=True),
        sa.Column("switched", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("create_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_partitions"),
        sa.UniqueConstraint("table_id", "partition_date", name="uq_partitions_table_id_partition_date"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_partitions_table_id"),
        sa.CheckConstraint("current_manifest_version >= -1", name="ck_partitions_current_version"),
    )
    op.create_table(
        "small_objects",
        sa.Column("id", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("staging_object_id", sa.Integer, nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("delayed", sa.Boolean, nullable=False),
        sa.Column("content_length", sa.BigInteger, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.Column("min_event_time", sa.DateTime, nullable=False),
        sa.Column("max_event_time", sa.DateTime, nullable=False),
        sa.Column("upload_start_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_small_objects"),
        sa.UniqueConstraint(
            "staging_object_id", "partition_id", name="uq_small_objects_staging_object_id_partition_id"
        ),
        sa.ForeignKeyConstraint(
            ["staging_object_id"], ["staging_objects.id"], name="fk_small_objects_staging_object_id"
        ),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"], name="fk_small_objects_partition_id"),
    )
    op.create_index("ix_small_objects_partition_id_id", "small_objects", ["partition_id", "id"])
    op.create_table(
        "merge_jobs",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("schedule_time", sa.DateTime, nullable=False),
        sa.Column("ongoing_mark", sa.Integer, nullable=False, server_default="0"),
        sa.Column("heartbeat_time", sa.DateTime, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_merge_jobs"),
        sa.UniqueConstraint("partition_id", "ongoing_mark", name="uq_merge_jobs_partition_id_ongoing_mark"),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"], name="fk_merge_jobs_partition_id"),
    )
    op.create_index("ix_merge_jobs_waiting", "merge_jobs", ["schedule_time"], **_partial("ongoing_mark = 0"))
    op.create_table(
        "merge_job_log",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("job_id", sa.Integer, nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("mode", sa.String(16), nullable=True),
        sa.Column("objects_in", sa.Integer, nullable=False, server_default="0"),
        sa.Column("bytes_in", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bytes_out", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("start_time", sa.DateTime, nullable=False),
        sa.Column("end_time", sa.DateTime, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_merge_job_log"),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"], name="fk_merge_job_log_partition_id"),
        sa.CheckConstraint("outcome IN ('finished', 'continuing', 'failed')", name="ck_merge_job_log_outcome"),
    )
    op.create_table(
        "merge_ranges",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("lower_bound", sa.BigInteger, nullable=True),
        sa.Column("upper_bound", sa.BigInteger, nullable=False),
        sa.Column("content_length", sa.BigInteger, nullable=False),
        sa.Column("create_time", sa.DateTime, nullable=False),
        sa.Column("update_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_merge_ranges"),
        sa.UniqueConstraint("partition_id", "lower_bound", name="uq_merge_ranges_partition_id_lower_bound"),
        sa.UniqueConstraint("partition_id", "upper_bound", name="uq_merge_ranges_partition_id_upper_bound"),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"], name="fk_merge_ranges_partition_id"),
        sa.ForeignKeyConstraint(
            ["partition_id", "lower_bound"],
            ["merge_ranges.partition_id", "merge_ranges.upper_bound"],
            name="fk_merge_ranges_chain",
        ),
        sa.CheckConstraint("upper_bound > lower_bound", name="ck_merge_ranges_bounds_increase"),
        sa.CheckConstraint("lower_bound IS NOT NULL OR upper_bound = 0", name="ck_merge_ranges_sentinel"),
    )
    op.create_table(
        "partition_versions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("partition_id", sa.Integer, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("commit_op", sa.String(16), nullable=False),
        sa.Column("live_watermark", sa.BigInteger, nullable=True),
        sa.Column("manifest_key", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.Column("byte_count", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_partition_versions"),
        sa.UniqueConstraint("partition_id", "version", name="uq_partition_versions_partition_id_version"),
        sa.ForeignKeyConstraint(["partition_id"], ["partitions.id"], name="fk_partition_versions_partition_id"),
        sa.CheckConstraint(
            "commit_op IN ('append', 'compaction', 'update', 'merge')", name="ck_partition_versions_commit_op"
        ),
        sa.CheckConstraint(
            "live_watermark IS NOT NULL OR manifest_key IS NOT NULL",
            name="ck_partition_versions_shows_something",
        ),
    )
    op.create_table(
        "id_counters",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("last_value", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_id_counters"),
    )
    op.execute(sa.text("INSERT INTO id_counters (name, last_value) VALUES ('small_objects', 0)"))


def downgrade() -> None:
    for table in (
        "id_counters",
        "partition_versions",
        "merge_ranges",
        "merge_job_log",
        "merge_jobs",
        "small_objects",
        "partitions",
        "unknown_staging_objects",
        "staging_objects",
        "tables",
        "instances",
    ):
        op.drop_table(table)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.schema.DropSequence(sa.Sequence("small_object_id_seq")))
