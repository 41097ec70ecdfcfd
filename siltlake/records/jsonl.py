"""JSON lines into typed batches.

Two decoders that must agree: a vectorised one built on pyarrow.json (used for a block of lines when
every line in it converts cleanly) and an exact per-record one that also names the bad records.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from siltlake import timevalues as tv
from siltlake.coltypes import arrow_type, decimal_parts
from siltlake.records.batches import BadRecord, BatchAssembler, ParsedBatch, UnreadableObject
from siltlake.records.coerce import (
    FLOAT32_MAX,
    INT32_RANGE,
    JSON_DECODER,
    ZONE_EDGE_MICROS,
    RecordConverter,
    describe,
    unexpected_reason,
)
from siltlake.records.framing import MAX_LINE_BYTES, UTF8_BOM
from siltlake.records.nesting import nests_within
from siltlake.records.pipeline import ordered_map, prefetched
from siltlake.records.vectorised import all_true, dates_to_days, epochs_to_micros, strings_to_micros, within
from siltlake.tabledef import Column, TableDef

MIN_BLOCK_BYTES = 64 << 10
MAX_BLOCK_BYTES = 32 << 20
FIRST_BLOCK_BYTES = 4 << 20
# Below this size a failing JSON block goes straight to the per-record decoder.
MIN_SPLIT_BYTES = 64 << 10
SPLIT_FANOUT = 8

# A line holding something besides JSON's blanks; `^` and `$` match at line ends (re.M), `.` never crosses one.
_NON_BLANK_LINE = re.compile(r"^[ \t\r]*[^ \t\r\n].*$", re.M)
_NON_BLANK = re.compile(rb"[^ \t\r\n]")
BLANKS = b" \t\r\n"
_NEWLINE, _OPEN, _CLOSE = b"\n{}"
_TIME_KINDS = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
_UTC_MICROS = pa.timestamp("us", tz="UTC")


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


def _fast_read_type(column: Column) -> pa.DataType | None:
    simple = {
        "string": pa.string(),
        "int": pa.int64(),
        "bigint": pa.int64(),
        "float": pa.float64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.string(),
    }
    if column.type in simple:
        return simple[column.type]
    if column.type.startswith("decimal"):
        return arrow_type(column.type)
    return None


class _JsonFastPath:
    """Whole-block conversion with pyarrow.json; returns None whenever it cannot be sure."""

    def __init__(self, table: TableDef, dropped: Counter[str] | None = None) -> None:
        self.schema = table.arrow_schema()
        self.columns = table.columns
        self.time_column = table.time_column
        self.epoch_unit = table.epoch_unit
        self.naive_zone = table.naive_zone
        self.dropped = dropped if table.unknown_fields == "ignore" else None
        # Fields that are no column are read too when they are counted (their non-null values are the count).
        self.unexpected = "error" if table.unknown_fields == "reject" else "infer" if dropped is not None else "ignore"
        self.static_types: dict[str, pa.DataType] = {}
        self.timestamp_sources: list[str] = []
        self.last_kinds: dict[str, str] = {}
        self.enabled = True
        for column in table.columns:
            if column.type == "timestamp":
                if column.source_field not in self.timestamp_sources:
                    self.timestamp_sources.append(column.source_field)
                continue
            read_type = _fast_read_type(column)
            previous = self.static_types.setdefault(column.source_field, read_type)
            if read_type is None or previous != read_type:
                self.enabled = False
        if set(self.timestamp_sources) & set(self.static_types):
            self.enabled = False
        # Stream tasks already run one per core, so Arrow's own threads would only contend.
        self.read_options = pa_json.ReadOptions(use_threads=False, block_size=4 << 20)

    def convert(self, block: bytes, layout: _LineLayout | None = None) -> pa.Table | None:
        """The block's rows, or None if any line needs the per-record decoder."""
        if not self.enabled or not nests_within(block):  # too deep for pyarrow's reader: see records.nesting
            return None
        try:
            return self._convert(block, layout)
        except Exception:  # a shortcut only: the per-record decoder decides each line of the block
            return None

    def _convert(self, block: bytes, layout: _LineLayout | None) -> pa.Table | None:
        lines = (layout or _line_layout(block)).object_lines
        if not lines:
            return None
        kinds = self._guess_time_kinds(block)
        if kinds is None:
            return None
        read_schema = pa.schema(
            [(source, read_type) for source, read_type in self.static_types.items()]
            + [(source, _TIME_KINDS[kind]) for source, kind in kinds.items()]
        )
        parsed = self._read(block, read_schema, self.unexpected)
        dropped: Counter[str] | None = None
        if parsed is None:
            return None
        if isinstance(parsed, str):
            # Fields that are no column change type from line to line, so Arrow cannot infer them: read the
            # columns alone, and count the dropped fields line by line.
            parsed = self._read(block, read_schema, "ignore")
            if not isinstance(parsed, pa.Table):
                return None
            dropped = _unknown_fields(block, set(read_schema.names))
        elif self.dropped is not None:
            dropped = Counter()
            for name in set(parsed.column_names) - set(read_schema.names):
                count = parsed.num_rows - parsed.column(name).null_count
                if count:
                    dropped[name] += count
        if parsed.num_rows != lines:
            return None
        arrays = []
        for column in self.columns:
            values = self._column(column, parsed.column(column.source_field), kinds)
            if values is None:
                return None
            arrays.append(values)
        self.last_kinds.update(kinds)
        if dropped and self.dropped is not None:
            self.dropped.update(dropped)
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _read(self, block: bytes, read_schema: pa.Schema, unexpected: str) -> pa.Table | str | None:
        """The block as Arrow reads it; "retry" when only the inference of fields that are no column failed."""
        options = pa_json.ParseOptions(
            explicit_schema=read_schema, unexpected_field_behavior=unexpected, newlines_in_values=False
        )
        try:
            return pa_json.read_json(pa.BufferReader(block), read_options=self.read_options, parse_options=options)
        except pa.ArrowInvalid as exc:
            return "retry" if unexpected == "infer" and "changed from" in str(exc) else None
        except (pa.ArrowNotImplementedError, UnicodeDecodeError):
            return None

    def _guess_time_kinds(self, block: bytes) -> dict[str, str] | None:
        """How to read each timestamp field, judged by its first non-null values in the block."""
        kinds: dict[str, str] = {}
        start = 0
        for _ in range(32):
            if start >= len(block) or len(kinds) == len(self.timestamp_sources):
                break
            found = _NON_BLANK.search(block, start)  # blank lines are skipped in one step, not counted
            if found is None:
                break
            start = found.start()
            end = block.find(b"\n", start)
            end = len(block) if end < 0 else end
            try:
                record = json.loads(block[start:end])
            except (ValueError, RecursionError):
                record = None
            start = end + 1
            if not isinstance(record, dict):
                continue
            for source in self.timestamp_sources:
                value = record.get(source)
                if source in kinds or value is None:
                    continue
                if isinstance(value, bool):
                    return None
                if isinstance(value, int):
                    kinds[source] = "int64"
                elif isinstance(value, float):
                    if self.epoch_unit == "ns":
                        return None
                    kinds[source] = "float64"
                else:
                    kinds[source] = "string"
        for source in self.timestamp_sources:
            kinds.setdefault(source, self.last_kinds.get(source, "string"))
        return kinds

    def _column(self, column: Column, values: pa.ChunkedArray, kinds: dict[str, str]) -> Any:
        required = not column.nullable or column.name == self.time_column
        if required and values.null_count:
            return None
        type_name = column.type
        if type_name == "int":
            return pc.cast(values, pa.int32()) if within(values, *INT32_RANGE) else None
        if type_name == "double":
            if not all_true(pc.is_finite(values)):
                return None
            return pc.add(values, 0.0)
        if type_name == "float":
            if not all_true(pc.is_finite(values)) or not within(values, -FLOAT32_MAX, FLOAT32_MAX):
                return None
            return pc.cast(pc.add(values, 0.0), pa.float32())
        if type_name == "timestamp":
            if kinds[column.source_field] == "string":
                micros = strings_to_micros(values, self.naive_zone)
            else:
                micros = epochs_to_micros(values, self.epoch_unit)
            # Near the ends of the range the per-record decoder decides (the partition date may not exist).
            margin = ZONE_EDGE_MICROS if column.name == self.time_column else 0
            if micros is None or not within(micros, tv.MIN_MICROS + margin, tv.MAX_MICROS - margin):
                return None
            return pc.cast(micros, _UTC_MICROS)
        if type_name == "date":
            return dates_to_days(values)
        if type_name.startswith("decimal"):
            # pyarrow.json rescales a number like 1e3 without checking it fits the precision.
            precision, scale = decimal_parts(type_name)
            largest = Decimal((0, (9,) * precision, -scale))  # built exactly: no context rounding
            return values if within(values, -largest, largest) else None
        return values


def _unknown_fields(block: bytes, sources: set[str]) -> Counter[str]:
    """The non-null values of fields that are no column, by name, in a block of JSON objects, one per line."""
    counts: Counter[str] = Counter()
    for line in block.splitlines():
        if line.strip(BLANKS):
            record = json.loads(line)
            for name in record.keys() - sources:
                if record[name] is not None:
                    counts[name] += 1
    return counts


class _LineLayout(NamedTuple):
    newlines: int
    object_lines: int | None  # non-blank lines when each holds exactly one {...}, else None


def _line_layout(block: bytes) -> _LineLayout:
    """Newline count, and whether every non-blank line is a single {...}.

    A line that starts with '{' and ends with '}' cannot continue onto the next line (a
    string cannot span lines, and '{' never follows a complete value inside a container),
    so pyarrow yields at least one row per such line: equal counts then mean exactly one.
    Blank lines are dropped by Arrow, so a block padded with them needs no loop over its lines.
    """
    if not block:
        return _LineLayout(0, 0)
    # What shippers write: one {...} per line and no blank line. Then every newline but a final one sits between
    # "}" and "{", which two counts confirm without splitting the block into lines.
    end = len(block) - 1 if block.endswith(b"\n") else len(block)
    if block.startswith(b"{") and block.endswith(b"}", 0, end):
        inner = _framed_newlines(block, end)
        if inner is not None:
            return _LineLayout(inner + (end < len(block)), inner + 1)
    # Arrow's kernels split and test ~10 MB of lines several times faster than bytes.count.
    lines = None
    if b"\n\n" not in block:
        lines = pc.list_flatten(pc.split_pattern(_as_binary_array(block), b"\n"))
        newlines = len(lines) - 1
        if block.endswith(b"\n"):
            lines = lines.slice(0, newlines)
    if lines is None or not all_true(pc.starts_with(lines, b"{")):
        # Blank lines hold no record: a split at each newline and the blanks after it skips runs of them
        # whole (a line's leading blanks go too, which JSON ignores); the newlines are counted apart.
        newlines = block.count(b"\n")
        lines = pc.list_flatten(pc.split_pattern_regex(_as_binary_array(block), r"\n[ \t\r\n]*"))
        lines = lines.filter(pc.match_substring_regex(lines, "[^ \t\r]"))
    if all_true(pc.starts_with(lines, b"{")) and (
        all_true(pc.ends_with(lines, b"}")) or all_true(pc.or_(pc.ends_with(lines, b"}"), pc.ends_with(lines, b"}\r")))
    ):
        return _LineLayout(newlines, len(lines))
    return _LineLayout(newlines, _layout_line_by_line(lines))


def _framed_newlines(block: bytes, end: int) -> int | None:
    """The newlines in block[:end] when each has "}" before it and "{" after it, else None. The block starts with
    "{" and block[end - 1] is "}", so no newline is first or last: one vectorised pass over the bytes (a third
    of the time of counting "\n" and "}\n{" with bytes.count)."""
    data = np.frombuffer(block, np.uint8, end)
    newlines = np.flatnonzero(data == _NEWLINE)
    if (data[newlines - 1] == _CLOSE).all() and (data[newlines + 1] == _OPEN).all():
        return len(newlines)
    return None


def _layout_line_by_line(lines: pa.Array) -> int | None:
    """How many of these non-blank lines hold a {...} once their blanks are stripped (None if one holds
    anything else): the exact test, for the blocks Arrow's could not decide."""
    count = 0
    for value in lines.to_pylist():
        stripped = value.strip(b" \t\r")
        if stripped[:1] != b"{" or stripped[-1:] != b"}":
            return None
        count += 1
    return count


def _as_binary_array(block: bytes) -> pa.Array:
    """The block as a one-element binary array, without copying it."""
    offsets = pa.array([0, len(block)], pa.int32()).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(block)])


def _split_block(block: bytes, first_line: int, parts: int) -> list[tuple[bytes, int, _LineLayout]]:
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
        layout = _line_layout(part)
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
    """Why the block is not UTF-8 (naming the line), or None; Arrow validates without building a str."""
    if block.isascii():
        return None
    try:
        _as_binary_array(block).cast(pa.string())
        return None
    except pa.ArrowInvalid:
        pass
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
        self.fast = _JsonFastPath(table, dropped)
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
        layout = _line_layout(block)
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
        self, block: bytes, first_line: int, layout: _LineLayout, top: bool = False, tried: bool = False
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
