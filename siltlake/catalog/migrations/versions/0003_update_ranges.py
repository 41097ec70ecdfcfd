"""Updates: a merge range may name its object (an update's output) instead of deriving it from its bounds;
a version records the largest small object id its manifest holds.

Revision ID: 0003
Revises: 0002
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("merge_ranges") as batch:
        batch.add_column(sa.Column("object_key", sa.Text, nullable=True))
    with op.batch_alter_table("partition_versions") as batch:
        batch.add_column(sa.Column("covered_upper", sa.BigInteger, nullable=True))
    # Merged versions published before this revision are named after the bound they hold: manifest-<upper>.json.
    versions = sa.table(
        "partition_versions",
        sa.column("id", sa.Integer),
        sa.column("manifest_key", sa.Text),
        sa.column("covered_upper", sa.BigInteger),
    )
    connection = op.get_bind()
    for row in connection.execute(
        sa.select(versions.c.id, versions.c.manifest_key).where(versions.c.manifest_key.is_not(None))
    ).all():
        version_id, key = row.id, row.manifest_key  # by name: the row's own unpacking types as objects
        bound = re.search(r"manifest-(\d+)\.json$", key)
        if bound:
            connection.execute(
                versions.update().where(versions.c.id == version_id).values(covered_upper=int(bound.group(1)))
            )


def downgrade() -> None:
    with op.batch_alter_table("partition_versions") as batch:
        batch.drop_column("covered_upper")
    with op.batch_alter_table("merge_ranges") as batch:
        batch.drop_column("object_key")
