"""The merge's choice of dictionary-encoded columns, from an evenly spread sample taken chunk by chunk."""

from __future__ import annotations

import pyarrow as pa

from siltlake.merge.task import DICTIONARY_SAMPLE_ROWS, _every_nth, dictionary_columns


def test_every_nth_takes_every_step_th_value_across_chunks() -> None:
    values = list(range(10_007))
    column = pa.chunked_array([values[:3001], values[3001:3002], values[3002:]], pa.int64())
    positions: dict = {}
    assert _every_nth(column, 7, positions).to_pylist() == values[::7]
    assert _every_nth(column, 7, positions).to_pylist() == values[::7]  # the positions kept for the next column
    assert _every_nth(column, 1, {}) is column


def test_repeating_columns_and_missing_ones_get_a_dictionary() -> None:
    rows = DICTIONARY_SAMPLE_ROWS * 5 + 3
    table = pa.table({"status": [200, 404, 500] * (rows // 3) + [200] * (rows % 3), "id": list(range(rows))})
    table = pa.Table.from_batches(table.to_batches(max_chunksize=rows // 4))
    schema = pa.schema([("status", pa.int64()), ("id", pa.int64()), ("dt", pa.date32())])
    assert dictionary_columns(table, schema) == ["status", "dt"]
