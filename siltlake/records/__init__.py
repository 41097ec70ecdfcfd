"""Decoding staging objects (JSON lines, MessagePack, CSV, Fluentd out_file lines, LTSV; plain or gzip) into
typed Arrow batches.

One module per input format (jsonl, msgpack_format, csv_format, text_lines) over the shared per-record coercion
(coerce, docs/coercion.md) and its vectorised twin (vectorised); framing finds gzip and the format;
writer writes typed rows as time-sorted Parquet per partition date. The stream and the load both use them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

from siltlake.records.batches import BadRecord, ParsedBatch, UnreadableObject
from siltlake.records.csv_format import read_csv
from siltlake.records.framing import SNIFF_BYTES, ByteStream, ObjectBytes, ObjectLimits, detect_format
from siltlake.records.jsonl import JsonLinesReader
from siltlake.records.msgpack_format import read_msgpack
from siltlake.records.pipeline import prefetched
from siltlake.records.text_lines import read_fluentd_lines, read_ltsv
from siltlake.tabledef import TableDef

__all__ = [
    "BadRecord",
    "ObjectLimits",
    "ParsedBatch",
    "UnreadableObject",
    "detect_format",
    "read_staging_object",
]


def read_staging_object(
    stream: ByteStream,
    key: str,
    table: TableDef,
    batch_rows: int = 65536,
    limits: ObjectLimits | None = None,
    dropped: Counter[str] | None = None,
    workers: int = 1,
) -> Generator[ParsedBatch, None, None]:
    """Decode a staging object (raw bytes as stored; gzip detected by magic bytes 1f 8b, never by name alone) into batches of typed rows. Memory must stay bounded by the batch size, whatever the object size (a 500 MB gzip object must stream: never read it whole). Raises UnreadableObject (possibly after some batches were already yielded — the caller discards them). With `dropped`, the values of fields that are no column are counted there by name (unknown_fields = "ignore"). With workers > 1 the object is decompressed in a thread of its own and JSON lines decode on that many threads (records.pipeline): the same batches, sooner."""  # noqa: E501
    if batch_rows < 1:
        raise ValueError("batch_rows must be at least 1")
    source = ObjectBytes(stream, limits)
    object_format = detect_format(key, source.head(SNIFF_BYTES), table.format)
    yield from decode_object(source, object_format, table, batch_rows, dropped, workers)


def decode_object(
    source: ObjectBytes,
    object_format: str,
    table: TableDef,
    batch_rows: int,
    dropped: Counter[str] | None = None,
    workers: int = 1,
) -> Generator[ParsedBatch, None, None]:
    """read_staging_object once the object's format is known."""
    if object_format == "jsonl":
        yield from JsonLinesReader(table, batch_rows, dropped).read(source.chunks(), workers)
        return
    chunks = prefetched(source.chunks(), depth=4) if workers > 1 else source.chunks()
    if object_format == "msgpack":
        yield from read_msgpack(chunks, table, batch_rows, dropped)
    elif object_format == "fluentd_line":
        yield from read_fluentd_lines(chunks, table, batch_rows, dropped)
    elif object_format == "ltsv":
        yield from read_ltsv(chunks, table, batch_rows, dropped)
    else:
        yield from read_csv(chunks, table, batch_rows, dropped)
