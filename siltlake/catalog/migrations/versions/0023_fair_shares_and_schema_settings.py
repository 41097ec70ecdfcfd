"""The merge queue's fair shares (merge_shares: each schema's and table's last turn) and the settings a schema gives
its tables (schema_settings; docs/design.md, "Merge" and "Settings inherited").

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "merge_shares",
        sa.Column("level", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("last_turn", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "schema_settings",
        sa.Column("schema_name", sa.String(63), primary_key=True),
        sa.Column("key", sa.String(32), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("schema_settings")
    op.drop_table("merge_shares")
