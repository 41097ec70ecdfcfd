"""Keyed tables' one rule of which rows readers see (docs/design.md "Keyed tables").

A keyed table's partition may hold several rows of one primary key: a shipper's re-sent chunk, an upsert
(a `merge` commit). Every reader, the merge and the update apply the same rule, here: of the rows of one
(dt, key), the one with the largest sequence column wins (when the table has one; a null sequence is the
smallest), and among equals the one committed last: rows are given in commit order (the partition's files
in file-list order, rows in file order). A winner that is a delete marker removes the key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from siltlake.storage.keys import small_object_id

# The boolean column an upsert's objects carry when some of their rows delete their key.
DELETE_MARKER = "_silt_delete"


def latest_rows(table: pa.Table, primary_key: Sequence[str], sequence_column: str = "") -> pa.Table:
    """The rows readers see of `table`, whose rows are in commit order: one row per key (the caller gives the
    rows of one partition date, or includes dt in the key), delete markers applied and the marker column
    dropped. The rows keep their order."""
    keys = list(primary_key)
    marked = DELETE_MARKER in table.column_names
    if table.num_rows == 0:
        return table.drop_columns([DELETE_MARKER]) if marked else table
    # A stable sort by key (then sequence, nulls first) leaves each key's rows in commit order: the last row
    # of each run of equal keys wins. Sorting beats hash grouping here (3x on integer keys, 1.7x on strings).
    sort_keys: list[tuple[str, ...]] = [(name, "ascending") for name in keys]
    if sequence_column:
        sort_keys.append((sequence_column, "ascending", "at_start"))
    order = pc.sort_indices(table.select([*keys, sequence_column] if sequence_column else keys), sort_keys=sort_keys)
    last: pa.Array | None = None
    for name in keys:
        column = pc.take(table.column(name), order)
        differs = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
        last = differs if last is None else pc.or_(last, differs)
    assert last is not None
    last = pc.fill_null(pa.concat_arrays([*_chunks(last), pa.array([True])]), True)
    winners = pc.filter(order, last)
    if len(winners) == table.num_rows and not marked:
        return table
    # A mask in commit order keeps the winners where they are: cheaper than sorting them for a take.
    keep = np.zeros(table.num_rows, dtype=bool)
    keep[winners.to_numpy()] = True
    kept = table.filter(pa.array(keep))
    if marked:
        kept = kept.filter(pc.invert(pc.fill_null(kept.column(DELETE_MARKER), False))).drop_columns([DELETE_MARKER])
    return kept


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return values.chunks if isinstance(values, pa.ChunkedArray) else [values]


def needs_merge_on_read(file_names: Sequence[str]) -> bool:
    """Whether a keyed partition showing these files (in file-list order) may hold several rows of a key: any
    small object (streamed, loaded or upserted rows), or more than one object. A merged or updated
    partition's one object holds each key once."""
    if len(file_names) > 1:
        return True
    return any(small_object_id(name.rsplit("/", 1)[-1]) is not None for name in file_names)
