"""Shared by the tests of siltlake.records: tables, readers over one-way streams, record builders."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import msgpack
import pyarrow as pa

from siltlake.records import BadRecord, ParsedBatch, read_staging_object
from siltlake.records import jsonl as json_lines
from siltlake.records.coerce import RecordConverter
from siltlake.tabledef import TableDef

EPOCH_2024 = 1_714_566_896  # 2024-05-01T12:34:56Z
US = 1_000_000
T0 = datetime(2024, 5, 1, 12, 34, 56, tzinfo=UTC)


def make_table(columns: list[dict[str, Any]], time_column: str = "ts", **options: Any) -> TableDef:
    return TableDef.from_mapping(
        {"schema": "logs", "name": "events", "time_column": time_column, "columns": columns, **options}
    )


BASIC_COLUMNS = [
    {"name": "ts", "type": "timestamp"},
    {"name": "user", "type": "string"},
    {"name": "n", "type": "bigint"},
    {"name": "action", "type": "string", "nullable": False},
]
BASIC = make_table(BASIC_COLUMNS)


class OneWayStream:
    """A readable stream that cannot seek or tell, like a network body."""

    def __init__(self, data: bytes) -> None:
        self._buffer = io.BytesIO(data)
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._buffer.read(size)
        self.position += len(chunk)
        return chunk

    def seekable(self) -> bool:
        return False


class TrickleStream(OneWayStream):
    """Returns at most a few bytes per read, as a slow socket might."""

    def read(self, size: int = -1) -> bytes:
        return super().read(7)


def read_batches(data: bytes, table: TableDef = BASIC, key: str = "in/obj.jsonl", batch_rows: int = 65536) -> list:
    return list(read_staging_object(OneWayStream(data), key, table, batch_rows))


def read_all(
    data: bytes, table: TableDef = BASIC, key: str = "in/obj.jsonl", batch_rows: int = 65536
) -> tuple[pa.Table, list[BadRecord]]:
    batches = read_batches(data, table, key, batch_rows)
    for batch in batches:
        assert isinstance(batch, ParsedBatch)
        assert batch.table.schema == table.arrow_schema()
        assert batch.records_in == batch.table.num_rows + len(batch.bad)
        assert 0 < batch.records_in <= batch_rows
    tables = [batch.table for batch in batches] or [table.arrow_schema().empty_table()]
    return pa.concat_tables(tables), [bad for batch in batches for bad in batch.bad]


def jsonl(*records: Any) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()


def event_record(i: int = 0, **extra: Any) -> dict[str, Any]:
    return {"ts": f"2024-05-01T12:34:{i % 60:02d}Z", "user": f"u{i}", "n": i, "action": "login", **extra}


def both_paths(table: TableDef, block: bytes) -> tuple[pa.Table | None, json_lines._Piece]:
    """The vectorised and the per-record result for one block; they must agree when both exist."""
    slow = json_lines._slow_json_block(block, 1, RecordConverter(table, "json"))
    fast = json_lines.JsonFastPath(table).convert(block)
    if fast is not None:
        assert slow.bad == []
        assert fast.equals(slow.table), (fast.to_pylist(), slow.table.to_pylist())
    return fast, slow


def pack(*items: Any) -> bytes:
    return b"".join(msgpack.packb(item, use_bin_type=True) for item in items)
