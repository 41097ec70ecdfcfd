"""The Python table API: a Lake (one deployment) and its Tables, read by any engine from exact file lists.

A table's state is read in one catalog snapshot (a constant number of queries, whatever the partitions)
and each partition's files come from its version's manifest: no directory is ever listed. Reading needs
pyarrow only; DuckDB, Polars and Spark are used when asked for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siltlake.config import Config, load_config
from siltlake.deployment import Deployment
from siltlake.errors import NoSuchPartition, SiltError
from siltlake.read.versions import parse_as_of, parse_dates, version_files

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession

    from siltlake.catalog import TableRecord
    from siltlake.merge import MergeReport
    from siltlake.publish import PublishReport
    from siltlake.publish.append import AppendReport
    from siltlake.publish.requests import UpdatesReport
    from siltlake.publish.retype import RetypeReport
    from siltlake.publish.upsert import UpsertReport
    from siltlake.read.inspect import TableInspect
    from siltlake.read.versions import DataFile
    from siltlake.reap import ReapReport

__all__ = ["CompactReport", "Lake", "NoSuchPartition", "Table"]

_PLANS_HELD = 32  # current-state file lists a Table keeps (by the dates read)
_VIEWS_HELD = 8  # parsed view statements a plan keeps


@dataclasses.dataclass
class _CurrentPlan:
    """The current state's files of some dates, planned at a catalog state (Versions.current_state), and their
    DuckDB SELECT once made, when it reads only files (nothing registered on one connection)."""

    state: tuple[int, int]
    files: list[DataFile]
    duckdb_select: str | None = None
    # to_duckdb(view=)'s CREATE of that SELECT, parsed once, by view name (at most _VIEWS_HELD)
    duckdb_views: dict[str, Any] = dataclasses.field(default_factory=dict)


def _registered_name(table_id: int) -> str:
    """A name of its own for what one to_duckdb call registers on a connection (Arrow parts: S3, merged on read,
    a filter's scan)."""
    import uuid

    return f"__silt_table_{table_id}_{uuid.uuid4().hex[:12]}"


class Lake:
    """A deployment's tables. `Lake.open()` reads the configuration as `silt` does ($SILTLAKE_CONFIG or
    ./siltlake.toml, then the environment); `Lake.open("path/to/siltlake.toml")` or `Lake.open(config)`
    name one; `Lake(deployment)` wraps an open Deployment."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    @classmethod
    def open(cls, config: Config | str | Path | None = None, *, catalog_url: str | None = None,
             storage_root: str | None = None) -> Lake:
        """Open the lake of a configuration (a Config or a TOML file's path; None: as `silt` finds it);
        catalog_url and storage_root override the configuration's."""
        if not isinstance(config, Config):
            config = load_config(config)
        if catalog_url is not None or storage_root is not None:
            config = config.model_copy(update={
                "catalog": config.catalog.model_copy(update={"url": catalog_url or config.catalog.url}),
                "storage": config.storage.model_copy(update={"root": storage_root or config.storage.root}),
            })
        deployment = Deployment.open(config)
        deployment.catalog.check_ready()
        return cls(deployment)

    def table(self, name: str) -> Table:
        """The table `schema.table` (a NotFoundError if there is none)."""
        return Table(self, self.deployment.catalog.tables.get(name))

    def tables(self) -> list[str]:
        """The names of the tables, schema.table."""
        return sorted(record.qualified_name for record in self.deployment.catalog.tables.list())

    def reap(self, dry_run: bool = False, now: dt.datetime | None = None, **options: Any) -> ReapReport:
        """Delete what no retained table version, merge range or writer in flight needs, as `silt reap` does
        (siltlake.reap.reap_once: retention=, grace= seconds, force=, full=); dry_run lists without deleting."""
        from siltlake.reap import reap_once

        return reap_once(self.deployment, now, dry_run=dry_run, **options)

    def close(self) -> None:
        self.deployment.close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Lake({self.deployment.lake.root})"


class Table:
    """One table. Reads take `as_of_version` (a table version: the state after that publish commit),
    `as_of` (a time: the versions published at or before it) or neither (the current state, which also
    shows live objects not yet published), and `dates` to read only some partitions."""

    def __init__(self, lake: Lake, record: TableRecord) -> None:
        self.lake = lake
        self.record = record
        # The current state's plans by the dates read: asking again costs one statement while nothing changed.
        self._current: dict[frozenset[dt.date] | None, _CurrentPlan] = {}

    @property
    def name(self) -> str:
        return self.record.qualified_name

    def __repr__(self) -> str:
        return f"Table({self.name})"

    @property
    def schema(self) -> pa.Schema:
        """The table's columns (added columns included, every one nullable as read) and the partition column dt."""
        from siltlake.read.versions import table_schema

        return table_schema(self.record)

    @property
    def version(self) -> int:
        """The newest table version (0: nothing published yet)."""
        return self.versions()[1]

    def versions(self) -> tuple[int, int]:
        """(oldest readable, newest) table version; older ones were reaped."""
        return self.lake.deployment.catalog.versions.table_bounds(self.record.id)

    # --- files ----------------------------------------------------------------------------------------

    def data_files(self, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                   dates: Any = None) -> list[DataFile]:
        """The exact data files of the table version, from its partitions' manifests (plus, for the
        current state, the live objects streamed since each partition's newest version, from the catalog),
        each with its size, row count and event time range (siltlake.read.inspect.with_stats).
        A keyed table's partitions that need a merge on read have no plain file list: SiltError names them."""
        from siltlake.read.inspect import with_stats

        return with_stats(self.lake.deployment, self.record, self._plain_files(as_of_version, as_of, dates))

    def _plain_files(self, as_of_version: int | None, as_of: dt.datetime | str | None, dates: Any) -> list[DataFile]:
        """data_files without their statistics."""
        files = self._data_files(as_of_version, as_of, dates)
        dirty = self._dirty_dates(files)
        if dirty:
            listed = ", ".join(day.isoformat() for day in sorted(dirty))
            raise SiltError(
                f"{self.name} is keyed (primary key {', '.join(self.record.definition.primary_key)}) and its "
                f"partitions {listed} hold several rows of some keys until merged, so their files alone are not "
                "the table: read it with to_arrow(), to_duckdb() or to_spark(), which merge on read; or, once "
                "the day has closed, run `silt merge --once --now` and `silt publish --once` (or wait for them), "
                "after which each partition is one merged object")
        return files

    def _dirty_dates(self, files: list[DataFile]) -> set[dt.date]:
        """The dates whose files need a merge on read (none for a table without a primary key)."""
        from siltlake.read.versions import dirty_dates_of

        return dirty_dates_of(self.record, files)

    def _data_files(self, as_of_version: int | None, as_of: dt.datetime | str | None, dates: Any,
                    filter: Any = None) -> list[DataFile]:  # noqa: A002 - pyarrow's name
        """data_files, skipping the partitions whose dt the pyarrow expression `filter` rules out
        before their manifests are read."""
        if as_of_version is None and as_of is None and filter is None:
            return self._current_files(parse_dates(dates))
        return version_files(
            self.lake.deployment, self.record, as_of_version=as_of_version,
            as_of=parse_as_of(as_of) if as_of is not None else None, dates=parse_dates(dates),
            date_filter=None if filter is None else lambda present: _dates_passing(filter, present, self.schema))

    def _current_files(self, dates: set[dt.date] | None) -> list[DataFile]:
        return list(self._current_plan(dates).files)

    def _current_plan(self, dates: set[dt.date] | None) -> _CurrentPlan:
        key = None if dates is None else frozenset(dates)
        state = self.lake.deployment.catalog.versions.current_state(self.record.id, dates)
        planned = self._current.get(key)
        if planned is None or planned.state != state:
            files = version_files(self.lake.deployment, self.record, dates=dates)
            if len(self._current) >= _PLANS_HELD:
                self._current.clear()
            # Planned after reading the state: a change in between only makes the next call plan again.
            planned = self._current[key] = _CurrentPlan(state, files)
        return planned

    def files(self, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
              dates: Any = None) -> list[str]:
        """The URIs (file:///..., s3://...) of exactly the data files of the table version."""
        return [f.uri for f in self._plain_files(as_of_version, as_of, dates)]

    # --- readers --------------------------------------------------------------------------------------

    def to_pyarrow_dataset(self, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                           dates: Any = None) -> ds.Dataset:
        """A pyarrow dataset over exactly the version's files, with the table's schema (dt from each
        file's partition; columns added later read as null, widened ones as their new type). A keyed
        table's partitions that need a merge on read are read and merged now, held in memory."""
        return self._dataset(as_of_version, as_of, dates)

    def _dataset(self, as_of_version: int | None, as_of: dt.datetime | str | None, dates: Any,
                 filter: Any = None) -> ds.Dataset:  # noqa: A002 - pyarrow's name
        import pyarrow.dataset as ds

        plain, merged = self._parts(as_of_version, as_of, dates, filter)
        if merged is None:
            return plain
        return ds.UnionDataset(self.schema, [plain, ds.InMemoryDataset(merged)])

    def _parts(self, as_of_version: int | None, as_of: dt.datetime | str | None, dates: Any,
               filter: Any = None) -> tuple[ds.FileSystemDataset, pa.Table | None]:  # noqa: A002 - pyarrow's name
        """The version's partitions that are plain files, as a dataset, and (a keyed table's) those merged on
        read, as one table (None: no partition needs it)."""
        from siltlake.read.versions import arrow_parts

        files = self._data_files(as_of_version, as_of, dates, filter)
        return arrow_parts(self.lake.deployment, self.record, files, self.schema)

    def to_arrow(self, filter: Any = None, columns: list[str] | None = None,  # noqa: A002 - pyarrow's name
                 as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                 dates: Any = None) -> pa.Table:
        """The table version as an Arrow table; `filter` is a pyarrow.compute expression (e.g.
        pc.field("action") == "login"; the days a condition on dt rules out are not even planned),
        `columns` the columns to read."""
        import pyarrow as pa

        plain, merged = self._parts(as_of_version, as_of, dates, filter)
        table = plain.to_table(filter=filter, columns=columns)
        if merged is None:
            return table
        # Merged rows are already in memory: filtered and projected here, not scanned again as a dataset.
        if filter is not None:
            merged = merged.filter(filter)
        if columns is not None:
            merged = merged.select(columns)
        return pa.concat_tables([table, merged]) if table.num_rows else merged

    def to_duckdb(self, connection: Any, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                  dates: Any = None, filter: Any = None, view: str | None = None) -> Any:  # noqa: A002
        """A DuckDB relation over the table version; `connection` is a duckdb connection. DuckDB reads the exact
        file list itself (read_parquet, dt from each file's partition); a keyed table's partitions that need a
        merge on read are merged now and handed over as Arrow. `dates` and `filter` (a pyarrow.compute
        expression, as to_arrow's: days it rules out by dt are not even planned) narrow what is read; with a
        filter the rows are scanned through pyarrow's dataset, which applies it. With `view`, the version is
        made a temporary view of that name on the connection (replacing one of that name) and the connection is
        returned, as PyIceberg's `to_duckdb(table_name, connection)` does: one bind of the files fewer than a
        view made with the relation's create_view()."""
        from siltlake.read.duck import create_view, view_statement

        if filter is not None:
            dataset = self._dataset(as_of_version, as_of, dates, filter).filter(filter)
            if view is None:
                return connection.from_arrow(dataset)
            name = _registered_name(self.record.id)
            connection.register(name, dataset)
            create_view(connection, view, f'SELECT * FROM "{name}"', replace=True)
            return connection
        # The relation is the SELECT itself: DuckDB binds it (reads the files' footers) here; a view is bound at
        # each query over it.
        select, kept = self._duckdb_select(connection, as_of_version, as_of, dates)
        if view is None:
            return connection.sql(select)
        if kept is None:
            create_view(connection, view, select, replace=True)
            return connection
        statement = kept.duckdb_views.get(view)
        if statement is None:
            if len(kept.duckdb_views) >= _VIEWS_HELD:
                kept.duckdb_views.clear()
            statement = kept.duckdb_views[view] = view_statement(connection, view, select, replace=True)
        connection.execute(statement)
        return connection

    def _duckdb_select(self, connection: Any, as_of_version: int | None, as_of: dt.datetime | str | None,
                       dates: Any) -> tuple[str, _CurrentPlan | None]:
        """The DuckDB SELECT of the version's files, and the current state's plan that keeps it (None: made for
        this call only): the current state's is made once while it stays current."""
        from siltlake.read.duck import table_select

        if as_of_version is not None or as_of is not None:
            files, plan = self._data_files(as_of_version, as_of, dates), None
        else:
            plan = self._current_plan(parse_dates(dates))
            if plan.duckdb_select is not None:
                return plan.duckdb_select, plan
            files = plan.files
        made = table_select(connection, _registered_name(self.record.id), self.lake.deployment, self.record, files)
        if plan is None or made.registered:
            return made.sql, None
        plan.duckdb_select = made.sql
        return made.sql, plan

    def to_polars(self, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                  dates: Any = None, filter: Any = None) -> Any:  # noqa: A002 - pyarrow's name
        """A Polars LazyFrame over the table version (needs polars installed); `dates` and `filter` (a
        pyarrow.compute expression) as to_arrow's: only the days they leave are planned."""
        try:
            import polars
        except ImportError:
            raise SiltError("Table.to_polars needs the polars package, which is not installed: pip install polars; "
                            "or read with to_arrow()") from None
        dataset = self._dataset(as_of_version, as_of, dates, filter)
        return polars.scan_pyarrow_dataset(dataset if filter is None else dataset.filter(filter))

    def to_spark(self, spark: SparkSession, as_of_version: int | None = None,
                 as_of: dt.datetime | str | None = None) -> DataFrame:
        """A Spark DataFrame of the table version (siltlake.read.table)."""
        from siltlake.read import table as read_table

        return read_table(spark, self.name, self.lake.deployment, as_of_version=as_of_version,
                          as_of=parse_as_of(as_of) if as_of is not None else None)

    def changes(self, start_version: int, end_version: int | None = None,
                columns: list[str] | None = None) -> pa.Table:
        """The change feed: the rows each table version in (start_version, end_version] (None: the newest)
        inserted or deleted, with `_change_type` (insert, delete; for a keyed table's changed keys
        update_preimage then update_postimage), `_commit_version` and `_commit_timestamp`, in version order.
        A compaction changes no row; a delayed object appears in the version that first shows it. Versions
        reaped away raise VersionOutOfRange."""
        from siltlake.read.changes import table_changes

        return table_changes(self.lake.deployment, self.record, self.schema, start_version, end_version, columns)

    # --- writes -------------------------------------------------------------------------------------

    def delete(self, where: str, dates: Any, now: dt.datetime | None = None, request_id: str | None = None,
               dry_run: bool = False) -> UpdatesReport:
        """Delete the rows matching the Spark SQL predicate `where` from the partitions `dates` (a date, ISO
        text, several, or "all") as one table version, all of them or none (a missing date is refused first);
        runs on the deployment's Spark. Once per `request_id`: a retry with an id applied already changes nothing
        (the report's applied_before says what the first did). The report is a sequence of the partitions'."""
        from siltlake.publish.row_updates import delete_rows_where

        return delete_rows_where(self.lake.deployment, self.name, self._write_dates(dates, "delete"), where,
                                 request_id=request_id, now=now, dry_run=dry_run)

    def upsert(self, rows: Any, delete_column: str | None = None, now: dt.datetime | None = None,
               request_id: str | None = None) -> UpsertReport:
        """Replace the rows of the same (dt, primary key) with `rows` (a pyarrow Table, or a Spark DataFrame),
        as one `merge` version per date they fall on; rows whose `delete_column` is true delete their key. Once
        per `request_id`, as delete's."""
        import pyarrow

        from siltlake.publish.upsert import upsert

        if not isinstance(rows, pyarrow.Table) and hasattr(rows, "toArrow"):
            rows = rows.toArrow()  # a Spark DataFrame: the rows are small enough to pass through the driver
        if not isinstance(rows, pyarrow.Table):
            raise SiltError(f"{self.name}.upsert: give the rows as a pyarrow Table or a Spark DataFrame, "
                            f"not {type(rows).__name__}")
        return upsert(self.lake.deployment, self.name, rows, delete_column, now, request_id)

    def add_column(self, name: str, type_name: str, source: str | None = None, now: dt.datetime | None = None) -> None:
        """Add a nullable column; objects written before it read it as null. A table version of its own."""
        from siltlake.tabledef import Column

        column = Column.from_mapping({"name": name, "type": type_name, "source": source})
        self.record = self.lake.deployment.catalog.tables.add_column(self.name, column, now)

    def alter_column(self, name: str, type_name: str, rewrite: bool = False,
                     now: dt.datetime | None = None) -> RetypeReport:
        """Change a column's type. A widening (int to bigint, float to double) rewrites nothing: older objects read
        as the new type. Any other change needs rewrite=True: the partitions holding values in the column are
        rewritten as update versions, and rows whose value does not convert move to an error file (the report
        counts them and names it; `silt errors replay` stages them again once fixed)."""
        from siltlake.publish.retype import alter_column

        report = alter_column(self.lake.deployment, self.name, name, type_name, rewrite=rewrite, now=now)
        self.record = self.lake.deployment.catalog.tables.get(self.name)
        return report

    def rename_column(self, old: str, new: str, now: dt.datetime | None = None) -> None:
        """Rename a column; no object is rewritten (objects keep it under the name they hold it by), its input
        field stays the one it had."""
        self.record = self.lake.deployment.catalog.tables.rename_column(self.name, old, new, now)

    def drop_column(self, name: str, now: dt.datetime | None = None) -> None:
        """Drop a column; no object is rewritten, and its data never shows again (a column added later under its
        name reads null in older rows)."""
        self.record = self.lake.deployment.catalog.tables.drop_column(self.name, name, now)

    def set_properties(self, now: dt.datetime | None = None, **values: Any) -> str:
        """Set table properties (ttl_days, merge_mode, merge_interval, merged_object_size, row_group_bytes,
        codec, error_policy, unknown_fields; ttl_days=None: no TTL), each daemon following them from its next
        run. The change is a table version of its own; what changed as `key=value ...` ("" if nothing did)."""
        assignments = [f"{key}={'none' if value is None else value}" for key, value in values.items()]
        self.record, change = self.lake.deployment.catalog.tables.set_properties(self.name, assignments, now)
        return change.detail if change else ""

    # --- inspection and maintenance ------------------------------------------------------------------

    def to_pandas(self, filter: Any = None, columns: list[str] | None = None,  # noqa: A002 - pyarrow's name
                  as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                  dates: Any = None) -> pd.DataFrame:
        """The table version as a pandas DataFrame: to_arrow's rows, with its arguments."""
        return self.to_arrow(filter, columns, as_of_version, as_of, dates).to_pandas()

    @property
    def inspect(self) -> TableInspect:
        """The table's metadata tables as Arrow tables: history(), versions(), files(), partitions(),
        merge_jobs() (siltlake.read.inspect)."""
        from siltlake.read.inspect import TableInspect

        return TableInspect(self.lake.deployment, self.record)

    def partitions(self, as_of_version: int | None = None, as_of: dt.datetime | str | None = None,
                   dates: Any = None) -> pa.Table:
        """The partitions of the table version, one row each: dt, state (new, live, closed, switched),
        version, table_version, objects, rows, bytes, min_event_time, max_event_time (inspect.partitions)."""
        return self.inspect.partitions(as_of_version, as_of, dates)

    def history(self, date: dt.date | None = None) -> list[dict]:
        """The published versions of every partition (or of one), oldest first per partition: date,
        version (the partition's), table_version, op, shows, created_at (UTC), rows, bytes; then, for the whole
        table, the versions that changed its definition (`set`: date, version, rows and bytes None)."""
        from siltlake.read.inspect import history_rows

        return history_rows(self.lake.deployment, self.record, date)

    def compact(self, dates: Any = None, now: dt.datetime | None = None, publish: bool = True) -> CompactReport:
        """Merge the table's small objects now (of the partitions `dates`; None: all), as `silt merge --once
        --now` does for it, then (publish) run a publish, which shows closed days' merged objects as a
        `compaction` version; a day still open keeps showing its live objects until it closes. `now` (naive
        UTC) replaces the clock. Runs on the deployment's Spark (small jobs run in process)."""
        from siltlake.clock import utcnow
        from siltlake.merge import MergeWorker
        from siltlake.publish import publish_once

        deployment = self.lake.deployment
        partition_ids = None
        if dates is not None:
            wanted = parse_dates(dates) or set()
            present = {p.partition_date: p.id for p in deployment.catalog.partitions.list(self.record.id)}
            missing = sorted(wanted - set(present))
            if missing:
                raise NoSuchPartition(f"{self.name} has no partition {', '.join(d.isoformat() for d in missing)}")
            partition_ids = [present[day] for day in sorted(wanted)]
        clock = (lambda: now) if now is not None else utcnow
        deployment.catalog.merge_queue.advance(clock(), [self.record.id], partition_ids)
        merged = MergeWorker(deployment, table_ids=[self.record.id], partition_ids=partition_ids,
                             clock=clock).run(once=True)
        return CompactReport(merged, publish_once(deployment, now) if publish else None)

    # --- writes with request ids: append, update, restore (docs/design.md "Request ids and restore") ---------

    def _write_dates(self, dates: Any, operation: str) -> list[dt.date]:
        """The partitions a delete or update names: a date, ISO text, several, or "all"."""
        if isinstance(dates, str) and dates == "all":
            return sorted(p.partition_date for p in self.lake.deployment.catalog.partitions.list(self.record.id))
        wanted = sorted(parse_dates(dates) or ())
        if not wanted:
            raise SiltError(f"{self.name}.{operation}: give the partitions: a date, several, or dates='all'")
        return wanted

    def append(self, rows: Any, request_id: str | None = None, now: dt.datetime | None = None) -> AppendReport:
        """Append rows (a pyarrow Table, RecordBatch, or an iterable of batches such as a RecordBatchReader; the
        table's columns, nullable ones may be missing) in one commit, as the stream appends a staging object: small
        objects, live or delayed, merge jobs scheduled; readers of the current state see them at once, time travel
        from the next publish. Once per `request_id`: a retry with an id applied already appends nothing and the
        report's applied_before says so."""
        from siltlake.publish.append import append

        return append(self.lake.deployment, self.name, rows, request_id, now)

    def update(self, set: dict[str, Any], where: str | None = None, dates: Any = None,  # noqa: A002 - SQL's word
               request_id: str | None = None, now: dt.datetime | None = None, dry_run: bool = False) -> UpdatesReport:
        """SET columns (column -> a Spark SQL expression over the row, e.g. "upper(action)" or "'login'" for a
        text, or a Python value) in the rows matching the Spark SQL predicate `where` (None: every row) of the
        partitions `dates` (as delete's), as one `update` table version: all of them or none, once per
        `request_id`. Primary key columns are not set."""
        from siltlake.publish.row_updates import update_rows

        return update_rows(self.lake.deployment, self.name, set, where, self._write_dates(dates, "update"),
                           request_id=request_id, now=now, dry_run=dry_run)

    def restore(self, version: int | None = None, as_of: dt.datetime | str | None = None,
                request_id: str | None = None, now: dt.datetime | None = None, dry_run: bool = False) -> UpdatesReport:
        """Publish a new table version that shows what `version` (or the newest version at the time `as_of`)
        showed, partition by partition (those that differ are rewritten; one commit, refused as an update is
        on a conflict). A version reap has removed is refused, naming reap.retention. Once per `request_id`."""
        from siltlake.publish.restore import restore

        return restore(self.lake.deployment, self.name, version, parse_as_of(as_of) if as_of is not None else None,
                       request_id=request_id, now=now, dry_run=dry_run)


@dataclasses.dataclass(frozen=True)
class CompactReport:
    """What Table.compact did: the merge run's report and the publish run's (None: not asked for)."""

    merge: MergeReport
    publish: PublishReport | None


def _dates_passing(filter: Any, dates: list[dt.date], schema: pa.Schema) -> set[dt.date]:  # noqa: A002
    """The dates whose partitions the pyarrow expression `filter` does not rule out by dt alone: pyarrow
    simplifies the filter against each partition's `dt == date` (no file is opened; the paths are
    placeholders), so a filter on other columns keeps every date."""
    import pyarrow.dataset as ds
    import pyarrow.fs as fs

    ordered = sorted(set(dates))
    if not ordered:
        return set()
    probe = ds.FileSystemDataset.from_paths(
        [f"/{day.isoformat()}" for day in ordered], schema=schema, format=ds.ParquetFileFormat(),
        filesystem=fs.LocalFileSystem(), partitions=[ds.field("dt") == day for day in ordered])
    return {dt.date.fromisoformat(fragment.path.lstrip("/")) for fragment in probe.get_fragments(filter=filter)}
