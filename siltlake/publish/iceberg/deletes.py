"""Merge on read in Iceberg's terms (docs/design.md, "Iceberg target"): a keyed table's partition whose version needs a
merge on read (small objects, an upsert's delta, several objects) is committed with all of its files and, for each
of them holding rows the keyed rule (siltlake.records.keyed) hides (a key's older rows, its delete markers), an
Iceberg v2 position delete file naming those rows (one per data file: polars' native reader refuses a delete file
naming several). An engine that applies position deletes then reads exactly siltlake's rows, whatever decided the
winner (commit order, the sequence column, a re-sent chunk's repeat inside one object).

Position deletes rather than equality deletes: PyIceberg (0.12) reads no equality deletes, and an equality delete
cannot tell apart two rows of one key in one file, nor keep an older row whose sequence value wins.

Each commit that changes such a partition decides the rule over all its rows again; a data file's delete file is
replaced when it hides more rows, and goes with the data file (a merge, an update). The delete files lie under the
table's `data/`, where reap keeps those a retained snapshot lists (siltlake.publish.iceberg.reap).
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from siltlake.errors import SiltError
from siltlake.publish.iceberg.manifests import EPOCH, day_bounds, partition_date
from siltlake.publish.iceberg.partitioning import partition_record
from siltlake.read.keyed import dirty_dates

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table as IcebergTable

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.version_files import DataFile

# The reserved field ids Iceberg gives a position delete file's columns.
FILE_PATH_ID = 2147483546
POS_ID = 2147483545
_FILE, _POS = "__silt_file", "__silt_pos"


def hidden_rows(
    lake: Any,
    keys: Sequence[str],
    columns: pa.Schema,
    primary_key: Sequence[str],
    sequence_column: str,
    cache: dict[str, pa.Table],
) -> list[Any]:
    """Of a keyed partition's objects (lake keys in commit order), the positions (numpy int64, ascending) of the rows
    readers do not see, one array per object: the keyed rule applied to `columns` (the key, the sequence column and
    the delete marker, as the objects hold them). `cache` keeps each object's columns (objects never change)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as ds

    from siltlake.records.arrays import int64_range
    from siltlake.records.keyed import latest_rows

    parts = []
    for number, key in enumerate(keys):
        if key not in cache:
            # One object per dataset: its rows in file order, a column it lacks (the marker, an added one) as nulls.
            cache[key] = ds.dataset(
                lake.path(key), schema=columns, format="parquet", filesystem=lake.filesystem
            ).to_table()
        rows = cache[key]
        parts.append(
            rows.append_column(_FILE, pa.repeat(pa.scalar(number, pa.int32()), rows.num_rows)).append_column(
                _POS, int64_range(0, rows.num_rows)
            )
        )
    every = pa.concat_tables(parts)
    shown = latest_rows(every, primary_key, sequence_column)
    seen = np.zeros(every.num_rows, dtype=bool)
    offsets = np.cumsum([0, *(part.num_rows for part in parts)])
    seen[offsets[shown.column(_FILE).to_numpy().astype(np.int64)] + shown.column(_POS).to_numpy()] = True
    return [np.flatnonzero(~seen[offsets[i] : offsets[i + 1]]) for i in range(len(parts))]


def position_delete_file(
    lake: Any, key: str, path: str, partition: Any, spec_id: int, target: str, positions: Any
) -> Any:  # a pyiceberg Record and numpy positions in; a pyiceberg DataFile out
    """Write, at lake key `key` (Iceberg path `path`), the position delete file of the data file `target` (an Iceberg
    path): its rows at `positions` (ascending). Its partition is the data file's (`partition`, a record of the
    table's spec)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = pa.schema(
        [
            pa.field(
                "file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}
            ),
            pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
        ]
    )
    table = pa.table(
        [pa.repeat(pa.scalar(target, pa.string()), len(positions)).cast(pa.string()), pa.array(positions, pa.int64())],
        schema=schema,
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = sink.getvalue()
    lake.write_bytes(key, data)
    bound = {FILE_PATH_ID: target.encode()}
    data_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=table.num_rows,
        file_size_in_bytes=len(data),
        value_counts={FILE_PATH_ID: table.num_rows, POS_ID: table.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        # Equal bounds name the one data file it applies to: how v2 readers (PyIceberg, Java's) tell.
        lower_bounds=bound,
        upper_bounds=bound,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
    )
    data_file.spec_id = spec_id
    return data_file


def target_of(delete_file: Any) -> str | None:  # a pyiceberg DataFile
    """The data file (Iceberg path) a position delete file applies to, by its file_path bounds (None: not one)."""
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_ID)
    return lower.decode() if lower is not None and lower == upper else None


class KeyedDeletes:
    """The position delete files of one keyed table's versions, as a publish run commits them one by one."""

    def __init__(
        self,
        deployment: Deployment,
        record: TableRecord,
        table: IcebergTable,
        location_key: str | None,
        path_of: Callable[[str], str],
    ) -> None:
        self.deployment = deployment
        self.record = record
        self.table = table
        self.location_key = location_key  # the lake key of the Iceberg table's location (None: not in the lake)
        self.path_of = path_of  # a lake key's Iceberg path
        self.cache: dict[str, pa.Table] = {}

    def change(
        self, version: int, files: Sequence[DataFile], dates: Collection[dt.date] | None, deletes: Sequence[Any]
    ) -> DeleteChange:
        """What table version `version` changes in the delete files of the partitions `dates` (None: all), given
        the version's files of them (in commit order) and those partitions' live delete files: one delete file per
        data file with hidden rows, written now, or kept from before when it hides as many rows (a hidden row
        stays hidden while its file stays: a key's winner only ever gives way to a newer one)."""
        import pyarrow as pa

        from siltlake.read.version_files import data_file_key, table_schema
        from siltlake.records.keyed import DELETE_MARKER
        from siltlake.records.physical import physical_definition

        dirty = dirty_dates([(f.partition_date, f.uri) for f in files])
        if dates is not None:
            dirty &= set(dates)
        if not dirty:
            return DeleteChange(list(deletes), [])
        then = self.deployment.catalog.tables.definition_at(self.record, version)
        definition = physical_definition(then.definition)
        key_columns = [*definition.primary_key, *([definition.sequence_column] if definition.sequence_column else [])]
        # The columns as the objects hold them (siltlake's readers read a version so: read.version_files.stored_parts).
        stored = {c.name: c.physical_name for c in then.definition.columns}
        by_stored = {stored.get(f.name, f.name): f for f in table_schema(then)}
        columns = pa.schema([*(by_stored[name] for name in key_columns), pa.field(DELETE_MARKER, pa.bool_())])
        lake = self.deployment.lake
        before = {target_of(f): f for f in deletes}
        kept, added = set(), []
        for date in sorted(dirty):
            of_date = [f for f in files if f.partition_date == date]
            keys = [data_file_key(lake, f.uri, self.record.qualified_name) for f in of_date]
            hidden = hidden_rows(lake, keys, columns, definition.primary_key, definition.sequence_column, self.cache)
            for data_file, rows in zip(of_date, hidden, strict=True):
                target = unquote(data_file.uri)
                if not len(rows):
                    continue
                if target in before and before[target].record_count == len(rows):
                    kept.add(before[target].file_path)
                    continue
                added.append(self._write(version, date, data_file.partition_values, target, rows))
        return DeleteChange([f for f in deletes if f.file_path not in kept], added)

    def _write(self, version: int, date: dt.date, values: str, target: str, rows: Any) -> Any:
        """The delete file of data file `target` of partition (`date`, `values`), beside the partition's other
        delete files."""
        if self.location_key is None:
            raise SiltError(
                f"Iceberg table {'.'.join(self.table.name())}: its location {self.table.location()} "
                "is not in the lake, where its delete files are written; drop it there and publish "
                "again (it is made anew at siltlake's location)"
            )
        name = f"v{version}-{uuid.uuid4().hex}-deletes.parquet"
        partition = "/".join(filter(None, (f"dt={date.isoformat()}", values)))
        key = f"{self.location_key.rstrip('/')}/data/{partition}/{name}"
        return position_delete_file(
            self.deployment.lake,
            key,
            self.path_of(key),
            partition_record(self.record.definition, date, values),
            self.table.metadata.default_spec_id,
            target,
            rows,
        )


def snapshot_deletes(table: IcebergTable, snapshot: Any, dates: Collection[dt.date] | None = None) -> list[Any]:
    """The live delete files (pyiceberg DataFile) a snapshot lists; with `dates`, those of these dates only."""
    from pyiceberg.manifest import ManifestContent

    days = None if dates is None else {(date - EPOCH).days for date in dates}
    found = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DELETES:
            continue
        bounds = day_bounds(manifest)
        if days is not None and bounds is not None and not any(bounds.first <= day <= bounds.last for day in days):
            continue
        found += [
            e.data_file
            for e in manifest.fetch_manifest_entry(table.io)
            if dates is None or partition_date(e.data_file) in dates
        ]
    return found


@dataclass(frozen=True)
class DeleteChange:
    """The delete files a commit adds and removes (commit_files' `deletes`): it writes the snapshot's delete manifests
    (PyIceberg 0.12's producers write data manifests only) and says what changed in the snapshot's summary."""

    removed: Sequence[Any] = ()  # pyiceberg DataFiles of content POSITION_DELETES
    added: Sequence[Any] = ()

    def __bool__(self) -> bool:
        return bool(self.removed or self.added)

    def summary(self) -> dict[str, str]:
        """Iceberg's summary fields for the change (PyIceberg derives the totals from them)."""
        counts = {
            "added-delete-files": len(self.added),
            "added-position-delete-files": len(self.added),
            "added-position-deletes": sum(f.record_count for f in self.added),
            "removed-delete-files": len(self.removed),
            "removed-position-delete-files": len(self.removed),
            "removed-position-deletes": sum(f.record_count for f in self.removed),
        }
        return {name: str(count) for name, count in counts.items() if count}

    def manifests(self, producer: Any, manifests: list[Any]) -> list[Any]:  # a pyiceberg snapshot producer
        """The snapshot's manifests: its data manifests as they are; the delete manifests holding a removed file
        written again into one with the added files (the others' live files as existing, the removed as deleted);
        delete manifests with no live file left out."""
        from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus

        this = producer.snapshot_id
        gone = {f.file_path for f in self.removed}
        dates = [date for f in self.removed if (date := partition_date(f)) is not None]
        # A delete file without a dt (siltlake writes none) may be listed anywhere: no manifest is skipped by bounds.
        days = {(date - EPOCH).days for date in dates} if len(dates) == len(self.removed) else None
        kept: list[Any] = []  # pyiceberg ManifestFiles
        entries: list[Any] = []  # and ManifestEntries
        for manifest in manifests:
            if manifest.content != ManifestContent.DELETES:
                kept.append(manifest)
                continue
            if manifest.added_snapshot_id != this and not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # only files an earlier commit removed: that commit's snapshot keeps them
            bounds = day_bounds(manifest)
            listed = (
                []
                if not gone
                or (bounds is not None and days is not None and not any(bounds.first <= d <= bounds.last for d in days))
                else producer.fetch_manifest_entry(manifest, discard_deleted=True)
            )
            if any(e.data_file.file_path in gone for e in listed):
                entries += listed
            else:
                kept.append(manifest)
        if not entries and not self.added:
            return kept
        spec = producer.spec(producer._transaction.table_metadata.default_spec_id)
        # PyIceberg's producer keeps the table's Avro codec in _compression; its own manifest writers use it so.
        with _delete_manifest_writer()(
            spec, producer.schema(), producer.new_manifest_output(), this, producer._compression
        ) as writer:
            for entry in entries:
                (writer.delete if entry.data_file.file_path in gone else writer.existing)(entry)
            for data_file in self.added:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=this,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=data_file,
                    )
                )
        return [*kept, writer.to_manifest_file()]


@functools.cache
def _delete_manifest_writer() -> type:
    """PyIceberg's v2 manifest writer, for a manifest of delete files (made on first use, as PyIceberg is imported
    only by a deployment that publishes to Iceberg)."""
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    return DeleteManifestWriter


def dates_of(data_files: Iterable[Any]) -> set[dt.date]:
    """The partition dates of pyiceberg DataFiles."""
    return {date for date in (partition_date(f) for f in data_files) if date is not None}
