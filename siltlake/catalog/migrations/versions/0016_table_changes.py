"""Table properties that change: each change to a table's definition that publishes no data is a table version,
recorded with what changed and the definition from then on.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "table_changes",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("table_version", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_table_changes_table_id", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_table_changes"),
        sa.UniqueConstraint("table_id", "table_version", name="uq_table_changes_table_id_table_version"),
    )


def downgrade() -> None:
    op.drop_table("table_changes")
