"""Table definitions: columns, time settings, keys, and their Arrow schema.

Column types are in siltlake.coltypes, identifiers, durations and definition files in siltlake.defbase, derived
table definitions in siltlake.derivedef: import their names from there."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from siltlake.coltypes import (
    FIELD_ID_KEY,
    KEY_TYPES,
    PARTITION_COLUMN,
    SEQUENCE_TYPES,
    arrow_type,
    needs_rewrite,
    parse_type,
)
from siltlake.defbase import (
    StrictModel,
    absent,
    check_identifier,
    definition_file,
    describe_validation_error,
    exact_bool,
    exact_int,
    parse_duration,
    validated,
)
from siltlake.errors import DefinitionError, no_column
from siltlake.partspec import BUCKET_TYPES, IDENTITY_TYPES, PartitionField, parse_field

if TYPE_CHECKING:  # pyarrow is imported where a schema is built: `silt status` and `--help` never load it
    import pyarrow as pa

__all__ = [
    "COMMIT_ORDER",
    "INHERITED_SETTINGS",
    "LEGACY_NAIVE_TIMEZONE",
    "Column",
    "TableDef",
    "load_table_file",
]

# What a log table stored before naive_timezone existed reads naive time strings in.
LEGACY_NAIVE_TIMEZONE = "UTC"

# The sequence_column that asks for a key's last committed row (stored as ""): without one, a keyed table's rows
# are ordered by their time column (docs/design.md "Keyed tables", Order).
COMMIT_ORDER = "_commit_order"

# Settings a log table that does not set them takes from its schema (`silt schema set`), else from the deployment's
# [tables] config, else their defaults here (docs/design.md "Settings inherited").
INHERITED_SETTINGS = ("merge_mode", "merged_object_size", "ttl_days", "codec", "merge_interval")


class Column(StrictModel):
    name: str
    type: str
    nullable: bool = True
    source: str | None = Field(default=None, description="input field name; defaults to the column name")
    # The column's Iceberg field id, written into every object as its Parquet field_id: assigned when the table
    # is created or the column added, never reused. None only in definitions stored before ids existed.
    field_id: int | None = Field(default=None, exclude_if=absent)
    # The name objects store the column under, when not its name: kept by a rename, never reused.
    physical: str | None = Field(default=None, exclude_if=absent)

    _nullable = field_validator("nullable", mode="before")(exact_bool)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_identifier(value, "column name")

    @field_validator("type")
    @classmethod
    def _type(cls, value: str) -> str:
        return parse_type(value)

    @property
    def source_field(self) -> str:
        return self.source or self.name

    @property
    def physical_name(self) -> str:
        return self.physical or self.name

    def arrow_field(self) -> pa.Field:
        import pyarrow as pa

        return pa.field(self.name, arrow_type(self.type), nullable=self.nullable)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Column:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise DefinitionError(f"column: {describe_validation_error(exc)}") from None


class TableDef(StrictModel):
    """A table definition as written by users (TOML) and stored in the catalog."""

    schema_name: str = Field(alias="schema")
    name: str
    time_column: str = ""  # required of log tables; a derived table may have none
    timezone: str = "UTC"
    # The zone of time strings written without an offset ("2024-05-01 12:00:00"); None: the table's timezone.
    naive_timezone: str | None = None
    merge_interval: int = 43200
    columns: tuple[Column, ...]
    format: Literal["auto", "jsonl", "msgpack", "csv", "fluentd_line", "ltsv"] = "auto"
    epoch_unit: Literal["s", "ms", "us", "ns"] = "s"
    unknown_fields: Literal["ignore", "reject"] = "ignore"
    error_policy: Literal["skip", "file"] = "skip"
    codec: Literal["zstd", "snappy", "gzip", "none"] = "zstd"
    merge_mode: Literal["auto", "deep", "shallow"] = "auto"
    merged_object_size: int = 128 * 1024 * 1024
    merge_batch_size: int = 2000
    row_group_bytes: int = 8 * 1024 * 1024  # target decoded size of a merged object's row groups
    ttl_days: int | None = None
    # "derived": built from a query by siltlake.derived (siltlake.derivedef.DerivedDef), never streamed into.
    kind: Literal["log", "derived"] = "log"
    # Keyed tables (docs/design.md "Keyed tables"): readers see one row per (dt, primary key), the one with the
    # largest sequence_column (by default the time column; ties and "": the last committed); merges keep only those.
    primary_key: tuple[str, ...] = ()
    sequence_column: str = ""
    # Partitions below dt (siltlake.partspec): "service" (one per value), "bucket(16, user_id)"; fixed at create.
    partition_by: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)
    # The Iceberg field id of the partition column dt (the columns carry their own; see Column.field_id).
    dt_field_id: int | None = Field(default=None, exclude_if=absent)
    # Dropped columns: their ids and physical names are never given to a column again.
    dropped_columns: tuple[Column, ...] = Field(default=(), exclude_if=lambda value: not value)
    # Of INHERITED_SETTINGS, those the table does not set itself: their values here are the ones it inherited
    # (siltlake.catalog.inherited). A definition given without `inherited` inherits what it leaves out.
    inherited: tuple[str, ...] = Field(default=(), exclude_if=lambda value: not value)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _inherits_what_it_leaves_out(cls, data: Any) -> Any:
        if isinstance(data, dict) and "inherited" not in data and data.get("kind", "log") == "log":
            left_out = [key for key in INHERITED_SETTINGS if key not in data]
            if left_out:
                data = {**data, "inherited": left_out}
        return data

    @model_validator(mode="before")
    @classmethod
    def _keyed_rows_order_by_time(cls, data: Any) -> Any:
        """A keyed log table given no sequence_column orders a key's rows by its time column, so a re-sent old
        chunk never rolls a key back; "_commit_order" asks for the last committed row (stored as "", as
        definitions made before this default were)."""
        if not isinstance(data, dict) or data.get("kind", "log") != "log" or not data.get("primary_key"):
            return data
        if "sequence_column" not in data and data.get("time_column"):
            return {**data, "sequence_column": data["time_column"]}
        if data.get("sequence_column") == COMMIT_ORDER:
            return {**data, "sequence_column": ""}
        return data

    @field_validator("inherited")
    @classmethod
    def _inheritable(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [key for key in value if key not in INHERITED_SETTINGS]
        if unknown:
            raise DefinitionError(
                f"inherited: {', '.join(unknown)} cannot be inherited; the settings that can are "
                f"{', '.join(INHERITED_SETTINGS)}"
            )
        return tuple(key for key in INHERITED_SETTINGS if key in value)

    @field_validator("schema_name", "name")
    @classmethod
    def _identifier(cls, value: str, info: ValidationInfo) -> str:
        return check_identifier(value, "schema name" if info.field_name == "schema_name" else "table name")

    @field_validator("timezone", "naive_timezone")
    @classmethod
    def _timezone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.field_name == "naive_timezone":
            return None
        try:
            ZoneInfo(value)  # type: ignore[arg-type]
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise DefinitionError(
                f"{info.field_name} {value!r} is not an IANA time zone name such as Asia/Tokyo"
            ) from None
        return value

    @field_validator("merge_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> int:
        return parse_duration(value, "merge_interval")

    _whole = field_validator("merged_object_size", "merge_batch_size", "row_group_bytes", "ttl_days", mode="before")(
        exact_int
    )

    @field_validator("merged_object_size", "merge_batch_size", "row_group_bytes")
    @classmethod
    def _positive(cls, value: int, info: ValidationInfo) -> int:
        if value < 1:
            raise DefinitionError(f"{info.field_name} must be at least 1, got {value}")
        return value

    @field_validator("ttl_days")
    @classmethod
    def _ttl(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise DefinitionError(f"ttl_days must be at least 1, got {value}")
        return value

    @model_validator(mode="after")
    def _columns(self) -> TableDef:
        names = [c.name for c in self.columns]
        if not names:
            raise DefinitionError("a table needs at least one column")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise DefinitionError(f"duplicate column names: {', '.join(duplicates)}")
        if PARTITION_COLUMN in names:
            raise DefinitionError("column name 'dt' is reserved for the partition date")
        self._check_field_ids()
        self._check_key()
        self._check_partition_by()
        if not self.time_column:
            if self.kind == "derived":
                return self
            raise DefinitionError("time_column: required: name the timestamp column that dates each record")
        time_columns = [c for c in self.columns if c.name == self.time_column]
        if not time_columns:
            raise DefinitionError(f"time_column {self.time_column!r} is not one of the columns")
        if time_columns[0].type != "timestamp":
            raise DefinitionError(f"time_column {self.time_column!r} must have type timestamp")
        return self

    def _check_field_ids(self) -> None:
        ids = [c.field_id for c in self.columns] + [self.dt_field_id]
        given = [i for i in ids if i is not None]
        if not given:
            return
        if len(given) != len(ids):
            missing = [c.name for c in self.columns if c.field_id is None] + (
                [PARTITION_COLUMN] if self.dt_field_id is None else []
            )
            raise DefinitionError(
                f"field ids: {', '.join(missing)} have none; give every column and dt_field_id "
                "an id, or none (ids are then assigned)"
            )
        if any(isinstance(i, bool) or i < 1 for i in given):
            raise DefinitionError(f"field ids must be positive whole numbers, got {sorted(given)}")
        if len(set(given)) != len(given):
            raise DefinitionError(f"field ids {sorted(i for i in set(given) if given.count(i) > 1)} are given twice")

    def _check_key(self) -> None:
        by_name = {c.name: c for c in self.columns}
        if len(set(self.primary_key)) != len(self.primary_key):
            raise DefinitionError(f"primary_key {list(self.primary_key)} names a column twice")
        for name in self.primary_key:
            column = by_name.get(name)
            if column is None:
                raise DefinitionError(f"primary_key column {name!r} is not one of the columns")
            if column.nullable:
                raise DefinitionError(
                    f"primary_key column {name!r} must be declared nullable = false: a key "
                    "must be present in every record"
                )
            if column.type not in KEY_TYPES and not column.type.startswith("decimal"):
                raise DefinitionError(
                    f"primary_key column {name!r} has type {column.type}, which cannot be a key; "
                    f"use one of {', '.join(KEY_TYPES)}"
                )
        if self.primary_key and self.kind == "derived":
            raise DefinitionError("a derived table cannot have a primary_key: its query decides its rows")
        if not self.sequence_column:
            return
        if not self.primary_key:
            raise DefinitionError("sequence_column orders the rows of one key: it needs a primary_key")
        column = by_name.get(self.sequence_column)
        if column is None:
            raise DefinitionError(f"sequence_column {self.sequence_column!r} is not one of the columns")
        if column.type not in SEQUENCE_TYPES and not column.type.startswith("decimal"):
            raise DefinitionError(
                f"sequence_column {self.sequence_column!r} has type {column.type}; it must be "
                f"one of {', '.join(SEQUENCE_TYPES)}"
            )
        if self.sequence_column in self.primary_key:
            raise DefinitionError(f"sequence_column {self.sequence_column!r} is part of the primary_key")

    def _check_partition_by(self) -> None:
        fields = self.partition_fields
        if not fields:
            return
        if self.kind == "derived":
            raise DefinitionError("partition_by: a derived table is partitioned by dt alone")
        names = [f.name for f in fields]
        if len(set(names)) != len(names) or len({f.column for f in fields}) != len(fields):
            raise DefinitionError(f"partition_by {list(self.partition_by)} names a column twice")
        by_name = {c.name: c for c in self.columns}
        for field in fields:
            column = by_name.get(field.column)
            if column is None:
                raise DefinitionError(f"partition_by {str(field)!r}: {field.column!r} is not one of the columns")
            if field.column == self.time_column:
                raise DefinitionError(f"partition_by {str(field)!r}: the time column already partitions by dt")
            allowed = IDENTITY_TYPES if field.buckets is None else BUCKET_TYPES
            if column.type not in allowed:
                raise DefinitionError(
                    f"partition_by {str(field)!r}: column {field.column!r} has type {column.type}; "
                    f"{'identity partitions' if field.buckets is None else 'buckets'} take {', '.join(allowed)}"
                )
            if self.primary_key and field.column not in self.primary_key:
                raise DefinitionError(
                    f"partition_by {str(field)!r}: a keyed table partitions by its primary_key columns only, so "
                    "that every row of a key lies in one partition"
                )

    @functools.cached_property
    def partition_fields(self) -> tuple[PartitionField, ...]:
        """The partition fields below dt (partition_by parsed), in order."""
        return tuple(parse_field(text) for text in self.partition_by)

    @property
    def keyed(self) -> bool:
        """Whether readers see one row per (dt, primary key) (merge-on-read until merged)."""
        return bool(self.primary_key)

    @property
    def qualified_name(self) -> str:
        return f"{self.schema_name}.{self.name}"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def naive_zone(self) -> str:
        """The zone naive time strings are read in: naive_timezone, else the table's timezone."""
        return self.naive_timezone or self.timezone

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def arrow_schema(self) -> pa.Schema:
        """Schema of the Parquet objects: the columns in order, the time column never null."""
        return self._arrow_schema

    @functools.cached_property
    def _arrow_schema(self) -> pa.Schema:  # once per definition: a stream task asks for it for every object
        import pyarrow as pa

        fields = []
        for column in self.columns:
            field = column.arrow_field()
            if self.time_column and column.name == self.time_column:
                field = field.with_nullable(False)
            fields.append(field)
        return pa.schema(fields)

    @property
    def field_ids(self) -> dict[str, int] | None:
        """Each column's Iceberg field id and dt's, by name (None: a definition stored before ids existed)."""
        if self.dt_field_id is None:
            return None
        return {**{c.name: c.field_id for c in self.columns}, PARTITION_COLUMN: self.dt_field_id}  # type: ignore[misc]

    def with_field_ids(self, ids: dict[str, int] | None = None) -> TableDef:
        """The definition with field ids: `ids` (by name, dt included; an Iceberg table's) or, if None, the
        columns numbered from 1 in order and dt after them. A definition that has ids keeps them."""
        if self.dt_field_id is not None:
            return self
        if ids is None:
            ids = {c.name: i for i, c in enumerate(self.columns, start=1)}
            ids[PARTITION_COLUMN] = len(self.columns) + 1
        missing = [c.name for c in self.columns if c.name not in ids] + (
            [PARTITION_COLUMN] if PARTITION_COLUMN not in ids else []
        )
        if missing:
            raise DefinitionError(f"table {self.qualified_name}: no field id for {', '.join(missing)}")
        data = self.model_dump(by_alias=True)
        data["columns"] = [{**c, "field_id": ids[c["name"]]} for c in data["columns"]]
        data["dt_field_id"] = ids[PARTITION_COLUMN]
        return TableDef.from_mapping(data)

    def file_schema(self) -> pa.Schema:
        """Schema of the Parquet objects every writer writes: the columns in order (the time column never null)
        and then dt, each carrying its Iceberg field id (docs/design.md, "Iceberg target")."""
        return self._file_schema

    @functools.cached_property
    def _file_schema(self) -> pa.Schema:
        import pyarrow as pa

        fields = [*self.arrow_schema(), pa.field(PARTITION_COLUMN, pa.date32(), nullable=False)]
        ids = self.field_ids
        names = [c.physical_name for c in self.columns] + [PARTITION_COLUMN]
        if ids is None:
            return pa.schema([f.with_name(n) for f, n in zip(fields, names, strict=True)])
        return pa.schema(
            [
                f.with_name(n).with_metadata({FIELD_ID_KEY: str(ids[f.name]).encode()})
                for f, n in zip(fields, names, strict=True)
            ]
        )

    def to_json(self) -> str:
        # A log table's JSON always names naive_timezone (null: the table's zone), so that a definition stored
        # before the key existed is told apart (from_json); a derived table's has no time strings to read, and
        # its JSON stays as it was (it is part of the derived definition's hash).
        exclude = {"naive_timezone"} if self.kind == "derived" else None
        return self.model_dump_json(by_alias=True, exclude=exclude)

    @classmethod
    def from_json(cls, text: str) -> TableDef:
        return _from_json(cls, text)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "table definition") -> TableDef:
        return validated(cls, data, source)

    def with_column(self, column: Column) -> TableDef:
        data = self.model_dump(by_alias=True)
        added = column.model_dump(exclude={"physical"})
        added["field_id"], added["physical"] = self._new_identity(column.name)
        data["columns"] = [*data["columns"], added]
        return TableDef.from_mapping(data)

    def _new_identity(self, name: str) -> tuple[int | None, str | None]:
        """A new column's field id (above every id the table ever had, dropped columns' too; None without ids)
        and physical name (None: its name), never one a column of the table ever had."""
        ever = [*self.columns, *self.dropped_columns]
        field_id = None
        if self.field_ids is not None:
            field_id = max([*self.field_ids.values(), *(c.field_id or 0 for c in ever)]) + 1
        taken, physical, suffix = {c.physical_name for c in ever}, name, field_id or len(ever)
        while physical in taken:  # a dropped or renamed column's objects hold this name: not this column's data
            physical, suffix = f"{name}_{suffix}", suffix + 1
        return field_id, (physical if physical != name else None)

    def with_column_type(self, name: str, type_name: str, rewrite: bool = False) -> TableDef:
        """The definition with column `name` of type `type_name`: a widening (WIDENINGS) keeps the column, whose
        older objects read as the new type; any other change needs `rewrite` and makes the column anew (a new
        field id and physical name; the old ones stay reserved among dropped_columns): the caller rewrites the
        values into it (write.retype), and objects not rewritten read it as null, never as the old type."""
        new_type = parse_type(type_name)
        check_identifier(name, "column name")  # so that the error shows a hostile name as repr, on one line
        try:
            old = self.column(name)
        except KeyError:
            raise no_column(self.qualified_name, name, (c.name for c in self.columns)) from None
        if old.type == new_type:
            raise DefinitionError(f"column {name} of {self.qualified_name} is {new_type} already")
        data = self.model_dump(by_alias=True)
        if not needs_rewrite(old.type, new_type):
            data["columns"] = [{**c, "type": new_type} if c["name"] == name else c for c in data["columns"]]
            return TableDef.from_mapping(data)
        if not rewrite:
            raise DefinitionError(
                f"changing column {name} of {self.qualified_name} from {old.type} to {new_type} converts its stored "
                "values: run it with --rewrite (rewrite=True), which rewrites every partition holding a value in it "
                "as an update version and moves rows whose value does not convert to an error file (`silt errors`); "
                "only int -> bigint and float -> double need no rewrite"
            )
        field_id, physical = self._new_identity(name)
        data["columns"] = [
            {**c, "type": new_type, "field_id": field_id, "physical": physical} if c["name"] == name else c
            for c in data["columns"]
        ]
        data["dropped_columns"] = [*(c.model_dump() for c in self.dropped_columns), old.model_dump()]
        return TableDef.from_mapping(data)

    def renamed(self, schema_name: str, name: str) -> TableDef:
        data = self.model_dump(by_alias=True)
        data.update(schema=schema_name, name=name)
        return TableDef.from_mapping(data)


def load_table_file(path: str | Path) -> TableDef:
    """Read a table definition from a .toml (or .yaml/.yml) file."""
    path = Path(path)
    return TableDef.from_mapping(definition_file(path, "table definition"), source=str(path))


@functools.lru_cache(maxsize=64)
def _from_json(cls: type[TableDef], text: str) -> TableDef:
    """Definitions are frozen: a Spark worker decoding the same table's JSON for every task shares one.

    A log table stored before naive_timezone existed read naive time strings as UTC, and keeps doing so."""
    data = json.loads(text)
    if isinstance(data, dict) and data.get("kind", "log") == "log":
        data.setdefault("naive_timezone", LEGACY_NAIVE_TIMEZONE)
    return cls.model_validate(data)
