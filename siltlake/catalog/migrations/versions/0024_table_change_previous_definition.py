"""Each table change keeps the definition before it as well as the one after (history is immutable):
time travel reads a version with the definition it had, and the versions before a table's first change need the
definition of then. Changes recorded earlier have none (NULL).

Revision ID: 0024
Revises: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("table_changes", sa.Column("previous_definition", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("table_changes", "previous_definition")
