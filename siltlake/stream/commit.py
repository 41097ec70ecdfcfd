"""The ordered commit of a wave's task results: each written object gets an id, its id key and its row."""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager

from siltlake.catalog import PendingStagingObject, StreamCommit, TableRecord
from siltlake.catalog.core import catalog_unavailable
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import storage_failure
from siltlake.records.writer import WrittenPart
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.stream.group_task import StageGroup, WaveResult, group_members
from siltlake.stream.report import DroppedFields, StreamReport
from siltlake.stream.task import StageDone, StageMoved, StageResult, StageUnknown

COMMIT_CHUNK = 64


def _update_conflict(tx: StreamCommit, table: TableRecord, parts: list[WrittenPart], mark: int) -> str | None:
    """Why an append must not commit: a partition it adds to was updated after the append started."""
    for part in parts:
        date = dt.date.fromisoformat(part["date"])
        partition = tx.partition(table.id, date, part.get("values", ""))
        version = tx.updated_since(partition.id, mark) if partition is not None else None
        if version is not None:
            return (
                f"{table.qualified_name} dt={date} was updated (version {version}) while this object was being "
                "processed; it stays pending and is streamed again on the next run"
            )
    return None


def commit_parts(
    tx: StreamCommit,
    lake: Storage,
    table: TableRecord,
    layout: TableLayout,
    staging_object_id: int,
    parts: list[WrittenPart],
    upload_start_time: str,
    now: dt.datetime,
    moves: list[tuple[str, str]] | None = None,
) -> list[bool]:
    """Give each written object (a task report's part) an id, move it to its id key, insert its row.

    Runs inside the ordered commit; returns whether each object went to delayed/. Shared with load.
    `moves` collects (temporary key, id key) of each move, for undoing them."""
    delayed = []
    for part, object_id in zip(parts, tx.allocate_ids(len(parts)), strict=True):
        date, values = dt.date.fromisoformat(part["date"]), part.get("values", "")
        partition = tx.partition_for(table.id, date, table.definition.merge_interval, now, values)
        key = layout.small_object(date, object_id, partition.closed, values)
        lake.place(part["tmp_key"], key)
        if moves is not None:
            moves.append((part["tmp_key"], key))
        # An object of several staging objects (a group's) is named by its first and lists them all.
        sources = [(source, first, count) for source, first, count in part.get("sources", [])]
        tx.add_small_object(
            object_id=object_id,
            staging_object_id=sources[0][0] if sources else staging_object_id,
            sources=sources if len(sources) > 1 else (),
            partition_id=partition.id,
            delayed=partition.closed,
            content_length=part["bytes"],
            row_count=part["rows"],
            min_event_time=dt.datetime.fromisoformat(part["min_time"]),
            max_event_time=dt.datetime.fromisoformat(part["max_time"]),
            upload_start_time=dt.datetime.fromisoformat(upload_start_time),
        )
        delayed.append(partition.closed)
    return delayed


def _failed(
    tx: StreamCommit,
    pending: PendingStagingObject,
    reason: str,
    counts: bool,
    max_failures: int,
    now: dt.datetime,
    report: StreamReport,
) -> None:
    """Report a failed attempt; one that is the object's own counts, and the last allowed moves it to unknown."""
    if not counts:
        report.failed.append((pending.uri, reason))
        return
    failures, unknown = tx.record_failure(pending.id, reason, max_failures=max_failures, now=now)
    if unknown is not None:
        report.unknown.append((pending.uri, unknown))
    elif failures:
        report.failed.append(
            (
                pending.uri,
                f"{reason} (failed {failures} of stream.max_failures={max_failures} "
                "times; then it moves to unknown objects)",
            )
        )


def _commit_one(
    deployment: Deployment,
    tx: StreamCommit,
    pending: PendingStagingObject,
    result: StageMoved | StageUnknown | StageDone,
    mark: int,
    now: dt.datetime,
    report: StreamReport,
    moves: list[tuple[str, str]] | None = None,
) -> bool:
    """Commit one object's task result; False when another process committed it first."""
    if tx.is_processed(pending.id):
        return False
    if result["status"] == "moved":  # its file is found again under its new name (stream/rotation.py)
        tx.mark_processed(pending.id, records_in=0, bad_records=0, error_uri=None, now=now)
        tx.release_pending(pending.uri, moved=True)
        return True
    if result["status"] == "unknown":
        tx.mark_unknown(
            pending.id, pending.uri, result["reason"], size=pending.size, table_id=pending.table.id, now=now
        )
        report.unknown.append((pending.uri, result["reason"]))
        tx.release_pending(pending.uri)  # a tail that went unknown never stops its file: it is judged again
        return True
    _commit_objects(deployment, tx, [(pending, result)], result["parts"], mark, now, report, moves)
    return True


def _commit_objects(
    deployment: Deployment,
    tx: StreamCommit,
    decoded: list[tuple[PendingStagingObject, StageDone]],
    parts: list[WrittenPart],
    mark: int,
    now: dt.datetime,
    report: StreamReport,
    moves: list[tuple[str, str]] | None,
) -> None:
    """Commit decoded objects of one table and the objects written for them (their own, or a group's shared)."""
    first, first_result = decoded[0]
    table = first.table
    conflict = _update_conflict(tx, table, parts, mark)
    if conflict is not None:
        report.failed += [(pending.uri, conflict) for pending, _ in decoded]  # not the objects' failure: not counted
        return
    delayed = commit_parts(
        tx,
        deployment.lake,
        table,
        table.layout(deployment.instance_key),
        first.id,
        parts,
        first_result["upload_start_time"],
        now,
        moves,
    )
    for pending, result in decoded:
        tx.mark_processed(
            pending.id,
            records_in=result["records_in"],
            bad_records=result["bad_records"],
            error_uri=result["error_key"],
            now=now,
        )
        position = result["position"]
        if position:
            tx.record_consumed(**position, delivery_uri=pending.uri, table_id=table.id, now=now)
    # The report changes last: a raise above leaves it as it was.
    for is_delayed, part in zip(delayed, parts, strict=True):
        report.delayed_objects += is_delayed
        report.live_objects += not is_delayed
        report.bytes_written += part["bytes"]
        report.records_loaded += part["rows"]
    for pending, result in decoded:
        _count_decoded(report, pending, result)


def _count_decoded(report: StreamReport, pending: PendingStagingObject, result: StageDone) -> None:
    report.processed += 1
    report.records_in += result["records_in"]
    report.bad_records += result["bad_records"]
    report.bad_samples += [(pending.uri, sample) for sample in result["bad_samples"]]
    if result.get("dropped_fields"):
        report.dropped_fields += result["dropped_fields"]
        report.dropped_by_object.append(
            DroppedFields(
                pending.uri,
                pending.table.qualified_name,
                result["dropped_fields"],
                result["dropped_field_kinds"],
                tuple(result["dropped_field_names"]),
            )
        )
    if result["error_key"]:
        report.error_files.append(result["error_key"])
    report.peak_task_rss_bytes = max(report.peak_task_rss_bytes, result["peak_rss_bytes"])


def _commit_group(
    deployment: Deployment,
    tx: StreamCommit,
    group: StageGroup,
    tables: dict[int, PendingStagingObject],
    report: StreamReport,
    mark: int,
    now: dt.datetime,
    moves: list[tuple[str, str]] | None,
) -> bool:
    """Commit a group's results: each object that did not decode on its own, the decoded ones together with
    their shared objects. False when another process committed one of the decoded ones first: then none of
    them commits here (the shared objects hold its rows), and the others stay pending for the next round."""
    decoded: list[tuple[PendingStagingObject, StageDone]] = []
    for member in group["members"]:
        if member["status"] == "ok":
            decoded.append((tables[member["staging_object_id"]], member))
        else:
            _commit_single(deployment, tx, member, tables, report, mark, now, moves)
    if not decoded:
        return True
    max_failures = deployment.config.stream.max_failures
    try:
        with tx.savepoint():
            if any(tx.is_processed(pending.id) for pending, _ in decoded):
                return False
            _commit_objects(deployment, tx, decoded, group["parts"], mark, now, report, moves)
    except Exception as exc:
        if catalog_unavailable(exc) or storage_failure(exc):
            raise
        for pending, _ in decoded:  # each is decoded alone next time, where the failure is its own
            _failed(tx, pending, f"{type(exc).__name__}: {exc}", True, max_failures, now, report)
    return True


def _commit_single(
    deployment: Deployment,
    tx: StreamCommit,
    result: StageResult,
    tables: dict[int, PendingStagingObject],
    report: StreamReport,
    mark: int,
    now: dt.datetime,
    moves: list[tuple[str, str]] | None,
) -> bool:
    """Commit one object's result in its own savepoint; False when another process committed it first.

    One that raises is counted as that object's failure; an unusable catalog or storage raises."""
    max_failures = deployment.config.stream.max_failures
    pending = tables[result["staging_object_id"]]
    if result["status"] == "failed":
        _failed(tx, pending, result["reason"], result.get("counts", True), max_failures, now, report)
        return True
    try:
        with tx.savepoint():
            return _commit_one(deployment, tx, pending, result, mark, now, report, moves)
    except Exception as exc:
        if catalog_unavailable(exc) or storage_failure(exc):
            raise
        _failed(tx, pending, f"{type(exc).__name__}: {exc}", True, max_failures, now, report)
        return True


def _commit_chunk(
    deployment: Deployment,
    tx: StreamCommit,
    chunk: list[WaveResult],
    tables: dict[int, PendingStagingObject],
    report: StreamReport,
    mark: int,
    now: dt.datetime,
    moves: list[tuple[str, str]] | None,
) -> list[WaveResult]:
    """Commit a chunk's results object by object (a group's decoded objects together), each in its own
    savepoint; returns the duplicates. One that raises is counted as that object's failure and the others
    commit; an unusable catalog or storage fails the whole chunk, counted against no object."""
    duplicates: list[WaveResult] = []
    for result in chunk:
        if result["status"] == "group":
            committed = _commit_group(deployment, tx, result, tables, report, mark, now, moves)
        else:
            committed = _commit_single(deployment, tx, result, tables, report, mark, now, moves)
        if not committed:
            duplicates.append(result)
    return duplicates


def _batch(
    tx: StreamCommit, chunk: list[WaveResult], tables: dict[int, PendingStagingObject], mark: int
) -> AbstractContextManager[None]:
    """The chunk's catalog work as one batch: what its objects read is fetched up front, what they write held."""
    committing = [member for result in chunk for member in group_members(result) if member["status"] != "failed"]
    parts = [
        (tables[group_members(result)[0]["staging_object_id"]].table.id, part["date"], part.get("values", ""))
        for result in chunk
        for part in _parts(result)
    ]
    return tx.batch(
        [result["staging_object_id"] for result in committing],
        {(table_id, dt.date.fromisoformat(date), values) for table_id, date, values in parts},
        len(parts),
        mark,
    )


def _parts(result: WaveResult) -> list[WrittenPart]:
    """The objects a task wrote: an object that was not decoded wrote none."""
    return result["parts"] if result["status"] in ("ok", "group") else []


def _undo(lake: Storage, moves: list[tuple[str, str]], best_effort: bool = False) -> None:
    """Move objects back to their temporary keys (deleted with the run's prefix), latest first."""
    while moves:
        tmp_key, key = moves.pop()
        try:
            lake.move(key, tmp_key)
        except OSError:
            if not best_effort:  # after a failed round the lake may be the failure: reap takes what is left
                raise


def _commit_batch(
    deployment: Deployment,
    tx: StreamCommit,
    chunk: list[WaveResult],
    tables: dict[int, PendingStagingObject],
    report: StreamReport,
    mark: int,
    before: tuple[dict, dict[str, int]],
    moves: list[tuple[str, str]],
) -> list[WaveResult]:
    """Commit a chunk as one batch; should its writes fail for a reason that is not an outage, undo its
    moves and commit it again object by object. Returns the duplicates."""
    now = utcnow()
    try:
        with _batch(tx, chunk, tables, mark):
            return _commit_chunk(deployment, tx, chunk, tables, report, mark, now, moves)
    except Exception as exc:
        if catalog_unavailable(exc) or storage_failure(exc):
            raise
        _undo(deployment.lake, moves)
        report.restore(before)
        return _commit_chunk(deployment, tx, chunk, tables, report, mark, now, moves)


def commit_results(
    deployment: Deployment,
    results: list[WaveResult],
    tables: dict[int, PendingStagingObject],
    report: StreamReport,
    mark: int,
) -> None:
    """Commit task results: under the ordering lock, move each object to its id key, insert its row.

    A chunk commits as one batch (a few statements whatever its size). Should the batch's writes fail
    for a reason that is not an outage, its moves are undone and the chunk commits again object by object,
    so that the failure is counted against the object that causes it."""
    for start in range(0, len(results), COMMIT_CHUNK):
        chunk = results[start : start + COMMIT_CHUNK]
        before = report.checkpoint()
        moves: list[tuple[str, str]] = []
        try:
            with deployment.catalog.partitions.stream_commit() as tx:
                try:
                    duplicates = _commit_batch(deployment, tx, chunk, tables, report, mark, before, moves)
                except BaseException:
                    # Undone while this transaction still holds the ordering lock: on SQLite the ids roll back,
                    # and the next commit may put its own objects at these keys once the lock is released.
                    _undo(deployment.lake, moves, best_effort=True)
                    raise
        except BaseException:
            # Nothing of the chunk committed, so the report drops it. (A failing COMMIT itself leaves its
            # moved objects where they are: orphans, which reap deletes.)
            report.restore(before)
            raise
        # Another stream process committed these first: our copies are not referenced by anything. A group's are
        # its decoded objects (the others committed on their own), counted each.
        for result in duplicates:
            report.skipped_duplicates += (
                sum(member["status"] == "ok" for member in result["members"]) if result["status"] == "group" else 1
            )
            for part in _parts(result):
                deployment.lake.delete(part["tmp_key"])
