"""Several small staging objects of one table decoded by one task into shared objects, one per partition date.

Each object decodes on its own (its own report, error file, position and failures, as process_staging_object);
its rows join the group's objects only once it decoded whole, so an object that fails or is unknown adds nothing.
Small JSON-lines objects are read by pyarrow in one call for several (records.joined), each keeping its rows.
The commit takes the group's decoded objects together (stream/commit.py) with one row range per object as lineage.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Literal, TypedDict

import pyarrow as pa

from siltlake.errors import storage_failure
from siltlake.records.group_writer import GroupWriter
from siltlake.records.joined import JOIN_BLOCK_BYTES, JoiningReader, WaitingObject
from siltlake.records.writer import WrittenPart
from siltlake.stream.task import (
    RowSink,
    StageFailed,
    StageResult,
    StreamTask,
    decode_staging_object,
    dropped_fields,
    peak_rss_bytes,
    process_staging_object,
)
from siltlake.tabledef import TableDef


@dataclass(frozen=True)
class StreamGroup:
    """Staging objects of one table that one task decodes into shared objects (stream.group_bytes)."""

    tasks: tuple[StreamTask, ...]


class StageGroup(TypedDict):
    """A group's result: each object's report (a decoded one's `parts` empty) and the objects they share."""

    status: Literal["group"]
    members: list[StageResult]
    parts: list[WrittenPart]


WaveResult = StageResult | StageGroup


class _HeldRows:
    """One object's decoded rows, held until it has decoded whole."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []

    def add(self, rows: pa.Table) -> None:
        self.tables.append(rows)

    def finish(self) -> list[WrittenPart]:
        return []  # its rows go to the group's objects

    def discard(self) -> None:
        self.tables = []


def process_wave_item(item: StreamTask | StreamGroup) -> WaveResult:
    """Run in a worker process or a Spark task: one object, or a group of them. Never raises for bad input."""
    if isinstance(item, StreamTask):
        return process_staging_object(item)
    first = item.tasks[0]
    table = TableDef.from_json(first.table_json)
    writer = GroupWriter(table, first.lake, first.layout, first.run_id, first.staging_object_id, first.spill_bytes)
    members: list[StageResult] = []
    try:
        _decode_group(item, table, writer, members)
        parts = writer.finish()
        peak = peak_rss_bytes()
        for member in members:
            if member["status"] == "ok":
                member["peak_rss_bytes"] = peak
    except Exception as exc:  # writing the shared objects failed: every object decoded so far tries again
        writer.discard()
        failed = _all_failed(item, members, exc)
        return {"status": "group", "members": failed, "parts": []}
    return {"status": "group", "members": members, "parts": parts}


@dataclass
class _Waiting:
    """A decoded object whose rows wait for a joined read: its place among the members, its task, its bytes."""

    member: int
    task: StreamTask
    held: WaitingObject


def _decode_group(group: StreamGroup, table: TableDef, writer: GroupWriter, members: list[StageResult]) -> None:
    """Decode the group's objects into the writer, a report each in members. Small JSON-lines objects are read
    together (records.joined); should a joined read need the per-record decoder, its halves are tried, and the
    objects of a half that needs it too decode again alone, as would any later object of the group."""
    joiner = JoiningReader(table)
    waiting: list[_Waiting] = []
    waiting_bytes = 0
    for task in group.tasks:
        result, held = decode_staging_object(task, table, _HeldRows, measure_rss=False, read=joiner.read)
        members.append(result)
        waiting_object = joiner.take()
        if result["status"] != "ok":
            continue
        if waiting_object is None:
            writer.add_source(task.staging_object_id, _held(held).tables)
            continue
        waiting.append(_Waiting(len(members) - 1, task, waiting_object))
        waiting_bytes += len(waiting_object.data)
        if waiting_bytes >= JOIN_BLOCK_BYTES:
            _read_joined(waiting, joiner, table, writer, members)
            waiting, waiting_bytes = [], 0
    _read_joined(waiting, joiner, table, writer, members)


def _read_joined(
    waiting: list[_Waiting],
    joiner: JoiningReader,
    table: TableDef,
    writer: GroupWriter,
    members: list[StageResult],
    halves: bool = True,
) -> None:
    if not waiting:
        return
    converted = joiner.convert([entry.held for entry in waiting])
    if converted is not None:
        for entry, rows in zip(waiting, converted, strict=True):
            report = members[entry.member]
            assert report["status"] == "ok"
            report["records_in"] += rows.num_rows
            if entry.held.dropped:
                report.update(dropped_fields(entry.held.dropped))
        writer.add_sources(
            [(entry.task.staging_object_id, rows) for entry, rows in zip(waiting, converted, strict=True)]
        )
        return
    joiner.joining = False  # lines that need the per-record decoder: likely more of them in this group
    if halves and len(waiting) > 1:
        middle = len(waiting) // 2
        for half in (waiting[:middle], waiting[middle:]):
            _read_joined(half, joiner, table, writer, members, halves=False)
        return
    for entry in waiting:
        result, held = decode_staging_object(entry.task, table, _HeldRows, measure_rss=False)
        members[entry.member] = result
        if result["status"] == "ok":
            writer.add_source(entry.task.staging_object_id, _held(held).tables)


def _held(sink: RowSink) -> _HeldRows:
    assert isinstance(sink, _HeldRows)
    return sink


def _all_failed(group: StreamGroup, members: list[StageResult], exc: Exception) -> list[StageResult]:
    """The group's reports once its objects could not be written: the decoded ones (and those not reached) failed,
    counted against each unless storage failed (an object that failed once is decoded alone next time)."""
    reports = {member["staging_object_id"]: member for member in members}
    failed: list[StageResult] = []
    for task in group.tasks:
        report = reports.get(task.staging_object_id)
        if report is not None and report["status"] != "ok":
            failed.append(report)
            continue
        attempt: StageFailed = {
            "staging_object_id": task.staging_object_id,
            "uri": task.uri,
            "status": "failed",
            "reason": f"writing its group's objects failed: {type(exc).__name__}: {exc}",
            "counts": not storage_failure(exc),
            "traceback": traceback.format_exc(limit=5),
        }
        failed.append(attempt)
    return failed


def group_members(result: WaveResult) -> list[StageResult]:
    """The per-object reports in a wave's result."""
    return result["members"] if result["status"] == "group" else [result]
