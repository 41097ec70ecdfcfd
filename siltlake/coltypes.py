"""Column types: their names, the Arrow types objects store them as, and which changes of a column's type
older objects read through (widenings) and which need their partitions rewritten (docs/design.md "Type changes")."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from siltlake.errors import DefinitionError

if TYPE_CHECKING:  # pyarrow is imported where a schema is built: `silt status` and `--help` never load it
    import pyarrow as pa

_DECIMAL = re.compile(r"^decimal\((\d{1,2}),\s*(\d{1,2})\)$")
SIMPLE_TYPES = ("string", "int", "bigint", "float", "double", "boolean", "timestamp", "date", "json")
# The type changes older objects can be read through (Parquet int32 as int64, float as double): nothing is rewritten.
WIDENINGS = {("int", "bigint"), ("float", "double")}
# The partition column: in every object (so that any Parquet or Iceberg reader filters on it), never a column name.
PARTITION_COLUMN = "dt"
# Names siltlake gives columns of its own next to a table's (tests/test_sql_scope.py checks each module's names
# are here): a table column so named would be taken for siltlake's, or siltlake's for it.
RESERVED_COLUMNS = {
    "_change_type": "the change feed (`silt changes`, Table.changes) adds it to every row",
    "_commit_version": "the change feed (`silt changes`, Table.changes) adds it to every row",
    "_commit_timestamp": "the change feed (`silt changes`, Table.changes) adds it to every row",
    "_retype_reason": "a type change's rewrite (`silt table alter-column --rewrite`) adds it to every row",
    "_retype_record": "a type change's rewrite (`silt table alter-column --rewrite`) adds it to every row",
}
# Helper columns (a row's number in a delete, an upsert's delete marker, a join's positions) begin so.
RESERVED_PREFIXES = ("_silt", "__silt")
# The Parquet schema metadata key of a column's Iceberg field id (pyarrow writes it as the Parquet field_id).
FIELD_ID_KEY = b"PARQUET:field_id"


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
    raise DefinitionError(f"unknown column type {type_name!r}: use one of {', '.join(SIMPLE_TYPES)} or decimal(p,s)")


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


def needs_rewrite(old_type: str, new_type: str) -> bool:
    """Whether changing a column from old_type to new_type (both normalised, different) needs its stored values
    converted: every change but a widening does."""
    return (old_type, new_type) not in WIDENINGS


def refuse_reserved_column(name: str) -> None:
    """Raise DefinitionError, saying which names are reserved and why, for a column name siltlake uses itself."""
    why = RESERVED_COLUMNS.get(name) or (
        "siltlake's helper columns begin so (a row's number while a delete is worked out, an upsert's delete marker)"
        if name.startswith(RESERVED_PREFIXES)
        else None
    )
    if why is not None:
        raise DefinitionError(
            f"column name {name!r} is reserved: {why}; siltlake reserves "
            f"{', '.join(RESERVED_COLUMNS)}, names beginning {' or '.join(RESERVED_PREFIXES)} "
            f"and {PARTITION_COLUMN} (the partition date) for columns of its own"
        )
