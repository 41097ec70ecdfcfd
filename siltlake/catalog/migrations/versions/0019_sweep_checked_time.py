"""A local root's sweep looks up only what changed: discovery cursors record when the last listing
that looked every object up started.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: no such listing is known, so the next pass of every root looks every file up, as before.
    op.add_column("discovery_cursors", sa.Column("checked_time", sa.DateTime, nullable=True))


def downgrade() -> None:
    op.drop_column("discovery_cursors", "checked_time")
