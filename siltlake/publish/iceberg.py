"""The Apache Iceberg publish target, through PyIceberg (docs/design.md, "Iceberg target").

A siltlake table `schema.table` is the Iceberg table `<namespace_prefix><schema>.<table>`, partitioned by
identity on `dt`, whose data files are siltlake's own objects (registered, never copied or rewritten).
Each table version becomes one Iceberg snapshot listing exactly the files `Table.files(as_of_version=N)`
returns, with the version in its summary (`siltlake.table-version`): the current snapshot's summary says
how far the Iceberg table is, so a run that died after an Iceberg commit is never committed twice.
Each commit expires the snapshots older than publish.iceberg.snapshot_retention with it.
A keyed table's partition shows its newest version that needs no merge on read (one merged object), or
is left out: Iceberg readers cannot apply siltlake's row rule.
Metadata lives under `<instance>/_iceberg/<physical table>/metadata/`; reap keeps what a retained
snapshot needs, expires snapshots before deleting any file they list, and deletes the rest.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from siltlake.catalog.core import normalise_url
from siltlake.clock import utcnow
from siltlake.errors import ConfigError, SiltError
from siltlake.publish.iceberg_manifests import EPOCH, commit_files, day_bounds, expire_snapshots, partition_date
from siltlake.publish.targets import SomeTablesFailed, drop_forgotten_tables
from siltlake.read.keyed import dirty_dates
from siltlake.read.versions import version_files
from siltlake.storage.keys import iceberg_warehouse
from siltlake.tabledef import PARTITION_COLUMN

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as IcebergCatalog
    from pyiceberg.table import Table as IcebergTable

    from siltlake.catalog import SyncedTable, TableRecord
    from siltlake.deployment import Deployment

TARGET = "iceberg"
RUN_PROPERTY = "siltlake.publish-run"
VERSION_PROPERTY = "siltlake.table-version"
VERSION_TIME_PROPERTY = "siltlake.version-time"
REAP_PROPERTY = "siltlake.reap"
TABLE_ID_PROPERTY = "siltlake.table-id"
INSTANCE_PROPERTY = "siltlake.instance"
VERSION_HINT = "version-hint.text"
MANAGED_PROPERTIES = {
    # Snapshot summaries list each changed partition's counts (`partitions.dt=...`) up to this many partitions.
    "write.summary.partition-limit": "100",
    # siltlake's reap deletes data files (siltlake's time travel may still need files no Iceberg snapshot lists):
    # an engine's expire_snapshots or remove_orphan_files must not.
    "gc.enabled": "false",
}
_CATALOGS: dict[tuple[str, str, str], Any] = {}


def catalog_uri(deployment: Deployment) -> str:
    """The Iceberg catalog's URL: publish.iceberg.catalog_url, else beside siltlake's own catalog."""
    configured = deployment.config.publish.iceberg.catalog_url
    if configured:
        return configured if configured.startswith(("http://", "https://")) else normalise_url(configured)
    url = normalise_url(deployment.config.catalog.url)
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return f"sqlite:///{Path(url[len('sqlite:///'):]).with_name('iceberg.db')}"
    return url


def iceberg_path(deployment: Deployment, key: str) -> str:
    """The path Iceberg records for an object: its URI, not percent-encoded (Iceberg paths are plain text)."""
    return unquote(deployment.lake.uri(key))


def open_catalog(deployment: Deployment) -> IcebergCatalog:
    """The deployment's Iceberg catalog (one per URL in a process: a SQL catalog holds an engine)."""
    config = deployment.config.publish.iceberg
    uri = catalog_uri(deployment)
    warehouse = iceberg_path(deployment, iceberg_warehouse(deployment.instance_key))
    io = file_io_properties(deployment)
    cache_key = (uri, config.catalog_name, warehouse, tuple(sorted(io.items())))
    if cache_key not in _CATALOGS:
        if uri.startswith(("http://", "https://")):
            from pyiceberg.catalog.rest import RestCatalog

            _CATALOGS[cache_key] = RestCatalog(config.catalog_name, uri=uri, warehouse=warehouse, **io)
        else:
            from pyiceberg.catalog.sql import SqlCatalog

            if uri.startswith("sqlite:///"):
                Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
            _CATALOGS[cache_key] = SqlCatalog(config.catalog_name, uri=uri, warehouse=warehouse, **io)
    return _CATALOGS[cache_key]


def file_io_properties(deployment: Deployment) -> dict[str, str]:
    """PyIceberg's FileIO settings for the lake: on S3, pyarrow's S3 file system at storage.s3's endpoint and
    region (credentials from the usual AWS settings, as for siltlake's own reads and writes)."""
    if not deployment.lake.is_object_store:
        return {}
    s3 = deployment.config.storage.s3
    properties = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    if s3.endpoint_override:
        properties["s3.endpoint"] = f"{s3.scheme}://{s3.endpoint_override}"
    region = s3.region or (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
                           if s3.endpoint_override else None)
    if region:
        properties["s3.region"] = region
    return properties


def identifier(deployment: Deployment, record: TableRecord) -> tuple[str, str]:
    prefix = deployment.config.publish.iceberg.namespace_prefix
    return prefix + record.definition.schema_name, record.definition.name


def _iceberg_type(arrow_type: Any) -> Any:  # noqa: ANN401 - pyarrow type in, Iceberg type out
    from pyiceberg.io.pyarrow import _ConvertToIcebergWithoutIDs, visit_pyarrow

    return visit_pyarrow(arrow_type, _ConvertToIcebergWithoutIDs())


def iceberg_schema(record: TableRecord) -> Any:  # noqa: ANN401 - a pyiceberg Schema
    """The table's columns (all optional: older objects lack added ones) and dt, with the definition's field ids
    (the ids siltlake's objects carry)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, NestedField

    ids = record.definition.field_ids
    if ids is None:
        raise SiltError(f"{record.qualified_name}: the table has no field ids yet (assign_field_ids first)")
    fields = [NestedField(ids[f.name], f.name, _iceberg_type(f.type), required=False)
              for f in record.definition.arrow_schema()]
    fields.append(NestedField(ids[PARTITION_COLUMN], PARTITION_COLUMN, DateType(), required=False))
    return Schema(*fields)


def version_hint_key(deployment: Deployment, table: IcebergTable) -> str | None:
    """The key of the table's metadata/version-hint.text (None: the table's location is not in the lake)."""
    return _lake_key(deployment, f"{table.location().rstrip('/')}/metadata/{VERSION_HINT}")


def write_version_hint(deployment: Deployment, table: IcebergTable) -> None:
    """Point metadata/version-hint.text at the current metadata file, for readers given only the table's
    directory: it holds the file's name without `.metadata.json`, which DuckDB's iceberg_scan and PyIceberg's
    StaticTable both resolve (Hadoop's integer hints need v<N>.metadata.json names, which catalogs do not write)."""
    key = version_hint_key(deployment, table)
    if key is None:
        return
    name = table.metadata_location.rsplit("/", 1)[-1].removesuffix(".metadata.json")
    deployment.lake.write_bytes(key, name.encode())


def snapshot_of_version(table: IcebergTable, version: int) -> Any:  # noqa: ANN401 - a Snapshot or None
    """The snapshot that holds siltlake table version `version` (None: not committed, or expired)."""
    for snapshot in table.snapshots():
        if snapshot.summary is not None and snapshot.summary.get(VERSION_PROPERTY) == str(version):
            return snapshot
    return None


def synced_version(table: IcebergTable) -> int:
    """The siltlake table version the current snapshot holds (0: none yet)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.get(VERSION_PROPERTY, "0"))


def snapshot_files(table: IcebergTable, snapshot: Any, cache: dict[str, list[Any]] | None = None,  # noqa: ANN401
                   dates: Collection[dt.date] | None = None) -> list[Any]:
    """The live data files (pyiceberg DataFile) a snapshot lists; with `dates`, those of these dates only,
    reading only the manifests whose partition bounds may hold one of them."""
    cache = {} if cache is None else cache
    days = None if dates is None else {(date - EPOCH).days for date in dates}
    files = []
    for manifest in snapshot.manifests(table.io):
        if days is not None and not _may_hold(manifest, days):
            continue
        if manifest.manifest_path not in cache:
            cache[manifest.manifest_path] = [e.data_file for e in manifest.fetch_manifest_entry(table.io)]
        files += cache[manifest.manifest_path] if dates is None else \
            [f for f in cache[manifest.manifest_path] if partition_date(f) in dates]
    return files


def _may_hold(manifest: Any, days: set[int]) -> bool:  # noqa: ANN401 - a pyiceberg ManifestFile
    """Whether a manifest's dt bounds (its manifest list entry's partition summary) may hold one of `days`."""
    bounds = day_bounds(manifest)
    return bounds is None or any(bounds[0] <= day <= bounds[1] for day in days)


class IcebergTarget:
    name = TARGET

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.catalog = deployment.catalog
        self.run = f"{utcnow().isoformat(timespec='milliseconds')}Z {socket.gethostname()}:{os.getpid()}"
        self.statements: list[str] = []
        self._tables: dict[int, IcebergTable] = {}

    @property
    def iceberg(self) -> IcebergCatalog:
        return open_catalog(self.deployment)

    # --- tables -------------------------------------------------------------------------------------

    def sync_tables(self, tables: Sequence[TableRecord]) -> list[str]:
        """Each table on its own: one that fails is named in the error raised after all the others."""
        self.statements = []
        synced = drop_forgotten_tables(self.catalog, TARGET, tables,
                                       lambda old: self._drop((old.database_name, old.table_name), old.table_id))
        failures = []
        for record in tables:
            try:
                self._sync_table(record, synced.get(record.id))
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported with the table's name below
                failures.append(f"{record.qualified_name}: {exc}")
        _raise_failures(failures)
        return self.statements

    def _sync_table(self, record: TableRecord, old: SyncedTable | None) -> None:
        before = (old.database_name, old.table_name) if old is not None else None
        table = self._table(record, before)
        self._evolve(record, table)
        if record.definition.field_ids is None:
            # Stored before field ids existed, its Iceberg table made by an older siltlake: objects written from
            # now on carry the ids that table gave its columns (older ones are read through the name mapping).
            schema = table.schema()
            record = self.catalog.tables.assign_field_ids(
                record.id, {name: schema.find_field(name, case_sensitive=True).field_id
                            for name in [*(c.name for c in record.definition.columns), PARTITION_COLUMN]})
        if any(table.properties.get(name) != value for name, value in MANAGED_PROPERTIES.items()):
            with table.transaction() as transaction:
                transaction.set_properties(MANAGED_PROPERTIES)
        write_version_hint(self.deployment, table)
        self._tables[record.id] = table
        namespace, name = identifier(self.deployment, record)
        if old is None or (old.database_name, old.table_name) != (namespace, name) or \
                old.columns != tuple((c.name, c.type) for c in record.definition.columns):
            self.catalog.external_sync.record_table(TARGET, record.id, namespace, name,
                                                    [(c.name, c.type) for c in record.definition.columns])

    def _owned(self, table: IcebergTable, table_id: int) -> bool:
        """Whether the Iceberg table is this deployment's table `table_id` (two deployments may share an
        Iceberg catalog, and a REST catalog may choose its own locations)."""
        return table.properties.get(TABLE_ID_PROPERTY) == str(table_id) and \
            table.properties.get(INSTANCE_PROPERTY) == self.deployment.instance_key

    def _load(self, ident: tuple[str, str]) -> IcebergTable | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.iceberg.load_table(ident)
        except NoSuchTableError:
            return None

    def _drop(self, ident: tuple[str, str], table_id: int) -> None:
        table = self._load(ident)
        if table is not None and self._owned(table, table_id):
            # Not purged: the data files are siltlake's, and reap deletes the metadata with the table.
            self.iceberg.drop_table(ident)
            self.statements.append(f"DROP TABLE {'.'.join(ident)}")

    def _table(self, record: TableRecord, before: tuple[str, str] | None) -> IcebergTable:
        """Load the table under its name, rename it from its old one, or create it."""
        ident = identifier(self.deployment, record)
        table = self._load(ident)
        if table is not None:
            if not self._owned(table, record.id):
                raise SiltError(f"Iceberg table {'.'.join(ident)} already exists and is not siltlake's table "
                                f"{record.qualified_name} (table {record.id} of this deployment); drop it there, or "
                                "set publish.iceberg.namespace_prefix")
            return table
        self.iceberg.create_namespace_if_not_exists(ident[0])
        if before is not None and before != ident and (old := self._load(before)) is not None \
                and self._owned(old, record.id):
            self.statements.append(f"RENAME TABLE {'.'.join(before)} TO {'.'.join(ident)}")
            return self.iceberg.rename_table(before, ident)
        return self._create(record, ident)

    def _create(self, record: TableRecord, ident: tuple[str, str]) -> IcebergTable:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.table.name_mapping import create_mapping_from_schema
        from pyiceberg.transforms import IdentityTransform

        if record.definition.field_ids is None:  # stored before field ids existed, and never in Iceberg yet
            record = self.catalog.tables.assign_field_ids(record.id)
        schema = iceberg_schema(record)
        spec = PartitionSpec(PartitionField(source_id=schema.find_field(PARTITION_COLUMN).field_id, field_id=1000,
                                            transform=IdentityTransform(), name=PARTITION_COLUMN))
        location = iceberg_path(self.deployment, record.layout(self.deployment.instance_key).iceberg_location())
        table = self.iceberg.create_table(
            ident, schema=schema, partition_spec=spec, location=location,
            properties={TABLE_ID_PROPERTY: str(record.id), INSTANCE_PROPERTY: self.deployment.instance_key,
                        "format-version": "2", **MANAGED_PROPERTIES,
                        # Objects written before siltlake wrote field ids into them are read by column name.
                        "schema.name-mapping.default": create_mapping_from_schema(schema).model_dump_json()})
        self.statements.append(f"CREATE TABLE {'.'.join(ident)} PARTITIONED BY (dt) LOCATION {location}")
        return table

    def _evolve(self, record: TableRecord, table: IcebergTable) -> None:
        """Follow siltlake's columns by field id: rename and drop (`rename_column`, `delete_column`), then add
        and widen (the name mapping follows). The Iceberg table's field ids must be the definition's: checked
        before anything changes."""
        schema = table.schema()
        ids = record.definition.field_ids
        by_id = {f.field_id: f for f in schema.fields if f.name != PARTITION_COLUMN}
        renamed, dropped = [], []
        if ids is not None:
            wanted_ids = {ids[c.name]: c.name for c in record.definition.columns}
            renamed = [(f.name, wanted_ids[i]) for i, f in by_id.items() if i in wanted_ids and f.name != wanted_ids[i]]
            dropped = [f.name for i, f in by_id.items() if i not in wanted_ids]
            # Columns by the names they will have once renames and drops are committed.
            current = {wanted_ids[i]: f for i, f in by_id.items() if i in wanted_ids}
        else:
            current = {f.name: f for f in by_id.values()}
        next_id = table.metadata.last_column_id
        added, widened = [], []
        for arrow_field in record.definition.arrow_schema():
            wanted = _iceberg_type(arrow_field.type)
            existing = current.get(arrow_field.name)
            if existing is None:
                next_id += 1  # Iceberg gives an added column the id after the table's last one
                found = next_id
                added.append((arrow_field.name, wanted))
            else:
                found = existing.field_id
                if existing.field_type != wanted:
                    widened.append((arrow_field.name, wanted))
            if ids is not None and ids[arrow_field.name] != found:
                raise SiltError(f"Iceberg table {'.'.join(table.name())}: column {arrow_field.name} has (or would get) "
                                f"field id {found}, siltlake's objects carry {ids[arrow_field.name]}; the Iceberg "
                                "table was changed outside siltlake: drop it there and publish again (it is made "
                                "anew from siltlake's table versions)")
        partition = schema.find_field(PARTITION_COLUMN, case_sensitive=True)
        if ids is not None and partition.field_id != ids[PARTITION_COLUMN]:
            raise SiltError(f"Iceberg table {'.'.join(table.name())}: dt has field id {partition.field_id}, siltlake's "
                            f"objects carry {ids[PARTITION_COLUMN]}; drop the Iceberg table there and publish again")
        name_of = ".".join(table.name())
        if renamed or dropped:  # committed first: an added column may take a dropped or renamed column's name
            with table.update_schema() as update:
                for name in dropped:
                    update.delete_column(name)
                for old, new in renamed:
                    update.rename_column(old, new)
            self.statements += [f"ALTER TABLE {name_of} DROP COLUMN {name}" for name in dropped]
            self.statements += [f"ALTER TABLE {name_of} RENAME COLUMN {old} TO {new}" for old, new in renamed]
        if added or widened:
            with table.update_schema() as update:
                for name, wanted in added:
                    update.add_column(name, wanted)
                for name, wanted in widened:
                    update.update_column(name, field_type=wanted)
            self.statements += [f"ALTER TABLE {name_of} ADD COLUMN {name} {wanted}" for name, wanted in added]
            self.statements += [f"ALTER TABLE {name_of} ALTER COLUMN {name} TYPE {wanted}" for name, wanted in widened]
        if ids is not None and (renamed or dropped or added):
            self._map_physical_names(record, table)

    @staticmethod
    def _map_physical_names(record: TableRecord, table: IcebergTable) -> None:
        """Objects written before field ids are read through the name mapping: each id maps to the name those
        objects hold it under (PyIceberg's own update would give a dropped column's name to a new column of
        that name, whose older objects hold the dropped data)."""
        from pyiceberg.table.name_mapping import MappedField, NameMapping

        ids = record.definition.field_ids or {}
        mapped = [MappedField(field_id=ids[c.name], names=[c.physical_name]) for c in record.definition.columns]
        mapped.append(MappedField(field_id=ids[PARTITION_COLUMN], names=[PARTITION_COLUMN]))
        with table.transaction() as transaction:
            transaction.set_properties({"schema.name-mapping.default": NameMapping(mapped).model_dump_json()})

    # --- snapshots ----------------------------------------------------------------------------------

    def sync_partitions(self, tables: Mapping[int, TableRecord]) -> list[str]:
        """Each table on its own, as sync_tables."""
        self.statements = []
        failures = []
        for table_id, table in self._tables.items():
            record = tables.get(table_id)
            if record is None:
                continue
            try:
                self.sync_versions(record, table)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported with the table's name below
                failures.append(f"{record.qualified_name}: {exc}")
        _raise_failures(failures)
        return self.statements

    def sync_versions(self, record: TableRecord, table: IcebergTable) -> None:
        """Commit one snapshot per siltlake table version the Iceberg table does not have yet, reading only the
        partition versions of those and the current files of the dates they change (docs/design.md, issue 28)."""
        newest = self.catalog.versions.newest(record.id)
        done = synced_version(table)  # the current snapshot's summary: what is synced, committed with it
        if newest == 0 or done >= newest:
            return
        if done == 0:
            start = self.catalog.versions.table_bounds(record.id)[0]
            stamped = self.catalog.versions.stamped(record.id, start - 1, newest)
        else:
            stamped = self.catalog.versions.stamped(record.id, done, newest)
            # A partition whose version before one of these was reaped: the table versions before its first
            # retained one cannot be read, and the catch-up starts there (as from table_bounds' oldest).
            reaped = [v.table_version for _, v, before in stamped if v.version > 1 and before is None]
            start = max([done + 1, *reaped])
        changed: dict[int, set[dt.date]] = defaultdict(set)
        times: dict[int, dt.datetime] = {}
        for date, v, _ in stamped:
            changed[v.table_version].add(date)
            times[v.table_version] = max(times.get(v.table_version, v.created_at), v.created_at)
        whole = done == 0 or start > done + 1
        snapshot = table.current_snapshot()
        current = {} if snapshot is None else {f.file_path: f for f in snapshot_files(
            table, snapshot, dates=None if whole else set().union(*changed.values()))}
        for version in range(start, newest + 1):
            # The first snapshot, or the first after versions reaped before they were synced: the whole table.
            dates = None if version == start and (done == 0 or start > done + 1) else changed.get(version, set())
            files = version_files(self.deployment, record, as_of_version=version, dates=dates)
            # A keyed partition whose version needs a merge on read keeps what the Iceberg table shows of it:
            # its newest version that needs none (synced before), or nothing.
            dirty = dirty_dates([(f.partition_date, f.uri) for f in files]) if record.definition.keyed else set()
            wanted = {unquote(f.uri): f for f in files if f.partition_date not in dirty}
            scope = [path for path, f in current.items()
                     if (dates is None or partition_date(f) in dates) and partition_date(f) not in dirty]
            removed = [current[path] for path in scope if path not in wanted]
            added = [self._data_file(table, path, f.partition_date, f.size)
                     for path, f in wanted.items() if path not in current]
            expired = self._commit(table, removed, added, {
                RUN_PROPERTY: self.run, VERSION_PROPERTY: str(version),
                VERSION_TIME_PROPERTY: times[version].isoformat() + "Z" if version in times else ""},
                retention=self.deployment.config.publish.iceberg.snapshot_retention)
            write_version_hint(self.deployment, table)
            for f in removed:
                del current[f.file_path]
            current.update((f.file_path, f) for f in added)
            self.statements.append(f"COMMIT {'.'.join(table.name())} SNAPSHOT {table.current_snapshot().snapshot_id} "
                                   f"(table version {version}: +{len(added)} -{len(removed)} files"
                                   f"{f'; {expired} older snapshots expired' if expired else ''})")

    @staticmethod
    def _commit(table: IcebergTable, removed: Sequence[Any], added: Sequence[Any], summary: dict[str, str],
                retention: int | None = None) -> int:
        previous = table.current_snapshot()
        if previous is not None:
            # Snapshot times must differ: a by-time lookup finds the newest snapshot at or before a time.
            while int(time.time() * 1000) <= previous.timestamp_ms:
                time.sleep(0.001)
        return commit_files(table, removed, added, summary, retention)

    def _data_file(self, table: IcebergTable, path: str, date: dt.date, size: int | None) -> Any:  # noqa: ANN401
        """A DataFile for one of siltlake's objects, its statistics from the Parquet footer; dt is its partition."""
        import pyarrow.parquet as pq
        from pyiceberg.io.pyarrow import (
            compute_statistics_plan,
            data_file_statistics_from_parquet_metadata,
            parquet_path_to_id_mapping,
            pyarrow_to_schema,
        )

        lake = self.deployment.lake
        key = _key_of(self.deployment, path)
        with lake.filesystem.open_input_file(lake.path(key)) as stream:
            footer = pq.read_metadata(stream)
            size = size if size is not None else stream.size()
        schema = table.schema()
        stored = footer.schema.to_arrow_schema()
        if set(stored.names) - {*schema.column_names}:
            # Columns under names the table no longer gives them (renamed, dropped): mapped by the file's own
            # field ids; counts only, its bounds may be of a narrower type.
            own = pyarrow_to_schema(stored)
            statistics = data_file_statistics_from_parquet_metadata(
                footer, compute_statistics_plan(own, {**table.properties, "write.metadata.metrics.default": "counts"}),
                parquet_path_to_id_mapping(own))
            return self._registered(table, path, date, size, statistics)
        try:
            statistics = data_file_statistics_from_parquet_metadata(
                footer, compute_statistics_plan(schema, table.properties), parquet_path_to_id_mapping(schema))
        except (ValueError, KeyError, TypeError):
            # A file written before a column was widened: its bounds are of the narrower type; counts only.
            counts_only = {**table.properties, "write.metadata.metrics.default": "counts"}
            statistics = data_file_statistics_from_parquet_metadata(
                footer, compute_statistics_plan(schema, counts_only), parquet_path_to_id_mapping(schema))
        return self._registered(table, path, date, size, statistics)

    @staticmethod
    def _registered(table: IcebergTable, path: str, date: dt.date, size: int, statistics: Any) -> Any:  # noqa: ANN401
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        data_file = DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
            partition=Record((date - EPOCH).days), file_size_in_bytes=size, sort_order_id=None,
            equality_ids=None, key_metadata=None, **statistics.to_serialized_dict())
        # from_args drops spec_id (PyIceberg 0.12): set it, or removing this file later in the same run (a
        # catch-up over several versions) fails on the missing attribute.
        data_file.spec_id = table.metadata.default_spec_id
        return data_file


def _raise_failures(failures: Sequence[str]) -> None:
    """One error naming every table that failed (the others were synced): the run reports it, the next retries."""
    if failures:
        raise SomeTablesFailed("; ".join(failures))


def _key_of(deployment: Deployment, path: str) -> str:
    key = _lake_key(deployment, path)
    if key is None:
        raise SiltError(f"Iceberg data file {path} is not under the lake's root {deployment.lake.root}")
    return key


def _lake_key(deployment: Deployment, path: str) -> str | None:
    """The object key of an Iceberg path under the lake's root (None: elsewhere)."""
    root = unquote(deployment.lake.root) + "/"
    return path[len(root):] if path.startswith(root) else None


# --- reap ------------------------------------------------------------------------------------------


@dataclass
class IcebergReap:
    """What reap did to the Iceberg tables, and the metadata files the remaining snapshots need."""

    expired: int = 0  # snapshots expired
    removed: int = 0  # files taken out of current snapshots (reaped partitions)
    retained: set[str] = field(default_factory=set)  # keys under the metadata area that stay


def reap_iceberg(deployment: Deployment, records: Iterable[TableRecord], doomed: set[str],
                 oldest_versions: Mapping[int, int]) -> IcebergReap:
    """Before reap deletes `doomed` object keys: take them out of current snapshots (a partition past its
    TTL), expire every other snapshot that lists one, and the snapshots of table versions older than
    `oldest_versions[table id]`; then name the metadata files the remaining snapshots need."""
    result = IcebergReap()
    target = IcebergTarget(deployment)
    records = list(records)
    live = {record.id for record in records}
    for old in deployment.catalog.external_sync.synced_tables(TARGET).values():
        if old.dropped or old.table_id not in live:  # its files go now: no Iceberg table may list them
            target._drop((old.database_name, old.table_name), old.table_id)
            deployment.catalog.external_sync.forget_table(TARGET, old.table_id)
    for record in records:
        table = target._load(identifier(deployment, record))
        if table is None or not target._owned(table, record.id):
            continue
        cache: dict[str, list[Any]] = {}
        current = table.current_snapshot()
        if current is not None:
            gone = [f for f in snapshot_files(table, current, cache) if _lake_key(deployment, f.file_path) in doomed]
            if gone:
                IcebergTarget._commit(table, gone, [], {VERSION_PROPERTY: str(synced_version(table)),
                                                        REAP_PROPERTY: utcnow().isoformat() + "Z"})
                result.removed += len(gone)
                current = table.current_snapshot()
        expire = []
        oldest = oldest_versions.get(record.id, 0)
        for snapshot in table.snapshots():
            if current is not None and snapshot.snapshot_id == current.snapshot_id:
                continue
            version = int((snapshot.summary or {}).get(VERSION_PROPERTY, "0"))
            if version < oldest or any(_lake_key(deployment, f.file_path) in doomed
                                       for f in snapshot_files(table, snapshot, cache)):
                expire.append(snapshot.snapshot_id)
        if expire:
            expire_snapshots(table, expire)
            result.expired += len(expire)
        write_version_hint(deployment, table)
        result.retained |= _metadata_keys(deployment, table)
    return result


def _metadata_keys(deployment: Deployment, table: IcebergTable) -> set[str]:
    """The metadata files the table needs: its metadata file and those its log names, and every manifest
    list and manifest of its snapshots."""
    paths = {table.metadata_location, *(entry.metadata_file for entry in table.metadata.metadata_log)}
    for snapshot in table.snapshots():
        paths.add(snapshot.manifest_list)
        paths |= {m.manifest_path for m in snapshot.manifests(table.io)}
    keys = {key for key in (_lake_key(deployment, path) for path in paths) if key is not None}
    hint = version_hint_key(deployment, table)
    return keys | ({hint} if hint is not None else set())
