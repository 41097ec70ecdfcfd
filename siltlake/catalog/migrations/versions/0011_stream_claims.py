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


def upgrade() -> None:
    with op.batch_alter_table("staging_objects") as batch:
        batch.add_column(sa.Column("claim_owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("claim_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("claim_pid", sa.Integer, nullable=True))
        batch.add_column(sa.Column("claim_time", sa.DateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("staging_objects") as batch:
        batch.drop_column("claim_time")
        batch.drop_column("claim_pid")
        batch.drop_column("claim_host")
        batch.drop_column("claim_owner")
