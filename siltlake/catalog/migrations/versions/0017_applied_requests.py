"""Request ids of committed writes: a retried append, upsert, delete, update or restore with the same id
changes nothing.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "applied_requests",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("table_id", sa.Integer, nullable=False),
        sa.Column("request_id", sa.String(200), nullable=False),
        sa.Column("operation", sa.String(16), nullable=False),
        sa.Column("table_version", sa.BigInteger, nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name="fk_applied_requests_table_id", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_applied_requests"),
        sa.UniqueConstraint("table_id", "request_id", name="uq_applied_requests_table_id_request_id"),
    )
    op.create_index("ix_applied_requests_created_at", "applied_requests", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_applied_requests_created_at", table_name="applied_requests")
    op.drop_table("applied_requests")
