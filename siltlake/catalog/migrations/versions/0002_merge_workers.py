"""Merge workers: job owner and last error, job log output figures, row counts of ranges.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite would hand a deleted job's id to the next job: AUTOINCREMENT keeps job ids (and the
    # ongoing_mark that holds them) unique for the job log.
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(
        "merge_jobs", recreate="always" if sqlite else "auto", table_kwargs={"sqlite_autoincrement": True}
    ) as batch:
        batch.add_column(sa.Column("owner", sa.String(64), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text, nullable=True))
        batch.add_column(sa.Column("continued_from", sa.Integer, nullable=True))
    with op.batch_alter_table("merge_job_log") as batch:
        batch.add_column(sa.Column("rows_out", sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("bytes_decoded", sa.BigInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("note", sa.Text, nullable=True))
    with op.batch_alter_table("merge_ranges") as batch:
        batch.add_column(sa.Column("row_count", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("merge_ranges") as batch:
        batch.drop_column("row_count")
    with op.batch_alter_table("merge_job_log") as batch:
        batch.drop_column("note")
        batch.drop_column("bytes_decoded")
        batch.drop_column("rows_out")
    with op.batch_alter_table("merge_jobs") as batch:
        batch.drop_column("continued_from")
        batch.drop_column("last_error")
        batch.drop_column("owner")
