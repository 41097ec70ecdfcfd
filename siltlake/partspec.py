"""Partitions beyond the date: identity partitions on a column and hash buckets of a column.

A table's `partition_by` lists fields such as "service" (identity: one partition per value) and
"bucket(16, user_id)" (Iceberg's bucket[16] transform: murmur3 of the value, so that every Iceberg engine prunes
on it exactly). A partition is (dt, values); its values are named by one path segment per field, in the spec's
order, "service=api/user_id_bucket=3" (the empty string for a table partitioned by dt alone). That text is what
the catalog stores and what object keys carry below dt=<date>.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from siltlake.errors import DefinitionError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BUCKET_TYPES",
    "IDENTITY_TYPES",
    "NULL_TEXT",
    "PartitionField",
    "bucket_of",
    "parse_field",
    "parse_values",
    "row_values",
    "values_text",
]

# Column types each transform takes (Iceberg's identity and bucket accept more; these are the ones a log table's
# second level is made of: names, numbers, flags and days).
IDENTITY_TYPES = ("string", "int", "bigint", "boolean", "date")
BUCKET_TYPES = ("string", "int", "bigint", "date")
# A null value's text in a path (Hive's convention, which Spark and Trino read back as null).
NULL_TEXT = "__HIVE_DEFAULT_PARTITION__"
MAX_BUCKETS = 1024

_BUCKET = re.compile(r"^bucket\(\s*(\d+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_IDENTITY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class PartitionField:
    """One field of a partition spec: a column's value (buckets None) or its bucket among `buckets`."""

    column: str
    buckets: int | None = None

    @property
    def name(self) -> str:
        """The partition field's name: the column's for identity, `<column>_bucket` for buckets (Iceberg's)."""
        return self.column if self.buckets is None else f"{self.column}_bucket"

    @property
    def transform(self) -> str:
        """Iceberg's name of the transform: identity or bucket[N]."""
        return "identity" if self.buckets is None else f"bucket[{self.buckets}]"

    def __str__(self) -> str:
        return self.column if self.buckets is None else f"bucket({self.buckets}, {self.column})"

    def value(self, column_value: Any) -> Any:
        """The partition value of a column value: itself, or its bucket."""
        if self.buckets is None or column_value is None:
            return column_value
        return bucket_of(column_value, self.buckets)

    def text(self, partition_value: Any) -> str:
        """This field's path segment for a partition value."""
        return f"{self.name}={_value_text(partition_value)}"


def parse_field(text: str) -> PartitionField:
    """A field as written in partition_by: `service` or `bucket(16, user_id)`."""
    text = text.strip()
    bucket = _BUCKET.match(text)
    if bucket:
        count = int(bucket.group(1))
        if not 1 <= count <= MAX_BUCKETS:
            raise DefinitionError(f"partition_by {text!r}: the bucket count must be 1 to {MAX_BUCKETS}, got {count}")
        return PartitionField(bucket.group(2), count)
    if _IDENTITY.match(text):
        return PartitionField(text)
    raise DefinitionError(
        f"partition_by {text!r} is neither a column name (one partition per value) nor bucket(N, column)"
    )


def bucket_of(value: Any, buckets: int) -> int:
    """Iceberg's bucket transform: murmur3_x86_32 (seed 0) of the value's Iceberg bytes, non-negative, mod N.
    Integers and dates (days since 1970) hash as 8-byte little-endian longs, strings as UTF-8."""
    import mmh3

    if isinstance(value, bool):
        raise TypeError("booleans have no bucket transform")
    if isinstance(value, int):
        data = struct.pack("<q", value)
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        data = struct.pack("<q", (value - _EPOCH).days)
    elif isinstance(value, str):
        data = value.encode("utf-8")
    else:
        raise TypeError(f"no bucket transform for {type(value).__name__} values")
    return (mmh3.hash(data, 0, signed=True) & 0x7FFFFFFF) % buckets


def _value_text(value: Any) -> str:
    if value is None:
        return NULL_TEXT
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return quote(str(value), safe="")


def values_text(fields: Sequence[PartitionField], values: Sequence[Any]) -> str:
    """The path naming a partition's values (one per field, in order)."""
    return "/".join(f.text(v) for f, v in zip(fields, values, strict=True))


def parse_values(fields: Sequence[PartitionField], column_types: dict[str, str], text: str) -> dict[str, Any]:
    """The partition values a values path names, by field name (buckets as ints, identity values typed as
    their column)."""
    if not fields:
        return {}
    segments = text.split("/")
    if len(segments) != len(fields):
        raise ValueError(f"partition values {text!r} do not name {len(fields)} fields")
    values: dict[str, Any] = {}
    for field, segment in zip(fields, segments, strict=True):
        name, _, raw = segment.partition("=")
        if name != field.name:
            raise ValueError(f"partition values {text!r}: expected {field.name}=..., got {segment!r}")
        if raw == NULL_TEXT:
            values[name] = None
        elif field.buckets is not None:
            values[name] = int(raw)
        else:
            values[name] = _typed(unquote(raw), column_types[field.column])
    return values


def _typed(text: str, column_type: str) -> Any:
    if column_type in ("int", "bigint"):
        return int(text)
    if column_type == "boolean":
        return text == "true"
    if column_type == "date":
        return dt.date.fromisoformat(text)
    return text


def row_values(fields: Sequence[PartitionField], rows: pa.Table) -> pa.Array:
    """Each row's values path (a string array): computed once per distinct value of each field's column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces = []
    for field in fields:
        column = rows.column(field.column).combine_chunks()
        distinct = pc.unique(column)
        texts = pa.array([field.text(field.value(value)) for value in distinct.to_pylist()], pa.string())
        pieces.append(pc.take(texts, pc.index_in(column, value_set=distinct)))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, "/")
