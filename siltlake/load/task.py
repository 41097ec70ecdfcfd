"""One load task (a Spark task): read a file, decode, filter lines, parse, apply record filters, coerce.

Coercion is the stream's (siltlake.records.coerce.RecordConverter, docs/coercion.md); rows are written per
partition date, sorted by event time, by the stream's object writer (siltlake.records.writer), to temporary
keys derived from the run id, the job and the task index, so a re-run task overwrites its own earlier output
and nothing else.
"""

from __future__ import annotations

import bz2
import csv
import datetime as dt
import io
import json
import re
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq

from siltlake.errors import ConfigError
from siltlake.load import fastcsv
from siltlake.load.config import PARSER_TYPES, AddFilter, DropFilter, JobConfig, ParserColumn, RenameFilter
from siltlake.records.coerce import RecordConverter, render_json
from siltlake.records.csv_format import render_csv
from siltlake.records.jsonl import decode_json_line
from siltlake.records.msgpack_format import msgpack_entries, msgpack_items
from siltlake.records.writer import ObjectWriter, WrittenPart
from siltlake.storage.filesystem import Storage, open_filesystem
from siltlake.storage.keys import TASK_INPUT, TableLayout, load_job_run
from siltlake.tabledef import Column, TableDef

BAD_SAMPLES = 3
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd"}
# The magics no text file starts with ("BZh" may start a CSV): a file under decoder.compression none that starts
# with one is compressed.
BINARY_MAGIC = {magic: name for magic, name in MAGIC.items() if name != "bzip2"}


def detected_compression(head: bytes) -> str:
    """The compression a file's first bytes name (its magic), or "none"."""
    return next((name for magic, name in MAGIC.items() if head.startswith(magic)), "none")


def check_compression(uri: str, compression: str, head: bytes) -> None:
    """Refuse, naming the file, a file whose first bytes contradict a pinned decoder.compression: read as
    configured it would fail in the decompressor, or load compressed bytes as text."""
    found = detected_compression(head)
    if compression == "none":
        if not any(head.startswith(magic) for magic in BINARY_MAGIC):
            return
    elif compression in ("auto", found):
        return
    what = "not compressed" if found == "none" else f"{found}-compressed"
    raise ConfigError(
        f"{uri}: decoder.compression is {compression}, but this file is {what} (by its first bytes); "
        "set decoder.compression to auto to detect each file's compression"
    )


class LoadAborted(Exception):
    """A bad record under `error: {type: abort}`."""


# A load task's report, by its status: JSON-able dicts (they leave Spark tasks, and the driver keeps them in the
# load's state file), typed here.
class LoadTaskHead(TypedDict):
    job: str
    index: int  # the task's place among its job's inputs
    uri: str
    upload_start_time: str  # when the task started, naive UTC in ISO form


class LoadTaskFailed(LoadTaskHead):
    """A task that failed (retried by a rerun) or aborted the load (a bad record under error type abort)."""

    status: Literal["failed", "aborted"]
    reason: str
    traceback: str


class LoadTaskDone(LoadTaskHead):
    """A task that read its input: its rows were written (parts), or, before a sql filter, its parsed input
    (in_key, the view `in`'s rows)."""

    status: Literal["ok"]
    records_in: int
    loaded: int
    bad_records: int
    bad_samples: list[str]
    error_file: str | None
    bytes_in: int
    seconds: float
    parts: NotRequired[list[WrittenPart]]
    in_key: NotRequired[str]


LoadTaskReport = LoadTaskDone | LoadTaskFailed


@dataclass(frozen=True)
class LoadTask:
    job: str
    index: int
    uri: str
    job_json: str
    columns_json: str  # the columns rows are coerced to (target table, or the `in` view before a sql filter)
    time_column: str  # "" before a sql filter: the view `in` has no event-time requirement
    timezone: str
    codec: str
    run_id: str
    lake: Storage
    instance_key: str
    error_uri: str | None  # where this task's bad records go (error type file)
    batch_rows: int
    spill_bytes: int
    offset: int = 0  # a split of an uncompressed file: the lines starting in [offset, offset + length)
    length: int | None = None
    dt_field_id: int | None = None  # the target table's (its columns carry theirs): objects hold Iceberg field ids
    partition_by: tuple[str, ...] = ()  # the target table's levels below dt: objects per partition

    @property
    def staging_run(self) -> str:
        return load_job_run(self.run_id, self.job)


def row_table(
    columns: list[Column],
    time_column: str,
    timezone: str,
    codec: str,
    dt_field_id: int | None = None,
    partition_by: Sequence[str] = (),
) -> TableDef:
    """The TableDef the stream's converter and writer take; no validation (the `in` view has no time column).
    The columns' field ids, dt_field_id and partition_by are the target table's (None: objects without field
    ids)."""
    return TableDef.model_construct(
        schema_name="load",
        name="rows",
        time_column=time_column,
        timezone=timezone,
        columns=tuple(columns),
        codec=codec,
        dt_field_id=dt_field_id,
        partition_by=tuple(partition_by),
    )


def open_source(uri: str, compression: str, offset: int = 0, length: int | None = None) -> io.BufferedReader:
    """The file's bytes, decompressed by magic bytes (auto) or as configured; or one split's lines."""
    filesystem, path = open_filesystem(uri)
    if length is not None:
        return io.BufferedReader(_Split(filesystem.open_input_file(path), offset, offset + length), 1 << 20)
    raw = filesystem.open_input_stream(path, compression=None)
    buffered: io.BufferedReader = io.BufferedReader(_PyArrowRaw(raw), 1 << 20)
    head = buffered.peek(4)[:4]
    check_compression(uri, compression, head)
    if compression == "auto":
        compression = detected_compression(head)
    if compression == "none":
        return buffered
    if compression == "bzip2":
        return io.BufferedReader(bz2.BZ2File(buffered), 1 << 20)
    stream = pa.CompressedInputStream(pa.PythonFile(buffered, mode="r"), compression)
    return io.BufferedReader(_PyArrowRaw(stream), 1 << 20)


class _Split(io.RawIOBase):
    """The lines whose first byte lies in [start, end): a line belongs to the split it starts in, so
    splits cut anywhere cover every line exactly once (the preceding split reads past its end to finish
    its last line; this one skips the partial line it starts in)."""

    def __init__(self, file: Any, start: int, end: int) -> None:
        self._file = file
        self._end = end
        self._done = False
        if start > 0:
            file.seek(start - 1)
            while True:
                chunk = file.read(1 << 16)
                if not chunk:
                    self._done = True
                    break
                newline = chunk.find(b"\n")
                if newline >= 0:
                    file.seek(file.tell() - len(chunk) + newline + 1)
                    break
        self._position = file.tell()
        self._done = self._done or self._position >= end  # no line starts inside this split

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        if self._done:
            return 0
        chunk = self._file.read(len(target))
        if not chunk:
            self._done = True
            return 0
        start = self._position
        self._position += len(chunk)
        if self._position >= self._end:
            # Stop after the newline that ends the last line starting before end.
            newline = chunk.find(b"\n", max(0, self._end - 1 - start))
            if newline >= 0:
                chunk = chunk[: newline + 1]
                self._done = True
        target[: len(chunk)] = chunk
        return len(chunk)

    def close(self) -> None:
        self._file.close()
        super().close()


class _PyArrowRaw(io.RawIOBase):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        data = self._stream.read(len(target))
        target[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def text_lines(source: io.BufferedReader, job: JobConfig, at_start: bool = True) -> Iterator[tuple[int, str]]:
    """(physical line number, line with its end) after skip_header_lines and the line filter."""
    rules = [(re.compile(rule.regex), rule) for rule in job.decoder.line_filter]
    # Undecodable bytes become lone surrogates, which _decoded finds with their line number.
    text = io.TextIOWrapper(source, encoding="utf-8-sig", errors="surrogateescape", newline="")
    skip = job.parser.skip_header_lines if job.parser.type == "csv" and at_start else 0
    for number, line in _decoded(text):
        if number <= skip:
            continue
        for pattern, rule in rules:
            if pattern.search(line) is None:
                continue
            if rule.replace is None:  # skip: true (a rule has either, LineRule checks)
                break
            end = "\r\n" if line.endswith("\r\n") else "\n" if line.endswith("\n") else ""
            line = pattern.sub(rule.replace, line[: len(line) - len(end)]) + end
        else:  # no rule skipped it
            yield number, line


def _decoded(text: io.TextIOWrapper) -> Iterator[tuple[int, str]]:
    """(line number, line); a line that is not UTF-8 fails the task, naming the line (the split's, when split)."""
    for number, line in enumerate(text, 1):
        if not line.isascii():
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"invalid UTF-8 at line {number}, character {exc.start + 1}") from None
        yield number, line


class _Numbered:
    """Feeds lines to csv.reader and remembers the physical line number of the last one read."""

    def __init__(self, lines: Iterator[tuple[int, str]]) -> None:
        self._lines = lines
        self.line = 0

    def __iter__(self) -> _Numbered:
        return self

    def __next__(self) -> str:
        self.line, text = next(self._lines)
        return text


def records(
    source: io.BufferedReader, job: JobConfig, at_start: bool = True
) -> Iterator[tuple[int, dict | None, str, str | None]]:
    """(line, record or None, raw text, reason) for every input record; lines count from the split's start."""
    parser = job.parser
    if parser.type == "msgpack":
        # A malformed or cut-off item fails the task (UnreadableObject names the byte).
        number = 0
        for item in msgpack_items(iter(lambda: source.read(1 << 20), b"")):
            for entry in msgpack_entries(item):
                number += 1
                yield number, entry.record, render_json(entry.raw), entry.problem
        return
    lines = text_lines(source, job, at_start)
    if parser.type == "jsonl":
        for number, line in lines:
            body = line.strip()
            if not body:
                continue
            record, problem = decode_json_line(body)
            yield number, record, body, problem
        return
    names = [column.name for column in parser.columns]
    numbered = _Numbered(lines)
    reader = csv.reader(
        numbered,
        delimiter=parser.delimiter,
        quotechar=parser.quote or '"',
        quoting=csv.QUOTE_NONE if parser.quote is None else csv.QUOTE_MINIMAL,
        escapechar=parser.escape,
        doublequote=parser.escape is None,
        strict=False,
    )
    header_pending = parser.header and at_start
    first = 0
    while True:
        first = numbered.line + 1
        try:
            row = next(reader, None)
        except csv.Error as exc:
            yield numbered.line, None, "", f"CSV error: {exc}"
            continue
        if row is None:
            return
        if not row or row == [""]:
            continue
        if header_pending:
            header_pending = False
            continue
        raw = render_csv(row, parser.delimiter)
        if len(row) != len(names):
            yield first, None, raw, f"row has {len(row)} fields, the parser has {len(names)} columns"
            continue
        values: list[str] | list[str | None] = row
        if parser.null_string is not None:
            values = [None if value == parser.null_string else value for value in row]
        yield first, dict(zip(names, values, strict=True)), raw, None


def _timestamp(value: object, column: ParserColumn) -> object:
    """A string in the column's format/zone as an aware datetime; anything else as it is."""
    if not isinstance(value, str) or value == "" or (column.format is None and column.zone is None):
        return value
    zone = ZoneInfo(column.zone or "UTC")
    try:
        parsed = (
            dt.datetime.strptime(value, column.format)
            if column.format
            else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        )
    except ValueError:
        shown = column.format or "ISO-8601"
        raise ValueError(f"column {column.name}: {value!r} does not match the timestamp format {shown}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)


def add_value(item: AddFilter) -> object:
    return item.value


def apply_filters(record: dict, job: JobConfig, timestamps: list[ParserColumn]) -> dict:
    for column in timestamps:
        if column.name in record:
            record[column.name] = _timestamp(record[column.name], column)
    for item in job.filters.values():
        if isinstance(item, RenameFilter):
            for old, new in item.columns.items():
                if old in record:
                    record[new] = record.pop(old)
        elif isinstance(item, DropFilter):
            for name in item.columns:
                record.pop(name, None)
        elif isinstance(item, AddFilter):
            record[item.column] = add_value(item)
    return record


def output_columns(job: JobConfig) -> list[tuple[str, str]] | None:
    """(name, siltlake type) of the records after the per-record filters, in order; None when the parser
    declares no columns (JSON lines or MessagePack taken as they come)."""
    if not job.parser.columns:
        return None
    columns = [(c.name, PARSER_TYPES[c.type]) for c in job.parser.columns]
    for item in job.filters.values():
        if isinstance(item, RenameFilter):
            columns = [(item.columns.get(name, name), kind) for name, kind in columns]
        elif isinstance(item, DropFilter):
            columns = [(name, kind) for name, kind in columns if name not in item.columns]
        elif isinstance(item, AddFilter):
            columns = [(name, kind) for name, kind in columns if name != item.column]
            columns.append((item.column, PARSER_TYPES[item.column_type]))
    return columns


class _Errors:
    def __init__(self, task: LoadTask, policy: str) -> None:
        self.task = task
        self.policy = policy
        self.count = 0
        self.samples: list[str] = []
        self._sink: Any = None  # a pyarrow output stream, opened at the first bad record

    def add(self, line: int, raw: str, reason: str) -> None:
        self.count += 1
        if len(self.samples) < BAD_SAMPLES:
            self.samples.append(f"{self.task.uri} {self._where(line)}: {reason}")
        if self.policy == "abort":
            raise LoadAborted(f"bad record at {self.task.uri} {self._where(line)}: {reason}")
        if self.policy == "file":
            if self._sink is None:
                assert self.task.error_uri is not None  # the runner gives one to every task of error type file
                filesystem, path = open_filesystem(self.task.error_uri)
                filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
                self._sink = filesystem.open_output_stream(path)
            entry = {"source": self.task.uri, "line": line, "reason": reason, "raw": raw}
            if self.task.offset:
                entry["split_offset"] = self.task.offset
            self._sink.write((json.dumps(entry, ensure_ascii=False) + "\n").encode())

    def _where(self, line: int) -> str:
        return f"line {line}" + (f" after byte {self.task.offset}" if self.task.offset else "")

    def close(self) -> str | None:
        if self._sink is None:
            return None
        self._sink.close()
        return self.task.error_uri


def run_load_task(task: LoadTask) -> LoadTaskReport:
    """Run in a Spark task; returns a JSON-able report (status ok, failed or aborted), never raises."""
    started = time.time()
    job = JobConfig.model_validate_json(task.job_json)
    columns = [Column.model_validate(c) for c in json.loads(task.columns_json)]
    table = row_table(columns, task.time_column, task.timezone, task.codec, task.dt_field_id, task.partition_by)
    kind = "csv" if job.parser.type == "csv" else job.parser.type
    converter = RecordConverter(table, kind)
    timestamps = [c for c in job.parser.columns if c.type == "timestamp"]
    base: LoadTaskHead = {
        "job": task.job,
        "index": task.index,
        "uri": task.uri,
        "upload_start_time": dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(),
    }
    layout = TableLayout(task.instance_key, "load", "rows")
    writer = (
        ObjectWriter(table, task.lake, layout, task.staging_run, task.index, task.spill_bytes)
        if task.time_column
        else None
    )
    in_key = layout.task_temporary(task.staging_run, task.index, TASK_INPUT)
    in_writer = None
    errors = _Errors(task, job.error.type)
    records_in = bytes_in = 0
    parts: list[WrittenPart] = []  # what the writer wrote (a job with a sql filter writes its input instead)

    def add_rows(rows: pa.Table) -> None:
        nonlocal in_writer
        if writer is not None:
            writer.add(rows)
            return
        if in_writer is None:
            in_writer = pq.ParquetWriter(task.lake.open_output(in_key), table.arrow_schema(), compression="zstd")
        in_writer.write_table(rows)

    def flush() -> None:
        add_rows(converter.take_table())

    try:
        filesystem, path = open_filesystem(task.uri)
        bytes_in = filesystem.get_file_info(path).size or 0
        if task.length is not None:
            bytes_in = task.length

        def one(line: int, record: dict | None, raw: str, reason: str | None) -> None:
            if record is not None:
                try:
                    record = apply_filters(record, job, timestamps)
                except ValueError as exc:
                    reason = str(exc)
                else:
                    reason = converter.add(record)
            if reason is not None:
                errors.add(line, raw, reason)
            if converter.row_count >= task.batch_rows:
                flush()

        with open_source(task.uri, job.decoder.compression, task.offset, task.length) as source:
            if fastcsv.usable(job, columns):

                def invalid(line: int, raw: str, reason: str) -> None:
                    nonlocal records_in
                    records_in += 1
                    errors.add(line, raw, reason)

                for rows, size in fastcsv.read_fast(
                    source,
                    job,
                    columns,
                    table.arrow_schema(),
                    task.time_column,
                    task.offset == 0,
                    invalid,
                    lambda line, record, raw: one(line, record, raw, None),
                ):
                    records_in += size
                    add_rows(rows)
            else:
                for line, record, raw, reason in records(source, job, at_start=task.offset == 0):
                    records_in += 1
                    one(line, record, raw, reason)
        flush()
        if writer is not None:
            parts = writer.finish()
        else:
            if in_writer is None:
                flush()  # makes it, so that an input without rows writes an empty object
            assert in_writer is not None
            in_writer.close()
        error_file = errors.close()
    except Exception as exc:  # every failure is this task's report; the driver decides
        errors.close()
        if writer is not None:
            writer.discard()
        reason = str(exc) if isinstance(exc, LoadAborted) else f"{type(exc).__name__}: {exc}"
        return {
            **base,
            "status": "aborted" if isinstance(exc, LoadAborted) else "failed",
            "reason": reason,
            "traceback": traceback.format_exc(limit=5),
        }
    loaded = sum(p["rows"] for p in parts) if writer is not None else records_in - errors.count
    done: LoadTaskDone = {
        **base,
        "status": "ok",
        "records_in": records_in,
        "loaded": loaded,
        "bad_records": errors.count,
        "bad_samples": errors.samples,
        "error_file": error_file,
        "bytes_in": bytes_in,
        "seconds": round(time.time() - started, 3),
    }
    if writer is not None:  # last, as before
        done["parts"] = parts
    else:
        done["in_key"] = in_key
    return done
