"""Object store discovery: per key prefix of a staging root the key its next listing starts after, and the
position and start of the rolling sweep that lists the whole root a bounded number of keys per round.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prefix_cursors",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("staging_root", sa.Text, nullable=False),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("start_after", sa.Text, nullable=False),
        sa.Column("newest_put", sa.DateTime, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_prefix_cursors"),
        sa.UniqueConstraint("staging_root", "prefix", name="uq_prefix_cursors_staging_root_prefix"),
    )
    # Plain ALTER TABLE on both databases (SQLite 3.35+ drops columns in place, too).
    op.add_column("discovery_cursors", sa.Column("sweep_after", sa.Text, nullable=True))
    op.add_column("discovery_cursors", sa.Column("sweep_started", sa.DateTime, nullable=True))


def downgrade() -> None:
    op.drop_column("discovery_cursors", "sweep_started")
    op.drop_column("discovery_cursors", "sweep_after")
    op.drop_table("prefix_cursors")
