"""The stream driver: discover, run one Spark stage per wave of staging objects, commit in order."""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from siltlake.catalog import PendingStagingObject
from siltlake.catalog.core import catalog_unavailable
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.forking import heap_frozen
from siltlake.hosts import default_owner, local_host
from siltlake.logs import event
from siltlake.polling import poll_forever
from siltlake.storage.accounted import AccountedNames
from siltlake.storage.keys import temporary_run
from siltlake.stream.commit import commit_results
from siltlake.stream.discover import Discovery, discover, sweep_slice
from siltlake.stream.group_task import WaveResult
from siltlake.stream.names import StoredNames, daemon_names, stored_names
from siltlake.stream.report import StreamReport
from siltlake.stream.stage import WaveStage


class Progress:
    """What the driver tells a progress display; the default shows nothing."""

    def start(self, total: int) -> None: ...

    def resize(self, total: int) -> None:
        """Discovery registered more while the round ran: the round's objects are `total` now."""

    def advance(self, count: int) -> None: ...


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
        wave = self._staging.claim(
            self._owner, limit=limit, now=utcnow(), timeout=self._settings.claim_timeout, local=self._local
        )
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


def discover_settled(
    deployment: Deployment,
    stop: threading.Event | None = None,
    accounted: AccountedNames | None = None,
    registered: Callable[[], None] | None = None,
) -> Discovery:
    """Discover, then wait for the local files still being written to settle (at most stream.settle_time) and
    discover again: what `silt stream --once` does, so that a file written just before it is taken."""
    found = discover(deployment, accounted, registered=registered)
    deadline = time.monotonic() + deployment.config.stream.settle_time
    while found.unsettled and found.settles_in is not None and (stop is None or not stop.is_set()):
        wait = max(found.settles_in, 0.0) + 0.05
        if time.monotonic() + wait > deadline + 0.5:
            break
        time.sleep(wait)
        again = discover(deployment, accounted, registered=registered)
        again.fold(found, same_listing=True)
        found = again
    return found


class _Discovering:
    """A round's discovery on a thread of its own. It registers new objects a chunk at a time
    (stream/discover.py), so the round's first wave starts on the first chunk while the rest are marked and
    registered: the worker processes no longer wait out a backlog's discovery."""

    def __init__(self, run: Callable[[Callable[[], None]], Discovery]) -> None:
        self._changed = threading.Condition()
        self._chunks = 0  # chunks registered with more to come
        self._done = False
        self._found: Discovery | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(run,), name="siltlake-discover", daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[Callable[[], None]], Discovery]) -> None:
        try:
            self._found = run(self._registered)
        except BaseException as exc:  # raised in the round's thread, by result()
            self._error = exc
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def _registered(self) -> None:
        with self._changed:
            self._chunks += 1
            self._changed.notify_all()

    def progress(self) -> tuple[bool, int]:
        """Whether discovery has ended, and how many chunks it had registered by then."""
        with self._changed:
            return self._done, self._chunks

    def wait(self, chunks: int) -> None:
        """Until discovery has registered more than `chunks` chunks, or has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._done or self._chunks > chunks)

    def join(self) -> None:
        """Until discovery has ended (a failed round leaves no discovery running into the next)."""
        self._thread.join()

    def result(self) -> Discovery:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._found is not None
        return self._found


def _take_wave(claims: _Claims, limit: int, discovering: _Discovering) -> list[PendingStagingObject]:
    """The next wave: what is claimable now, or once discovery registers more; empty once it has ended and
    nothing is left."""
    while True:
        ended, chunks = discovering.progress()  # read before the claim: a chunk registered after it is waited for
        wave = claims.take(limit)
        if wave or ended:
            return wave
        discovering.wait(chunks)


@functools.cache
def process_owner() -> str:
    """This process's claim owner: one per process, so a later round knows its own leftover claims."""
    return default_owner()


@heap_frozen()
def stream_once(
    deployment: Deployment,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    owner: str | None = None,
    settle_wait: bool = False,
    accounted: AccountedNames | None = None,
) -> StreamReport:
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
    discovering = _Discovering(
        lambda registered: (
            discover_settled(deployment, stop, record, registered)
            if settle_wait
            else discover(deployment, record, sweep=False, registered=registered)
        )
    )
    storing = record.store if isinstance(record, StoredNames) else None
    report = StreamReport()
    settings = deployment.config.stream
    claims = _Claims(deployment, owner or process_owner())
    committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="siltlake-commit")
    found: Discovery | None = None
    stored: Future | None = None
    sweeping: Future | None = None
    committing: Future | None = None
    run_id = f"stream-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    staged = False  # whether a stage may have written under the run's temporary prefix
    followed_up = False  # after_discovery() has run

    def discovered() -> Discovery:
        """Discovery's report, once it has ended."""
        nonlocal found
        if found is None:
            found = discovering.result()
            _discovered(report, found)
        return found

    def after_discovery() -> None:
        """Once discovery has ended and a stage runs: the committer stores a one-off run's record of names and
        reads the rolling sweep's slice (what the slice registers after the last claim is the next round's)."""
        nonlocal stored, sweeping, followed_up
        if not followed_up:
            followed_up = True
            stored = committer.submit(storing) if storing is not None else None
            pending = discovered().sweep_pending
            sweeping = committer.submit(sweep_slice, deployment, pending) if pending is not None else None

    try:
        # The first wave is claimed before the progress display starts: what discovery registered by then.
        budget = settings.max_objects_per_run
        if stop is None or not stop.is_set():
            discovering.wait(0)  # its first chunk registered; a round of one chunk, all of its discovery
            wave = _take_wave(claims, min(settings.objects_per_wave, budget), discovering)
        else:
            wave = []
        claimed = len(wave)
        progress.start(claimed + (claims.claimable(budget - claimed) if wave else 0))
        if not wave:
            if storing is not None:
                storing()
            found = discovered()
            _add_sweep(report, found, sweep_slice(deployment, found.sweep_pending) if found.sweep_pending else None)
            report.seconds = time.monotonic() - started
            return report
        staged = True
        if discovering.progress()[0]:
            after_discovery()
        stage = WaveStage(deployment, progress.advance)
        # Wave N commits (the driver's and the catalog's work) while wave N+1 runs on the executors; commits
        # stay in wave order, each waiting for the one before. Stages run in this thread: Ctrl-C cancels them.
        mark = deployment.catalog.versions.mark()  # updates published after it fail the wave's appends
        while wave:
            budget -= len(wave)
            results = stage.run(wave, run_id)
            report.waves += 1
            report.local_waves, report.spark_start_seconds = stage.local_waves, stage.spark_start_seconds
            if committing is not None:
                committing.result()  # the previous wave's commit, and its failure
            # The next wave's mark and claim, taken before its stage starts and while no commit of ours holds the
            # catalog: on SQLite a claim made during the commit would wait for its write lock, ending the overlap.
            next_mark = deployment.catalog.versions.mark()
            stopping = (stop is not None and stop.is_set()) or budget <= 0
            limit = min(settings.objects_per_wave, budget)
            ended, chunks = discovering.progress()
            next_wave = [] if stopping else claims.take(limit)
            committing = committer.submit(_commit_wave, deployment, results, wave, report, mark, claims)
            if not next_wave and not stopping and not ended:
                discovering.wait(chunks)  # the next wave is what discovery registers next
                next_mark = deployment.catalog.versions.mark()
                next_wave = _take_wave(claims, limit, discovering)
            claimed += len(next_wave)
            if not followed_up and discovering.progress()[0]:
                after_discovery()  # the display's total: what this round claimed and what is claimable now
                progress.resize(claimed + claims.claimable(max(budget - len(next_wave), 0)))
            mark, wave = next_mark, next_wave
        if committing is not None:
            committing.result()
        after_discovery()
        if stored is not None:
            stored.result()
        _add_sweep(report, discovered(), sweeping.result() if sweeping is not None else None)
    except BaseException as exc:
        if committing is not None:
            wait([committing])  # a commit under way ends as it would have (it is one transaction)
        if isinstance(exc, Exception) and report.processed:  # the user is told, in the command's error line
            exc.add_note(
                f"this run had committed {report.processed} staging objects "
                f"({report.records_loaded:,} records) before it failed"
            )
        raise
    finally:
        discovering.join()
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


def _commit_wave(
    deployment: Deployment,
    results: list[WaveResult],
    wave: list[PendingStagingObject],
    report: StreamReport,
    mark: int,
    claims: _Claims,
) -> None:
    commit_results(deployment, results, {item.id: item for item in wave}, report, mark)
    claims.committed(item.id for item in wave)  # a failed one stays claimed until the round gives all back


log = logging.getLogger(__name__)


def _log_round(report: StreamReport) -> None:
    """One line per round that found work; a warning per object that failed or went to unknown."""
    if report.processed or report.registered or report.failed:
        event(
            log,
            "stream.round",
            registered=report.registered,
            notified=report.notified,
            processed=report.processed,
            records_loaded=report.records_loaded,
            bad_records=report.bad_records,
            dropped_fields=report.dropped_fields,
            live_objects=report.live_objects,
            delayed_objects=report.delayed_objects,
            bytes_written=report.bytes_written,
            seconds=report.seconds,
        )
    for uri, reason in report.failed:
        event(log, "stream.object_failed", logging.WARNING, uri=uri, reason=reason)
    for uri, reason in report.unknown:
        event(log, "stream.object_unknown", logging.WARNING, uri=uri, reason=reason)


def stream_forever(
    deployment: Deployment,
    stop: threading.Event,
    on_report: Callable[[StreamReport], None],
    interval: float | None = None,
    on_error: Callable[[Exception, float], None] | None = None,
    progress: Progress | None = None,
) -> None:
    """Poll until stop is set; a round stops between waves once stop is set. A failing round (catalog
    or storage unreachable) is reported and retried with backoff; bad input never fails a round. The rounds
    share a record of the names they listed in a local staging root's directories (storage/accounted.py)."""
    interval = deployment.config.stream.poll_interval if interval is None else interval
    accounted = daemon_names(deployment)
    try:
        poll_forever(
            lambda: stream_once(deployment, progress, stop=stop, accounted=accounted),
            stop,
            interval,
            on_report,
            on_error,
        )
    finally:
        accounted.close()
