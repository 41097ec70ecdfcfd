"""Table definitions: columns, types, time settings, and their Arrow schema."""

from __future__ import annotations

import functools
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from siltlake.errors import DefinitionError, no_column

if TYPE_CHECKING:  # pyarrow is imported where a schema is built: `silt status` and `--help` never load it
    import pyarrow as pa

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")  # \Z: "$" would let a trailing newline through
_DECIMAL = re.compile(r"^decimal\((\d{1,2}),\s*(\d{1,2})\)$")
SIMPLE_TYPES = ("string", "int", "bigint", "float", "double", "boolean", "timestamp", "date", "json")
# The type changes older objects can be read through (Parquet int32 as int64, float as double): nothing is rewritten.
WIDENINGS = {("int", "bigint"), ("float", "double")}
# What a log table stored before naive_timezone existed reads naive time strings in.
LEGACY_NAIVE_TIMEZONE = "UTC"
_DURATION = re.compile(r"^(\d+)\s*(s|m|h|d)?$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
# The partition column: in every object (so that any Parquet or Iceberg reader filters on it), never a column name.
PARTITION_COLUMN = "dt"
# The Parquet schema metadata key of a column's Iceberg field id (pyarrow writes it as the Parquet field_id).
FIELD_ID_KEY = b"PARQUET:field_id"


def _absent(value: Any) -> bool:
    return value is None


def check_identifier(value: str, what: str) -> str:
    """Return value if it is a safe lower-case identifier, else raise DefinitionError."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise DefinitionError(
            f"{what} {value!r} is not a valid identifier: use 1-63 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )
    return value


def parse_duration(value: int | str, what: str = "duration") -> int:
    """Seconds from an integer or a string such as '12h', '30m', '0s', '45'."""
    if isinstance(value, bool):
        raise DefinitionError(f"{what} {value!r} is not a duration")
    if isinstance(value, int):
        if value < 0:
            raise DefinitionError(f"{what} must not be negative, got {value}")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match:
            return int(match.group(1)) * _DURATION_UNITS[match.group(2)]
    raise DefinitionError(f"{what} {value!r} is not a duration: use seconds or a number with s, m, h or d")


def format_duration(seconds: int) -> str:
    """A duration as a user writes it ('12h', '30m', '0s'): the largest unit parse_duration reads back exactly."""
    for unit in ("d", "h", "m"):
        if seconds and seconds % _DURATION_UNITS[unit] == 0:
            return f"{seconds // _DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


def parse_type(type_name: str) -> str:
    """Normalise a column type name; raise DefinitionError for unknown types."""
    normal = type_name.strip().lower() if isinstance(type_name, str) else ""
    if normal in SIMPLE_TYPES:
        return normal
    match = _DECIMAL.match(normal)
    if match:
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise DefinitionError(f"decimal({precision},{scale}) needs 1 <= precision <= 38 and scale <= precision")
        return f"decimal({precision},{scale})"
    raise DefinitionError(
        f"unknown column type {type_name!r}: use one of {', '.join(SIMPLE_TYPES)} or decimal(p,s)"
    )


def decimal_parts(type_name: str) -> tuple[int, int]:
    match = _DECIMAL.match(type_name)
    if not match:
        raise ValueError(f"{type_name!r} is not a decimal type")
    return int(match.group(1)), int(match.group(2))


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type a column of this siltlake type is stored as."""
    import pyarrow as pa

    simple = {
        "string": pa.string(),
        "json": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "date": pa.date32(),
    }
    if type_name in simple:
        return simple[type_name]
    precision, scale = decimal_parts(type_name)
    return pa.decimal128(precision, scale)


# Types a primary key column may have, and a sequence column (decimal(p,s) is allowed for both).
KEY_TYPES = ("string", "int", "bigint", "date", "timestamp", "boolean")
SEQUENCE_TYPES = ("int", "bigint", "double", "float", "date", "timestamp")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_Model = TypeVar("_Model", bound=BaseModel)


def _exact_bool(value: Any, info: ValidationInfo) -> bool:
    """A real boolean: pydantic would take "no", "off" or 0 for false."""
    if not isinstance(value, bool):
        raise DefinitionError(f"{info.field_name} {value!r} is not a boolean: write true or false")
    return value


def _exact_int(value: Any, info: ValidationInfo) -> Any:
    """A real integer: pydantic would take true for 1 and "100" or 1.0 for a number."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise DefinitionError(f"{info.field_name} {value!r} is not a whole number")
    return value


class Column(_Strict):
    name: str
    type: str
    nullable: bool = True
    source: str | None = Field(default=None, description="input field name; defaults to the column name")
    # The column's Iceberg field id, written into every object as its Parquet field_id: assigned when the table
    # is created or the column added, never reused. None only in definitions stored before ids existed.
    field_id: int | None = Field(default=None, exclude_if=_absent)
    # The name objects store the column under, when not its name: kept by a rename, never reused (issue 31).
    physical: str | None = Field(default=None, exclude_if=_absent)

    _nullable = field_validator("nullable", mode="before")(_exact_bool)

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


class TableDef(_Strict):
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
    row_group_bytes: int = 8 * 1024 * 1024  # target decoded size of a merged object's row groups (issue 36)
    ttl_days: int | None = None
    # "derived": built from a query by siltlake.derived (siltlake.tabledef.DerivedDef), never streamed into.
    kind: Literal["log", "derived"] = "log"
    # Keyed tables (docs/design.md "Keyed tables"): readers see one row per (dt, primary key), the one committed
    # last unless sequence_column orders them; merges keep only those rows.
    primary_key: tuple[str, ...] = ()
    sequence_column: str = ""
    # The Iceberg field id of the partition column dt (the columns carry their own; see Column.field_id).
    dt_field_id: int | None = Field(default=None, exclude_if=_absent)
    # Dropped columns (issue 31): their ids and physical names are never given to a column again.
    dropped_columns: tuple[Column, ...] = Field(default=(), exclude_if=lambda value: not value)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

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
            raise DefinitionError(f"{info.field_name} {value!r} is not an IANA time zone name such as "
                                  "Asia/Tokyo") from None
        return value

    @field_validator("merge_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> int:
        return parse_duration(value, "merge_interval")

    _whole = field_validator("merged_object_size", "merge_batch_size", "row_group_bytes", "ttl_days",
                             mode="before")(_exact_int)

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
            missing = [c.name for c in self.columns if c.field_id is None] + \
                ([PARTITION_COLUMN] if self.dt_field_id is None else [])
            raise DefinitionError(f"field ids: {', '.join(missing)} have none; give every column and dt_field_id "
                                  "an id, or none (ids are then assigned)")
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
                raise DefinitionError(f"primary_key column {name!r} must be declared nullable = false: a key "
                                      "must be present in every record")
            if column.type not in KEY_TYPES and not column.type.startswith("decimal"):
                raise DefinitionError(f"primary_key column {name!r} has type {column.type}, which cannot be a key; "
                                      f"use one of {', '.join(KEY_TYPES)}")
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
            raise DefinitionError(f"sequence_column {self.sequence_column!r} has type {column.type}; it must be "
                                  f"one of {', '.join(SEQUENCE_TYPES)}")
        if self.sequence_column in self.primary_key:
            raise DefinitionError(f"sequence_column {self.sequence_column!r} is part of the primary_key")

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
        missing = [c.name for c in self.columns if c.name not in ids] + \
            ([PARTITION_COLUMN] if PARTITION_COLUMN not in ids else [])
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
        return pa.schema([f.with_name(n).with_metadata({FIELD_ID_KEY: str(ids[f.name]).encode()})
                          for f, n in zip(fields, names, strict=True)])

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
        return _validated(cls, data, source)

    def with_column(self, column: Column) -> TableDef:
        data = self.model_dump(by_alias=True)
        added = column.model_dump(exclude={"physical"})
        ever = [*self.columns, *self.dropped_columns]
        if self.field_ids is not None:  # a new id, above every id the table ever had (dropped columns' too)
            added["field_id"] = max([*self.field_ids.values(), *(c.field_id or 0 for c in ever)]) + 1
        taken, physical, suffix = {c.physical_name for c in ever}, column.name, added.get("field_id") or len(ever)
        while physical in taken:  # a dropped or renamed column's objects hold this name: not this column's data
            physical, suffix = f"{column.name}_{suffix}", suffix + 1
        added["physical"] = physical if physical != column.name else None
        data["columns"] = [*data["columns"], added]
        return TableDef.from_mapping(data)

    def with_column_type(self, name: str, type_name: str) -> TableDef:
        """The definition with column `name` widened to `type_name` (only the WIDENINGS are allowed)."""
        new_type = parse_type(type_name)
        check_identifier(name, "column name")  # so that the error shows a hostile name as repr, on one line
        try:
            old_type = self.column(name).type
        except KeyError:
            raise no_column(self.qualified_name, name, (c.name for c in self.columns)) from None
        if (old_type, new_type) not in WIDENINGS:
            raise DefinitionError(
                f"cannot change column {name} of {self.qualified_name} from {old_type} to {new_type}: only int -> "
                "bigint and float -> double widen (older objects stay readable); add a new column instead")
        data = self.model_dump(by_alias=True)
        data["columns"] = [{**c, "type": new_type} if c["name"] == name else c for c in data["columns"]]
        return TableDef.from_mapping(data)

    def renamed(self, schema_name: str, name: str) -> TableDef:
        data = self.model_dump(by_alias=True)
        data.update(schema=schema_name, name=name)
        return TableDef.from_mapping(data)


def _validated(model: type[_Model], data: dict[str, Any], source: str) -> _Model:
    """The model of `data`; a DefinitionError naming `source` and each problem's key path otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DefinitionError(f"{source}: {describe_validation_error(exc)}") from None
    except DefinitionError as exc:
        raise DefinitionError(f"{source}: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, each naming the key path."""
    lines = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, "):]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{path}: {message}")
    return "; ".join(lines)


class DerivedDef(_Strict):
    """A derived table (DESIGN §12): a Spark SQL query over tables, and when to rebuild it.

    One rule keeps it fresh: persist_for (rebuild when the build is older), trigger = "sources" (when a
    source table's published version changes; the default) or trigger_sql (when the query's value
    changes, as Looker's sql_trigger_value). incremental: the query keeps each source dt's rows in that
    dt, so a build recomputes only the dates whose source partitions changed.
    """

    name: str
    query: str
    incremental: bool = False
    persist_for: int | None = None
    trigger: Literal["sources"] | None = None
    trigger_sql: str | None = None
    codec: Literal["zstd", "snappy", "gzip", "none"] = "zstd"

    _incremental = field_validator("incremental", mode="before")(_exact_bool)

    @field_validator("name")
    @classmethod
    def _qualified(cls, value: str) -> str:
        parts = value.split(".") if isinstance(value, str) else []
        if len(parts) != 2:
            raise DefinitionError(f"name {value!r} must be schema.table")
        check_identifier(parts[0], "schema name")
        check_identifier(parts[1], "table name")
        return value

    @field_validator("persist_for", mode="before")
    @classmethod
    def _persist(cls, value: Any) -> int | None:
        if value is None:
            return None
        seconds = parse_duration(value, "persist_for")
        if seconds < 1:
            raise DefinitionError("persist_for must be at least 1s")
        return seconds

    @field_validator("query", "trigger_sql")
    @classmethod
    def _text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.strip():
            raise DefinitionError(f"{info.field_name} is empty")
        return value.strip().rstrip(";").strip() if value is not None else None

    @model_validator(mode="after")
    def _one_rule(self) -> DerivedDef:
        rules = [key for key in ("persist_for", "trigger", "trigger_sql") if getattr(self, key) is not None]
        if len(rules) > 1:
            raise DefinitionError(f"give one of persist_for, trigger and trigger_sql, not {' and '.join(rules)}")
        return self

    @property
    def schema_name(self) -> str:
        return self.name.split(".")[0]

    @property
    def table_name(self) -> str:
        return self.name.split(".")[1]

    @property
    def rule(self) -> str:
        """How the table is kept: "persist_for", "sql" or "sources"."""
        if self.persist_for is not None:
            return "persist_for"
        return "sql" if self.trigger_sql is not None else "sources"

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> DerivedDef:
        return cls.model_validate_json(text)

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str = "derived table definition") -> DerivedDef:
        return _validated(cls, data, source)


def _definition_file(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DefinitionError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except Exception as exc:  # the parsers raise several unrelated exception types
        raise DefinitionError(f"{path} is not valid {path.suffix.lstrip('.') or 'toml'}: {exc}") from None
    if not isinstance(data, dict):
        raise DefinitionError(f"{path}: expected a mapping at the top level")
    return data


def load_derived_file(path: str | Path) -> DerivedDef:
    """Read a derived table definition from a .toml (or .yaml/.yml) file."""
    path = Path(path)
    return DerivedDef.from_mapping(_definition_file(path, "derived table definition"), source=str(path))


def load_table_file(path: str | Path) -> TableDef:
    """Read a table definition from a .toml (or .yaml/.yml) file."""
    path = Path(path)
    return TableDef.from_mapping(_definition_file(path, "table definition"), source=str(path))


@functools.lru_cache(maxsize=64)
def _from_json(cls: type[TableDef], text: str) -> TableDef:
    """Definitions are frozen: a Spark worker decoding the same table's JSON for every task shares one.

    A log table stored before naive_timezone existed read naive time strings as UTC, and keeps doing so."""
    data = json.loads(text)
    if isinstance(data, dict) and data.get("kind", "log") == "log":
        data.setdefault("naive_timezone", LEGACY_NAIVE_TIMEZONE)
    return cls.model_validate(data)
