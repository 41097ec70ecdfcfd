"""Discovery cursors: how far each staging root's listing has come, so that a round lists only what may be new.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "discovery_cursors",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("staging_root", sa.Text, nullable=False),
        sa.Column("cursor_time", sa.DateTime, nullable=False),
        sa.Column("full_listing_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_discovery_cursors"),
        sa.UniqueConstraint("staging_root", name="uq_discovery_cursors_staging_root"),
    )


def downgrade() -> None:
    op.drop_table("discovery_cursors")
