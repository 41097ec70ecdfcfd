"""Merge-on-read of keyed tables' partitions (docs/design.md "Keyed tables", "Readers"): the objects of one
partition, read in commit order as the table's schema, reduced by the one rule (siltlake.records.keyed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from siltlake.records.keyed import DELETE_MARKER, latest_rows, needs_merge_on_read

if TYPE_CHECKING:
    import pyarrow as pa

    from siltlake.storage.filesystem import Storage


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The object's rows as `schema`'s columns (dt left out): a column added after the object was written reads
    as null, a widened one as its new type; an upsert's delete-marker column is kept (last)."""
    import pyarrow as pa

    from siltlake.records.writer import conform as as_columns

    shaped = as_columns(table, pa.schema([field for field in schema if field.name != "dt"]))
    if DELETE_MARKER in table.column_names and DELETE_MARKER not in schema.names:
        shaped = shaped.append_column(pa.field(DELETE_MARKER, pa.bool_()), table.column(DELETE_MARKER))
    return shaped


def dirty_dates(files: Sequence[tuple[dt.date, str]]) -> set[dt.date]:
    """The dates whose files ((date, name or URI) in commit order) need a merge on read."""
    by_date: dict[dt.date, list[str]] = {}
    for date, name in files:
        by_date.setdefault(date, []).append(name)
    return {date for date, names in by_date.items() if needs_merge_on_read(names)}


def read_partitions(
    lake: Storage,
    partitions: Sequence[tuple[dt.date, Sequence[str]]],
    schema: pa.Schema,
    primary_key: Sequence[str],
    sequence_column: str,
) -> list[pa.Table]:
    """What readers see of each partition (date, its object keys in commit order), with the dt column: the
    objects read as `schema` by pyarrow's scanner (its threads; the table keeps the objects' order, rows in
    file order), then one row per key."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    dt_field = schema.field("dt")
    # The marker column too: only an upsert's objects have it; the others read it as null (not a delete).
    fields = [field for field in schema if field.name != "dt" and field.name != DELETE_MARKER]
    read_schema = pa.schema([*fields, pa.field(DELETE_MARKER, pa.bool_())])
    out = []
    for date, keys in partitions:
        rows = ds.FileSystemDataset.from_paths(
            [lake.path(key) for key in keys],
            schema=read_schema,
            format=ds.ParquetFileFormat(),
            filesystem=lake.filesystem,
        ).to_table()
        if rows.column(DELETE_MARKER).null_count == rows.num_rows:
            rows = rows.drop_columns([DELETE_MARKER])
        rows = latest_rows(rows, primary_key, sequence_column)
        out.append(rows.append_column(dt_field, pa.repeat(pa.scalar(date, dt_field.type), rows.num_rows)))
    return out
