"""What one table version is made of: its exact data files, from its partitions' manifests (plus, for the
current state, the live objects the catalog lists), and the time-travel time that picks a version.

A table's state is read in one catalog snapshot (a constant number of queries, whatever the partitions);
no directory is ever listed. The table API (siltlake.lake) and the Iceberg publish target read here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from siltlake.errors import SiltError
from siltlake.storage import manifests

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

    from siltlake.catalog import PartitionView, TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.partition_prune import PartitionFilter
    from siltlake.storage.filesystem import Storage

_MANIFEST_READERS = 16


def parse_as_of(value: dt.datetime | dt.date | str) -> dt.datetime:
    """A time-travel time as naive UTC (siltlake.clock.parse_time); SiltError names a text that is none."""
    from siltlake.clock import parse_time

    try:
        return parse_time(value)
    except ValueError as exc:
        raise SiltError(str(exc)) from None


def version_number(deployment: Deployment, record: TableRecord, version: int | str | None) -> int | None:
    """A table version given as its number or as a tag's name (Table.tag): the number."""
    if isinstance(version, str):
        return deployment.catalog.tags.version_of(record.id, version, record.qualified_name)
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise SiltError(
            f"{record.qualified_name}: as_of_version takes a version number or a tag's name, not {version!r}"
        )
    return version


def parse_dates(dates: Any) -> set[dt.date] | None:
    """None (every partition), or the set of dates given as one date/ISO text or an iterable of them."""
    if dates is None:
        return None
    if isinstance(dates, (dt.date, str)):
        dates = [dates]
    wanted = set()
    for value in dates:
        if isinstance(value, dt.datetime):
            value = value.date()
        if isinstance(value, str):
            try:
                value = dt.date.fromisoformat(value)
            except ValueError:
                raise SiltError(f"dates: {value!r} is not a date such as 2026-11-20") from None
        wanted.add(value)
    return wanted


@dataclass(frozen=True)
class DataFile:
    """One data file of a table version: its URI (as the catalog and manifests store it), partition date
    and size in bytes (None for a live object of the current state, not yet in any manifest); and, once
    siltlake.read.inspect.with_stats has filled them in, its row count and event time range (naive UTC;
    None where the file has no statistics of the time column)."""

    uri: str
    partition_date: dt.date
    size: int | None
    rows: int | None = None
    min_event_time: dt.datetime | None = None
    max_event_time: dt.datetime | None = None
    partition_values: str = ""  # below dt (siltlake.partspec), for a table with partition_by


def table_schema(record: TableRecord) -> pa.Schema:
    """The table's columns as read (added columns included, every one nullable), then the partition column dt."""
    import pyarrow as pa

    fields = [field.with_nullable(True) for field in record.definition.arrow_schema()]
    return pa.schema([*fields, pa.field("dt", pa.date32(), nullable=False)])


def version_files(
    deployment: Deployment,
    record: TableRecord,
    *,
    as_of_version: int | None = None,
    as_of: dt.datetime | None = None,
    dates: set[dt.date] | None = None,
    date_filter: Callable[[list[dt.date]], set[dt.date]] | None = None,
    partition_filter: PartitionFilter | None = None,
) -> list[DataFile]:
    """The exact data files of a table version (as_of_version, or the versions published at or before the
    naive UTC time as_of, or the current state), of the partitions `dates` (None: all) that `date_filter`
    (given the dates present, returns those to read) and `partition_filter` (given the (date, values) present,
    returns those to read) keep; manifests are read only for those."""
    views = deployment.catalog.version_reads.reader_snapshot(
        record.id,
        as_of_version=as_of_version,
        as_of=as_of,
        table_name=record.qualified_name,
        dates=dates,
        date_filter=date_filter,
        partition_filter=partition_filter,
    )
    return partition_files(deployment, record, views)


def partition_files(deployment: Deployment, record: TableRecord, views: list[PartitionView]) -> list[DataFile]:
    """The exact data files of partitions as a reader snapshot shows them (their manifests are read here)."""
    lake = deployment.lake
    keys = [view.manifest_key for view in views if view.manifest_key]
    if len(keys) <= 1:  # a day's read: no thread pool to start
        listed = {key: manifests.read_manifest(lake, key) for key in keys}
    else:
        with ThreadPoolExecutor(min(_MANIFEST_READERS, len(keys))) as pool:
            listed = dict(zip(keys, pool.map(lambda key: manifests.read_manifest(lake, key), keys), strict=True))
    layout = record.layout(deployment.instance_key)
    files: list[DataFile] = []
    for view in views:
        date, values = view.partition_date, view.partition_values
        if view.manifest_key:
            files += [DataFile(uri, date, size, partition_values=values) for uri, size in listed[view.manifest_key]]
        files += [
            DataFile(lake.uri(layout.small_object(date, object_id, False, values)), date, None, partition_values=values)
            for object_id in view.live_object_ids
        ]
    return files


def dirty_dates_of(record: TableRecord, files: list[DataFile]) -> set[dt.date]:
    """The dates whose files need a merge on read (none for a table without a primary key)."""
    if not record.definition.keyed:
        return set()
    from siltlake.read.keyed import dirty_dates

    return dirty_dates([(f.partition_date, f.uri) for f in files])


def lake_keys(deployment: Deployment, record: TableRecord, files: list[DataFile]) -> list[str]:
    """The lake keys of a version's data files (a URI outside the lake's root is refused)."""
    return [data_file_key(deployment.lake, f.uri, record.qualified_name) for f in files]


def data_file_key(lake: Storage, uri: str, table_name: str | None = None) -> str:
    """The lake key of a data file a manifest lists. Every reader (Spark, pyarrow in Spark's tasks or not, DuckDB,
    the Spark data source) takes its files' keys here, so a manifest planted, edited by hand or written by another
    deployment never makes one open a file outside the lake's root (docs/design.md, "Hostile input")."""
    from urllib.parse import unquote

    prefix = lake.root + "/"
    if not uri.startswith(prefix):
        raise SiltError(
            f"{table_name + ': ' if table_name else ''}data file {uri} is not under the lake's root "
            f"{lake.root}; the manifest was written by another deployment or by hand"
        )
    key = unquote(uri[len(prefix) :])
    lake.path(key)  # refuses a key that decodes to a '..' segment, a NUL byte or an absolute path
    return key


@dataclass(frozen=True)
class ArrowParts:
    """A version's files as pyarrow reads them. `plain`: the partitions that are plain files, as a dataset of the
    columns as objects hold them (a renamed column under its stored name, `stored_names`: table name -> stored
    name) and dt from each file's partition, so filters and projections still skip row groups; `merged`: a keyed
    table's partitions merged on read, in the table's names (None: no partition needs it); `schema`: the table's."""

    plain: ds.FileSystemDataset
    merged: pa.Table | None
    schema: pa.Schema
    stored_names: dict[str, str]

    def stored(self, name: str) -> str:
        return self.stored_names.get(name, name)

    def renaming(self, columns: Sequence[str] | None = None) -> dict[str, Any]:
        """A scanner's projection reading `columns` (None: all) of `plain` under the table's names."""
        import pyarrow.dataset as ds

        return {name: ds.field(self.stored(name)) for name in (columns or self.schema.names)}

    def dataset(self) -> Any:
        """`plain` under the table's names: the dataset itself or, when a column is renamed, a RenamedDataset of
        it (siltlake.read.renamed: read in place, as pyarrow cannot rename a dataset's column lazily)."""
        if not self.stored_names:
            return self.plain
        from siltlake.read.renamed import RenamedDataset

        return RenamedDataset(ArrowParts(self.plain, None, self.schema, self.stored_names))


def stored_parts(deployment: Deployment, record: TableRecord, files: list[DataFile], schema: pa.Schema) -> ArrowParts:
    """The partitions of `files` as ArrowParts of `schema` (the table's, dt last)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from siltlake.records.physical import physical_definition

    lake = deployment.lake
    keys = lake_keys(deployment, record, files)
    dirty = dirty_dates_of(record, files)
    definition = physical_definition(record.definition)
    # Objects hold a renamed column under its old name: read by those names, shown by the table's.
    names = {c.name: c.physical_name for c in record.definition.columns if c.physical_name != c.name}
    stored = pa.schema([f.with_name(names.get(f.name, f.name)) for f in schema]) if names else schema
    plain = ds.FileSystemDataset.from_paths(
        [lake.path(key) for key, f in zip(keys, files, strict=True) if f.partition_date not in dirty],
        schema=stored,
        format=ds.ParquetFileFormat(),
        filesystem=lake.filesystem,
        partitions=[ds.field("dt") == f.partition_date for f in files if f.partition_date not in dirty],
    )
    if not dirty:
        return ArrowParts(plain, None, schema, names)
    # A keyed table's partitions holding several rows of a key are merged on read here, in memory; the
    # others stay files, so filters and projections still skip their row groups. A filter applies to the
    # merged rows: a key's older row matching it never shows.
    from siltlake.read.keyed import read_partitions

    grouped: dict[dt.date, list[str]] = {}
    for key, f in zip(keys, files, strict=True):
        if f.partition_date in dirty:
            grouped.setdefault(f.partition_date, []).append(key)
    merged = read_partitions(lake, sorted(grouped.items()), stored, definition.primary_key, definition.sequence_column)
    return ArrowParts(
        plain,
        (pa.concat_tables(merged) if len(merged) > 1 else merged[0]).rename_columns(schema.names).cast(schema),
        schema,
        names,
    )


def arrow_parts(
    deployment: Deployment,
    record: TableRecord,
    files: list[DataFile],
    schema: pa.Schema,
) -> tuple[Any, pa.Table | None]:
    """The partitions of `files` that are plain files, as a pyarrow dataset of `schema` (ArrowParts.dataset: a
    RenamedDataset where a column is renamed), and (a keyed table's) those merged on read, as one table (None: none)."""
    parts = stored_parts(deployment, record, files, schema)
    return parts.dataset(), parts.merged
