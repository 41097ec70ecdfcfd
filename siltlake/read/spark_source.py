"""siltlake as a Spark data source (PySpark's Python data source API), registered by `register(spark)`:

    spark.readStream.format("siltlake").option("table", "web.access").load()   # the change feed, a version a batch
    spark.read.format("siltlake").option("table", "web.access").option("versionAsOf", 3).load()

Options: `table` (required); `config` (a siltlake.toml; default: as `silt` finds it, $SILTLAKE_CONFIG or
./siltlake.toml); streaming: `startingVersion` (the first version whose changes are read: a number, or `latest`
for only versions published after the query starts; default 1, the whole history); batch: `versionAsOf` or
`timestampAsOf` (default: the current state). A stream's offsets are table versions, so a checkpointed query
restarts after the last version it committed; each version's changes are read in a task of their own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles, SupportsTriggerAvailableNow

from siltlake.errors import SiltError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from siltlake.deployment import Deployment

SOURCE_NAME = "siltlake"


def register(spark: SparkSession) -> None:
    """Make `format("siltlake")` known to the session's readers."""
    spark.dataSource.register(SiltlakeSource)


def _open(options: Mapping[str, str]) -> Deployment:
    from siltlake.config import load_config
    from siltlake.deployment import Deployment

    deployment = Deployment.open(load_config(options.get("config")))
    deployment.catalog.check_ready()
    return deployment


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case names: Spark matches option names in any case."""
    return {name.lower(): value for name, value in options.items()}


def _pinned(options: dict[str, str]) -> str | None:
    """The option that pins a batch read to a table version (None: the change feed is read)."""
    given = [name for name in ("versionasof", "timestampasof") if options.get(name) is not None]
    if len(given) > 1:
        raise SiltError("give one of versionAsOf and timestampAsOf")
    return given[0] if given else None


def _first_version(options: dict[str, str], newest: int) -> int:
    """startingVersion: the first version whose changes are read (latest: none published so far)."""
    starting = options.get("startingversion", "1")
    if starting == "latest":
        return newest + 1
    try:
        first = int(starting)
    except ValueError:
        raise SiltError(f"startingVersion {starting!r}: give a table version (a number) or latest") from None
    if first < 1:
        raise SiltError(f"startingVersion {first}: table versions start at 1")
    return first


def _newest(options: dict[str, str]) -> int:
    deployment = _open(options)
    try:
        record = deployment.catalog.tables.get(_table_name(options))
        return deployment.catalog.version_reads.table_bounds(record.id).newest
    finally:
        deployment.close()


def _version_changes(options: dict[str, str], version: int) -> Iterator[pa.RecordBatch]:
    from siltlake.read.changes import table_changes
    from siltlake.read.version_files import table_schema

    deployment = _open(options)
    try:
        record = deployment.catalog.tables.get(_table_name(options))
        feed = table_changes(deployment, record, table_schema(record), version - 1, version)
    finally:
        deployment.close()
    yield from feed.to_batches()


def _table_name(options: dict[str, str]) -> str:
    name = options.get("table")
    if not name:
        raise SiltError('the siltlake source needs the table: .option("table", "schema.table")')
    return name


class SiltlakeSource(DataSource):
    """A siltlake table: its change feed as a stream, a version of it as a batch."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        # DDL text: this runs in a Python worker, where no Spark session parses types.
        deployment = _open(self.options)
        try:
            record = deployment.catalog.tables.get(_table_name(_lowered(self.options)))
            if not self._streaming:  # a version: its own columns and types
                pinned = VersionReader(_lowered(self.options))
                record = deployment.catalog.tables.definition_at(record, pinned.as_of_version, pinned.as_of)
        finally:
            deployment.close()
        spark_types = {"json": "string", "int": "int", "bigint": "bigint", "timestamp": "timestamp"}
        fields = [f"`{c.name.replace('`', '``')}` {spark_types.get(c.type, c.type)}" for c in record.definition.columns]
        fields.append("dt date NOT NULL")
        if self._streaming:
            fields += [
                "_change_type string NOT NULL",
                "_commit_version bigint NOT NULL",
                "_commit_timestamp timestamp NOT NULL",
            ]
        return ", ".join(fields)

    # Spark asks for the schema before it says whether it reads a stream or a batch, so the options decide:
    # with versionAsOf / timestampAsOf a table version, otherwise the change feed (a stream, or a batch of it).
    @property
    def _streaming(self) -> bool:
        return _pinned(_lowered(self.options)) is None

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _lowered(self.options)
        return ChangeBatchReader(options) if _pinned(options) is None else VersionReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # PySpark's name
        return ChangeStreamReader(_lowered(self.options))


class _Version(InputPartition):
    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"version": N}: everything up to table version N has been read. `maxVersionsPerTrigger`
    bounds the versions of one micro-batch (Spark's limit counts them as files)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.table = _table_name(options)
        self.available_now: int | None = None  # Trigger.AvailableNow: the newest version when the query started
        per_trigger = options.get("maxversionspertrigger")
        try:
            self.per_trigger = int(per_trigger) if per_trigger is not None else None
        except ValueError:
            raise SiltError(f"maxVersionsPerTrigger {per_trigger!r}: give a number of versions") from None
        if self.per_trigger is not None and self.per_trigger < 1:
            raise SiltError(f"maxVersionsPerTrigger {self.per_trigger}: give at least 1")

    def initialOffset(self) -> dict:  # PySpark's name
        return {"version": _first_version(self.options, _newest(self.options)) - 1}

    def getDefaultReadLimit(self) -> ReadLimit:  # PySpark's name
        return ReadAllAvailable() if self.per_trigger is None else ReadMaxFiles(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # PySpark's name
        self.available_now = _newest(self.options)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # PySpark's name
        newest = _newest(self.options) if self.available_now is None else self.available_now
        if isinstance(limit, ReadMaxFiles):
            newest = min(newest, int(start["version"]) + limit.max_files)
        return {"version": max(newest, int(start["version"]))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Version(v) for v in range(int(start["version"]) + 1, int(end["version"]) + 1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _version_changes(self.options, partition.version)  # type: ignore[attr-defined]

    def commit(self, end: dict) -> None:
        """Nothing to release: a version's changes stay readable until reap removes the version."""


class ChangeBatchReader(DataSourceReader):
    """The change feed of versions startingVersion to endingVersion (default: the newest), a version a task."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        newest = _newest(self.options)
        ending = self.options.get("endingversion")
        try:
            last = newest if ending is None else int(ending)
        except ValueError:
            raise SiltError(f"endingVersion {ending!r}: give a table version (a number)") from None
        from siltlake.read.changes import checked_range

        deployment = _open(self.options)
        try:
            record = deployment.catalog.tables.get(_table_name(self.options))
            first = _first_version(self.options, newest)
            checked_range(record, deployment.catalog.version_reads.table_bounds(record.id), first - 1, last)
        finally:
            deployment.close()
        return [_Version(v) for v in range(first, last + 1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _version_changes(self.options, partition.version)  # type: ignore[attr-defined]


class VersionReader(DataSourceReader):
    """One table version (versionAsOf or timestampAsOf), a partition date a task; the version is fixed when the
    query is planned, so every task reads the same one."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.table = _table_name(options)
        version, stamp = options.get("versionasof"), options.get("timestampasof")
        try:
            self.as_of_version = int(version) if version is not None else None
        except ValueError:
            raise SiltError(f"versionAsOf {version!r}: give a table version (a number)") from None
        self.as_of: dt.datetime | None = None
        if stamp is not None:
            from siltlake.read.version_files import parse_as_of

            self.as_of = parse_as_of(stamp)

    def partitions(self) -> list[InputPartition]:
        from siltlake.read.version_files import version_files

        deployment = _open(self.options)
        try:
            record = deployment.catalog.tables.get(self.table)
            files = version_files(deployment, record, as_of_version=self.as_of_version, as_of=self.as_of)
        finally:
            deployment.close()
        return [InputPartition(day.isoformat()) for day in sorted({f.partition_date for f in files})]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from siltlake.read.version_files import arrow_parts, table_schema, version_files

        deployment = _open(self.options)
        try:
            record = deployment.catalog.tables.definition_at(
                deployment.catalog.tables.get(self.table), self.as_of_version, self.as_of
            )
            files = version_files(
                deployment,
                record,
                as_of_version=self.as_of_version,
                as_of=self.as_of,
                dates={dt.date.fromisoformat(partition.value)},
            )
            plain, merged = arrow_parts(deployment, record, files, table_schema(record))
            rows = plain.to_table()
            if merged is not None:
                rows = pa.concat_tables([rows, merged]) if rows.num_rows else merged
        finally:
            deployment.close()
        yield from rows.to_batches()
