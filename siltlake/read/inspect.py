"""A table's metadata tables (Table.inspect, shaped after PyIceberg's table.inspect): its history, table versions,
data files with their statistics, partitions and merge jobs, each as an Arrow table.

File statistics come from the catalog where it records them (each small object's size, rows and event time
range, written by the stream at its commit; a merge range's size and rows, and, where the merge kept every row,
its small objects' event times) and otherwise from the file's Parquet footer (update objects, a keyed table's
merged objects, superseded ranges an older version lists: one small read each, in parallel). No directory is
listed and no row is read.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from siltlake.errors import NoSuchPartition
from siltlake.read.version_files import DataFile, lake_keys, parse_as_of, parse_dates, partition_files, version_number
from siltlake.storage.keys import merge_range_of, small_object_id

if TYPE_CHECKING:
    import pyarrow as pa

    from siltlake.catalog import FileStats, PartitionView, TableRecord
    from siltlake.deployment import Deployment

__all__ = ["TableInspect", "history_rows", "with_stats"]

_FOOTER_READERS = 16


def _time_type() -> pa.DataType:
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def _naive_utc(value: Any) -> dt.datetime | None:
    """A footer statistic or catalog time as naive UTC (None: not a time)."""
    if not isinstance(value, dt.datetime):
        return None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def _physical_time_column(record: TableRecord) -> str | None:
    """The name objects hold the event time column under (None: a derived table without one)."""
    definition = record.definition
    return next((c.physical_name for c in definition.columns if c.name == definition.time_column), None)


def _footer_stats(deployment: Deployment, key: str, time_column: str | None) -> FileStats:
    """Size, rows, min and max event time of one Parquet file from its footer; a time is None when the file
    has no statistics of the column."""
    import pyarrow.parquet as pq

    from siltlake.catalog.rows import FileStats

    lake = deployment.lake
    with lake.open_input_file(key) as handle:
        size = handle.size()
        footer = pq.read_metadata(handle)
    low: dt.datetime | None = None
    high: dt.datetime | None = None
    names = footer.schema.to_arrow_schema().names
    if time_column in names and footer.num_row_groups:
        index = names.index(time_column)
        stats = [footer.row_group(i).column(index).statistics for i in range(footer.num_row_groups)]
        if all(s is not None and s.has_min_max for s in stats):
            # A column that holds no timestamps (a file written by hand) has statistics that are no times: then
            # none is known, rather than a comparison of None with a time failing.
            lows = [time for s in stats if (time := _naive_utc(s.min)) is not None]
            highs = [time for s in stats if (time := _naive_utc(s.max)) is not None]
            if len(lows) == len(highs) == len(stats):
                low, high = min(lows), max(highs)
    return FileStats(size, footer.num_rows, low, high)


def with_stats(deployment: Deployment, record: TableRecord, files: list[DataFile]) -> list[DataFile]:
    """The files with their size, row count and event time range filled in: a small object's from the
    catalog; a merge range's object too, where the merge kept every row of its small objects (a table
    without a primary key); any other file's from its Parquet footer."""
    catalog = deployment.catalog
    names = {f.uri: f.uri.rsplit("/", 1)[-1] for f in files}
    ids = {uri: small_object_id(name) for uri, name in names.items()}
    recorded = catalog.partitions.object_stats([i for i in ids.values() if i is not None])
    stats: dict[str, FileStats] = {uri: recorded[i] for uri, i in ids.items() if i in recorded}
    bounds = {f.uri: (f.partition_date, *found) for f in files if (found := merge_range_of(names[f.uri]))}
    if bounds and not record.definition.keyed:
        ranges = catalog.merge_queue.range_stats(record.id, {day for day, _, _ in bounds.values()})
        stats.update({uri: ranges[key] for uri, key in bounds.items() if key in ranges})
    unrecorded = [f for f in files if f.uri not in stats]
    if unrecorded:
        keys = lake_keys(deployment, record, unrecorded)
        time_column = _physical_time_column(record)
        with ThreadPoolExecutor(min(_FOOTER_READERS, len(keys))) as pool:
            footers = pool.map(lambda key: _footer_stats(deployment, key, time_column), keys)
            stats.update(zip((f.uri for f in unrecorded), footers, strict=True))
    return [
        DataFile(
            f.uri,
            f.partition_date,
            size=stats[f.uri].content_length,
            rows=stats[f.uri].row_count,
            min_event_time=stats[f.uri].min_event_time,
            max_event_time=stats[f.uri].max_event_time,
            partition_values=f.partition_values,
        )
        for f in files
    ]


def _kind(uri: str) -> str:
    """What a data file is, by where it lies: live or delayed (a small object), merged (a merge range's or an
    update's object), or derived (a derived table build's)."""
    area = uri.rsplit("/", 3)[-3] if uri.count("/") >= 3 else ""
    return area if area in ("live", "delayed", "merged") else "derived"


class TableInspect:
    """Table.inspect: one table's metadata tables, each a pyarrow Table. Those of a table version (files,
    partitions) take as_of_version=, as_of= and dates= as the table's readers do."""

    def __init__(self, deployment: Deployment, record: TableRecord) -> None:
        self.deployment = deployment
        self.record = record

    def _views(
        self, as_of_version: int | str | None, as_of: dt.datetime | str | None, dates: Any
    ) -> list[PartitionView]:
        return self.deployment.catalog.version_reads.reader_snapshot(
            self.record.id,
            as_of_version=version_number(self.deployment, self.record, as_of_version),
            as_of=parse_as_of(as_of) if as_of is not None else None,
            table_name=self.record.qualified_name,
            dates=parse_dates(dates),
        )

    def files(
        self, as_of_version: int | str | None = None, as_of: dt.datetime | str | None = None, dates: Any = None
    ) -> pa.Table:
        """One row per data file of the table version: file_path (URI), dt, kind (live, delayed, merged,
        derived), file_size_in_bytes, record_count, min_event_time, max_event_time. A keyed table's partition
        waiting for its merge may hold several rows of a key: record_count counts rows in files."""
        import pyarrow as pa

        files = with_stats(
            self.deployment,
            self.record,
            partition_files(self.deployment, self.record, self._views(as_of_version, as_of, dates)),
        )
        return pa.table(
            {
                "file_path": pa.array([f.uri for f in files], pa.string()),
                "dt": pa.array([f.partition_date for f in files], pa.date32()),
                "kind": pa.array([_kind(f.uri) for f in files], pa.string()),
                "file_size_in_bytes": pa.array([f.size for f in files], pa.int64()),
                "record_count": pa.array([f.rows for f in files], pa.int64()),
                "min_event_time": pa.array([f.min_event_time for f in files], _time_type()),
                "max_event_time": pa.array([f.max_event_time for f in files], _time_type()),
            }
        )

    def partitions(
        self, as_of_version: int | str | None = None, as_of: dt.datetime | str | None = None, dates: Any = None
    ) -> pa.Table:
        """One row per partition the table version shows: dt, partition_values (its values below dt, for a table with
        partition_by; "" otherwise), state (the partition's state now, one of siltlake.catalog.PARTITION_STATES: new,
        live, closed, switched), version (the partition version shown; null: never published, its live objects
        shown), table_version (the one that published it), objects, rows, bytes, min_event_time, max_event_time."""
        import pyarrow as pa

        views = self._views(as_of_version, as_of, dates)
        files = with_stats(self.deployment, self.record, partition_files(self.deployment, self.record, views))
        states = {
            (p.partition_date, p.partition_values): p.state
            for p in self.deployment.catalog.partitions.list(self.record.id)
        }
        by_partition: dict[tuple[dt.date, str], list[DataFile]] = {}
        for f in files:
            by_partition.setdefault((f.partition_date, f.partition_values), []).append(f)
        keys = [(view.partition_date, view.partition_values) for view in views]
        shown = [by_partition.get(key, []) for key in keys]
        lows = [[f.min_event_time for f in part if f.min_event_time is not None] for part in shown]
        highs = [[f.max_event_time for f in part if f.max_event_time is not None] for part in shown]
        return pa.table(
            {
                "dt": pa.array([date for date, _ in keys], pa.date32()),
                "partition_values": pa.array([values for _, values in keys], pa.string()),
                "state": pa.array([states[key] for key in keys], pa.string()),
                "version": pa.array([view.version for view in views], pa.int64()),
                "table_version": pa.array([view.table_version for view in views], pa.int64()),
                "objects": pa.array([len(part) for part in shown], pa.int64()),
                "rows": pa.array([sum(f.rows or 0 for f in part) for part in shown], pa.int64()),
                "bytes": pa.array([sum(f.size or 0 for f in part) for part in shown], pa.int64()),
                "min_event_time": pa.array([min(times) if times else None for times in lows], _time_type()),
                "max_event_time": pa.array([max(times) if times else None for times in highs], _time_type()),
            }
        )

    def history(self) -> pa.Table:
        """Every retained partition version, then the table versions that changed the definition: as
        Table.history() lists them (dt, version, table_version, op, shows, created_at, rows, bytes)."""
        import pyarrow as pa

        rows = _history(self.deployment, self.record)
        return pa.table(
            {
                "dt": pa.array([dt.date.fromisoformat(r["date"]) if r["date"] else None for r in rows], pa.date32()),
                "version": pa.array([r["version"] for r in rows], pa.int64()),
                "table_version": pa.array([r["table_version"] for r in rows], pa.int64()),
                "op": pa.array([r["op"] for r in rows], pa.string()),
                "shows": pa.array([r["shows"] for r in rows], pa.string()),
                "created_at": pa.array([r["created_at"] for r in rows], _time_type()),
                "rows": pa.array([r["rows"] for r in rows], pa.int64()),
                "bytes": pa.array([r["bytes"] for r in rows], pa.int64()),
            }
        )

    def versions(self) -> pa.Table:
        """One row per retained table version, oldest first (PyIceberg's snapshots): table_version,
        created_at, operations (the ops of its commit: append, compaction, update, merge, set), dates it
        changed, readable (time travel to it works), and, for a readable one, the rows and bytes the
        table's published partitions held after it."""
        import pyarrow as pa

        catalog = self.deployment.catalog
        partitions = catalog.partitions.list(self.record.id)
        dates = {p.id: p.partition_date for p in partitions}
        oldest, _ = catalog.version_reads.table_bounds(self.record.id)
        tagged = {tag.table_version for tag in catalog.tags.list(self.record.id)}  # kept by reap, however old
        commits: dict[int, dict] = {}
        for v in catalog.versions.of_partitions(list(dates)):
            commit = commits.setdefault(v.table_version, {"created_at": v.created_at, "ops": set(), "changed": {}})
            commit["ops"].add(v.commit_op)
            commit["changed"][v.partition_id] = v
        for change in catalog.tables.changes(self.record.id):
            commit = commits.setdefault(
                change.table_version, {"created_at": change.created_at, "ops": set(), "changed": {}}
            )
            commit["ops"].add(change.op)
        shown: dict[int, tuple[int, int]] = {}  # partition id: (rows, bytes) of its newest version so far
        out: list[dict] = []
        for number in sorted(commits):
            commit = commits[number]
            shown.update({pid: (v.row_count, v.byte_count) for pid, v in commit["changed"].items()})
            readable = number >= oldest or number in tagged
            out.append(
                {
                    "table_version": number,
                    "created_at": commit["created_at"],
                    "operations": sorted(commit["ops"]),
                    "dates": sorted(dates[p] for p in commit["changed"]),
                    "readable": readable,
                    "rows": sum(r for r, _ in shown.values()) if readable else None,
                    "bytes": sum(b for _, b in shown.values()) if readable else None,
                }
            )
        return pa.table(
            {
                "table_version": pa.array([r["table_version"] for r in out], pa.int64()),
                "created_at": pa.array([r["created_at"] for r in out], _time_type()),
                "operations": pa.array([r["operations"] for r in out], pa.list_(pa.string())),
                "dates": pa.array([r["dates"] for r in out], pa.list_(pa.date32())),
                "readable": pa.array([r["readable"] for r in out], pa.bool_()),
                "rows": pa.array([r["rows"] for r in out], pa.int64()),
                "bytes": pa.array([r["bytes"] for r in out], pa.int64()),
            }
        )

    def merge_jobs(self, now: dt.datetime | None = None) -> pa.Table:
        """The table's jobs in the merge queue, by id: job_id, dt, state (scheduled, due, running, stale,
        continuing, failed: parked until `silt merge --retry-failed`), schedule_time, heartbeat_time, attempts,
        owner, last_error. Finished jobs leave the queue (`silt merge` logs them)."""
        import pyarrow as pa

        from siltlake.clock import utcnow
        from siltlake.hosts import local_host

        jobs = self.deployment.catalog.merge_queue.of_table(
            self.record.id, now or utcnow(), self.deployment.config.merge.job_timeout, local_host()
        )
        return pa.table(
            {
                "job_id": pa.array([j["job_id"] for j in jobs], pa.int64()),
                "dt": pa.array([j["date"] for j in jobs], pa.date32()),
                "state": pa.array([j["state"] for j in jobs], pa.string()),
                "schedule_time": pa.array([j["schedule_time"] for j in jobs], _time_type()),
                "heartbeat_time": pa.array([j["heartbeat_time"] for j in jobs], _time_type()),
                "attempts": pa.array([j["attempts"] for j in jobs], pa.int64()),
                "owner": pa.array([j["owner"] for j in jobs], pa.string()),
                "last_error": pa.array([j["last_error"] for j in jobs], pa.string()),
            }
        )


def history_rows(deployment: Deployment, record: TableRecord, date: dt.date | None = None) -> list[dict]:
    """The published versions of every partition (or of one: NoSuchPartition if it has none), oldest first
    per partition: date, version (the partition's), table_version, op, shows, created_at (UTC, to the second),
    rows, bytes; then, for the whole table, the versions that changed its definition (`set`: date, version,
    rows and bytes None)."""
    return [
        {**row, "created_at": row["created_at"].isoformat(sep=" ", timespec="seconds")}
        for row in _history(deployment, record, date)
    ]


def _history(deployment: Deployment, record: TableRecord, date: dt.date | None = None) -> list[dict]:
    """history_rows with created_at as a naive UTC datetime."""
    catalog = deployment.catalog
    partitions = catalog.partitions.list(record.id)
    if date is not None:
        partitions = [p for p in partitions if p.partition_date == date]
        if not partitions:
            raise NoSuchPartition(f"{record.qualified_name} has no partition {date.isoformat()}")
    dates = {p.id: p.partition_date.isoformat() for p in partitions}
    return [
        {
            "date": dates[v.partition_id],
            "version": v.version,
            "op": v.commit_op,
            "shows": v.shows(),
            "created_at": v.created_at,
            "rows": v.row_count,
            "bytes": v.byte_count,
            "table_version": v.table_version,
        }
        for v in catalog.versions.of_partitions(list(dates))
    ] + (
        []
        if date is not None
        else [
            {
                "date": None,
                "version": None,
                "op": change.op,
                "shows": change.detail,
                "created_at": change.created_at,
                "rows": None,
                "bytes": None,
                "table_version": change.table_version,
            }
            for change in catalog.tables.changes(record.id)
        ]
    )
