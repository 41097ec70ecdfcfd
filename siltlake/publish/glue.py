"""The AWS Glue Data Catalog publish target, through boto3: what Athena, Redshift Spectrum and EMR read.

The Hive target's rules with Glue API calls for its metastore calls: a siltlake table `schema.table` is the
external table `<database_prefix><schema>.<table>` (Glue and Athena fold names to lower case), partitioned by
`dt` (date) and then by each partition_by field as the Hive target declares them, stored as
SymlinkTextInputFormat with the Parquet SerDe; each (date, values) partition points at the directory of
its newest version's symlink manifest (a live version from before file lists: its live directory, as Parquet);
what was synced is kept in the catalog under target "glue" (Catalog.external_sync), so a run calls Glue only
for what changed and resumes after a crash like the Hive target. Glue has no rename: a renamed table is
recreated with its partitions. Locations are the lake's own URIs (s3://), which Athena reads.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from siltlake.errors import ConfigError, SiltError
from siltlake.publish.hive import (
    PARQUET_INPUT,
    PARQUET_OUTPUT,
    PARQUET_SERDE,
    SYMLINK_INPUT,
    SYMLINK_OUTPUT,
    HiveTarget,
    _columns,
    hive_type,
    partition_columns,
    partition_of_spec,
    partition_spec,
)
from siltlake.publish.targets import drop_forgotten_tables

if TYPE_CHECKING:
    from siltlake.catalog import PartitionToSync, SyncedTable, TableRecord
    from siltlake.deployment import Deployment

TARGET = "glue"
# Glue's limits per call: BatchCreatePartition and BatchUpdatePartition take 100 partitions, BatchDeletePartition 25.
_CREATE_BATCH = _UPDATE_BATCH = 100
_DELETE_BATCH = 25
_CREDENTIALS_HELP = (
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials or an instance or task role"
)


def glue_type(type_name: str) -> str:
    """A column type as Glue and Athena spell it (Hive's names, lower case; json is a string)."""
    return hive_type(type_name).lower()


def _same_location(a: str, b: str) -> bool:
    return unquote(a).rstrip("/") == unquote(b).rstrip("/")  # a table created before locations were unescaped


def _values(date: dt.date, values: str) -> list[str]:
    """A partition's values as Glue lists them, in the order of the table's partition keys (dt first)."""
    return [text for _, text in partition_spec(date, values)]


def _path(date: dt.date, values: str) -> str:
    """A partition as the statements name it: dt=<date>, then its values path."""
    return f"dt={date}/{values}" if values else f"dt={date}"


def _partition_of(keys: Sequence[str], glue_values: Sequence[str]) -> tuple[dt.date, str]:
    """The (date, values path) of a Glue partition's values, which Glue lists without the partition keys' names."""
    return partition_of_spec(list(zip(keys, glue_values, strict=True)))


class GlueTarget(HiveTarget):
    name = TARGET

    def __init__(self, deployment: Deployment) -> None:
        super().__init__(deployment)
        # Its own settings beside the inherited Hive ones (self.config), which only the Spark paths it replaces read.
        self.glue_config = deployment.config.publish.glue
        self.database_prefix = self.glue_config.database_prefix
        self._client: Any = None

    # --- Glue access --------------------------------------------------------------------------------

    def _glue(self) -> Any:  # a boto3 client
        if self._client is None:
            import boto3
            from botocore.config import Config as BotoConfig

            session = boto3.session.Session()
            region = self.glue_config.region or session.region_name
            if not region:
                raise ConfigError(
                    "publish.targets includes glue, but no AWS region is set: set publish.glue.region "
                    "(SILTLAKE_PUBLISH__GLUE__REGION) or AWS_REGION"
                )
            if session.get_credentials() is None:
                raise ConfigError(
                    f"publish.targets includes glue, but no AWS credentials were found ({region}): "
                    f"give them as {_CREDENTIALS_HELP}"
                )
            self._client = session.client(
                "glue",
                region_name=region,
                endpoint_url=self.glue_config.endpoint_url,
                config=BotoConfig(retries={"max_attempts": self.glue_config.max_attempts, "mode": "standard"}),
            )
        return self._client

    def _call(self, operation: str, what: str, *, allow: tuple[str, ...] = (), **arguments: Any) -> dict | None:
        """One Glue call; None when it failed with one of the `allow`ed error codes (already exists, not found)."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        if self.glue_config.catalog_id:
            arguments["CatalogId"] = self.glue_config.catalog_id
        try:
            return getattr(self._glue(), operation)(**arguments)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") in allow:
                return None
            raise SiltError(f"Glue: {operation} {what} failed: {error.get('Code')}: {error.get('Message')}") from None
        except NoCredentialsError:
            raise ConfigError(
                f"publish.targets includes glue, but no AWS credentials were found: give them as {_CREDENTIALS_HELP}"
            ) from None
        except BotoCoreError as exc:  # the endpoint unreachable, a timeout: the next run retries
            raise SiltError(f"Glue: {operation} {what} failed: {exc}") from None

    def _sql(self, statement: str) -> None:
        raise AssertionError(f"the Glue target issues no SQL (asked for {statement!r})")

    def _uri(self, key: str) -> str:
        # s3://, as Athena and Spectrum read it (not Spark's s3a://); unescaped, as the Hive target's locations.
        return unquote(self.deployment.lake.uri(key))

    # --- tables -------------------------------------------------------------------------------------

    def sync_tables(self, tables: Sequence[TableRecord]) -> list[str]:
        self.statements = []
        synced = drop_forgotten_tables(
            self.catalog, TARGET, tables, lambda old: self._delete_table(old.database_name, old.table_name)
        )
        for record in tables:
            old = synced.get(record.id)
            database, table = self._names(record)
            columns = _columns(record)
            if old is not None and (old.database_name, old.table_name, old.columns) == (database, table, columns):
                continue
            if (
                old is None
                or (old.database_name, old.table_name) != (database, table)
                or not self._alterable(old.columns, columns)
            ):
                # New, renamed (Glue renames nothing) or changed beyond adds and widenings: (re)create it with
                # all its partitions. External: deleting a Glue table leaves the objects alone.
                if old is not None:
                    self._delete_table(old.database_name, old.table_name)
                self._create(record, database, table)
                self.catalog.external_sync.record_table(
                    TARGET, record.id, database, table, columns, forget_partitions=True
                )
                continue
            self._call(
                "update_table",
                f"{database}.{table}",
                DatabaseName=database,
                TableInput=self._table_input(record, table),
            )
            changes = [f"{name} {glue_type(kind)}" for name, kind in columns if (name, kind) not in old.columns]
            self.statements.append(f"UpdateTable {database}.{table} columns {', '.join(changes)}")
            self.catalog.external_sync.record_table(TARGET, record.id, database, table, columns)
        return self.statements

    def _delete_table(self, database: str, table: str) -> None:
        self._call(
            "delete_table", f"{database}.{table}", allow=("EntityNotFoundException",), DatabaseName=database, Name=table
        )
        self.statements.append(f"DeleteTable {database}.{table}")

    def _storage(self, columns: Sequence[tuple[str, str]], location: str, *, symlink: bool = True) -> dict:
        return {
            "Columns": [{"Name": name, "Type": glue_type(kind)} for name, kind in columns],
            "Location": location,
            "InputFormat": SYMLINK_INPUT if symlink else PARQUET_INPUT,
            "OutputFormat": SYMLINK_OUTPUT if symlink else PARQUET_OUTPUT,
            "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {"serialization.format": "1"}},
        }

    def _table_input(self, record: TableRecord, table: str) -> dict:
        # Partitions carry storage of their own (Glue copies nothing from the table), so the table's symlink
        # format only describes the table; each partition states its own.
        return {
            "Name": table,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {"EXTERNAL": "TRUE", "siltlake.table": record.qualified_name},
            "PartitionKeys": [{"Name": name, "Type": glue_type(kind)} for name, kind in partition_columns(record)],
            "StorageDescriptor": self._storage(_columns(record), self._live_location(record)),
        }

    def _create(self, record: TableRecord, database: str, table: str) -> None:
        if (
            self._call("create_database", database, allow=("AlreadyExistsException",), DatabaseInput={"Name": database})
            is not None
        ):
            self.statements.append(f"CreateDatabase {database}")
        found = self._call(
            "get_table", f"{database}.{table}", allow=("EntityNotFoundException",), DatabaseName=database, Name=table
        )
        if found is not None:
            # Ours from a run that stopped before recording it: recreate. Anyone else's: leave it be.
            existing = found["Table"].get("StorageDescriptor", {}).get("Location", "")
            if not _same_location(existing, self._live_location(record)):
                raise SiltError(
                    f"Glue table {database}.{table} already exists and is not siltlake's table "
                    f"{record.qualified_name} (its location is {existing or 'unset'}); delete it there, or set "
                    "publish.glue.database_prefix"
                )
            self._delete_table(database, table)
        self._call(
            "create_table", f"{database}.{table}", DatabaseName=database, TableInput=self._table_input(record, table)
        )
        self.statements.append(f"CreateTable {database}.{table} LOCATION '{self._live_location(record)}'")

    # --- partitions (the Hive target's sync_partitions decides which; these make the calls) ---------

    def _partition_input(self, names: SyncedTable, p: PartitionToSync, where: str) -> dict:
        return {
            "Values": _values(p.partition_date, p.partition_values),
            "StorageDescriptor": self._storage(names.columns, where, symlink=p.file_list_key is not None),
        }

    @staticmethod
    def _described(moves: Sequence[tuple[PartitionToSync, str]]) -> str:
        return ", ".join(
            f"{_path(p.partition_date, p.partition_values)} LOCATION '{where}'"
            + ("" if p.file_list_key is not None else " (Parquet)")
            for p, where in moves
        )

    def _add_partitions(self, names: SyncedTable, new: list[tuple[PartitionToSync, str]]) -> None:
        qualified = f"{names.database_name}.{names.table_name}"
        existing = []
        for start in range(0, len(new), _CREATE_BATCH):
            chunk = new[start : start + _CREATE_BATCH]
            answer = self._call(
                "batch_create_partition",
                qualified,
                DatabaseName=names.database_name,
                TableName=names.table_name,
                PartitionInputList=[self._partition_input(names, p, where) for p, where in chunk],
            )
            self.statements.append(f"BatchCreatePartition {qualified} {self._described(chunk)}")
            failed = self._failed(answer, qualified, "BatchCreatePartition", ok="AlreadyExistsException")
            existing += [
                (p, where) for p, where in chunk if tuple(_values(p.partition_date, p.partition_values)) in failed
            ]
        if existing:  # added by a run that died before recording it: point it here, as a move does
            self._set_storage(names, existing)

    def _set_storage(self, names: SyncedTable, moves: list[tuple[PartitionToSync, str]]) -> None:
        qualified = f"{names.database_name}.{names.table_name}"
        for start in range(0, len(moves), _UPDATE_BATCH):
            chunk = moves[start : start + _UPDATE_BATCH]
            answer = self._call(
                "batch_update_partition",
                qualified,
                DatabaseName=names.database_name,
                TableName=names.table_name,
                Entries=[
                    {
                        "PartitionValueList": _values(p.partition_date, p.partition_values),
                        "PartitionInput": self._partition_input(names, p, where),
                    }
                    for p, where in chunk
                ],
            )
            self.statements.append(f"BatchUpdatePartition {qualified} {self._described(chunk)}")
            self._failed(answer, qualified, "BatchUpdatePartition")

    def _drop_partitions(self, names: SyncedTable, gone: list[tuple[dt.date, str]]) -> None:
        qualified = f"{names.database_name}.{names.table_name}"
        for start in range(0, len(gone), _DELETE_BATCH):
            chunk = gone[start : start + _DELETE_BATCH]
            answer = self._call(
                "batch_delete_partition",
                qualified,
                allow=("EntityNotFoundException",),
                DatabaseName=names.database_name,
                TableName=names.table_name,
                PartitionsToDelete=[{"Values": _values(date, values)} for date, values in chunk],
            )
            self.statements.append(
                f"BatchDeletePartition {qualified} " + ", ".join(_path(date, values) for date, values in chunk)
            )
            self._failed(answer, qualified, "BatchDeletePartition", ok="EntityNotFoundException")

    @staticmethod
    def _failed(answer: dict | None, qualified: str, operation: str, ok: str = "") -> set[tuple[str, ...]]:
        """The values (as Glue lists them) of the partitions a batch call failed with the `ok` error code; any other
        failure raises, naming the first."""
        errors = (answer or {}).get("Errors", [])
        other = [e for e in errors if e.get("ErrorDetail", {}).get("ErrorCode") != ok]
        if other:
            detail = other[0].get("ErrorDetail", {})
            raise SiltError(
                f"Glue: {operation} {qualified} failed for {len(other)} partition(s), first "
                f"{'/'.join(other[0].get('PartitionValues', ['?']))}: {detail.get('ErrorCode')}: "
                f"{detail.get('ErrorMessage')}"
            )
        return {tuple(e["PartitionValues"]) for e in errors}

    def _shown_partitions(self, record: TableRecord, names: SyncedTable) -> set[tuple[dt.date, str]]:
        """The (date, values) of the partitions Glue has of the table."""
        keys = [name for name, _ in partition_columns(record)]
        qualified = f"{names.database_name}.{names.table_name}"
        shown: set[tuple[dt.date, str]] = set()
        token: str | None = None
        while True:
            more = {"NextToken": token} if token else {}
            answer = self._call(
                "get_partitions",
                qualified,
                allow=("EntityNotFoundException",),
                DatabaseName=names.database_name,
                TableName=names.table_name,
                **more,
            )
            if answer is None:
                return shown
            shown |= {_partition_of(keys, p["Values"]) for p in answer.get("Partitions", [])}
            token = answer.get("NextToken")
            if not token:
                return shown

    def _ensure_symlink_table(self, names: SyncedTable) -> None:
        """Every Glue table siltlake has is its own, created with the symlink storage: nothing to switch."""
