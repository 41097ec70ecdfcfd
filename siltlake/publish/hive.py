"""The Hive metastore publish target, through Spark SQL DDL on a Hive-enabled session.

A siltlake table `schema.table` is the external table `<database_prefix><schema>.<table>`, partitioned by
`dt DATE` and then by each of its partition_by fields (an identity field as its column, typed as it, and not
among the data columns: a Hive partition column cannot be both; a bucket field as `<column>_bucket INT`), stored
as SymlinkTextInputFormat with the Parquet SerDe. Each siltlake partition (date, values) is one metastore
partition, which points at the directory holding the symlink manifest of its newest version (live, merged or
updated alike), never at a data directory, where old objects and a crashed writer's uncommitted ones sit. A
live version published before file lists existed (migration 0006) has no manifest: its partition keeps the live
directory, as Parquet, until its next version. Spark SQL cannot set a partition's input format (SET FILEFORMAT is
refused) nor change a column's type (CHANGE COLUMN refuses int -> bigint), so those two go through
Spark's ExternalCatalog over py4j; everything else is DDL. A keyed table's partition points at its newest
version that needs no merge on read (one merged object), and is left out until it has one.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from siltlake.errors import ConfigError, SiltError
from siltlake.partspec import NULL_TEXT
from siltlake.publish.targets import drop_forgotten_tables
from siltlake.read.expression_sql import spark_string
from siltlake.records.keyed import needs_merge_on_read
from siltlake.spark import jvm
from siltlake.storage.keys import symlink_directory
from siltlake.storage.manifests import read_manifest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from siltlake.catalog import PartitionToSync, PublishedVersion, Removals, SyncedTable, TableRecord
    from siltlake.deployment import Deployment

TARGET = "hive"
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
SYMLINK_INPUT = "org.apache.hadoop.hive.ql.io.SymlinkTextInputFormat"
SYMLINK_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
_HIVE_TYPES = {
    "string": "STRING",
    "json": "STRING",
    "int": "INT",
    "bigint": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
}
_PARTITIONS_PER_STATEMENT = 100


def hive_type(type_name: str) -> str:
    return _HIVE_TYPES.get(type_name) or type_name.upper()  # decimal(p,s)


def _copy(case_object, *first):  # py4j proxies of Scala case classes
    """case_object.copy(*first, <the other fields as they are>): the field count differs between Spark
    versions (CatalogStorageFormat gained a seventh in 4.x), so the rest come from copy's defaults."""
    fields = sum(1 for m in case_object.getClass().getMethods() if m.getName().startswith("copy$default$"))
    rest = [getattr(case_object, f"copy$default${k}")() for k in range(len(first) + 1, fields + 1)]
    return case_object.copy(*first, *rest)


def _columns(record: TableRecord) -> tuple[tuple[str, str], ...]:
    """The data columns as objects hold them: Hive reads Parquet columns by name, and a renamed column's objects
    hold it under its physical name (a column added under a dropped one's name has a physical name of its own).
    An identity partition column is left out: the metastore refuses a partition column that is also a data
    column, and readers take its value from the partition."""
    identity = {f.column for f in record.definition.partition_fields if f.buckets is None}
    return tuple((c.physical_name, c.type) for c in record.definition.columns if c.name not in identity)


def partition_columns(record: TableRecord) -> tuple[tuple[str, str], ...]:
    """The external table's partition columns: dt, then each partition_by field (a bucket is an int)."""
    types = {c.name: c.type for c in record.definition.columns}
    fields = record.definition.partition_fields
    return (("dt", "date"), *((f.name, types[f.column] if f.buckets is None else "int") for f in fields))


def partition_spec(date: dt.date, values: str) -> tuple[tuple[str, str], ...]:
    """A siltlake partition as the metastore names it: (column, value text) for dt and each field of its values
    path, unescaped. A null keeps Hive's default partition name, which the metastore and its readers take as null."""
    fields = [segment.partition("=") for segment in values.split("/")] if values else []
    return (("dt", date.isoformat()), *((name, unquote(text)) for name, _, text in fields))


def partition_of_spec(spec: Sequence[tuple[str, str]]) -> tuple[dt.date, str]:
    """The (date, values path) of a metastore partition's (column, value text) pairs: partition_spec reversed."""
    (_, date), *fields = spec
    values = "/".join(f"{name}={text if text == NULL_TEXT else quote(text, safe='')}" for name, text in fields)
    return dt.date.fromisoformat(date), values


def _comparable(location: str) -> str:
    return location.rstrip("/").replace("file:///", "file:/")


def _named(p: PartitionToSync) -> tuple[dt.date, str]:
    """A partition as the metastore tells partitions apart: by date and values."""
    return p.partition_date, p.partition_values


def _spec_sql(spec: Sequence[tuple[str, str]]) -> str:
    return "PARTITION (" + ", ".join(f"`{name}` = {spark_string(text)}" for name, text in spec) + ")"


def derby_locked(metastore_dir: str) -> bool:
    """Whether another process has the embedded metastore's Derby database booted (it holds dbex.lck)."""
    lock = Path(metastore_dir).expanduser().resolve() / "metastore_db" / "dbex.lck"
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock at once
    return False


class HiveTarget:
    name = TARGET

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.config = deployment.config.publish.hive
        self.database_prefix = self.config.database_prefix  # a subclass sets its own (Glue's)
        self.catalog = deployment.catalog
        self._session: SparkSession | None = None
        self.statements: list[str] = []

    # --- metastore access ---------------------------------------------------------------------------

    def _spark(self) -> SparkSession:
        if self._session is None:
            spark = self.deployment.spark()
            implementation = spark.conf.get("spark.sql.catalogImplementation", "in-memory")
            if implementation != "hive":
                raise ConfigError(
                    "publish.targets includes hive, but the Spark session has no Hive support "
                    f"(spark.sql.catalogImplementation={implementation}): it was started without the hive "
                    "target's settings; let Deployment.spark() start it, or set spark.sql.catalogImplementation=hive"
                )
            self._session = spark
        return self._session

    def _failure(self, exc: Exception, what: str) -> SiltError:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not self.config.metastore_uris and derby_locked(self.config.metastore_dir):
            return SiltError(
                f"the embedded Hive metastore at {self.config.metastore_dir} is in use by another process (Derby "
                "allows one JVM at a time): stop the other silt publish/notebook using it, or set "
                "publish.hive.metastore_uris to a shared metastore"
            )
        return SiltError(f"Hive metastore: {what} failed: {message}")

    def _sql(self, statement: str) -> None:
        try:
            self._spark().sql(statement).collect()
        except SiltError:
            raise
        except Exception as exc:  # AnalysisException, Py4JJavaError: the metastore's own errors
            raise self._failure(exc, statement) from None
        self.statements.append(statement)

    def _external_catalog(self):  # a py4j proxy of Spark's ExternalCatalog
        return self._spark()._jsparkSession.sessionState().catalog().externalCatalog()

    def _table_location(self, database: str, table: str) -> str | None:
        spark = self._spark()
        try:
            if not spark.catalog.tableExists(f"`{database}`.`{table}`"):
                return None
            return str(self._external_catalog().getTable(database, table).location())
        except Exception as exc:
            raise self._failure(exc, f"looking up {database}.{table}") from None

    # --- tables -------------------------------------------------------------------------------------

    def _names(self, record: TableRecord) -> tuple[str, str]:
        return self.database_prefix + record.definition.schema_name, record.definition.name

    def _uri(self, key: str) -> str:
        """A location as the metastore's readers open it (Spark's S3 connector: s3a://), unescaped: the metastore,
        Hadoop and Trino take a location's text as the path itself, where the lake's URIs escape what a key holds
        (the %XX of a partition value's path)."""
        return unquote(self.deployment.lake.engine_uri(key))

    def _live_location(self, record: TableRecord) -> str:
        return self._uri(record.layout(self.deployment.instance_key).live_prefix())

    def sync_tables(self, tables: Sequence[TableRecord]) -> list[str]:
        self.statements = []
        synced = drop_forgotten_tables(
            self.catalog,
            TARGET,
            tables,
            lambda old: self._sql(f"DROP TABLE IF EXISTS `{old.database_name}`.`{old.table_name}`"),
        )
        for record in tables:
            old = synced.get(record.id)
            database, table = self._names(record)
            columns = _columns(record)
            if old is not None and (old.database_name, old.table_name, old.columns) == (database, table, columns):
                continue
            if old is None or old.database_name != database or not self._alterable(old.columns, columns):
                # New, moved to another database (Spark renames within one only) or changed beyond adds
                # and widenings: (re)create it. External: dropping the old one leaves the objects alone.
                if old is not None:
                    self._sql(f"DROP TABLE IF EXISTS `{old.database_name}`.`{old.table_name}`")
                self._create(record, database, table)
                self.catalog.external_sync.record_table(
                    TARGET, record.id, database, table, columns, forget_partitions=True
                )
                continue
            if old.table_name != table:
                self._sql(f"ALTER TABLE `{database}`.`{old.table_name}` RENAME TO `{database}`.`{table}`")
            self._alter_columns(database, table, old.columns, columns)
            self.catalog.external_sync.record_table(TARGET, record.id, database, table, columns)
        return self.statements

    @staticmethod
    def _alterable(old: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]) -> bool:
        """Old columns kept in order (types equal or widened by the table), new ones appended."""
        return len(new) >= len(old) and all(a[0] == b[0] for a, b in zip(old, new, strict=False))

    def _create(self, record: TableRecord, database: str, table: str) -> None:
        location = self._live_location(record)
        existing = self._table_location(database, table)
        if existing is not None:
            # Ours from a run that stopped before recording it: recreate. Anyone else's: leave it be.
            if _comparable(unquote(existing)) != _comparable(location):
                raise SiltError(
                    f"Hive table {database}.{table} already exists and is not siltlake's table {record.qualified_name} "
                    f"(its location is {existing}); drop it there, or set publish.hive.database_prefix"
                )
            self._sql(f"DROP TABLE `{database}`.`{table}`")
        self._sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        columns = ", ".join(f"`{name}` {hive_type(kind)}" for name, kind in _columns(record))
        partitioned = ", ".join(f"`{name}` {hive_type(kind)}" for name, kind in partition_columns(record))
        # Partitions added later inherit this storage, so one pointing at a manifest directory is never
        # read as Parquet, not even between two metastore calls.
        self._sql(
            f"CREATE EXTERNAL TABLE `{database}`.`{table}` ({columns}) PARTITIONED BY ({partitioned}) "
            f"ROW FORMAT SERDE {spark_string(PARQUET_SERDE)} STORED AS INPUTFORMAT {spark_string(SYMLINK_INPUT)} "
            f"OUTPUTFORMAT {spark_string(SYMLINK_OUTPUT)} LOCATION {spark_string(location)}"
        )

    def _alter_columns(
        self, database: str, table: str, old: tuple[tuple[str, str], ...], new: tuple[tuple[str, str], ...]
    ) -> None:
        added = new[len(old) :]
        if added:
            self._sql(
                f"ALTER TABLE `{database}`.`{table}` ADD COLUMNS "
                f"({', '.join(f'`{name}` {hive_type(kind)}' for name, kind in added)})"
            )
        widened = [(name, kind) for (name, kind), (_, before) in zip(new, old, strict=False) if kind != before]
        if not widened:
            return
        # Spark SQL refuses CHANGE COLUMN int -> bigint on Hive tables; the metastore itself takes it.
        from pyspark.sql.types import StructType, _parse_datatype_string

        schema = _parse_datatype_string("struct<" + ",".join(f"`{n}`:{hive_type(k).lower()}" for n, k in new) + ">")
        assert isinstance(schema, StructType)
        try:
            spark = self._spark()
            self._external_catalog().alterTableDataSchema(
                database, table, spark._jsparkSession.parseDataType(schema.json())
            )
        except Exception as exc:
            raise self._failure(exc, f"widening columns of {database}.{table}") from None
        for name, kind in widened:
            self.statements.append(
                f"ALTER TABLE `{database}`.`{table}` CHANGE COLUMN `{name}` `{name}` "
                f"{hive_type(kind)} (by the metastore client)"
            )

    # --- partitions ---------------------------------------------------------------------------------

    def sync_partitions(self, tables: Mapping[int, TableRecord]) -> list[str]:
        """Drop what reap removed since the last run, then sync the partitions of the table versions published
        since each table's synced version: what is new, never the whole table (docs/design.md)."""
        self.statements = []
        synced = self.catalog.external_sync.synced_tables(self.name)
        partitions, upto = self.catalog.external_sync.partitions_to_sync(self.name)
        to_sync = {table_id: list(group) for table_id, group in groupby(partitions, key=lambda p: p.table_id)}
        removals = self.catalog.external_sync.removals(self.name)
        for table_id, names in synced.items():
            record = tables.get(table_id)
            if record is None or names.dropped:
                continue  # dropped meanwhile: the next step 3 drops it from the metastore
            if table_id in removals:
                self._drop_removed_partitions(names, removals[table_id])
            if names.synced_version == names.syncing_version == 0 and table_id in upto:
                self._drop_partitions_reaped_before_0018(record, names)
            if table_id in upto:
                self._sync_table_partitions(record, names, to_sync.get(table_id, []), upto[table_id])
        return self.statements

    def _drop_removed_partitions(self, names: SyncedTable, removals: Removals) -> None:
        """Drop the metastore's partitions reap removed: they point at manifests it deleted (a date published
        again since is added back by the partition sync that follows). IF EXISTS: a run that died before
        forgetting the removals drops them again."""
        self._drop_partitions(names, list(removals.partitions))
        self.catalog.external_sync.forget_removals(removals.ids)

    def _drop_partitions(self, names: SyncedTable, gone: list[tuple[dt.date, str]]) -> None:
        """Drop these (date, values) partitions; a date with values "" names all of the date's partitions."""
        qualified = f"`{names.database_name}`.`{names.table_name}`"
        for start in range(0, len(gone), _PARTITIONS_PER_STATEMENT):
            self._sql(
                f"ALTER TABLE {qualified} DROP IF EXISTS "
                + ", ".join(
                    _spec_sql(partition_spec(date, values))
                    for date, values in gone[start : start + _PARTITIONS_PER_STATEMENT]
                )
            )

    def _drop_partitions_reaped_before_0018(self, record: TableRecord, names: SyncedTable) -> None:
        """The first run over a table synced before revision 0018 (it has recorded partitions, but no synced
        version yet): reap removed partitions then without a removal row, so the metastore is asked once which
        partitions it shows and those the catalog no longer has are dropped (docs/design.md)."""
        known = {p.id: (p.partition_date, p.partition_values) for p in self.catalog.partitions.list(record.id)}
        if not self.catalog.external_sync.partition_manifests(self.name, list(known)):
            return  # a table new to the target: nothing it shows can be stale
        self._drop_partitions(names, sorted(self._shown_partitions(record, names) - set(known.values())))

    def _shown_partitions(self, record: TableRecord, names: SyncedTable) -> set[tuple[dt.date, str]]:
        """The (date, values) of the partitions the metastore has of the table."""
        qualified = f"`{names.database_name}`.`{names.table_name}`"
        try:
            # SHOW PARTITIONS names each as a path, its values escaped as Hive escapes them (%XX).
            return {
                partition_of_spec(
                    [(name, unquote(text)) for name, _, text in (s.partition("=") for s in row[0].split("/"))]
                )
                for row in self._spark().sql(f"SHOW PARTITIONS {qualified}").collect()
            }
        except Exception as exc:  # AnalysisException, Py4JJavaError: the metastore's own errors
            raise self._failure(exc, f"listing the partitions of {names.database_name}.{names.table_name}") from None

    def _sync_table_partitions(
        self, record: TableRecord, names: SyncedTable, partitions: list[PartitionToSync], upto: int
    ) -> None:
        """Add the partitions the metastore does not have and move the others; then record them, and table version
        `upto` as synced, in one transaction. What the metastore has is what the catalog recorded, unless a run
        died between its metastore calls and that record: then the metastore is asked (docs/design.md)."""
        layout = record.layout(self.deployment.instance_key)

        def location(p: PartitionToSync) -> str:
            if p.file_list_key is None:
                return self._uri(layout.live_partition(p.partition_date, p.partition_values))
            return self._uri(symlink_directory(p.file_list_key))

        if record.definition.keyed:
            partitions = self.keyed_partitions(partitions)
        if partitions:
            if names.syncing_version > names.synced_version:
                shown = self._shown_partitions(record, names)
            else:
                recorded = self.catalog.external_sync.partition_manifests(
                    self.name, [p.partition_id for p in partitions]
                )
                shown = {_named(p) for p in partitions if p.partition_id in recorded}
            self.catalog.external_sync.start_sync(self.name, record.id, upto)
            self._ensure_symlink_table(names)
            self._add_partitions(names, [(p, location(p)) for p in partitions if _named(p) not in shown])
            # New partitions took the table's symlink storage. A known one changes location (and input
            # format, should it have been a live directory) in one metastore call: Spark SQL can set
            # neither the format nor both at once.
            moved = [p for p in partitions if _named(p) in shown or p.file_list_key is None]
            if moved:
                self._set_storage(names, [(p, location(p)) for p in moved])
        self.catalog.external_sync.record_partitions(
            self.name, [(p.partition_id, p.file_list_key, location(p)) for p in partitions], upto=(record.id, upto)
        )

    def _add_partitions(self, names: SyncedTable, new: list[tuple[PartitionToSync, str]]) -> None:
        qualified = f"`{names.database_name}`.`{names.table_name}`"
        for start in range(0, len(new), _PARTITIONS_PER_STATEMENT):
            self._sql(
                f"ALTER TABLE {qualified} ADD IF NOT EXISTS "
                + " ".join(
                    f"{_spec_sql(partition_spec(p.partition_date, p.partition_values))} LOCATION {spark_string(where)}"
                    for p, where in new[start : start + _PARTITIONS_PER_STATEMENT]
                )
            )

    def keyed_partitions(self, partitions: list[PartitionToSync]) -> list[PartitionToSync]:
        """A keyed table's partitions as the metastore may show them: each at its newest version that needs no
        merge on read (a compaction's or an update's one object), left out while it has none, and not moved
        when the metastore already shows that version. Hive's readers cannot apply siltlake's row rule."""
        lake = self.deployment.lake

        def plain(file_list_key: str | None) -> bool:
            return file_list_key is not None and not needs_merge_on_read(
                [uri for uri, _ in read_manifest(lake, file_list_key)]
            )

        dirty = [p for p in partitions if not plain(p.file_list_key)]
        if not dirty:
            return partitions
        versions: dict[int, list[PublishedVersion]] = {}
        for version in self.catalog.versions.of_partitions([p.partition_id for p in dirty]):
            versions.setdefault(version.partition_id, []).append(version)
        shown = self.catalog.external_sync.partition_manifests(self.name, [p.partition_id for p in dirty])
        kept = [p for p in partitions if p not in dirty]
        for p in dirty:
            # Newest first; appends and upserts list small objects, so only these can be one merged object.
            key = next(
                (
                    v.file_list_key
                    for v in reversed(versions.get(p.partition_id, []))
                    if v.commit_op in ("compaction", "update")
                    and v.file_list_key != p.file_list_key
                    and plain(v.file_list_key)
                ),
                None,
            )
            if key is not None and shown.get(p.partition_id, "") != key:
                kept.append(replace(p, file_list_key=key))
        return sorted(kept, key=_named)

    def _ensure_symlink_table(self, names: SyncedTable) -> None:
        """A table created as Parquet (by an earlier siltlake) takes the symlink storage its new partitions inherit."""
        try:
            external = self._external_catalog()
            table = external.getTable(names.database_name, names.table_name)
            storage = table.storage()
            if storage.inputFormat().isDefined() and storage.inputFormat().get() == SYMLINK_INPUT:
                return
            some = jvm(self._spark()).scala.Some
            symlink = _copy(
                storage, storage.locationUri(), some(SYMLINK_INPUT), some(SYMLINK_OUTPUT), some(PARQUET_SERDE)
            )
            external.alterTable(_copy(table, table.identifier(), table.tableType(), symlink))
        except Exception as exc:
            raise self._failure(exc, f"setting the storage of {names.database_name}.{names.table_name}") from None
        self.statements.append(
            f"ALTER TABLE `{names.database_name}`.`{names.table_name}` SET SymlinkTextInputFormat "
            "(by the metastore client)"
        )

    def _set_storage(self, names: SyncedTable, moves: list[tuple[PartitionToSync, str]]) -> None:
        spark = self._spark()
        view = jvm(spark)
        utils = view.org.apache.spark.api.python.PythonUtils
        some = view.scala.Some
        try:
            external = self._external_catalog()
            changed = []
            for p, where in moves:
                partition = external.getPartition(
                    names.database_name,
                    names.table_name,
                    utils.toScalaMap(dict(partition_spec(p.partition_date, p.partition_values))),
                )
                symlink = p.file_list_key is not None
                storage = _copy(
                    partition.storage(),
                    # As Spark SQL's LOCATION takes it: the text is the path (a % in it is a %, not an escape).
                    some(view.org.apache.hadoop.fs.Path(where).toUri()),
                    some(SYMLINK_INPUT if symlink else PARQUET_INPUT),
                    some(SYMLINK_OUTPUT if symlink else PARQUET_OUTPUT),
                    some(PARQUET_SERDE),
                )
                changed.append(_copy(partition, partition.spec(), storage))
            external.alterPartitions(names.database_name, names.table_name, utils.toSeq(changed))
        except SiltError:
            raise
        except Exception as exc:
            raise self._failure(exc, f"setting partitions of {names.database_name}.{names.table_name}") from None
        for p, where in moves:
            fmt = "SymlinkTextInputFormat" if p.file_list_key is not None else "Parquet"
            self.statements.append(
                f"ALTER TABLE `{names.database_name}`.`{names.table_name}` "
                f"{_spec_sql(partition_spec(p.partition_date, p.partition_values))} SET LOCATION "
                f"{spark_string(where)} ({fmt}, by the metastore client)"
            )
