"""Hardening: a staging object counts the times its processing failed (and why), so a poison object moves to
unknown after a bound instead of being retried forever; a merge claim records the claimer's host and pid, so a
claim of a dead process on the same host is taken over at once.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("staging_objects") as batch:
        batch.add_column(sa.Column("failure_count", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("last_failure", sa.Text, nullable=True))
        batch.add_column(sa.Column("last_failure_time", sa.DateTime, nullable=True))
    with op.batch_alter_table("merge_jobs") as batch:
        batch.add_column(sa.Column("owner_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("owner_pid", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("merge_jobs") as batch:
        batch.drop_column("owner_pid")
        batch.drop_column("owner_host")
    with op.batch_alter_table("staging_objects") as batch:
        batch.drop_column("last_failure_time")
        batch.drop_column("last_failure")
        batch.drop_column("failure_count")
