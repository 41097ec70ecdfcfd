"""Files written in place and appended to: the files of a local staging root still being written (waiting to
settle) and, per appendable file, how far its deliveries have consumed it (its position).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "staging_waits",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("staging_root", sa.Text, nullable=False),
        sa.Column("uri", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("change_time", sa.DateTime, nullable=False),
        sa.Column("first_seen", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_staging_waits"),
        sa.UniqueConstraint("uri", name="uq_staging_waits_uri"),
    )
    op.create_index("ix_staging_waits_staging_root", "staging_waits", ["staging_root"])
    op.create_table(
        "staging_positions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("staging_root", sa.Text, nullable=False),
        sa.Column("uri", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=True),
        sa.Column("consumed_end", sa.BigInteger, nullable=True),
        sa.Column("read_end", sa.BigInteger, nullable=True),
        sa.Column("file_identity", sa.String(64), nullable=True),
        sa.Column("fingerprint", sa.BigInteger, nullable=True),
        sa.Column("pending_uri", sa.Text, nullable=True),
        sa.Column("state", sa.String(16), nullable=False, server_default="appending"),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("watch", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("change_time", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_staging_positions"),
        sa.UniqueConstraint("uri", name="uq_staging_positions_uri"),
    )
    op.create_index("ix_staging_positions_watch", "staging_positions", ["staging_root", "watch", "change_time"])
    op.create_index("ix_staging_positions_change_time", "staging_positions", ["change_time"])


def downgrade() -> None:
    op.drop_index("ix_staging_positions_change_time", table_name="staging_positions")
    op.drop_index("ix_staging_positions_watch", table_name="staging_positions")
    op.drop_table("staging_positions")
    op.drop_index("ix_staging_waits_staging_root", table_name="staging_waits")
    op.drop_table("staging_waits")
