"""The work one Spark task does for one staging object: decode, split by partition date, sort, write.

Output goes to temporary keys; the driver moves it to id-derived keys inside the catalog commit.
Decoding is siltlake.records', and so is the writer (memory bounded by spill_bytes, see its docstring).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import time
import traceback
from collections import Counter
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import BinaryIO, Literal, NotRequired, Protocol, TypedDict
from urllib.parse import unquote

import pyarrow as pa

from siltlake.delivery_names import parse_delivery
from siltlake.errors import storage_failure
from siltlake.records import ObjectLimits, UnreadableObject, read_staging_object
from siltlake.records.batches import BadRecord, ParsedBatch
from siltlake.records.framing import ByteStream
from siltlake.records.writer import ObjectWriter, WrittenPart
from siltlake.storage.filesystem import Storage, UnsafeKey
from siltlake.storage.keys import TASK_ERRORS, TableLayout
from siltlake.stream.tails import Delivery, FileMoved, NotedFile, NotedFileReplaced, open_delivery
from siltlake.tabledef import TableDef

BAD_SAMPLES = 3
DROPPED_NAMES = 5  # the fields named in a task's report, most dropped first


class DeliveryPosition(TypedDict):
    """Where a local file's delivery stopped (stream/tails.py): what the commit records as its position."""

    uri: str
    staging_root: str
    key: str
    consumed_end: int
    read_end: int
    file_identity: str
    fingerprint: int
    head_crc: int
    head_length: int
    compressed: bool
    fragment_end: int | None


# A task's result, by its status: JSON-able dicts (they leave Spark tasks and worker processes), typed here.
class StageHead(TypedDict):
    staging_object_id: int
    uri: str
    upload_start_time: str  # when the task started, naive UTC in ISO form


class StageMoved(StageHead):
    """A followed file's tail whose file was renamed or rotated away: found again under its new name."""

    status: Literal["moved"]
    reason: str


class StageUnknown(StageHead):
    """An object that cannot be read (or no longer exists): it goes to the unknown objects."""

    status: Literal["unknown"]
    reason: str


class StageFailed(TypedDict):
    """An attempt that failed and is retried; `counts`: against stream.max_failures. One made by the driver, for
    a task whose process died, has neither the start time nor a traceback."""

    staging_object_id: int
    uri: str
    upload_start_time: NotRequired[str]
    status: Literal["failed"]
    reason: str
    counts: bool
    traceback: NotRequired[str]


class StageDone(StageHead):
    """An object decoded and written: its parts wait for the commit."""

    status: Literal["ok"]
    records_in: int
    bad_records: int
    bad_samples: list[str]
    error_key: str | None
    dropped_fields: int  # values of fields that are no column, dropped from rows that loaded
    dropped_field_names: list[str]
    dropped_field_kinds: int
    parts: list[WrittenPart]
    position: DeliveryPosition | None  # None: not an appendable local file
    seconds: float
    peak_rss_bytes: int


StageResult = StageMoved | StageUnknown | StageFailed | StageDone


@dataclass(frozen=True)
class StreamTask:
    staging_object_id: int
    uri: str
    staging: Storage  # the staging root the object lies under: opening the URI checks the object against it
    lake: Storage
    layout: TableLayout
    table_json: str
    run_id: str
    batch_rows: int
    spill_bytes: int
    limits: ObjectLimits = ObjectLimits()  # the stream's settings; unbounded when a test leaves them out
    # The size the object was registered at: a local file is read up to it, whatever it has grown to since
    # (None: to its end). A local file unchanged for fragment_final_after has its trailing fragment taken too.
    end: int | None = None
    fragment_final_after: float = 0.0
    # Threads the object decodes on (records.read_staging_object's workers): more than one for a large object
    # (stream.parallel_decode_bytes) that has cores of the wave to itself.
    decode_threads: int = 1
    noted: NotedFile | None = None  # a local file's, for its name's first delivery (stream/tails.py open_delivery)


def open_uri(uri: str, staging: Storage):
    """Open a staging object's URI: a key that is no longer a regular file under the root is unknown."""
    try:
        return staging.open_uri(uri)
    except UnsafeKey as exc:
        raise UnreadableObject(str(exc)) from None


class _ErrorSink:
    """Bad records as JSON lines with source, line and reason: a file a user can fix and replay."""

    def __init__(self, task: StreamTask, keep: bool) -> None:
        self.task = task
        self.keep = keep
        self.count = 0
        self.samples: list[str] = []
        self._temporary = task.layout.task_temporary(task.run_id, task.staging_object_id, TASK_ERRORS)
        self._stream: BinaryIO | None = None

    def add(self, bad: list) -> None:  # list of records.BadRecord
        for record in bad:
            self.count += 1
            if len(self.samples) < BAD_SAMPLES:
                self.samples.append(f"line {record.line}: {record.reason}")
            if not self.keep:
                continue
            if self._stream is None:
                self._stream = self.task.lake.open_output(self._temporary)
            line = {"source": self.task.uri, "line": record.line, "reason": record.reason, "raw": record.raw}
            self._stream.write((json.dumps(line, ensure_ascii=False) + "\n").encode())

    def finish(self) -> str | None:
        if self._stream is None:
            return None
        self._stream.close()
        final = self.task.layout.errors(self.task.staging_object_id)
        self.task.lake.place(self._temporary, final)  # the temporary goes with its run's prefix
        return final

    def discard(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self.task.lake.delete(self._temporary)


def _all_bad(stream, delivery: Delivery, reason: str, errors: _ErrorSink) -> int:
    """Make every line of the delivery's range a bad record (one record for a binary format); returns how many."""
    if delivery.lead is not None:
        errors.add([delivery.lead])
    fd = stream.fileno()
    data = os.pread(fd, delivery.consumed_end - delivery.read_start, delivery.read_start)
    pieces = data.splitlines() if delivery.table.format != "msgpack" else [data]
    bad = [
        BadRecord(number, f"unreadable tail: {reason}", piece.decode("utf-8", "backslashreplace"))
        for number, piece in enumerate(pieces, start=1)
        if piece.strip()
    ]
    errors.add(bad)
    return len(bad) + (delivery.lead is not None)


class RowSink(Protocol):
    """Where a task's decoded rows go: an ObjectWriter (objects of its own) or a group's holder (group_task.py)."""

    def add(self, rows: pa.Table) -> None: ...

    def finish(self) -> list[WrittenPart]: ...

    def discard(self) -> None: ...


def process_staging_object(task: StreamTask) -> StageResult:
    """Run in a Spark task or a worker process. Returns a small, JSON-able report; never raises for bad input."""
    table = TableDef.from_json(task.table_json)

    def own_objects() -> RowSink:
        return ObjectWriter(table, task.lake, task.layout, task.run_id, task.staging_object_id, task.spill_bytes)

    return decode_staging_object(task, table, own_objects)[0]


def decode_staging_object(
    task: StreamTask,
    table: TableDef,
    new_sink: Callable[[], RowSink],
    measure_rss: bool = True,
    read: Callable[..., Generator[ParsedBatch, None, None]] = read_staging_object,
) -> tuple[StageResult, RowSink]:
    """Decode one staging object into a sink made by new_sink; the report, and the sink that holds its rows.
    Without measure_rss its peak_rss_bytes is 0 (a group measures once for all its objects: 2 ms a call).
    `read` decodes the object's bytes: read_staging_object, or a group's records.joined.JoiningReader.read."""
    started = time.time()
    report: StageHead = {
        "staging_object_id": task.staging_object_id,
        "uri": task.uri,
        "upload_start_time": dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(),
    }
    writer = new_sink()
    errors = _ErrorSink(task, keep=table.error_policy == "file")
    records_in = 0
    dropped: Counter[str] = Counter()
    position: DeliveryPosition | None = None
    name = parse_delivery(task.uri)
    base = name.base
    delivery: Delivery | None = None
    try:
        with open_uri(base, task.staging) as stream:
            # A local gzip range is first read as whole members (inflated once); read again up to its last whole
            # member when that read finds one cut short or bytes that are not gzip.
            for assume_whole in (True, False):
                source: ByteStream = stream
                reading = table
                records_in = 0
                if task.staging.is_local:
                    delivery = open_delivery(
                        stream,
                        base,
                        table,
                        name,
                        task.end,
                        task.fragment_final_after,
                        assume_whole,
                        task.noted,
                    )
                    source, reading = delivery.stream, delivery.table
                    position = _position_of(task, base, delivery)
                    if delivery.lead is not None:
                        errors.add([delivery.lead])
                        records_in += 1
                try:
                    batches = read(
                        source,
                        base,
                        reading,
                        batch_rows=task.batch_rows,
                        limits=task.limits,
                        dropped=dropped,
                        workers=task.decode_threads,
                    )
                    with closing(batches):  # its decoding threads stop before the stream closes
                        for batch in batches:
                            records_in += batch.records_in
                            writer.add(batch.table)
                            errors.add(batch.bad)
                except UnreadableObject as exc:
                    if delivery is not None and delivery.assumed_whole:
                        writer.discard()
                        errors.discard()
                        writer, errors = new_sink(), _ErrorSink(task, keep=table.error_policy == "file")
                        dropped.clear()
                        continue
                    if delivery is None or not (name.start or name.generation):
                        raise
                    # A tail never stops its file: what cannot be read of it is bad records, and the next tail
                    # starts after it (docs/design.md, "A bad tail never stops a file").
                    writer.discard()
                    errors.discard()
                    writer = new_sink()
                    errors = _ErrorSink(task, keep=table.error_policy == "file")
                    records_in = _all_bad(stream, delivery, exc.reason, errors)
                break
        parts = writer.finish()
        error_key = errors.finish()
    except FileMoved as exc:
        writer.discard()
        errors.discard()
        return {**report, "status": "moved", "reason": str(exc)}, writer
    except UnreadableObject as exc:
        writer.discard()
        errors.discard()
        return {**report, "status": "unknown", "reason": exc.reason}, writer
    except NotedFileReplaced as exc:
        writer.discard()
        errors.discard()
        return {**report, "status": "unknown", "reason": str(exc)}, writer
    except FileNotFoundError:
        writer.discard()
        errors.discard()
        if name.identity is not None:  # a followed file's tail: renamed or rotated away, found by its identity
            return {**report, "status": "moved", "reason": "no file at this name any more"}, writer
        return {**report, "status": "unknown", "reason": "the staging object no longer exists"}, writer
    except Exception as exc:  # an I/O failure or a bug: leave the object pending, report, retry next run
        writer.discard()
        errors.discard()
        return {
            **report,
            "status": "failed",
            "reason": f"{type(exc).__name__}: {exc}",
            "counts": not storage_failure(exc),
            "traceback": traceback.format_exc(limit=5),
        }, writer
    return {
        **report,
        "status": "ok",
        "records_in": records_in,
        "bad_records": errors.count,
        "bad_samples": errors.samples,
        "error_key": error_key,
        **dropped_fields(dropped),
        "parts": parts,
        "position": position,  # where a local file's delivery stopped (stream/tails.py); None: not appendable
        "seconds": time.time() - started,
        "peak_rss_bytes": peak_rss_bytes() if measure_rss else 0,
    }, writer


def _position_of(task: StreamTask, base: str, delivery: Delivery) -> DeliveryPosition:
    """Where a local file's delivery stopped, as its commit records it."""
    root = task.staging.root
    return {
        "uri": base,
        "staging_root": root,
        "key": unquote(base[len(root) + 1 :]),
        "consumed_end": delivery.consumed_end,
        "read_end": delivery.read_end,
        "file_identity": delivery.file_identity,
        "fingerprint": delivery.fingerprint,
        "head_crc": delivery.head_crc,
        "head_length": delivery.head_length,
        "compressed": delivery.compressed,
        "fragment_end": delivery.fragment_end,
    }


class DroppedFields(TypedDict):
    """Values of fields that are no column, dropped from rows that loaded (unknown_fields = "ignore")."""

    dropped_fields: int
    dropped_field_names: list[str]
    dropped_field_kinds: int


def dropped_fields(dropped: Counter[str]) -> DroppedFields:
    """A report's fields for the values dropped, counted by field name."""
    return {
        "dropped_fields": sum(dropped.values()),
        "dropped_field_names": [name for name, _ in dropped.most_common(DROPPED_NAMES)],
        "dropped_field_kinds": len(dropped),
    }


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
