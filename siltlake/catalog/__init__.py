"""The metadata catalog (SQLite or PostgreSQL). The only package that speaks SQL."""

from siltlake.catalog.catalog import (
    Catalog,
    PartitionRow,
    PendingStagingObject,
    Redelivery,
    SmallObjectRow,
    StreamCommit,
    TableRecord,
    UnknownObject,
)

__all__ = [
    "Catalog",
    "PartitionRow",
    "PendingStagingObject",
    "Redelivery",
    "SmallObjectRow",
    "StreamCommit",
    "TableRecord",
    "UnknownObject",
]
