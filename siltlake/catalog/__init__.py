"""The metadata catalog (SQLite or PostgreSQL). The only package that speaks SQL.

Catalog and the records and exceptions its callers use; StreamCommit is the stream's commit unit."""

from siltlake.catalog.catalog import Catalog
from siltlake.catalog.partitions import StreamCommit
from siltlake.catalog.records import (
    ClaimedJob,
    JobOutcome,
    LiveCandidate,
    LocalHost,
    LostMergeJob,
    MergeConflict,
    PartitionRow,
    PartitionToSync,
    PendingStagingObject,
    PublishedVersion,
    RangeWrite,
    ReapTable,
    ReapVersion,
    ReapView,
    Redelivery,
    SmallObjectRow,
    SwitchedPartition,
    SyncedTable,
    TableRecord,
    UnknownObject,
    UpdateBase,
    UpdateConflict,
    VersionOutOfRange,
)

__all__ = [
    "Catalog",
    "ClaimedJob",
    "JobOutcome",
    "LiveCandidate",
    "LocalHost",
    "LostMergeJob",
    "MergeConflict",
    "PartitionRow",
    "PartitionToSync",
    "PendingStagingObject",
    "PublishedVersion",
    "RangeWrite",
    "ReapTable",
    "ReapVersion",
    "ReapView",
    "Redelivery",
    "SmallObjectRow",
    "StreamCommit",
    "SwitchedPartition",
    "SyncedTable",
    "TableRecord",
    "UnknownObject",
    "UpdateBase",
    "UpdateConflict",
    "VersionOutOfRange",
]
