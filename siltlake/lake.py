"""The Python table API: a Lake (one deployment) and its Tables, read by any engine from exact file lists.

A table's state is read in one catalog snapshot (a constant number of queries, whatever the partitions)
and each partition's files come from its version's manifest: no directory is ever listed. Reading needs
pyarrow only; DuckDB, Polars and Spark are used when asked for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siltlake.config import Config, load_config
from siltlake.deployment import Deployment
from siltlake.errors import NoSuchPartition
from siltlake.read.scan import ReadPlans, Scan
from siltlake.read.version_files import parse_as_of
from siltlake.table_writes import TableWrites

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds
    from pyspark.sql import DataFrame, SparkSession

    from siltlake.catalog import TableRecord
    from siltlake.catalog.tags import Tag
    from siltlake.read.inspect import TableInspect
    from siltlake.read.metadata import TableMetadata
    from siltlake.read.query import SqlResult
    from siltlake.read.version_files import DataFile
    from siltlake.reap import ReapReport
    from siltlake.reap.maintenance import CompactReport, TableMaintenance
    from siltlake.write.alter import TableAlter
    from siltlake.write.retype import RetypeReport

__all__ = ["CompactReport", "Lake", "NoSuchPartition", "Table"]


class Lake:
    """A deployment's tables. `Lake.open()` reads the configuration as `silt` does ($SILTLAKE_CONFIG or
    ./siltlake.toml, then the environment); `Lake.open("path/to/siltlake.toml")` or `Lake.open(config)`
    name one; `Lake(deployment)` wraps an open Deployment."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    @classmethod
    def open(
        cls,
        config: Config | str | Path | None = None,
        *,
        catalog_url: str | None = None,
        storage_root: str | None = None,
    ) -> Lake:
        """Open the lake of a configuration (a Config or a TOML file's path; None: as `silt` finds it);
        catalog_url and storage_root override the configuration's."""
        if not isinstance(config, Config):
            config = load_config(config)
        if catalog_url is not None or storage_root is not None:
            config = config.model_copy(
                update={
                    "catalog": config.catalog.model_copy(update={"url": catalog_url or config.catalog.url}),
                    "storage": config.storage.model_copy(update={"root": storage_root or config.storage.root}),
                }
            )
        deployment = Deployment.open(config)
        deployment.catalog.check_ready()
        return cls(deployment)

    def table(self, name: str) -> Table:
        """The table `schema.table` (a NotFoundError if there is none)."""
        return Table(self, self.deployment.catalog.tables.get(name))

    def tables(self) -> list[str]:
        """The names of the tables, schema.table."""
        return sorted(record.qualified_name for record in self.deployment.catalog.tables.list())

    def list_tables(self) -> list[Table]:
        """Every table, in the catalog's order, from one catalog read."""
        return [Table(self, record) for record in self.deployment.catalog.tables.list()]

    def sql(
        self,
        query: str,
        *,
        as_of: dt.datetime | str | None = None,
        engine: str = "auto",
        limit: int | None = None,
        spark: SparkSession | Callable[[], SparkSession] | None = None,
        running: Callable[[str], AbstractContextManager[object]] | None = None,
    ) -> SqlResult:
        """Run SQL (Spark's syntax) over the tables, named schema.table, as `silt sql` does: DuckDB answers when it
        gives Spark's answer (engine "auto"; "duckdb": that or an error; "spark": always Spark). A reference pins
        its version with VERSION AS OF n | 'tag' or TIMESTAMP AS OF '...'; `as_of` reads every other as of that
        time. At most `limit` rows (None: all); .to_arrow(), .to_pylist(), .columns, .rows. `spark`: the session,
        or a function making one, when Spark answers (default: the lake's); `running`: given what runs now, the
        context it runs in (a progress display's)."""
        from siltlake.read.query import run_sql

        return run_sql(self.deployment, query, engine=engine, limit=limit, as_of=as_of, spark=spark, running=running)

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


class Table(TableWrites):
    """One table. Reads take `as_of_version` (a table version: the state after that commit; or a tag's name),
    `as_of` (a time: the versions published at or before it) or neither (the current state, which also
    shows live objects not yet published), and `dates` to read only some partitions."""

    def __init__(self, lake: Lake, record: TableRecord) -> None:
        self.lake = lake
        self.record = record
        # The current state's plans by the dates read: asking again costs one statement while nothing changed.
        self._plans = ReadPlans()

    @property
    def name(self) -> str:
        return self.record.qualified_name

    def __repr__(self) -> str:
        return f"Table({self.name})"

    def close(self) -> None:
        """Drop what the Table keeps between reads (its current-state plans). It holds no connection of its own:
        DuckDB connections are the caller's (to_duckdb), the catalog and Spark the Lake's (Lake.close). A closed
        Table may still be read; it plans again."""
        self._plans.by_dates.clear()

    def __enter__(self) -> Table:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def properties(self) -> dict[str, Any]:
        """The table's settings (ttl_days, merge_mode, codec, time_column, timezone, format, ...) as a new dict, as
        of this Table's definition; set_properties changes them."""
        from siltlake.read.metadata import table_properties

        return table_properties(self.record)

    @property
    def metadata(self) -> TableMetadata:
        """name, id, version, created_at, columns, partitioning, primary_key (keyed), kind, physical_name and
        settings_from (where each inherited setting comes from) as a frozen TableMetadata."""
        from siltlake.read.metadata import table_metadata

        catalog = self.lake.deployment.catalog
        sources = catalog.tables.setting_sources(self.record) if self.record.definition.kind == "log" else {}
        return table_metadata(self.record, self.version, sources)

    def partition_counts(self) -> list[dict[str, Any]]:
        """Per partition, now: date (ISO text), state, live and delayed objects and rows, bytes of the small
        objects, merged objects and rows; as `silt table show` lists them."""
        from decimal import Decimal

        rows = []
        for row in self.lake.deployment.catalog.partitions.summary(self.record.id):
            del row["closed"]  # the state says it: catalog.PARTITION_STATES
            # PostgreSQL sums integers as numeric: counts are ints whichever database the catalog is.
            counts = {key: int(value) if isinstance(value, Decimal) else value for key, value in row.items()}
            rows.append({**counts, "date": row["date"].isoformat()})
        return rows

    @property
    def schema(self) -> pa.Schema:
        """The table's columns (added columns included, every one nullable as read) and the partition column dt."""
        from siltlake.read.version_files import table_schema

        return table_schema(self.record)

    @property
    def version(self) -> int:
        """The newest table version (0: nothing published yet)."""
        return self.lake.deployment.catalog.version_reads.table_bounds(self.record.id).newest

    def versions(self) -> tuple[int, int]:
        """(oldest readable, newest) table version; older ones were reaped (but those tags name: Table.tags)."""
        bounds = self.lake.deployment.catalog.version_reads.table_bounds(self.record.id)
        return bounds.oldest, bounds.newest  # a plain pair, as documented and printed

    def tag(self, name: str, version: int | None = None, move: bool = False, now: dt.datetime | None = None) -> Tag:
        """Name table `version` (None: the newest); read it as as_of_version="name" or VERSION AS OF 'name'. Reap
        keeps what a tagged version shows, however old. A name that tags another version is refused unless `move`.
        With the Iceberg target, it is also an Iceberg tag on the version's snapshot."""
        from siltlake.publish.iceberg.follow import follow_tags

        number = self.version if version is None else version
        tag = self.lake.deployment.catalog.tags.add(self.record.id, name, number, self.name, now, move=move)
        follow_tags(self.lake.deployment, self.record)  # the Iceberg tag on its snapshot, at once
        return tag

    def untag(self, name: str) -> Tag:
        """Forget a tag: its version is reaped as any other once outside the retention window."""
        from siltlake.publish.iceberg.follow import follow_tags

        tag = self.lake.deployment.catalog.tags.remove(self.record.id, name, self.name)
        follow_tags(self.lake.deployment, self.record, {tag.name: tag.table_version})
        return tag

    @property
    def tags(self) -> dict[str, int]:
        """The table's tags: name -> table version, by version."""
        return {tag.name: tag.table_version for tag in self.lake.deployment.catalog.tags.list(self.record.id)}

    # --- reads: a Scan (siltlake.read.scan) and its outputs ------------------------------------------------------

    def scan(
        self,
        filter: Any = None,
        columns: Sequence[str] | None = None,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
        limit: int | None = None,
    ) -> Scan:
        """A read of the table version (an immutable Scan; its outputs plan and read): `filter` SQL text
        ("action = 'login' AND dt >= '2026-11-20'") or a pyarrow.compute expression (the days a condition on dt
        rules out are not even planned), `columns` the columns to read, `dates` the partitions, `limit` the rows.
        Outputs: to_arrow(), to_batches(), to_pandas(), to_polars(), to_duckdb(connection, view=),
        to_pyarrow_dataset(), files(), data_files(), count(); refinements: with_filter(), select(), with_dates(),
        with_version(), with_limit()."""
        return Scan.of(
            self.lake.deployment,
            self.record,
            self._plans,
            filter=filter,
            columns=columns,
            as_of_version=as_of_version,
            as_of=as_of,
            dates=dates,
            limit=limit,
        )

    def data_files(
        self,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
        filter: Any = None,
    ) -> list[DataFile]:
        """The exact data files of the table version, from its partitions' manifests (plus, for the
        current state, the live objects streamed since each partition's newest version, from the catalog),
        each with its size, row count and event time range (siltlake.read.inspect.with_stats); with `filter`,
        those of the partitions it does not rule out (their files may hold other rows too).
        A keyed table's partitions that need a merge on read have no plain file list: SiltError names them."""
        return self.scan(filter, as_of_version=as_of_version, as_of=as_of, dates=dates).data_files()

    def files(
        self,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
        filter: Any = None,
    ) -> list[str]:
        """The URIs (file:///..., s3://...) of exactly the data files of the table version; with `filter` (SQL
        text or a pyarrow expression), those of the partitions it does not rule out, which a reader applying
        the filter needs (their files may hold other rows too)."""
        return self.scan(filter, as_of_version=as_of_version, as_of=as_of, dates=dates).files()

    def to_pyarrow_dataset(
        self, as_of_version: int | str | None = None, as_of: dt.datetime | str | None = None, dates: Any = None
    ) -> ds.Dataset:
        """scan(...).to_pyarrow_dataset(): a pyarrow dataset over exactly the version's files, with the table's schema
        (dt from each file's partition; columns added later read as null, widened ones as their new type)."""
        return self.scan(as_of_version=as_of_version, as_of=as_of, dates=dates).to_pyarrow_dataset()

    def to_arrow(
        self,
        filter: Any = None,
        columns: list[str] | None = None,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
    ) -> pa.Table:
        """scan(filter, columns, ...).to_arrow(): the table version as an Arrow table."""
        return self.scan(filter, columns, as_of_version, as_of, dates).to_arrow()

    def to_pandas(
        self,
        filter: Any = None,
        columns: list[str] | None = None,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
    ) -> pd.DataFrame:
        """scan(filter, columns, ...).to_pandas(): to_arrow's rows as a pandas DataFrame."""
        return self.scan(filter, columns, as_of_version, as_of, dates).to_pandas()

    def to_duckdb(
        self,
        connection: Any,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
        filter: Any = None,
        view: str | None = None,
    ) -> Any:
        """scan(filter, ...).to_duckdb(connection, view): a DuckDB relation over the table version (DuckDB reads the
        exact file list itself); with `view`, a temporary view of that name, and the connection is returned."""
        return self.scan(filter, None, as_of_version, as_of, dates).to_duckdb(connection, view)

    def to_polars(
        self,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        dates: Any = None,
        filter: Any = None,
    ) -> Any:
        """scan(filter, ...).to_polars(): a Polars LazyFrame over the table version (needs polars installed)."""
        return self.scan(filter, None, as_of_version, as_of, dates).to_polars()

    def to_spark(
        self, spark: SparkSession, as_of_version: int | str | None = None, as_of: dt.datetime | str | None = None
    ) -> DataFrame:
        """A Spark DataFrame of the table version (siltlake.read.table)."""
        from siltlake.read import table as read_table
        from siltlake.read.version_files import version_number

        as_of_version = version_number(self.lake.deployment, self.record, as_of_version)
        return read_table(
            spark,
            self.name,
            self.lake.deployment,
            as_of_version=as_of_version,
            as_of=parse_as_of(as_of) if as_of is not None else None,
        )

    def changes(self, start_version: int, end_version: int | None = None, columns: list[str] | None = None) -> pa.Table:
        """The change feed: the rows each table version in (start_version, end_version] (None: the newest)
        inserted or deleted, with `_change_type` (insert, delete; for a keyed table's changed keys
        update_preimage then update_postimage), `_commit_version` and `_commit_timestamp`, in version order.
        A compaction changes no row; a delayed object appears in the version that first shows it. Versions
        reaped away raise VersionOutOfRange."""
        from siltlake.read.changes import table_changes

        return table_changes(self.lake.deployment, self.record, self.schema, start_version, end_version, columns)

    def alter(self, now: dt.datetime | None = None, dry_run: bool = False) -> TableAlter:
        """A TableAlter: several column and property changes committed as ONE table version (stamped `now`) at the
        end of a `with` block or at commit(): `with table.alter() as change: change.add_column("referrer", "string");
        change.rename_column("action", "event"); change.set_properties(ttl_days=30)` (siltlake.write.alter)."""
        from siltlake.write.alter import TableAlter

        return TableAlter(self.lake.deployment, self.name, now=now, dry_run=dry_run, on_commit=self._altered)

    def _altered(self, record: TableRecord) -> None:
        self.record = record

    def add_column(self, name: str, type_name: str, source: str | None = None, now: dt.datetime | None = None) -> None:
        """alter().add_column(...): a nullable column, a table version of its own."""
        self.alter(now=now).add_column(name, type_name, source).commit()

    def alter_column(
        self, name: str, type_name: str, rewrite: bool = False, now: dt.datetime | None = None, dry_run: bool = False
    ) -> RetypeReport:
        """Change a column's type. A widening (int to bigint, float to double) rewrites nothing: older objects read
        as the new type. Any other change needs rewrite=True: the partitions holding values in the column are
        rewritten as update versions, and rows whose value does not convert move to an error file (the report
        counts them and names it; `silt errors replay` stages them again once fixed). A dry run makes the change's
        checks and writes nothing."""
        from siltlake.write.retype import alter_column

        report = alter_column(
            self.lake.deployment, self.name, name, type_name, rewrite=rewrite, now=now, dry_run=dry_run
        )
        self.record = self.lake.deployment.catalog.tables.get(self.name)
        return report

    def rename_column(self, old: str, new: str, now: dt.datetime | None = None) -> None:
        """alter().rename_column(...): no object is rewritten, a table version of its own."""
        self.alter(now=now).rename_column(old, new).commit()

    def drop_column(self, name: str, now: dt.datetime | None = None) -> None:
        """alter().drop_column(...): no object is rewritten, a table version of its own."""
        self.alter(now=now).drop_column(name).commit()

    def set_properties(self, now: dt.datetime | None = None, **values: Any) -> str:
        """alter().set_properties(**values): typed values (ttl_days=30, ttl_days=None for no TTL, merge_interval=
        a timedelta or seconds, sizes in bytes, codec="zstd", ...), each daemon following them from its next run.
        The change is a table version of its own; what changed as `key=value ...` ("" if nothing did)."""
        change = self.alter(now=now).set_properties(**values).commit()
        return change.detail if change else ""

    # --- inspection and maintenance ------------------------------------------------------------------

    @property
    def inspect(self) -> TableInspect:
        """The table's metadata tables as Arrow tables: history(), versions(), files(), partitions(),
        merge_jobs() (siltlake.read.inspect)."""
        from siltlake.read.inspect import TableInspect

        return TableInspect(self.lake.deployment, self.record)

    def partitions(
        self, as_of_version: int | str | None = None, as_of: dt.datetime | str | None = None, dates: Any = None
    ) -> pa.Table:
        """The partitions of the table version, one row each: dt, partition_values (below dt; "" for a table
        partitioned by dt alone), state (new, live, closed, switched), version, table_version, objects, rows, bytes,
        min_event_time, max_event_time (inspect.partitions)."""
        return self.inspect.partitions(as_of_version, as_of, dates)

    def history(self, date: dt.date | None = None) -> list[dict]:
        """The published versions of every partition (or of one), oldest first per partition: date,
        version (the partition's), table_version, op, shows, created_at (UTC), rows, bytes; then, for the whole
        table, the versions that changed its definition (`set`: date, version, rows and bytes None)."""
        from siltlake.read.inspect import history_rows

        return history_rows(self.lake.deployment, self.record, date)

    @property
    def maintenance(self) -> TableMaintenance:
        """compact(dates=) and expire(dry_run=) of this table (siltlake.reap.maintenance)."""
        from siltlake.reap.maintenance import TableMaintenance

        return TableMaintenance(self.lake.deployment, self.record)

    def compact(
        self, dates: Any = None, now: dt.datetime | None = None, publish: bool = True, dry_run: bool = False
    ) -> CompactReport:
        """maintenance.compact(dates, now, publish, dry_run)."""
        return self.maintenance.compact(dates, now, publish, dry_run)


def __getattr__(name: str) -> Any:
    if name == "CompactReport":  # its home is siltlake.reap.maintenance, imported when asked for
        from siltlake.reap.maintenance import CompactReport

        return CompactReport
    raise AttributeError(f"module 'siltlake.lake' has no attribute {name!r}")
