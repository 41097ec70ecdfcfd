"""The change feed (docs/design.md "Change feed"): the rows each table version inserted or deleted, computed from
the catalog's commits and each changed partition's file lists before and after, never by diffing the table. A
partition is a date and, for a table with partition_by, its values below dt: each is compared on its own.

Per partition version stamped with a table version:

* append: the objects its file list adds (the old list is a prefix of it) are inserts; nothing else is read.
* compaction: nothing, unless it covers small object ids its predecessor did not show (a delayed object becoming
  visible); then, as for any version that removes files, the rows of the files it drops and of the files it adds
  are compared as multisets, and only the difference is a change.
* update (a delete or overwrite): the same multiset difference of the replaced objects and the new one.
* keyed tables: the partition's rows before and after, each with the keyed rule applied, compared by key:
  `insert`, `delete`, or an `update_preimage` / `update_postimage` pair for a key whose row changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from siltlake.catalog import VersionOutOfRange
from siltlake.errors import SiltError
from siltlake.read.version_files import DataFile, lake_keys, version_files

if TYPE_CHECKING:
    import pyarrow as pa

    from siltlake.catalog import PublishedVersion, TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.partition_prune import PartitionKey

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
INSERT, DELETE, PREIMAGE, POSTIMAGE = "insert", "delete", "update_preimage", "update_postimage"

_COUNT = "__silt_count"


def change_schema(schema: pa.Schema) -> pa.Schema:
    """A table's schema (its columns, then dt) followed by the change columns."""
    import pyarrow as pa

    return pa.schema(
        [
            *schema,
            pa.field(CHANGE_TYPE, pa.string(), nullable=False),
            pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
            pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


def checked_range(record: TableRecord, bounds: tuple[int, int], start_version: int, end_version: int | None) -> int:
    """The end version of a change range (None: the newest); VersionOutOfRange names a range the table cannot
    answer: the changes of version N need version N - 1, so after a reap the oldest readable version is the
    first start."""
    oldest, newest = bounds
    end = newest if end_version is None else end_version
    name = record.qualified_name
    if start_version < 0 or end < start_version:
        raise SiltError(
            f"{name}: changes from version {start_version} to {end} is not a range; give 0 <= "
            "start <= end (changes are those of the versions after start, up to end)"
        )
    if end > newest:
        raise VersionOutOfRange(f"{name} has no version {end}: its newest version is {newest}")
    first_start = 0 if oldest <= 1 else oldest
    if start_version < first_start:
        raise VersionOutOfRange(
            f"{name}: the changes after version {start_version} cannot be read: versions before {oldest} were "
            f"reaped; start from version {oldest} or later (or read the whole table as of a version)"
        )
    return end


def table_changes(
    deployment: Deployment,
    record: TableRecord,
    schema: pa.Schema,
    start_version: int,
    end_version: int | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows each table version in (start_version, end_version] inserted or deleted, in version order, with
    the change columns; `schema` is the table's (columns, then dt), `columns` those to keep."""
    import pyarrow as pa

    catalog = deployment.catalog
    end = checked_range(record, catalog.version_reads.table_bounds(record.id), start_version, end_version)
    out_schema = change_schema(schema)
    if columns is not None:
        unknown = [c for c in columns if c not in out_schema.names]
        if unknown:
            raise SiltError(
                f"{record.qualified_name} has no column {', '.join(unknown)}; its columns are "
                f"{', '.join(out_schema.names)}"
            )
    by_version: dict[int, list[tuple[PartitionKey, PublishedVersion, PublishedVersion | None]]] = {}
    for date, values, version, before in catalog.versions.stamped_partitions(record.id, start_version, end):
        by_version.setdefault(version.table_version, []).append(((date, values), version, before))
    pieces = []
    for table_version, changed in sorted(by_version.items()):
        stamp = max(version.created_at for _, version, _ in changed).replace(tzinfo=dt.UTC)
        # Each partition (date, values below dt) its own: its files before and after, read for it alone.
        wanted = [key for key, version, before in changed if _may_change_rows(record, version, before)]
        if not wanted:
            continue
        new_files = _partition_files(deployment, record, table_version, wanted)
        old_files = _partition_files(deployment, record, table_version - 1, wanted) if table_version > 1 else {}
        for key in wanted:
            date = key[0]
            rows = partition_changes(deployment, record, schema, date, old_files.get(key, []), new_files.get(key, []))
            if rows.num_rows:
                count = rows.num_rows
                rows = rows.append_column(
                    out_schema.field(COMMIT_VERSION), pa.repeat(pa.scalar(table_version, pa.int64()), count)
                )
                rows = rows.append_column(
                    out_schema.field(COMMIT_TIMESTAMP), pa.repeat(pa.scalar(stamp, pa.timestamp("us", tz="UTC")), count)
                )
                pieces.append(rows.cast(out_schema))
    result = pa.concat_tables(pieces) if pieces else out_schema.empty_table()
    return result.select(list(columns)) if columns is not None else result


def _may_change_rows(record: TableRecord, version: PublishedVersion, before: PublishedVersion | None) -> bool:
    """False for a compaction that only rewrites what its predecessor showed (no small object id above what the
    predecessor showed, and for a plain table the same row count): the common case, decided without a read."""
    if version.commit_op != "compaction" or before is None:
        return True
    shown = max(before.covered_upper or 0, before.live_watermark or 0)
    if (version.covered_upper or 0) > shown:
        return True  # delayed objects became visible
    return not record.definition.keyed and version.row_count != before.row_count


def _partition_files(
    deployment: Deployment, record: TableRecord, table_version: int, wanted: list[PartitionKey]
) -> dict[PartitionKey, list[DataFile]]:
    """The files of the partitions `wanted` as of a table version, by partition (only theirs are read)."""
    kept = set(wanted)
    files = version_files(
        deployment,
        record,
        as_of_version=table_version,
        dates={date for date, _ in kept},
        partition_filter=lambda present: kept & set(present),
    )
    grouped: dict[PartitionKey, list[DataFile]] = {}
    for f in files:
        grouped.setdefault((f.partition_date, f.partition_values), []).append(f)
    return grouped


def partition_changes(
    deployment: Deployment,
    record: TableRecord,
    schema: pa.Schema,
    date: dt.date,
    old: list[DataFile],
    new: list[DataFile],
) -> pa.Table:
    """One partition's changed rows (schema's columns and the change type) between two file lists."""
    if record.definition.keyed:
        return _keyed_changes(deployment, record, schema, date, old, new)
    old_uris = {f.uri for f in old}
    new_uris = {f.uri for f in new}
    added = [f for f in new if f.uri not in old_uris]
    removed = [f for f in old if f.uri not in new_uris]
    inserted = _read(deployment, record, schema, date, added)
    if not removed:
        return _typed(inserted, INSERT)
    return _multiset_difference(_read(deployment, record, schema, date, removed), inserted)


def _read(
    deployment: Deployment, record: TableRecord, schema: pa.Schema, date: dt.date, files: list[DataFile]
) -> pa.Table:
    """The rows of some of a partition's files as `schema` (dt set to the partition's date)."""
    import pyarrow.dataset as ds

    if not files:
        return schema.empty_table()
    lake = deployment.lake
    return ds.FileSystemDataset.from_paths(
        [lake.path(key) for key in lake_keys(deployment, record, files)],
        schema=schema,
        format=ds.ParquetFileFormat(),
        filesystem=lake.filesystem,
        partitions=[ds.field("dt") == date] * len(files),
    ).to_table()


def _typed(rows: pa.Table, change_type: str) -> pa.Table:
    import pyarrow as pa

    return rows.append_column(
        pa.field(CHANGE_TYPE, pa.string(), nullable=False),
        pa.repeat(pa.scalar(change_type), rows.num_rows).cast(pa.string()),
    )


def _multiset_difference(removed: pa.Table, added: pa.Table) -> pa.Table:
    """Rows `added` holds more often than `removed` (inserts, repeated by the difference) and the reverse
    (deletes): rows both sides hold, such as those a compaction or an update rewrites unchanged, cancel."""
    import numpy as np
    import pyarrow as pa

    names = removed.column_names
    both = pa.concat_tables(
        [
            removed.append_column(_COUNT, pa.repeat(pa.scalar(-1, pa.int64()), removed.num_rows)),
            added.append_column(_COUNT, pa.repeat(pa.scalar(1, pa.int64()), added.num_rows)),
        ]
    )
    counted = both.group_by(names, use_threads=False).aggregate([(_COUNT, "sum")])
    counts = counted.column(f"{_COUNT}_sum").to_numpy()
    rows = counted.select(names)
    out = []
    for change_type, sign in ((DELETE, -1), (INSERT, 1)):
        repeats = np.where(counts * sign > 0, np.abs(counts), 0)
        indices = np.repeat(np.arange(len(counts)), repeats)
        out.append(_typed(rows.take(pa.array(indices, pa.int64())), change_type))
    return pa.concat_tables(out)


def _keyed_changes(
    deployment: Deployment,
    record: TableRecord,
    schema: pa.Schema,
    date: dt.date,
    old: list[DataFile],
    new: list[DataFile],
) -> pa.Table:
    """A keyed partition's rows before and after (keyed rule applied), compared by primary key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from siltlake.read.keyed import read_partitions
    from siltlake.records.arrays import int64_range

    definition = record.definition
    key = list(definition.primary_key)

    def view(files: list[DataFile]) -> pa.Table:
        if not files:
            return schema.empty_table()
        (rows,) = read_partitions(
            deployment.lake, [(date, lake_keys(deployment, record, files))], schema, key, definition.sequence_column
        )
        return rows.cast(schema)

    before, after = view(old), view(new)
    joined = (
        before.select(key)
        .append_column("__silt_old", int64_range(0, before.num_rows))
        .join(
            after.select(key).append_column("__silt_new", int64_range(0, after.num_rows)),
            keys=key,
            join_type="full outer",
            use_threads=False,
        )
    )
    old_at, new_at = joined.column("__silt_old"), joined.column("__silt_new")
    gone = pc.filter(old_at, pc.is_null(new_at))
    came = pc.filter(new_at, pc.is_null(old_at))
    pairs = joined.filter(pc.and_(pc.is_valid(old_at), pc.is_valid(new_at)))
    old_rows, new_rows = before.take(pairs.column("__silt_old")), after.take(pairs.column("__silt_new"))
    differs = pa.repeat(pa.scalar(False), pairs.num_rows)
    for name in schema.names:
        a, b = old_rows.column(name), new_rows.column(name)
        same = pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b)))
        differs = pc.or_(differs, pc.invert(pc.fill_null(same, False)))
    changed = pairs.filter(differs)
    pre, post = before.take(changed.column("__silt_old")), after.take(changed.column("__silt_new"))
    # Each preimage is followed by its postimage.
    order = np.arange(2 * changed.num_rows).reshape(2, -1).T.reshape(-1) if changed.num_rows else np.array([], int)
    updates = pa.concat_tables([_typed(pre, PREIMAGE), _typed(post, POSTIMAGE)]).take(pa.array(order, pa.int64()))
    return pa.concat_tables([_typed(before.take(gone), DELETE), updates, _typed(after.take(came), INSERT)])
