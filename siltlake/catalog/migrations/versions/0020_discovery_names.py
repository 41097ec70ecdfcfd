"""A one-off stream run's record of names (docs/design.md): per directory of a local staging root, the file names a
completed round accounted for, so that `silt stream --once` `stat`s only the names it has not seen, as a daemon.

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Empty: the next one-off run of each root `stat`s every name of a changed directory once, as before.
    op.create_table(
        "discovery_names",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("staging_root", sa.Text, nullable=False),
        sa.Column("directory", sa.Text, nullable=False),
        sa.Column("identity", sa.String(80), nullable=False),
        sa.Column("newest_ns", sa.BigInteger, nullable=False),
        sa.Column("names", sa.LargeBinary, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_discovery_names"),
        sa.UniqueConstraint("staging_root", "directory", name="uq_discovery_names_staging_root_directory"),
    )


def downgrade() -> None:
    op.drop_table("discovery_names")
