"""Merge-on-read of keyed tables' partitions (docs/design.md "Keyed tables", "Readers"): the objects of one
partition, read in commit order as the table's schema, reduced by the one rule (siltlake.records.keyed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from siltlake.records.keyed import DELETE_MARKER, latest_rows, needs_merge_on_read

if TYPE_CHECKING:
    import pyarrow as pa

    from siltlake.storage.filesystem import Storage

# Objects of a dirty partition read at once: pyarrow releases the GIL while it reads and decodes.
_READERS = 8


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The object's rows as `schema`'s columns (dt left out): a column added after the object was written reads
    as null, a widened one as its new type; an upsert's delete-marker column is kept (last)."""
    import pyarrow as pa

    columns, fields = [], []
    for target in schema:
        if target.name == "dt":
            continue
        index = table.schema.get_field_index(target.name)
        if index < 0:
            column = pa.nulls(table.num_rows, target.type)
        else:
            column = table.column(index)
            if not column.type.equals(target.type):
                column = column.cast(target.type)
        columns.append(column)
        fields.append(target)
    if DELETE_MARKER in table.column_names and DELETE_MARKER not in schema.names:
        columns.append(table.column(DELETE_MARKER))
        fields.append(pa.field(DELETE_MARKER, pa.bool_()))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def dirty_dates(files: Sequence[tuple[dt.date, str]]) -> set[dt.date]:
    """The dates whose files ((date, name or URI) in commit order) need a merge on read."""
    by_date: dict[dt.date, list[str]] = {}
    for date, name in files:
        by_date.setdefault(date, []).append(name)
    return {date for date, names in by_date.items() if needs_merge_on_read(names)}


def read_partitions(lake: Storage, partitions: Sequence[tuple[dt.date, Sequence[str]]], schema: pa.Schema,
                    primary_key: Sequence[str], sequence_column: str) -> list[pa.Table]:
    """What readers see of each partition (date, its object keys in commit order), with the dt column: every
    object read as `schema` (threads over all the objects at once), then one row per key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def read(key: str) -> pa.Table:
        with lake.open_input_file(key) as handle:
            return conform(pq.read_table(handle), schema)

    keys = [key for _, keys in partitions for key in keys]
    if len(keys) <= 1:
        tables = [read(key) for key in keys]
    else:
        with ThreadPoolExecutor(min(_READERS, len(keys))) as pool:
            tables = list(pool.map(read, keys))
    out, start = [], 0
    dt_type = schema.field("dt").type
    for date, objects in partitions:
        parts, start = tables[start:start + len(objects)], start + len(objects)
        # An upsert's objects carry the marker, the others do not: those read it as null (not a delete).
        rows = latest_rows(pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0],
                           primary_key, sequence_column)
        out.append(rows.append_column(pa.field("dt", dt_type, nullable=schema.field("dt").nullable),
                                      pa.repeat(pa.scalar(date, dt_type), rows.num_rows)))
    return out
