"""Updates: a merge range may name its object (an update's output) instead of deriving it from its bounds.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("merge_ranges") as batch:
        batch.add_column(sa.Column("object_key", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("merge_ranges") as batch:
        batch.drop_column("object_key")
