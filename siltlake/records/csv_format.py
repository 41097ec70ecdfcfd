"""CSV with a header line into typed batches; and a row rendered back as CSV text (for bad records)."""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from siltlake.records.batches import BadRecord, BatchAssembler, ParsedBatch, UnreadableObject
from siltlake.records.coerce import RecordConverter
from siltlake.records.framing import MAX_LINE_BYTES, READ_SIZE
from siltlake.tabledef import TableDef

# csv's default field limit (128 KiB) would make one long field (a user agent, a stack trace) fail the
# whole object; a CSV field may be as long as a JSON line. The limit is process-wide: only ever raised.
csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))


class _ChunkStream(io.RawIOBase):
    """A readable raw stream over an iterator of byte chunks, for io.TextIOWrapper."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def read_csv(
    chunks: Iterable[bytes], table: TableDef, batch_rows: int, dropped: Counter[str] | None = None
) -> Iterator[ParsedBatch]:
    converter = RecordConverter(table, "csv", dropped)
    assembler = BatchAssembler(converter.schema, batch_rows)
    # Undecodable bytes become lone surrogates, found per record below, so the error can name the line.
    text = io.TextIOWrapper(
        io.BufferedReader(_ChunkStream(chunks), READ_SIZE), encoding="utf-8-sig", errors="surrogateescape", newline=""
    )
    reader = csv.reader(text)
    rendered = io.StringIO()
    # With an empty line terminator the writer would not quote fields holding newlines.
    writer = csv.writer(rendered, lineterminator="\r\n")
    header: list[str] | None = None
    bad: list[BadRecord] = []
    previous_line = 0
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise UnreadableObject(f"CSV error at line {reader.line_num}: {exc}") from None
        if row is None:
            break
        start_line, previous_line = previous_line + 1, reader.line_num
        if not row:
            continue
        if not all(field.isascii() for field in row):
            _check_csv_utf8(row, start_line)
        if header is None:
            header = _csv_header(row, converter.sources)
            continue
        reason: str | None
        if len(row) != len(header):
            reason = f"row has {len(row)} fields, the header has {len(header)}"
        else:
            reason = converter.add(dict(zip(header, row, strict=True)))
        if reason is not None:
            rendered.seek(0)
            rendered.truncate()
            writer.writerow(row)
            bad.append(BadRecord(start_line, reason, rendered.getvalue()[:-2]))
        if converter.row_count + len(bad) >= batch_rows:
            yield from assembler.add(converter.take_table(), bad)
            bad = []
    yield from assembler.add(converter.take_table(), bad)
    yield from assembler.finish()


def _check_csv_utf8(row: list[str], line: int) -> None:
    try:
        "".join(row).encode("utf-8")
    except UnicodeEncodeError:
        raise UnreadableObject(f"invalid UTF-8 in CSV at line {line}") from None


def _csv_header(row: list[str], sources: frozenset[str]) -> list[str]:
    seen = set()
    for name in row:
        if name in seen:
            raise UnreadableObject(f"CSV header names {name!r} twice")
        seen.add(name)
    if not seen & sources:
        shown = ", ".join(repr(name) for name in row[:5])
        raise UnreadableObject(
            f"CSV has no header: its first line ({shown}{', ...' if len(row) > 5 else ''}) "
            "names none of the table's fields"
        )
    return row


def render_csv(row: list[str], delimiter: str) -> str:
    """A row as one CSV line without its line end: the raw text of a bad record."""
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(row)
    return out.getvalue()
