"""Keyed tables' one rule of which rows readers see (docs/design.md "Keyed tables").

A keyed table's partition may hold several rows of one primary key: a shipper's re-sent chunk, an upsert
(a `merge` commit). Every reader, the merge and the update apply the same rule, here: of the rows of one
(dt, key), the one with the largest sequence column wins (when the table has one; a null sequence is the
smallest), and among equals the one committed last: rows are given in commit order (the partition's files
in file-list order, rows in file order). A winner that is a delete marker removes the key.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from siltlake.storage.keys import small_object_id

# The boolean column an upsert's objects carry when some of their rows delete their key.
DELETE_MARKER = "_silt_delete"
_POSITION = "__silt_position"
_RANK = "__silt_rank"


def _positions(count: int) -> pa.Array:
    """0, 1, ..., count - 1 (int64), without a Python loop."""
    return pc.subtract(pc.cumulative_sum(pc.fill_null(pa.nulls(count, pa.int64()), 1)), 1)


def latest_rows(table: pa.Table, primary_key: Sequence[str], sequence_column: str = "") -> pa.Table:
    """The rows readers see of `table`, whose rows are in commit order: one row per key (the caller gives the
    rows of one partition date, or includes dt in the key), delete markers applied and the marker column
    dropped. The rows keep their order."""
    keys = list(primary_key)
    marked = DELETE_MARKER in table.column_names
    if table.num_rows == 0:
        return table.drop_columns([DELETE_MARKER]) if marked else table
    if sequence_column:
        # Rank rows by (sequence, commit order): the largest rank of a key is its winner.
        ordered = pc.sort_indices(
            pa.table({"s": table.column(sequence_column), "p": _positions(table.num_rows)}),
            sort_keys=[("s", "ascending", "at_start"), ("p", "ascending", "at_end")])
        rank = _inverse(ordered)
        by = table.select(keys).append_column(_RANK, rank)
        winners = by.group_by(keys, use_threads=False).aggregate([(_RANK, "max")])
        if winners.num_rows == table.num_rows and not marked:
            return table
        chosen = pc.take(ordered, winners.column(f"{_RANK}_max"))
    else:
        by = table.select(keys).append_column(_POSITION, _positions(table.num_rows))
        winners = by.group_by(keys, use_threads=False).aggregate([(_POSITION, "max")])
        if winners.num_rows == table.num_rows and not marked:
            return table
        chosen = winners.column(f"{_POSITION}_max")
    kept = table.take(pc.take(chosen, pc.sort_indices(chosen)))
    if marked:
        kept = kept.filter(pc.invert(pc.fill_null(kept.column(DELETE_MARKER), False))).drop_columns([DELETE_MARKER])
    return kept


def _inverse(order: pa.Array) -> pa.Array:
    """The inverse permutation of `order`: inverse[order[i]] = i."""
    return pc.take(_positions(len(order)), pc.sort_indices(order))


def needs_merge_on_read(file_names: Sequence[str]) -> bool:
    """Whether a keyed partition showing these files (in file-list order) may hold several rows of a key: any
    small object (streamed, loaded or upserted rows), or more than one object. A merged or updated
    partition's one object holds each key once."""
    if len(file_names) > 1:
        return True
    return any(small_object_id(name.rsplit("/", 1)[-1]) is not None for name in file_names)
