"""Files followed by their identity: a position keeps the CRC-32 of its file's first bytes (how many:
head_length) so that a renamed file, a rotated copy and a file put under a name another file had are told apart;
a generation token that makes each file's delivery URIs its own; whether the file is rotated away (its trailing
fragment is its last record) and compressed; where a fragment taken as final ended.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("staging_positions") as batch:
        batch.add_column(sa.Column("head_crc", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("head_length", sa.Integer, nullable=True))
        batch.add_column(sa.Column("generation", sa.String(16), nullable=True))
        batch.add_column(sa.Column("rotated", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("compressed", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("fragment_end", sa.BigInteger, nullable=True))
    op.create_index("ix_staging_positions_file_identity", "staging_positions", ["file_identity"])
    op.create_index("ix_staging_positions_head_crc", "staging_positions", ["head_crc"])


def downgrade() -> None:
    op.drop_index("ix_staging_positions_head_crc", table_name="staging_positions")
    op.drop_index("ix_staging_positions_file_identity", table_name="staging_positions")
    with op.batch_alter_table("staging_positions") as batch:
        for column in ("fragment_end", "compressed", "rotated", "generation", "head_length", "head_crc"):
            batch.drop_column(column)
