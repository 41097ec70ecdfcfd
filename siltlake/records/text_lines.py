"""Line formats read record by record: Fluentd's out_file line (time TAB tag TAB JSON) and LTSV (TAB-separated
label:value fields). The rules, bad records included, are docs/coercion.md's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from siltlake.records.batches import BadRecord, BatchAssembler, ParsedBatch, UnreadableObject
from siltlake.records.coerce import RecordConverter
from siltlake.records.framing import LTSV_LABEL, MAX_LINE_BYTES, UTF8_BOM
from siltlake.records.jsonl import decode_json_line
from siltlake.tabledef import TableDef

# (record, entry time, None) or (None, None, why the line is a bad record)
LineParser = Callable[[str], tuple[dict[str, Any] | None, str | None, str | None]]


def text_lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line that is not blank, without its line end; UnreadableObject at
    invalid UTF-8 or a line longer than MAX_LINE_BYTES."""
    pending: list[bytes] = []
    pending_size = 0
    number = 0
    first = True
    for chunk in chunks:
        if first and chunk:
            chunk = chunk[len(UTF8_BOM) :] if chunk.startswith(UTF8_BOM) else chunk
            first = False
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size > MAX_LINE_BYTES:
                raise UnreadableObject(f"a line is longer than {MAX_LINE_BYTES >> 20} MiB")
            continue
        block = b"".join([*pending, chunk[:cut]])
        rest = chunk[cut:]
        pending, pending_size = ([rest], len(rest)) if rest else ([], 0)
        number = yield from _block_lines(block, number)
    if pending:
        yield from _block_lines(b"".join(pending), number)


def _block_lines(block: bytes, number: int) -> Generator[tuple[int, str], None, int]:
    """The block's lines as text_lines yields them; returns the number of its last line."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = number + 1 + block.count(b"\n", 0, exc.start)
        raise UnreadableObject(f"invalid UTF-8 at line {at}: {exc.reason}") from None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    for line in lines:
        number += 1
        if line.endswith("\r"):
            line = line[:-1]
        if line.strip(" \t"):
            yield number, line
    return number


def read_lines(
    chunks: Iterable[bytes],
    table: TableDef,
    batch_rows: int,
    kind: str,
    parse: LineParser,
    what: str,
    dropped: Counter[str] | None = None,
) -> Iterator[ParsedBatch]:
    """Each line through `parse`, then the per-record coercion; an object none of whose lines parses is not
    this format at all (UnreadableObject), so a misdetected object loads no row."""
    converter = RecordConverter(table, kind, dropped)
    assembler = BatchAssembler(converter.schema, batch_rows)
    bad: list[BadRecord] = []
    lines = parsed = 0
    for number, line in text_lines(chunks):
        lines += 1
        record, entry_time, reason = parse(line)
        if record is not None:
            parsed += 1
            reason = converter.add(record, entry_time)
        if reason is not None:
            bad.append(BadRecord(number, reason, line))
        if converter.row_count + len(bad) >= batch_rows:
            yield from assembler.add(converter.take_table(), bad)
            bad = []
    if lines and not parsed:
        raise UnreadableObject(f"not {what}: none of {lines} lines is one")
    yield from assembler.add(converter.take_table(), bad)
    yield from assembler.finish()


def fluentd_line(line: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """time TAB tag TAB {json} (or time TAB {json}): the record, and its time as the entry time, which stands
    in for a missing or unusable time field as a MessagePack entry time does. The tag is not kept."""
    time_text, tab, rest = line.partition("\t")
    if tab and not rest.startswith("{"):
        _tag, tab, rest = rest.partition("\t")
    if not tab or not rest.startswith("{"):
        return None, None, "not a Fluentd out_file line: expected a time, TAB, a tag, TAB and a JSON object"
    record, problem = decode_json_line(rest)
    if record is None:
        return None, None, problem
    return record, time_text, None


def ltsv_line(line: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """label:value fields separated by TABs; an empty field (two TABs in a row) is skipped."""
    record: dict[str, Any] = {}
    for position, field in enumerate(line.split("\t"), start=1):
        if not field:
            continue
        label, colon, value = field.partition(":")
        if not colon or not LTSV_LABEL.fullmatch(label):
            shown = field if len(field) <= 40 else field[:37] + "..."
            return (
                None,
                None,
                (f"field {position} ({shown!r}) is not label:value (a label is letters, digits, '_', '.' and '-')"),
            )
        if label in record:
            return None, None, f"label {label!r} appears twice"
        record[label] = value
    return record, None, None


def read_fluentd_lines(
    chunks: Iterable[bytes], table: TableDef, batch_rows: int, dropped: Counter[str] | None = None
) -> Iterator[ParsedBatch]:
    return read_lines(
        chunks,
        table,
        batch_rows,
        "json",
        fluentd_line,
        "Fluentd out_file lines (time TAB tag TAB JSON object)",
        dropped,
    )


def read_ltsv(
    chunks: Iterable[bytes], table: TableDef, batch_rows: int, dropped: Counter[str] | None = None
) -> Iterator[ParsedBatch]:
    return read_lines(chunks, table, batch_rows, "ltsv", ltsv_line, "LTSV (TAB-separated label:value fields)", dropped)
