"""The Apache Iceberg publish target, through PyIceberg (docs/design.md, "Iceberg target").

A siltlake table `schema.table` is the Iceberg table `<namespace_prefix><schema>.<table>`, partitioned by
identity on `dt` and the table's partition_by fields (siltlake.publish.iceberg.partitioning), whose data files are
siltlake's own objects (registered, never copied or rewritten).
Each table version becomes one Iceberg snapshot listing exactly the files `Table.files(as_of_version=N)`
returns, with the version in its summary (`siltlake.table-version`): the current snapshot's summary says
how far the Iceberg table is, so a run that died after an Iceberg commit is never committed twice.
Each commit expires the snapshots older than publish.iceberg.snapshot_retention with it, but tagged versions'
(siltlake's tags are Iceberg tags on their snapshots: siltlake.publish.iceberg.tags).
A keyed table's partition that needs a merge on read is committed with all its files and a position delete
file hiding the rows siltlake's row rule hides (siltlake.publish.iceberg.deletes).
Metadata lives under `<instance>/_iceberg/<physical table>/metadata/`; reap keeps what a retained
snapshot needs, expires snapshots before deleting any file they list, and deletes the rest.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from siltlake.catalog.core import CATALOG_OUTAGES
from siltlake.clock import utcnow
from siltlake.coltypes import PARTITION_COLUMN
from siltlake.errors import ConfigError, SiltError
from siltlake.publish.iceberg.catalog import (
    INSTANCE_PROPERTY,
    MANAGED_PROPERTIES,
    RUN_PROPERTY,
    TABLE_ID_PROPERTY,
    TARGET,
    VERSION_PROPERTY,
    VERSION_TIME_PROPERTY,
    iceberg_path,
    identifier,
    lake_key,
    object_key,
    open_catalog,
    retried_on_conflict,
)
from siltlake.publish.iceberg.datafiles import marker_mapping, registered_file
from siltlake.publish.iceberg.deletes import DeleteChange, KeyedDeletes, snapshot_deletes
from siltlake.publish.iceberg.manifests import commit_files, partition_date, same_fields, use_schema
from siltlake.publish.iceberg.partitioning import partition_record, partition_spec, spec_clause, spec_fields
from siltlake.publish.iceberg.snapshots import (
    iceberg_schema,
    iceberg_type,
    snapshot_files,
    synced_version,
    version_schema,
    version_snapshots,
    write_version_hint,
)
from siltlake.publish.iceberg.tags import tag_refs
from siltlake.publish.targets import SomeTablesFailed, drop_forgotten_tables
from siltlake.read.version_files import version_files
from siltlake.storage.keys import split_key

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as IcebergCatalog
    from pyiceberg.table import Table as IcebergTable

    from siltlake.catalog import SyncedTable, TableRecord
    from siltlake.deployment import Deployment


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
        synced = drop_forgotten_tables(
            self.catalog, TARGET, tables, lambda old: self.drop((old.database_name, old.table_name), old.table_id)
        )
        failures = []
        for record in tables:

            def sync(r: TableRecord = record) -> None:
                self._sync_table(r, synced.get(r.id))

            try:
                retried_on_conflict(record.qualified_name, sync)
            except (ConfigError, *CATALOG_OUTAGES):  # an outage fails every table: the run reports it once
                raise
            except Exception as exc:  # reported with the table's name below
                failures.append(f"{record.qualified_name}: {exc}")
        _raise_failures(failures)
        return self.statements

    def _sync_table(self, record: TableRecord, old: SyncedTable | None) -> None:
        before = (old.database_name, old.table_name) if old is not None else None
        table = self._table(record, before)
        self._check_spec(record, table)
        self._evolve(record, table)
        if record.definition.field_ids is None:
            # Stored before field ids existed, its Iceberg table made by an older siltlake: objects written from
            # now on carry the ids that table gave its columns (older ones are read through the name mapping).
            schema = table.schema()
            record = self.catalog.tables.assign_field_ids(
                record.id,
                {
                    name: schema.find_field(name, case_sensitive=True).field_id
                    for name in [*(c.name for c in record.definition.columns), PARTITION_COLUMN]
                },
            )
        managed = {**MANAGED_PROPERTIES, **marker_mapping(table)} if record.definition.keyed else MANAGED_PROPERTIES
        if any(table.properties.get(name) != value for name, value in managed.items()):
            with table.transaction() as transaction:
                transaction.set_properties(managed)
        write_version_hint(self.deployment, table)
        self._tables[record.id] = table
        namespace, name = identifier(self.deployment, record)
        if (
            old is None
            or (old.database_name, old.table_name) != (namespace, name)
            or old.columns != tuple((c.name, c.type) for c in record.definition.columns)
        ):
            self.catalog.external_sync.record_table(
                TARGET, record.id, namespace, name, [(c.name, c.type) for c in record.definition.columns]
            )

    def follow(self, record: TableRecord) -> None:
        """One table's definition, then its versions not committed yet: right after a write made versions."""
        old = self.catalog.external_sync.synced_tables(TARGET).get(record.id)
        retried_on_conflict(record.qualified_name, lambda: self._sync_table(record, old))
        self.sync_versions(record, self._tables[record.id])

    def owned(self, table: IcebergTable, table_id: int) -> bool:
        """Whether the Iceberg table is this deployment's table `table_id` (two deployments may share an
        Iceberg catalog, and a REST catalog may choose its own locations)."""
        return (
            table.properties.get(TABLE_ID_PROPERTY) == str(table_id)
            and table.properties.get(INSTANCE_PROPERTY) == self.deployment.instance_key
        )

    def load(self, ident: tuple[str, str]) -> IcebergTable | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.iceberg.load_table(ident)
        except NoSuchTableError:
            return None

    def drop(self, ident: tuple[str, str], table_id: int) -> None:
        table = self.load(ident)
        if table is not None and self.owned(table, table_id):
            # Not purged: the data files are siltlake's, and reap deletes the metadata with the table.
            self.iceberg.drop_table(ident)
            self.statements.append(f"DROP TABLE {'.'.join(ident)}")

    def _table(self, record: TableRecord, before: tuple[str, str] | None) -> IcebergTable:
        """Load the table under its name, rename it from its old one, or create it."""
        ident = identifier(self.deployment, record)
        table = self.load(ident)
        if table is not None:
            if not self.owned(table, record.id):
                raise SiltError(
                    f"Iceberg table {'.'.join(ident)} already exists and is not siltlake's table "
                    f"{record.qualified_name} (table {record.id} of this deployment); drop it there, or "
                    "set publish.iceberg.namespace_prefix"
                )
            return table
        try:
            self.iceberg.create_namespace_if_not_exists(ident[0])
        except Exception:
            # Another run creating it at the same moment: PyIceberg's SQL catalog reports the duplicate key.
            if not self.iceberg.namespace_exists(ident[0]):
                raise
        if (
            before is not None
            and before != ident
            and (old := self.load(before)) is not None
            and self.owned(old, record.id)
        ):
            self.statements.append(f"RENAME TABLE {'.'.join(before)} TO {'.'.join(ident)}")
            return self.iceberg.rename_table(before, ident)
        return self._create(record, ident)

    def _create(self, record: TableRecord, ident: tuple[str, str]) -> IcebergTable:
        from pyiceberg.table.name_mapping import create_mapping_from_schema

        if record.definition.field_ids is None:  # stored before field ids existed, and never in Iceberg yet
            record = self.catalog.tables.assign_field_ids(record.id)
        schema = iceberg_schema(record)
        spec = partition_spec(record.definition, schema)
        location = iceberg_path(self.deployment, record.layout(self.deployment.instance_key).iceberg_location())
        table = self.iceberg.create_table(
            ident,
            schema=schema,
            partition_spec=spec,
            location=location,
            properties={
                TABLE_ID_PROPERTY: str(record.id),
                INSTANCE_PROPERTY: self.deployment.instance_key,
                "format-version": "2",
                **MANAGED_PROPERTIES,
                # Objects written before siltlake wrote field ids into them are read by column name.
                "schema.name-mapping.default": create_mapping_from_schema(schema).model_dump_json(),
            },
        )
        self.statements.append(
            f"CREATE TABLE {'.'.join(ident)} PARTITIONED BY ({spec_clause(record.definition)}) LOCATION {location}"
        )
        return table

    @staticmethod
    def _check_spec(record: TableRecord, table: IcebergTable) -> None:
        """The Iceberg table's partition spec must be the one siltlake gives the table (dt, then its partition_by
        fields): files are registered with partition records of that spec. Compared by meaning, through the
        table's current schema (a renamed column keeps its field id)."""
        if record.definition.field_ids is None:
            return  # an older siltlake's table of dt alone: _sync_table gives the definition its ids next
        wanted_schema = iceberg_schema(record)
        wanted = spec_fields(partition_spec(record.definition, wanted_schema), wanted_schema)
        found = spec_fields(table.spec(), table.schema())
        if found != wanted:
            shown = ", ".join(f"{transform}({column})" for _, transform, column in found)
            raise SiltError(
                f"Iceberg table {'.'.join(table.name())} is partitioned by ({shown}), siltlake's table "
                f"{record.qualified_name} by ({spec_clause(record.definition)}); drop the Iceberg table there "
                "and publish again (it is made anew from siltlake's table versions)"
            )

    def _evolve(self, record: TableRecord, table: IcebergTable) -> None:
        """Follow siltlake's columns by field id: rename and drop (`rename_column`, `delete_column`), then add
        and widen (the name mapping follows). The Iceberg table's field ids must be the definition's: checked
        before anything changes. A schema the table has already (a catch-up of older versions stopped before its
        newest, which made theirs current) is made current again."""
        schema = table.schema()
        ids = record.definition.field_ids
        wanted_schema = iceberg_schema(record) if ids is not None else None
        if (
            wanted_schema is not None
            and not same_fields(schema, wanted_schema)
            and any(same_fields(s, wanted_schema) for s in table.metadata.schemas)
        ):
            with table.transaction() as transaction:
                schema_id = use_schema(transaction, wanted_schema)
            self.statements.append(f"ALTER TABLE {'.'.join(table.name())} SET CURRENT SCHEMA {schema_id}")
            self._map_physical_names(record, table)
            return
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
            wanted = iceberg_type(arrow_field.type)
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
                raise SiltError(
                    f"Iceberg table {'.'.join(table.name())}: column {arrow_field.name} has (or would get) "
                    f"field id {found}, siltlake's objects carry {ids[arrow_field.name]}; the Iceberg "
                    "table was changed outside siltlake: drop it there and publish again (it is made "
                    "anew from siltlake's table versions)"
                )
        partition = schema.find_field(PARTITION_COLUMN, case_sensitive=True)
        if ids is not None and partition.field_id != ids[PARTITION_COLUMN]:
            raise SiltError(
                f"Iceberg table {'.'.join(table.name())}: dt has field id {partition.field_id}, siltlake's "
                f"objects carry {ids[PARTITION_COLUMN]}; drop the Iceberg table there and publish again"
            )
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
        # pyiceberg's models take field names too (populate_by_name); mypy sees only the alias, field-id.
        mapped = [
            MappedField(field_id=ids[c.name], names=[c.physical_name])  # type: ignore[call-arg]
            for c in record.definition.columns
        ]
        mapped.append(MappedField(field_id=ids[PARTITION_COLUMN], names=[PARTITION_COLUMN]))  # type: ignore[call-arg]
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
            except (ConfigError, *CATALOG_OUTAGES):  # an outage fails every table: the run reports it once
                raise
            except Exception as exc:  # reported with the table's name below
                failures.append(f"{record.qualified_name}: {exc}")
        _raise_failures(failures)
        return self.statements

    def sync_versions(self, record: TableRecord, table: IcebergTable) -> None:
        """Commit one snapshot per siltlake table version the Iceberg table does not have yet; a commit another
        (a publish run at the same time, a reap) beat starts again from the table as the winner left it."""
        retried_on_conflict(record.qualified_name, lambda: self._sync_versions(record, table), table.refresh)

    def _sync_versions(self, record: TableRecord, table: IcebergTable) -> None:
        """The versions after the current snapshot's, reading only the partition versions of those and the current
        files of the dates they change (docs/design.md, "Publish targets read what is new")."""
        newest = self.catalog.version_reads.newest(record.id)
        done = synced_version(table)  # the current snapshot's summary: what is synced, committed with it
        if newest == 0 or done >= newest:
            return
        if done == 0:
            start = self.catalog.version_reads.table_bounds(record.id).oldest
            stamped = self.catalog.versions.stamped(record.id, start - 1, newest)
        else:
            stamped = self.catalog.versions.stamped(record.id, done, newest)
            # A partition whose version before one of these was reaped: the table versions before its first
            # retained one cannot be read, and the catch-up starts there (as from table_bounds' oldest).
            reaped = [v.table_version for _, v, before in stamped if v.version > 1 and before is None]
            start = max([done + 1, *reaped])
        changed: dict[int, set[dt.date]] = defaultdict(set)
        for date, v, _ in stamped:
            changed[v.table_version].add(date)
        times = self.catalog.version_reads.version_times(record.id, start - 1, newest)
        whole = done == 0 or start > done + 1
        snapshot = table.current_snapshot()
        scope = None if whole else set().union(*changed.values())
        current = {} if snapshot is None else {f.file_path: f for f in snapshot_files(table, snapshot, dates=scope)}
        deletes = [] if snapshot is None else snapshot_deletes(table, snapshot, scope)
        tagged = {tag.table_version for tag in self.catalog.tags.list(record.id)}
        keep = {snapshot_id for version, snapshot_id in version_snapshots(table).items() if version in tagged}
        keyed = (
            KeyedDeletes(
                self.deployment,
                record,
                table,
                lake_key(self.deployment, table.location()),
                lambda key: iceberg_path(self.deployment, key),
            )
            if record.definition.keyed
            else None
        )
        for version in range(start, newest + 1):
            # The first snapshot, or the first after versions reaped before they were synced: the whole table.
            dates = None if version == start and (done == 0 or start > done + 1) else changed.get(version, set())
            files = version_files(self.deployment, record, as_of_version=version, dates=dates)
            wanted = {unquote(f.uri): f for f in files}
            removed = [
                f for path, f in current.items() if (dates is None or partition_date(f) in dates) and path not in wanted
            ]
            added = [
                self._data_file(record, table, path, f.partition_date, f.partition_values, f.size)
                for path, f in wanted.items()
                if path not in current
            ]
            # A keyed partition's delete files are decided again whenever the version changes the partition.
            scoped = [f for f in deletes if dates is None or partition_date(f) in dates]
            change = keyed.change(version, files, dates, scoped) if keyed is not None else DeleteChange(scoped)
            expired = self.commit(
                table,
                removed,
                added,
                {
                    RUN_PROPERTY: self.run,
                    VERSION_PROPERTY: str(version),
                    VERSION_TIME_PROPERTY: times[version].isoformat() + "Z" if version in times else "",
                },
                retention=self.deployment.config.publish.iceberg.snapshot_retention,
                schema=version_schema(self.deployment, record, table, version),
                at=times.get(version),
                deletes=change,
                keep=keep,
            )
            write_version_hint(self.deployment, table)
            for f in removed:
                del current[f.file_path]
            current.update((f.file_path, f) for f in added)
            deletes = [*(f for f in deletes if f not in change.removed), *change.added]
            committed = table.current_snapshot()  # the one just committed
            snapshot_id = committed.snapshot_id if committed is not None else None
            self.statements.append(
                f"COMMIT {'.'.join(table.name())} SNAPSHOT {snapshot_id} "
                f"(table version {version}: +{len(added)} -{len(removed)} files"
                f"{f', {len(change.added)} delete files' if change.added else ''}"
                f"{f'; {expired} older snapshots expired' if expired else ''})"
            )
        if tagged:
            self.sync_tags(record, table)

    def sync_tags(self, record: TableRecord, table: IcebergTable, removed: Mapping[str, int] | None = None) -> None:
        """Make the Iceberg tags of siltlake's tags of the table (publish.iceberg.tags); `removed` (name -> version):
        tags siltlake just forgot. A tag whose version has no snapshot (expired before it was tagged) has no Iceberg
        tag."""
        snapshots = version_snapshots(table)
        wanted = {
            tag.name: snapshots[tag.table_version]
            for tag in self.catalog.tags.list(record.id)
            if tag.table_version in snapshots
        }
        made = tag_refs(
            table,
            wanted,
            {name: snapshots[version] for name, version in (removed or {}).items() if version in snapshots},
        )
        if made:
            write_version_hint(self.deployment, table)
            self.statements += made

    @staticmethod
    def commit(
        table: IcebergTable,
        removed: Sequence[Any],
        added: Sequence[Any],
        summary: dict[str, str],
        retention: int | None = None,
        schema: Any = None,  # a pyiceberg Schema
        at: dt.datetime | None = None,
        deletes: DeleteChange | None = None,
        keep: Collection[int] = (),
    ) -> int:
        return commit_files(table, removed, added, summary, retention, schema, at, deletes, keep)

    def _data_file(
        self, record: TableRecord, table: IcebergTable, path: str, date: dt.date, values: str, size: int | None
    ) -> Any:
        """A DataFile for one of siltlake's objects, its statistics from the Parquet footer; its partition is its
        date and its values below dt (the values path its catalog row names)."""
        key = object_key(self.deployment, path)
        if not values and record.definition.partition_fields:
            # A file listed without its partition's values: its key names them below dt=<date>/.
            parts = split_key(self.deployment.instance_key, key)
            values = parts.partition_values if parts is not None else ""
        partition = partition_record(record.definition, date, values)
        return registered_file(self.deployment.lake, key, table, path, partition, size)


def _raise_failures(failures: Sequence[str]) -> None:
    """One error naming every table that failed (the others were synced): the run reports it, the next retries."""
    if failures:
        raise SomeTablesFailed("; ".join(failures))
