"""Derived tables: their definitions, builds, the active-build list, and which build published a version.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partition_versions") as batch:
        batch.add_column(sa.Column("build_id", sa.Integer, nullable=True))
    op.create_table(
        "derived_tables",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("definition_hash", sa.String(64), nullable=False),
        sa.Column("sources", sa.Text, nullable=False),
        sa.Column("create_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_derived_tables"),
        sa.UniqueConstraint("table_id", name="uq_derived_tables_table_id"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_derived_tables_table_id"),
    )
    op.create_table(
        "derived_builds",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("derived_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(96), nullable=False),
        sa.Column("reg_key", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("owner_host", sa.String(255), nullable=False),
        sa.Column("owner_pid", sa.Integer, nullable=False),
        sa.Column("start_time", sa.DateTime, nullable=False),
        sa.Column("heartbeat_time", sa.DateTime, nullable=False),
        sa.Column("end_time", sa.DateTime, nullable=True),
        sa.Column("source_state", sa.Text, nullable=True),
        sa.Column("trigger_value", sa.Text, nullable=True),
        sa.Column("dates_written", sa.Integer, nullable=False, server_default="0"),
        sa.Column("rows_written", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("bytes_written", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_derived_builds"),
        sa.UniqueConstraint("name", name="uq_derived_builds_name"),
        sa.ForeignKeyConstraint(["derived_id"], ["derived_tables.id"], name="fk_derived_builds_derived_id"),
        sa.CheckConstraint("status IN ('building', 'published', 'failed')", name="ck_derived_builds_status"),
        sa.CheckConstraint("kind IN ('full', 'incremental')", name="ck_derived_builds_kind"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_derived_builds_building",
        "derived_builds",
        ["derived_id"],
        unique=True,
        sqlite_where=sa.text("status = 'building'"),
        postgresql_where=sa.text("status = 'building'"),
    )
    op.create_table(
        "active_derived_builds",
        sa.Column("build_id", sa.Integer, nullable=False),
        sa.Column("derived_id", sa.Integer, nullable=False),
        sa.Column("expire_time", sa.DateTime, nullable=True),
        sa.Column("activate_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("build_id", name="pk_active_derived_builds"),
        sa.ForeignKeyConstraint(["build_id"], ["derived_builds.id"], name="fk_active_derived_builds_build_id"),
        sa.ForeignKeyConstraint(["derived_id"], ["derived_tables.id"], name="fk_active_derived_builds_derived_id"),
    )


def downgrade() -> None:
    op.drop_table("active_derived_builds")
    op.drop_index("uq_derived_builds_building", table_name="derived_builds")
    op.drop_table("derived_builds")
    op.drop_table("derived_tables")
    with op.batch_alter_table("partition_versions") as batch:
        batch.drop_column("build_id")
