"""Small objects written for several staging objects at once: each source's row range (small_object_sources).

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "small_object_sources",
        sa.Column("small_object_id", sa.BigInteger, nullable=False),
        sa.Column("staging_object_id", sa.Integer, nullable=False),
        sa.Column("first_row", sa.BigInteger, nullable=False),
        sa.Column("row_count", sa.BigInteger, nullable=False),
        sa.ForeignKeyConstraint(
            ["small_object_id"], ["small_objects.id"], name="fk_small_object_sources_small_object_id"
        ),
        sa.ForeignKeyConstraint(
            ["staging_object_id"], ["staging_objects.id"], name="fk_small_object_sources_staging_object_id"
        ),
        sa.PrimaryKeyConstraint("small_object_id", "staging_object_id", name="pk_small_object_sources"),
    )
    op.create_index(
        "ix_small_object_sources_staging_object_id", "small_object_sources", ["staging_object_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_small_object_sources_staging_object_id", table_name="small_object_sources")
    op.drop_table("small_object_sources")
