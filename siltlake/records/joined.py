"""Small JSON-lines objects read together: pyarrow.json's fixed cost per call is most of a small object's decode,
so a group of them (stream/group_task.py) is read in one call and each object's rows come back as its own slice.

An object joins only when it is JSON lines and decodes to at most JOIN_OBJECT_BYTES; the joined read is the
vectorised path alone (records.json_fast.convert_joined), so an object with any line that needs the per-record
decoder, its bad records and line numbers, is decoded again on its own by the caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from itertools import chain

import pyarrow as pa

from siltlake.records import decode_object
from siltlake.records.batches import ParsedBatch
from siltlake.records.framing import SNIFF_BYTES, UTF8_BOM, ByteStream, ObjectBytes, ObjectLimits, detect_format
from siltlake.records.json_fast import BLANKS, JsonFastPath
from siltlake.records.jsonl import JsonLinesReader
from siltlake.tabledef import TableDef

JOIN_OBJECT_BYTES = 1 << 20  # an object that decodes to more bytes amortises the per-call cost alone
JOIN_BLOCK_BYTES = 4 << 20  # the waiting objects' bytes read in one call


@dataclass
class WaitingObject:
    """An object's decoded bytes held for a joined read, and where its dropped fields are counted."""

    data: bytes
    dropped: Counter[str] | None


class JoiningReader:
    """read_staging_object's twin for a group: a small JSON-lines object is held (its read yields nothing, and
    `held` says so) instead of decoded, anything else decodes as read_staging_object would."""

    def __init__(self, table: TableDef) -> None:
        self.fast = JsonFastPath(table, Counter())
        self.joining = self.fast.enabled
        self.held: WaitingObject | None = None

    def read(
        self,
        stream: ByteStream,
        key: str,
        table: TableDef,
        batch_rows: int = 65536,
        limits: ObjectLimits | None = None,
        dropped: Counter[str] | None = None,
        workers: int = 1,
    ) -> Generator[ParsedBatch, None, None]:
        self.held = None
        source = ObjectBytes(stream, limits)
        object_format = detect_format(key, source.head(SNIFF_BYTES), table.format)
        if object_format != "jsonl" or not self.joining:
            yield from decode_object(source, object_format, table, batch_rows, dropped, workers)
            return
        chunks = source.chunks()
        read: list[bytes] = []
        size = 0
        for chunk in chunks:
            read.append(chunk)
            size += len(chunk)
            if size > JOIN_OBJECT_BYTES:
                yield from JsonLinesReader(table, batch_rows, dropped).read(chain(read, chunks), workers)
                return
        data = b"".join(read).removeprefix(UTF8_BOM)
        if not data.strip(BLANKS):  # nothing to join: an empty object decodes as it always does
            yield from JsonLinesReader(table, batch_rows, dropped).read([data], workers)
            return
        self.held = WaitingObject(data, dropped)

    def take(self) -> WaitingObject | None:
        """The object the last read held, if it did."""
        held, self.held = self.held, None
        return held

    def convert(self, waiting: list[WaitingObject]) -> list[pa.Table] | None:
        """The held objects' rows, each its own, in one read; their dropped fields counted where each's go.
        None: some line needs the per-record decoder (the caller decodes each object again on its own)."""
        converted = self.fast.convert_joined([item.data for item in waiting])
        if converted is None:
            return None
        for item, (_, dropped) in zip(waiting, converted, strict=True):
            if item.dropped is not None and dropped:
                item.dropped.update(dropped)
        return [rows for rows, _ in converted]
