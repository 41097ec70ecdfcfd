"""Publish targets: external catalogs a publish run keeps in step with siltlake's catalog.

Always on, built in: siltlake's own catalog (partition versions, which `siltlake.read` reads) and the
manifest files of merged versions (step 5). Optional, named in `publish.targets`: "hive" (a Hive
metastore through Spark SQL DDL) and "iceberg" (Apache Iceberg tables through PyIceberg). A target
hears about table definitions in step 3 and about partition states after step 5 of the same run, so
a switched partition points at the manifest published just now. Each target keeps what it synced (the
Hive target in the catalog: Catalog.external_sync.synced_tables, partitions_to_sync; the Iceberg target in its
snapshots' summaries) and issues statements only for what changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from siltlake.errors import SiltError

if TYPE_CHECKING:
    from siltlake.catalog import Catalog, SyncedTable, TableRecord


class SomeTablesFailed(SiltError):
    """A target synced its other tables and names the ones that failed: their partitions wait for the next
    run, the others' follow in this one."""


class PublishTarget(Protocol):
    name: str
    statements: list[str]  # those issued by the current call, also when it fails part way

    def sync_tables(self, tables: Sequence[TableRecord]) -> list[str]:
        """Create, rename, extend (and drop) the target's tables to match these live tables; returns the
        statements issued."""

    def sync_partitions(self, tables: Mapping[int, TableRecord]) -> list[str]:
        """Add partitions and point them at what each shows now; returns the statements issued."""


def drop_forgotten_tables(
    catalog: Catalog, target: str, tables: Sequence[TableRecord], drop: Callable[[SyncedTable], None]
) -> dict[int, SyncedTable]:
    """Drop (then forget) the target's tables whose siltlake table was dropped or is not among `tables`;
    returns what the target was last told, by table id."""
    synced = catalog.external_sync.synced_tables(target)
    live_ids = {record.id for record in tables}
    for old in synced.values():
        if old.dropped or old.table_id not in live_ids:
            drop(old)
            catalog.external_sync.forget_table(target, old.table_id)
    return synced
