"""The Iceberg partition spec of a siltlake table and the partition record of each file it registers (docs/design.md,
"Iceberg target" and "Partitions below the date").

The spec is `dt` (identity) then one field per `partition_by` field, in its order: identity on the column, or
bucket[N] of it, named as siltlake.partspec names it (`action`, `user_id_bucket`). Partition field ids are Iceberg's
by position (1000 for dt, 1001 for the first field below it, ...): PyIceberg gives a new table's spec those ids, and
partition_by is fixed when the table is created, so they never change. A file's partition record is its date (days
since 1970-01-01, Iceberg's form of a date) then its values below dt, read from the values path the catalog and
the object's key carry ("action=a1/user_id_bucket=3"): engines prune on the record, and it must name the
partition the file's rows lie in.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from siltlake.coltypes import PARTITION_COLUMN
from siltlake.partspec import parse_values
from siltlake.publish.iceberg.manifests import EPOCH

if TYPE_CHECKING:
    from siltlake.tabledef import TableDef

# Iceberg's first partition field id (PyIceberg numbers a new table's spec from it, by position).
FIRST_PARTITION_FIELD_ID = 1000


def partition_spec(definition: TableDef, schema: Any) -> Any:  # a pyiceberg Schema in, a PartitionSpec out
    """The table's spec over `schema` (whose field ids are the definition's)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    fields = [
        PartitionField(
            source_id=schema.find_field(PARTITION_COLUMN).field_id,
            field_id=FIRST_PARTITION_FIELD_ID,
            transform=IdentityTransform(),
            name=PARTITION_COLUMN,
        )
    ]
    for position, field in enumerate(definition.partition_fields, start=1):
        fields.append(
            PartitionField(
                source_id=schema.find_field(field.column).field_id,
                field_id=FIRST_PARTITION_FIELD_ID + position,
                transform=IdentityTransform() if field.buckets is None else BucketTransform(field.buckets),
                name=field.name,
            )
        )
    return PartitionSpec(*fields)


def spec_clause(definition: TableDef) -> str:
    """The spec as a CREATE TABLE's PARTITIONED BY list: `dt, action, bucket(4, user_id)`."""
    return ", ".join([PARTITION_COLUMN, *(str(field) for field in definition.partition_fields)])


def spec_fields(spec: Any, schema: Any) -> list[tuple[str, str, str]]:  # a pyiceberg PartitionSpec and Schema
    """A spec's fields as (name, transform, source column name), to compare a table's spec with the wanted one by
    what they mean (a renamed column keeps its field id, so source names are read from the schema given)."""
    return [(f.name, str(f.transform), schema.find_column_name(f.source_id)) for f in spec.fields]


def partition_record(definition: TableDef, date: dt.date, values: str) -> Any:  # a pyiceberg Record
    """A file's partition record: `date` in days, then the typed values its values path names (buckets as ints,
    identity values as their column's type; a date column's in days like dt)."""
    from pyiceberg.typedef import Record

    fields = definition.partition_fields
    typed = parse_values(fields, {c.name: c.type for c in definition.columns}, values)
    return Record((date - EPOCH).days, *(_iceberg_value(typed[field.name]) for field in fields))


def _iceberg_value(value: Any) -> Any:
    """A partition value in the form a manifest stores: a date as days since 1970, anything else as it is."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - EPOCH).days
    return value
