"""Alembic environment: runs on the connection the catalog hands over."""

from alembic import context

from siltlake.catalog import schema_discovery  # noqa: F401  (its tables are part of metadata)
from siltlake.catalog.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
