"""What the format readers yield: batches of typed rows with the bad records beside them, in input order;
and the refusal of a whole object."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from siltlake.errors import Refusal


class UnreadableObject(Refusal):
    """The object as a whole cannot be decoded (bad gzip/truncated, invalid UTF-8, not JSON lines at all, not MessagePack, CSV without header...)."""  # noqa: E501


@dataclass(frozen=True)
class BadRecord:
    """One input record that could not become a row, and why."""

    line: int
    reason: str
    raw: str


@dataclass
class ParsedBatch:
    """Good rows as a table in the TableDef's schema, plus the bad records of the same stretch."""

    table: pa.Table
    bad: list[BadRecord]
    records_in: int


class BatchAssembler:
    """Cuts decoded pieces into ParsedBatches of at most batch_rows records."""

    def __init__(self, schema: pa.Schema, batch_rows: int) -> None:
        self.schema = schema
        self.batch_rows = batch_rows
        self.tables: list[pa.Table] = []
        self.rows = 0
        self.bad: deque[BadRecord] = deque()

    def add(self, table: pa.Table | None, bad: Iterable[BadRecord] = ()) -> Iterator[ParsedBatch]:
        if table is not None and table.num_rows:
            self.tables.append(table)
            self.rows += table.num_rows
        self.bad.extend(bad)
        while self.rows + len(self.bad) >= self.batch_rows:
            yield self._emit(self.batch_rows)

    def finish(self) -> Iterator[ParsedBatch]:
        if self.rows or self.bad:
            yield self._emit(self.rows + len(self.bad))

    def _emit(self, size: int) -> ParsedBatch:
        bad = [self.bad.popleft() for _ in range(min(size, len(self.bad)))]
        wanted = size - len(bad)
        if self.tables:
            pending = self.tables[0] if len(self.tables) == 1 else pa.concat_tables(self.tables)
        else:
            pending = self.schema.empty_table()
        table, rest = pending.slice(0, wanted), pending.slice(wanted)
        self.tables = [rest] if rest.num_rows else []
        self.rows = rest.num_rows
        return ParsedBatch(table=table, bad=bad, records_in=table.num_rows + len(bad))
