"""The stream driver: discover, run one Spark stage per wave of staging objects, commit in order."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from siltlake.catalog import PendingStagingObject, StreamCommit, TableRecord
from siltlake.catalog.core import catalog_unavailable
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import storage_failure
from siltlake.hosts import default_owner, local_host
from siltlake.logs import event
from siltlake.polling import poll_forever
from siltlake.records.writer import WrittenPart
from siltlake.storage.accounted import AccountedNames
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout, temporary_run
from siltlake.stream.discover import Discovery, discover, sweep_slice
from siltlake.stream.names import StoredNames, daemon_names, stored_names
from siltlake.stream.notifications import NotificationTally
from siltlake.stream.stage import WaveStage
from siltlake.stream.task import StageDone, StageMoved, StageResult, StageUnknown

COMMIT_CHUNK = 64


@dataclass(frozen=True)
class DroppedFields:
    """What one staging object's rows dropped: values of fields that are no column of its table."""

    uri: str
    table: str
    values: int  # field values dropped, over all its rows
    fields: int  # distinct field names
    names: tuple[str, ...]  # the most dropped, a few


@dataclass
class StreamReport:
    listed: int = 0
    swept: int = 0  # of those, files a local root's rolling sweep read (docs/design.md, "Discovery reads what is new")
    remembered: int = 0  # of those, names in changed directories a daemon's record accounted for: not `stat`ed
    registered: int = 0
    processed: int = 0
    records_in: int = 0
    records_loaded: int = 0
    bad_records: int = 0
    live_objects: int = 0
    delayed_objects: int = 0
    bytes_written: int = 0
    skipped_duplicates: int = 0  # decoded here but committed first by another process: dropped
    redelivered: int = 0  # staging objects put again after they were registered: ignored
    expired: int = 0  # listed objects that arrived before the expiry watermark: skipped (stream.staging_retention)
    notified: int = 0  # objects S3 event notifications named that the catalog did not know (stream.notifications)
    notifications: NotificationTally | None = None  # what the notification queue delivered; None without one
    listing_waits: float | None = None  # a round that read only its queue: seconds until its listing is due
    changed_reputs: list[tuple[str, int, int]] = field(default_factory=list)  # (uri, loaded size, new size)
    # Files written in place (stream/appends.py): tails of appended files registered as new deliveries, files
    # found changed other than by appending (uri, why: reported once, not loaded), and local files still being
    # written when the round ended (how many, how long the oldest has waited).
    appended: int = 0
    rewritten: list[tuple[str, str]] = field(default_factory=list)
    unsettled: int = 0
    unsettled_seconds: float = 0.0
    unknown: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    bad_samples: list[tuple[str, str]] = field(default_factory=list)
    error_files: list[str] = field(default_factory=list)
    # Values of fields that are no column of their table, dropped from loaded rows (unknown_fields = "ignore").
    dropped_fields: int = 0
    dropped_by_object: list[DroppedFields] = field(default_factory=list)
    peak_task_rss_bytes: int = 0
    seconds: float = 0.0
    spark_start_seconds: float = 0.0
    local_waves: int = 0  # waves small enough to run on this host's worker processes (stream.in_driver_bytes)

    def checkpoint(self) -> tuple[dict, dict[str, int]]:
        """What restore() needs to undo later changes: the counts, and the length of each list (lists only grow)."""
        values = dict(vars(self))
        return values, {name: len(value) for name, value in values.items() if isinstance(value, list)}

    def restore(self, checkpoint: tuple[dict, dict[str, int]]) -> None:
        values, lengths = checkpoint
        for name, value in values.items():
            if name in lengths:
                del getattr(self, name)[lengths[name]:]
            else:
                setattr(self, name, value)


class Progress:
    """What the driver tells a progress display; the default shows nothing."""

    def start(self, total: int) -> None: ...

    def advance(self, count: int) -> None: ...


def _update_conflict(tx: StreamCommit, table: TableRecord, parts: list[WrittenPart], mark: int) -> str | None:
    """Why an append must not commit: a partition it adds to was updated after the append started."""
    for part in parts:
        date = dt.date.fromisoformat(part["date"])
        partition = tx.partition(table.id, date)
        version = tx.updated_since(partition.id, mark) if partition is not None else None
        if version is not None:
            return (f"{table.qualified_name} dt={date} was updated (version {version}) while this object was being "
                    "processed; it stays pending and is streamed again on the next run")
    return None


def commit_parts(tx: StreamCommit, lake: Storage, table: TableRecord, layout: TableLayout, staging_object_id: int,
                 parts: list[WrittenPart], upload_start_time: str, now: dt.datetime,
                 moves: list[tuple[str, str]] | None = None) -> list[bool]:
    """Give each written object (a task report's part) an id, move it to its id key, insert its row.

    Runs inside the ordered commit; returns whether each object went to delayed/. Shared with load.
    `moves` collects (temporary key, id key) of each move, for undoing them."""
    delayed = []
    for part, object_id in zip(parts, tx.allocate_ids(len(parts)), strict=True):
        date = dt.date.fromisoformat(part["date"])
        partition = tx.partition_for(table.id, date, table.definition.merge_interval, now)
        key = layout.small_object(date, object_id, partition.closed)
        lake.place(part["tmp_key"], key)
        if moves is not None:
            moves.append((part["tmp_key"], key))
        tx.add_small_object(
            object_id=object_id, staging_object_id=staging_object_id, partition_id=partition.id,
            delayed=partition.closed, content_length=part["bytes"], row_count=part["rows"],
            min_event_time=dt.datetime.fromisoformat(part["min_time"]),
            max_event_time=dt.datetime.fromisoformat(part["max_time"]),
            upload_start_time=dt.datetime.fromisoformat(upload_start_time),
        )
        delayed.append(partition.closed)
    return delayed


def _failed(tx: StreamCommit, pending: PendingStagingObject, reason: str, counts: bool, max_failures: int,
            now: dt.datetime, report: StreamReport) -> None:
    """Report a failed attempt; one that is the object's own counts, and the last allowed moves it to unknown."""
    if not counts:
        report.failed.append((pending.uri, reason))
        return
    failures, unknown = tx.record_failure(pending.id, reason, max_failures=max_failures, now=now)
    if unknown is not None:
        report.unknown.append((pending.uri, unknown))
    elif failures:
        report.failed.append((pending.uri, f"{reason} (failed {failures} of stream.max_failures={max_failures} "
                                           "times; then it moves to unknown objects)"))


def _commit_one(deployment: Deployment, tx: StreamCommit, pending: PendingStagingObject,
                result: StageMoved | StageUnknown | StageDone,
                mark: int, now: dt.datetime, report: StreamReport, moves: list[tuple[str, str]] | None = None) -> bool:
    """Commit one object's task result; False when another process committed it first."""
    if tx.is_processed(pending.id):
        return False
    if result["status"] == "moved":  # its file is found again under its new name (stream/rotation.py)
        tx.mark_processed(pending.id, records_in=0, bad_records=0, error_uri=None, now=now)
        tx.release_pending(pending.uri, moved=True)
        return True
    if result["status"] == "unknown":
        tx.mark_unknown(pending.id, pending.uri, result["reason"], size=pending.size,
                        table_id=pending.table.id, now=now)
        report.unknown.append((pending.uri, result["reason"]))
        tx.release_pending(pending.uri)  # a tail that went unknown never stops its file: it is judged again
        return True
    table = pending.table
    parts = result["parts"]
    conflict = _update_conflict(tx, table, parts, mark)
    if conflict is not None:
        report.failed.append((pending.uri, conflict))  # not the object's failure: it is not counted
        return True
    delayed = commit_parts(tx, deployment.lake, table, table.layout(deployment.instance_key), pending.id, parts,
                           result["upload_start_time"], now, moves)
    tx.mark_processed(pending.id, records_in=result["records_in"],
                      bad_records=result["bad_records"], error_uri=result["error_key"], now=now)
    position = result["position"]
    if position:
        tx.record_consumed(**position, delivery_uri=pending.uri, table_id=table.id, now=now)
    # The report changes last: a raise above leaves it as it was.
    for is_delayed, part in zip(delayed, parts, strict=True):
        report.delayed_objects += is_delayed
        report.live_objects += not is_delayed
        report.bytes_written += part["bytes"]
        report.records_loaded += part["rows"]
    report.processed += 1
    report.records_in += result["records_in"]
    report.bad_records += result["bad_records"]
    report.bad_samples += [(pending.uri, sample) for sample in result["bad_samples"]]
    if result.get("dropped_fields"):
        report.dropped_fields += result["dropped_fields"]
        report.dropped_by_object.append(DroppedFields(pending.uri, table.qualified_name, result["dropped_fields"],
                                                      result["dropped_field_kinds"],
                                                      tuple(result["dropped_field_names"])))
    if result["error_key"]:
        report.error_files.append(result["error_key"])
    report.peak_task_rss_bytes = max(report.peak_task_rss_bytes, result["peak_rss_bytes"])
    return True


def _commit_chunk(deployment: Deployment, tx: StreamCommit, chunk: list[StageResult],
                  tables: dict[int, PendingStagingObject], report: StreamReport, mark: int, now: dt.datetime,
                  moves: list[tuple[str, str]] | None) -> list[StageResult]:
    """Commit a chunk's results object by object, each in its own savepoint; returns the duplicates.

    One that raises is counted as that object's failure and the others commit; an unusable catalog or
    storage fails the whole chunk, counted against no object."""
    max_failures = deployment.config.stream.max_failures
    duplicates: list[StageResult] = []
    for result in chunk:
        pending = tables[result["staging_object_id"]]
        if result["status"] == "failed":
            _failed(tx, pending, result["reason"], result.get("counts", True), max_failures, now, report)
            continue
        try:
            with tx.savepoint():
                committed = _commit_one(deployment, tx, pending, result, mark, now, report, moves)
        except Exception as exc:
            if catalog_unavailable(exc) or storage_failure(exc):
                raise
            _failed(tx, pending, f"{type(exc).__name__}: {exc}", True, max_failures, now, report)
            continue
        if not committed:
            duplicates.append(result)
    return duplicates


def _batch(tx: StreamCommit, chunk: list[StageResult], tables: dict[int, PendingStagingObject],
           mark: int) -> AbstractContextManager[None]:
    """The chunk's catalog work as one batch: what its objects read is fetched up front, what they write held."""
    committing = [result for result in chunk if result["status"] != "failed"]
    parts = [(tables[result["staging_object_id"]].table.id, part["date"])
             for result in committing for part in _parts(result)]
    return tx.batch([result["staging_object_id"] for result in committing],
                    {(table_id, dt.date.fromisoformat(date)) for table_id, date in parts}, len(parts), mark)


def _parts(result: StageResult) -> list[WrittenPart]:
    """The objects a task wrote: an object that was not decoded wrote none."""
    return result["parts"] if result["status"] == "ok" else []


def _undo(lake: Storage, moves: list[tuple[str, str]], best_effort: bool = False) -> None:
    """Move objects back to their temporary keys (deleted with the run's prefix), latest first."""
    while moves:
        tmp_key, key = moves.pop()
        try:
            lake.move(key, tmp_key)
        except OSError:
            if not best_effort:  # after a failed round the lake may be the failure: reap takes what is left
                raise


def _commit_batch(deployment: Deployment, tx: StreamCommit, chunk: list[StageResult],
                  tables: dict[int, PendingStagingObject], report: StreamReport, mark: int,
                  before: tuple[dict, dict[str, int]], moves: list[tuple[str, str]]) -> list[StageResult]:
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


def _commit(deployment: Deployment, results: list[StageResult], tables: dict[int, PendingStagingObject],
            report: StreamReport, mark: int) -> None:
    """Commit task results: under the ordering lock, move each object to its id key, insert its row.

    A chunk commits as one batch (a few statements whatever its size). Should the batch's writes fail
    for a reason that is not an outage, its moves are undone and the chunk commits again object by object,
    so that the failure is counted against the object that causes it."""
    for start in range(0, len(results), COMMIT_CHUNK):
        chunk = results[start:start + COMMIT_CHUNK]
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
        # Another stream process committed these first: our copies are not referenced by anything.
        for result in duplicates:
            report.skipped_duplicates += 1
            for part in _parts(result):
                deployment.lake.delete(part["tmp_key"])


class _Claims:
    """The staging objects this round claimed and has not committed yet: taken wave by wave, their claims
    refreshed every stream.heartbeat_interval while the round runs, given back when it ends.

    A claim only keeps other daemons from decoding the object again; exactly-once is the commit's (the
    processed mark, read under the ordering lock), so a claim taken over from a daemon that merely stalled
    costs a decode, never a doubled row."""

    def __init__(self, deployment: Deployment, owner: str) -> None:
        self._staging = deployment.catalog.staging
        self._settings = deployment.config.stream
        self._owner = owner
        self._local = local_host()
        self._held: set[int] = set()  # claimed and not committed yet: what the heartbeat refreshes
        self._taken = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def take(self, limit: int) -> list[PendingStagingObject]:
        if self._owner in _unreleased:  # an earlier round's claims, which its end could not give back
            self._staging.release(self._owner)
            _unreleased.discard(self._owner)
        wave = self._staging.claim(self._owner, limit=limit, now=utcnow(), timeout=self._settings.claim_timeout,
                                   local=self._local)
        with self._lock:
            self._held.update(item.id for item in wave)
            self._taken = self._taken or bool(wave)
        if wave and self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="siltlake-stream-claims")
            self._beat.start()
        return wave

    def claimable(self, limit: int) -> int:
        """How many more pending objects no daemon holds (what a progress display expects)."""
        return len(self._staging.pending(limit, timeout=self._settings.claim_timeout, local=self._local))

    def committed(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._held.difference_update(ids)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._settings.heartbeat_interval):
            with self._lock:
                held = list(self._held)
            try:
                self._staging.heartbeat(self._owner, held, utcnow())
            except Exception:  # the catalog is briefly unreachable: the next beat tries again
                continue

    def close(self) -> None:
        """Stop the heartbeat and give back what was not committed (failed objects, a stopped or failed
        round's later waves) so that any daemon takes it now; should the catalog refuse, the next round of
        this process gives it back first (other daemons wait out stream.claim_timeout)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if not self._taken and self._owner not in _unreleased:
            return
        try:
            self._staging.release(self._owner)  # one statement, whatever the round's size
            _unreleased.discard(self._owner)
        except Exception as exc:
            _unreleased.add(self._owner)
            if not catalog_unavailable(exc):
                raise


# Owners whose claims a failed round could not give back: the next round gives them back first.
_unreleased: set[str] = set()


def discover_settled(deployment: Deployment, stop: threading.Event | None = None,
                     accounted: AccountedNames | None = None) -> Discovery:
    """Discover, then wait for the local files still being written to settle (at most stream.settle_time) and
    discover again: what `silt stream --once` does, so that a file written just before it is taken."""
    found = discover(deployment, accounted)
    deadline = time.monotonic() + deployment.config.stream.settle_time
    while found.unsettled and found.settles_in is not None and (stop is None or not stop.is_set()):
        wait = max(found.settles_in, 0.0) + 0.05
        if time.monotonic() + wait > deadline + 0.5:
            break
        time.sleep(wait)
        again = discover(deployment, accounted)
        again.fold(found, same_listing=True)
        found = again
    return found


@functools.cache
def process_owner() -> str:
    """This process's claim owner: one per process, so a later round knows its own leftover claims."""
    return default_owner()


def stream_once(deployment: Deployment, progress: Progress | None = None,
                stop: threading.Event | None = None, owner: str | None = None,
                settle_wait: bool = False, accounted: AccountedNames | None = None) -> StreamReport:
    """Register new staging objects and process every pending one no other stream daemon holds (see
    _Claims); returns what happened. `owner` names the claims (default: this process's).

    With settle_wait (`silt stream --once`), discovery waits up to stream.settle_time for the local files still
    being written to settle, so that a one-off run takes what was just written (a daemon's next round would).
    Once stop is set no new wave starts: the objects of later waves stay pending for the next run. `accounted`:
    a daemon's record of the names its earlier rounds listed in a local root (stream_forever keeps one); without
    it a round reads the record the catalog stores for one-off runs and stores it back (stream/names.py)."""
    started = time.monotonic()
    progress = progress or Progress()
    deployment.catalog.check_ready()
    deployment.check_instance("stream")
    record = accounted if accounted is not None else stored_names(deployment)
    found = discover_settled(deployment, stop, record) if settle_wait else discover(deployment, record, sweep=False)
    storing = record.store if isinstance(record, StoredNames) else None
    report = StreamReport()
    _discovered(report, found)
    settings = deployment.config.stream
    claims = _Claims(deployment, owner or process_owner())
    committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="siltlake-commit")
    sweeping: Future | None = None
    committing: Future | None = None
    run_id = f"stream-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    staged = False  # whether a stage may have written under the run's temporary prefix
    try:
        # The first wave is claimed before the progress display starts, as the whole list was read before.
        budget = settings.max_objects_per_run
        wave = [] if stop is not None and stop.is_set() else claims.take(min(settings.objects_per_wave, budget))
        progress.start(len(wave) + (claims.claimable(budget - len(wave)) if wave else 0))
        if not wave:
            if storing is not None:
                storing()
            _add_sweep(report, found, sweep_slice(deployment, found.sweep_pending) if found.sweep_pending else None)
            report.seconds = time.monotonic() - started
            return report
        # The committer stores a one-off run's record of names and reads the rolling sweep's slice while the first
        # stage runs, before the first commit (what the slice registers after this claim is taken by the next round).
        stored = committer.submit(storing) if storing is not None else None
        if found.sweep_pending is not None:
            sweeping = committer.submit(sweep_slice, deployment, found.sweep_pending)
        staged = True
        stage = WaveStage(deployment, progress.advance)
        # Wave N commits (the driver's and the catalog's work) while wave N+1 runs on the executors; commits
        # stay in wave order, each waiting for the one before. Stages run in this thread: Ctrl-C cancels them.
        mark = deployment.catalog.versions.mark()  # updates published after it fail the wave's appends
        while wave:
            budget -= len(wave)
            results = stage.run(wave, run_id)
            report.local_waves, report.spark_start_seconds = stage.local_waves, stage.spark_start_seconds
            if committing is not None:
                committing.result()  # the previous wave's commit, and its failure
            # The next wave's mark and claim, taken before its stage starts and while no commit of ours holds the
            # catalog: on SQLite a claim made during the commit would wait for its write lock, ending the overlap.
            next_mark = deployment.catalog.versions.mark()
            stopping = (stop is not None and stop.is_set()) or budget <= 0
            next_wave = [] if stopping else claims.take(min(settings.objects_per_wave, budget))
            committing = committer.submit(_commit_wave, deployment, results, wave, report, mark, claims)
            mark, wave = next_mark, next_wave
        if committing is not None:
            committing.result()
        if stored is not None:
            stored.result()
        _add_sweep(report, found, sweeping.result() if sweeping is not None else None)
    except BaseException as exc:
        if committing is not None:
            wait([committing])  # a commit under way ends as it would have (it is one transaction)
        if isinstance(exc, Exception) and report.processed:  # the user is told, in the command's error line
            exc.add_note(f"this run had committed {report.processed} staging objects "
                         f"({report.records_loaded:,} records) before it failed")
        raise
    finally:
        committer.shutdown(wait=True)
        claims.close()
        if staged:  # an idle round costs no listing of the lake
            deployment.lake.delete_prefix(temporary_run(deployment.instance_key, run_id))
    report.seconds = time.monotonic() - started
    _log_round(report)
    return report


def _discovered(report: StreamReport, found: Discovery) -> None:
    """Set what a round's discovery found on its report."""
    report.listed, report.swept, report.remembered = found.listed, found.swept, found.remembered
    report.registered, report.redelivered, report.expired = found.registered, found.redelivered, found.expired
    report.notified, report.notifications = found.notified, found.notifications
    report.listing_waits = found.listing_waits
    report.changed_reputs = [(put.uri, put.registered_size, put.size) for put in found.changed]
    report.appended, report.rewritten = found.appended, list(found.rewritten)
    report.unsettled, report.unsettled_seconds = found.unsettled, found.unsettled_seconds


def _add_sweep(report: StreamReport, found: Discovery, swept: Discovery | None) -> None:
    """Count the round's sweep slice into its report."""
    if swept is not None:
        found.add_sweep(swept)
        _discovered(report, found)


def _commit_wave(deployment: Deployment, results: list[StageResult], wave: list[PendingStagingObject],
                 report: StreamReport, mark: int, claims: _Claims) -> None:
    _commit(deployment, results, {item.id: item for item in wave}, report, mark)
    claims.committed(item.id for item in wave)  # a failed one stays claimed until the round gives all back


log = logging.getLogger(__name__)


def _log_round(report: StreamReport) -> None:
    """One line per round that found work; a warning per object that failed or went to unknown."""
    if report.processed or report.registered or report.failed:
        event(log, "stream.round", registered=report.registered, notified=report.notified, processed=report.processed,
              records_loaded=report.records_loaded, bad_records=report.bad_records,
              dropped_fields=report.dropped_fields, live_objects=report.live_objects,
              delayed_objects=report.delayed_objects, bytes_written=report.bytes_written,
              seconds=report.seconds)
    for uri, reason in report.failed:
        event(log, "stream.object_failed", logging.WARNING, uri=uri, reason=reason)
    for uri, reason in report.unknown:
        event(log, "stream.object_unknown", logging.WARNING, uri=uri, reason=reason)


def stream_forever(deployment: Deployment, stop: threading.Event,
                   on_report: Callable[[StreamReport], None], interval: float | None = None,
                   on_error: Callable[[Exception, float], None] | None = None,
                   progress: Progress | None = None) -> None:
    """Poll until stop is set; a round stops between waves once stop is set. A failing round (catalog
    or storage unreachable) is reported and retried with backoff; bad input never fails a round. The rounds
    share a record of the names they listed in a local staging root's directories (storage/accounted.py)."""
    interval = deployment.config.stream.poll_interval if interval is None else interval
    accounted = daemon_names(deployment)
    try:
        poll_forever(lambda: stream_once(deployment, progress, stop=stop, accounted=accounted), stop, interval,
                     on_report, on_error)
    finally:
        accounted.close()
