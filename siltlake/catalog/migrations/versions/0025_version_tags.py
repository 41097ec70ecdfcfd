"""Tags: names given to table versions (Table.tag, `silt table tag`), read as `as_of_version="name"` and
`VERSION AS OF 'name'`; reap keeps what a tagged version shows.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "version_tags",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("table_version", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_version_tags_table_id", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_version_tags"),
        sa.UniqueConstraint("table_id", "name", name="uq_version_tags_table_id_name"),
    )


def downgrade() -> None:
    op.drop_table("version_tags")
