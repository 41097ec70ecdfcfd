"""JSON lines into typed batches.

Two decoders that must agree: the vectorised one of records.json_fast (used for a block of lines when every line
in it converts cleanly) and an exact per-record one here that also names the bad records.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace

import pyarrow as pa

from siltlake.records.batches import BadRecord, BatchAssembler, ParsedBatch, UnreadableObject
from siltlake.records.coerce import JSON_DECODER, RecordConverter, describe, unexpected_reason
from siltlake.records.framing import MAX_LINE_BYTES, UTF8_BOM
from siltlake.records.json_fast import BLANKS, JsonFastPath, LineLayout, is_utf8, line_layout
from siltlake.records.pipeline import ordered_map, prefetched
from siltlake.tabledef import TableDef

MIN_BLOCK_BYTES = 64 << 10
MAX_BLOCK_BYTES = 32 << 20
FIRST_BLOCK_BYTES = 4 << 20
# Below this size a failing JSON block goes straight to the per-record decoder.
MIN_SPLIT_BYTES = 64 << 10
SPLIT_FANOUT = 8

# A line holding something besides JSON's blanks; `^` and `$` match at line ends (re.M), `.` never crosses one.
_NON_BLANK_LINE = re.compile(r"^[ \t\r]*[^ \t\r\n].*$", re.M)


@dataclass
class _Piece:
    table: pa.Table | None
    bad: list[BadRecord]
    objects: int
    lines: int


def decode_json_line(line: str) -> tuple[dict, None] | tuple[None, str]:
    """One line of JSON lines: (the record, None), or (None, why it is a bad record). Stream and load both
    decode lines here, with the decoder that keeps each number's text (coerce.JSON_DECODER)."""
    try:
        value = JSON_DECODER.decode(line)
    except RecursionError:
        return None, "invalid JSON: nested too deeply"
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"
    except Exception as exc:  # one line never fails its object
        return None, f"invalid JSON: {unexpected_reason(exc)}"
    if not isinstance(value, dict):
        return None, f"not a JSON object but {describe(value)}"
    return value, None


def _slow_json_block(block: bytes, first_line: int, converter: RecordConverter) -> _Piece:
    """The exact per-record decoder for a block of whole lines (already known to be UTF-8). Only non-blank
    lines are visited: runs of blank lines are skipped by the regular expression, not line by line."""
    bad = []
    objects = 0
    lines = 0
    text = block.decode("utf-8")
    line_number, counted = first_line, 0
    for found in _NON_BLANK_LINE.finditer(text):
        line_number += text.count("\n", counted, found.start())
        counted = found.start()
        line = found.group()
        lines += 1
        raw = line[:-1] if line.endswith("\r") else line
        decoded = decode_json_line(line)  # indexed, not unpacked: so the type checker pairs a None with its reason
        if decoded[0] is None:
            bad.append(BadRecord(line_number, decoded[1], raw))
            continue
        value = decoded[0]
        objects += 1
        reason = converter.add(value)
        if reason is not None:
            bad.append(BadRecord(line_number, reason, raw))
    return _Piece(converter.take_table(), bad, objects, lines)


def _split_block(block: bytes, first_line: int, parts: int) -> list[tuple[bytes, int, LineLayout]]:
    """About `parts` runs of whole lines: (bytes, first line number, layout)."""
    pieces = []
    start = 0
    line = first_line
    step = max(len(block) // parts, 1)
    while start < len(block):
        cut = block.find(b"\n", start + step - 1) + 1 if start + step < len(block) else len(block)
        if cut <= 0:
            cut = len(block)
        part = block[start:cut]
        layout = line_layout(part)
        pieces.append((part, line, layout))
        line += layout.newlines
        start = cut
    return pieces


def _without_bom(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The chunks with a UTF-8 byte order mark at the very start of the object dropped."""
    iterator = iter(chunks)
    head = b""
    for chunk in iterator:
        head += chunk
        if len(head) >= len(UTF8_BOM):
            break
    head = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    if head:
        yield head
    yield from iterator


def _invalid_utf8(block: bytes, first_line: int) -> str | None:
    """Why the block is not UTF-8 (naming the line), or None."""
    if is_utf8(block):
        return None
    try:
        block.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + block.count(b"\n", 0, exc.start)
        return f"invalid UTF-8 at line {line}: {exc.reason}"
    return None


class _NotUtf8(Exception):
    """A block that is not UTF-8: the reader, which knows where the block starts, names the line."""

    def __init__(self, block: bytes) -> None:
        super().__init__("invalid UTF-8")
        self.block = block


class JsonLinesReader:
    """JSON lines in blocks of whole lines, each through the fast path where it can be."""

    def __init__(self, table: TableDef, batch_rows: int, dropped: Counter[str] | None = None) -> None:
        self.table = table
        self.batch_rows = batch_rows
        self.dropped = dropped
        self.converter = RecordConverter(table, "json", dropped)
        self.fast = JsonFastPath(table, dropped)
        self.assembler = BatchAssembler(self.converter.schema, batch_rows)
        self.target = max(MIN_BLOCK_BYTES, min(FIRST_BLOCK_BYTES, batch_rows * 256))
        self.objects = 0
        self.lines = 0
        # After blocks where nothing could take the fast path, skip trying for a while.
        self.penalty = 0
        self.skip = 0

    def read(self, chunks: Iterable[bytes], workers: int = 1) -> Iterator[ParsedBatch]:
        """Batches of the lines in chunks; with workers > 1, blocks after the first decode on that many threads
        while a thread of its own decompresses and cuts the chunks (records.pipeline): the same batches."""
        blocks = self._line_blocks(_without_bom(chunks))
        decoded = self._decoded_in_parallel(blocks, workers) if workers > 1 else map(self._decode, blocks)
        line_number = 1
        try:
            for pieces, newlines in decoded:
                for piece in pieces:
                    self.objects += piece.objects
                    self.lines += piece.lines
                    bad = piece.bad
                    if bad and line_number > 1:  # decoded counting from line 1 of its block
                        bad = [replace(record, line=record.line + line_number - 1) for record in bad]
                    yield from self.assembler.add(piece.table, bad)
                line_number += newlines
        except _NotUtf8 as exc:
            # The block was found not UTF-8, so a reason is always there; the exception's text stands in for none.
            raise UnreadableObject(_invalid_utf8(exc.block, line_number) or str(exc)) from None
        yield from self.assembler.finish()
        if self.lines and not self.objects:
            raise UnreadableObject(f"not JSON lines: none of {self.lines} lines is a JSON object")

    def _decoded_in_parallel(self, blocks: Iterator[bytes], workers: int) -> Iterator[tuple[list[_Piece], int]]:
        """The first block decoded here (it sets the block size for the rest, which then stays: the blocks are cut
        the same whatever the threads do), the others on `workers` threads, each with decoders of its own."""
        first = next(blocks, None)
        if first is None:
            return
        yield self._decode(first)
        local = threading.local()
        readers: list[JsonLinesReader] = []

        def decode(block: bytes) -> tuple[list[_Piece], int]:
            reader = getattr(local, "reader", None)
            if reader is None:
                reader = local.reader = JsonLinesReader(
                    self.table, self.batch_rows, Counter() if self.dropped is not None else None
                )
                readers.append(reader)
            return reader._decode(block)

        ahead = prefetched(blocks, depth=2)
        try:
            with closing(ahead):  # the read-ahead thread stops here, however the reading ends
                yield from ordered_map(decode, ahead, workers)
        finally:
            for reader in readers:
                if self.dropped is not None and reader.dropped:
                    self.dropped.update(reader.dropped)

    def _decode(self, block: bytes) -> tuple[list[_Piece], int]:
        """A block's pieces, their bad records numbered from the block's first line as line 1, and its newlines."""
        if block.isspace() and not block.strip(BLANKS):  # isspace: stops at the first other byte
            return [], block.count(b"\n")
        if _invalid_utf8(block, 1) is not None:
            raise _NotUtf8(block)
        layout = line_layout(block)
        # Aim the next block at batch_rows records, judging their length by this block (blank lines between
        # records count for their bytes only, so padding does not shrink blocks to many tiny ones).
        wanted = len(block) * self.batch_rows // (layout.object_lines or layout.newlines or 1)
        self.target = max(MIN_BLOCK_BYTES, min(MAX_BLOCK_BYTES, wanted))
        return self._pieces(block, 1, layout, top=True), layout.newlines

    def _line_blocks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Runs of whole lines of at least self.target bytes (the last one: whatever is left)."""
        pending: list[bytes | memoryview] = []
        size = 0
        unterminated = 0  # bytes since the last newline seen
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            cut = chunk.rfind(b"\n") + 1
            unterminated = unterminated + len(chunk) if not cut else len(chunk) - cut
            if unterminated > MAX_LINE_BYTES:
                raise UnreadableObject(f"a line is longer than {MAX_LINE_BYTES >> 20} MiB")
            if size < self.target or not cut:
                continue
            if len(pending) == 1 and cut == len(chunk):
                block = chunk
            else:
                block = b"".join([*pending[:-1], memoryview(chunk)[:cut]])
            pending = [memoryview(chunk)[cut:]] if cut < len(chunk) else []
            size = len(chunk) - cut
            yield block
        if size:
            yield b"".join(pending)

    def _pieces(
        self, block: bytes, first_line: int, layout: LineLayout, top: bool = False, tried: bool = False
    ) -> list[_Piece]:
        """Fast path where it succeeds; failing stretches are split to find the few bad lines."""
        if top and self.skip:
            self.skip -= 1
            return [_slow_json_block(block, first_line, self.converter)]
        if not tried:
            table = self.fast.convert(block, layout)
            if table is not None:
                if top:
                    self.penalty = 0
                return [_Piece(table, [], table.num_rows, table.num_rows)]
        if not self.fast.enabled or len(block) < 2 * MIN_SPLIT_BYTES:
            return [_slow_json_block(block, first_line, self.converter)]
        parts = _split_block(block, first_line, min(SPLIT_FANOUT, len(block) // MIN_SPLIT_BYTES))
        tables = [self.fast.convert(part, part_layout) for part, _, part_layout in parts]
        if all(table is None for table in tables):
            if top:
                self.penalty = min(max(1, self.penalty * 2), 16)
                self.skip = self.penalty
            return [_slow_json_block(part, line, self.converter) for part, line, _ in parts]
        pieces = []
        for (part, line, part_layout), table in zip(parts, tables, strict=True):
            if table is not None:
                pieces.append(_Piece(table, [], table.num_rows, table.num_rows))
            else:
                pieces.extend(self._pieces(part, line, part_layout, tried=True))
        return pieces
