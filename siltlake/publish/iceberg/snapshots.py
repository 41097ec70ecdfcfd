"""An Iceberg table as siltlake's table versions see it: the schema a version is committed with, the snapshot that
holds a version, the data files a snapshot lists, and the version hint for readers given only a directory."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from siltlake.coltypes import PARTITION_COLUMN
from siltlake.errors import SiltError
from siltlake.publish.iceberg.catalog import REAP_PROPERTY, VERSION_HINT, VERSION_PROPERTY, lake_key
from siltlake.publish.iceberg.manifests import EPOCH, day_bounds, partition_date

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment


def iceberg_type(arrow_type: Any) -> Any:  # pyarrow type in, Iceberg type out
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow

    return visit_pyarrow(arrow_type, _ConvertToIcebergWithoutIDs())


def iceberg_schema(record: TableRecord) -> Any:  # a pyiceberg Schema
    """The table's columns (all optional: older objects lack added ones) and dt, with the definition's field ids
    (the ids siltlake's objects carry)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, NestedField

    ids = record.definition.field_ids
    if ids is None:
        raise SiltError(f"{record.qualified_name}: the table has no field ids yet (assign_field_ids first)")
    fields = [
        NestedField(ids[f.name], f.name, iceberg_type(f.type), required=False) for f in record.definition.arrow_schema()
    ]
    fields.append(NestedField(ids[PARTITION_COLUMN], PARTITION_COLUMN, DateType(), required=False))
    return Schema(*fields)


def version_schema(deployment: Deployment, record: TableRecord, table: IcebergTable, version: int) -> Any:
    """The Iceberg schema table version `version` is committed with: the definition it had (an engine reads
    a snapshot with its schema, as siltlake reads the version), with the field ids its objects carry. A definition
    stored before field ids takes its names' ids in the Iceberg table now; None if it has a name that table has not
    (the version is committed with the current schema)."""
    from pyiceberg.schema import Schema

    then = deployment.catalog.tables.definition_at(record, version)
    if then.definition.field_ids is None:
        known = {f.name: f.field_id for f in table.schema().fields}
        if not {*(c.name for c in then.definition.columns), PARTITION_COLUMN} <= known.keys():
            return None
        then = dataclasses.replace(then, definition=then.definition.with_field_ids(known))
    # dt where Iceberg's evolution puts it: after the columns made with the table, before those added later.
    dt_id = then.definition.dt_field_id
    assert dt_id is not None  # the definition had its ids, or took the table's above
    fields = iceberg_schema(then).fields
    return Schema(*sorted(fields, key=lambda f: f.field_id > dt_id))


def version_hint_key(deployment: Deployment, table: IcebergTable) -> str | None:
    """The key of the table's metadata/version-hint.text (None: the table's location is not in the lake)."""
    return lake_key(deployment, f"{table.location().rstrip('/')}/metadata/{VERSION_HINT}")


def write_version_hint(deployment: Deployment, table: IcebergTable) -> None:
    """Point metadata/version-hint.text at the current metadata file, for readers given only the table's
    directory: it holds the file's name without `.metadata.json`, which DuckDB's iceberg_scan and PyIceberg's
    StaticTable both resolve (Hadoop's integer hints need v<N>.metadata.json names, which catalogs do not write)."""
    key = version_hint_key(deployment, table)
    if key is None:
        return
    name = table.metadata_location.rsplit("/", 1)[-1].removesuffix(".metadata.json")
    deployment.lake.write_bytes(key, name.encode())


def snapshot_of_version(table: IcebergTable, version: int) -> Any:  # a Snapshot or None
    """The snapshot that holds siltlake table version `version` (None: not committed, or expired)."""
    for snapshot in table.snapshots():
        if snapshot.summary is not None and snapshot.summary.get(VERSION_PROPERTY) == str(version):
            return snapshot
    return None


def version_snapshots(table: IcebergTable) -> dict[int, int]:
    """Snapshot ids by the siltlake table version they hold (a reap's snapshot, which repeats its parent's version
    with fewer files, left out)."""
    return {
        int(version): s.snapshot_id
        for s in table.snapshots()  # (a Summary has no `in`)
        if s.summary is not None
        and (version := s.summary.get(VERSION_PROPERTY))
        and s.summary.get(REAP_PROPERTY) is None
    }


def synced_version(table: IcebergTable) -> int:
    """The siltlake table version the current snapshot holds (0: none yet)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.get(VERSION_PROPERTY, "0"))


def snapshot_files(
    table: IcebergTable,
    snapshot: Any,
    cache: dict[str, list[Any]] | None = None,
    dates: Collection[dt.date] | None = None,
) -> list[Any]:
    """The live data files (pyiceberg DataFile) a snapshot lists (its delete files: snapshot_deletes); with
    `dates`, those of these dates only, reading only the manifests whose partition bounds may hold one of them."""
    from pyiceberg.manifest import ManifestContent

    cache = {} if cache is None else cache
    days = None if dates is None else {(date - EPOCH).days for date in dates}
    files = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA or (days is not None and not _may_hold(manifest, days)):
            continue
        if manifest.manifest_path not in cache:
            cache[manifest.manifest_path] = [e.data_file for e in manifest.fetch_manifest_entry(table.io)]
        files += (
            cache[manifest.manifest_path]
            if dates is None
            else [f for f in cache[manifest.manifest_path] if partition_date(f) in dates]
        )
    return files


def _may_hold(manifest: Any, days: set[int]) -> bool:  # a pyiceberg ManifestFile
    """Whether a manifest's dt bounds (its manifest list entry's partition summary) may hold one of `days`."""
    bounds = day_bounds(manifest)
    return bounds is None or any(bounds.first <= day <= bounds.last for day in days)
