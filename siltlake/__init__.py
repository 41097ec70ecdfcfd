"""siltlake: turns streams of small log batches into date-partitioned Parquet tables."""

from typing import TYPE_CHECKING

from siltlake.errors import (
    CatalogError,
    CatalogUnreachable,
    ConfigError,
    DefinitionError,
    MergeConflict,
    NotFoundError,
    Refusal,
    RetryableConflict,
    RetryableError,
    SiltError,
    UpdateConflict,
    VersionOutOfRange,
)

__version__ = "0.1.0"
# The errors: SiltError is the root of every one siltlake raises with a message for the user; RetryableError's
# (RetryableConflict: UpdateConflict, MergeConflict; CatalogUnreachable) mean nothing was committed and the operation
# can be run again (docs/api.md "Errors").
__all__ = [
    "CatalogError",
    "CatalogUnreachable",
    "ConfigError",
    "DefinitionError",
    "Lake",
    "MergeConflict",
    "NotFoundError",
    "Refusal",
    "RetryableConflict",
    "RetryableError",
    "SiltError",
    "Table",
    "TableMetadata",
    "UpdateConflict",
    "VersionOutOfRange",
    "__version__",
]

if TYPE_CHECKING:
    from siltlake.lake import Lake, Table
    from siltlake.read.metadata import TableMetadata


def __getattr__(name: str):
    if name in ("Lake", "Table"):
        from siltlake import lake

        return getattr(lake, name)
    if name == "TableMetadata":
        from siltlake.read.metadata import TableMetadata

        return TableMetadata
    raise AttributeError(f"module 'siltlake' has no attribute {name!r}")
