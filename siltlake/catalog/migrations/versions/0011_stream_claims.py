"""Stream claims: a pending staging object records the stream daemon decoding it and that daemon's last
heartbeat, so several daemons on one catalog share the pending objects instead of decoding each one twice.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both databases (SQLite 3.35+ drops columns in place): a batch operation would copy
# staging_objects into a new table, which SQLite's foreign keys from small_objects refuse.
_COLUMNS = ("claim_owner", "claim_host", "claim_pid", "claim_time")


def upgrade() -> None:
    op.add_column("staging_objects", sa.Column("claim_owner", sa.String(64), nullable=True))
    op.add_column("staging_objects", sa.Column("claim_host", sa.String(255), nullable=True))
    op.add_column("staging_objects", sa.Column("claim_pid", sa.Integer, nullable=True))
    op.add_column("staging_objects", sa.Column("claim_time", sa.DateTime, nullable=True))


def downgrade() -> None:
    for column in reversed(_COLUMNS):
        op.drop_column("staging_objects", column)
