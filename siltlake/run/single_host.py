"""Single-host mode (`silt run`): the stream, merge, publish, reap and derived-table loops in one process, on
one SparkSession.

Each loop is its daemon's own loop (`stream_forever`, `MergeWorker.run`, `poll_forever` over
`publish_once`) in a thread of its own, under a supervisor: an exception that escapes a loop is
reported and the loop starts again after a backoff, while the other loops go on. Setting the stop
event ends each loop the way its daemon ends: the stream after its current wave (later waves stay
pending), merge after its running jobs, publish after its current run, derived after its current build.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from siltlake.catalog import CatalogReplaced
from siltlake.deployment import Deployment
from siltlake.derived import RegenerateReport, regenerate
from siltlake.merge import MergeProgress, MergeReport, MergeWorker
from siltlake.observe.history import HistorySampler
from siltlake.observe.metrics import observe_error, observe_report
from siltlake.polling import backoff, poll_forever
from siltlake.publish import PublishReport, publish_once
from siltlake.reap import ReapReport, reap_once
from siltlake.stream import Progress, StreamReport, stream_forever

__all__ = ["Loop", "LoopStatus", "SingleHost", "run_loops"]


@dataclass
class LoopStatus:
    """What one loop is doing and has done; written by its thread, read by the display."""

    name: str
    interval: float
    state: str = "starting"  # starting, working, waiting, retrying, stopping, stopped
    detail: str = ""  # what it works on now, or the error it retries after
    rounds: int = 0
    last_work: str = ""  # what the last round that did something did
    last_work_at: float | None = None  # time.monotonic() of that round
    totals: str = ""
    errors: int = 0
    next_at: float | None = None  # time.monotonic() of the next round or retry

    def working(self, detail: str = "") -> None:
        self.state, self.detail, self.next_at = "working", detail, None

    def round_done(self, work: str | None, totals: str) -> None:
        """A round ended; `work` says what it did, None if it found nothing to do."""
        self.rounds += 1
        self.totals = totals
        if work:
            self.last_work, self.last_work_at = work, time.monotonic()
        self.detail = ""
        if self.state not in ("stopping", "stopped"):
            self.state, self.next_at = "waiting", time.monotonic() + self.interval

    def failed(self, exc: BaseException, wait: float) -> None:
        if self.state in ("stopping", "stopped"):
            # A stop signal that reached Spark's JVM too ends the running round: the stop, not an error.
            self.detail = "its round ended with the shutdown"
            return
        self.errors += 1
        self.state, self.next_at = "retrying", time.monotonic() + wait
        # The first line: a Spark error's text goes on with the whole Java stack, not for a status table.
        self.detail = f"{type(exc).__name__}: {next((line for line in str(exc).splitlines() if line.strip()), '')}"


@dataclass
class Loop:
    """A named loop: body(stop) runs rounds every interval until stop is set, and may raise."""

    name: str
    interval: float
    body: Callable[[threading.Event], None]
    status: LoopStatus = field(init=False)

    def __post_init__(self) -> None:
        self.status = LoopStatus(self.name, self.interval)


# A loop's failure is an Exception: a BaseException that is not one (KeyboardInterrupt) ends the process, not a loop.
ErrorHandler = Callable[[str, Exception, float], None]


def supervise(
    loop: Loop, stop: threading.Event, on_error: ErrorHandler, on_fatal: Callable[[BaseException], None] | None = None
) -> None:
    """Run the loop until stop is set; whatever escapes it is reported and retried after a backoff, except a
    catalog file deleted or replaced under the process: no retry mends that, so it stops every loop."""
    failures = 0
    while not stop.is_set():
        rounds = loop.status.rounds
        try:
            loop.body(stop)
        except CatalogReplaced as exc:
            loop.status.failed(exc, 0.0)
            stop.set()
            if on_fatal is not None:
                on_fatal(exc)
            break
        except Exception as exc:  # one loop's failure (even a SiltError) must not end the others
            # Count failures in a row: a loop that completed rounds since its last failure starts over.
            failures = 1 if loop.status.rounds > rounds else failures + 1
            wait = backoff(loop.interval, failures)
            loop.status.failed(exc, wait)
            on_error(loop.name, exc, wait)
            stop.wait(wait)
        else:
            stop.wait(loop.interval)  # a body returns only once stopped; never spin if one does not
    loop.status.state, loop.status.next_at = "stopped", None


def run_loops(
    loops: list[Loop],
    stop: threading.Event,
    on_error: ErrorHandler,
    on_fatal: Callable[[BaseException], None] | None = None,
) -> list[threading.Thread]:
    """Start a supervised thread per loop; they end once stop is set and their current work is done."""
    threads = [
        threading.Thread(target=supervise, args=(loop, stop, on_error, on_fatal), name=f"silt-{loop.name}", daemon=True)
        for loop in loops
    ]
    for thread in threads:
        thread.start()
    return threads


# --- the three loops ----------------------------------------------------------------------------------


class _StreamStatus(Progress):
    def __init__(self, status: LoopStatus) -> None:
        self.status = status
        self.total = self.done = 0

    def start(self, total: int) -> None:
        self.total, self.done = total, 0
        if total:
            self.status.working(f"{total:,} staging objects")

    def resize(self, total: int) -> None:
        self.total = total

    def advance(self, count: int) -> None:
        self.done += count
        self.status.detail = f"{self.done:,}/{self.total:,} staging objects"


class _MergeStatus(MergeProgress):
    def __init__(self, status: LoopStatus) -> None:
        self.status = status
        self.running = 0
        self.lock = threading.Lock()  # stage threads report at once

    def found(self, jobs: int) -> None:
        with self.lock:
            self.running += jobs
            self.status.working(f"{self.running} jobs running")

    def done(self, jobs: int) -> None:
        with self.lock:
            self.running -= jobs
            self.status.detail = f"{self.running} jobs running"


def stream_work(report: StreamReport) -> str | None:
    if not (report.processed or report.failed or report.registered):
        return None
    parts = [f"{report.processed:,} objects", f"{report.records_loaded:,} records"]
    parts += [
        f"{count:,} {what}"
        for count, what in (
            (report.bad_records, "bad records"),
            (report.dropped_fields, "dropped field values"),
            (len(report.unknown), "unknown"),
            (len(report.failed), "failed"),
            (report.delayed_objects, "delayed"),
        )
        if count
    ]
    return ", ".join(parts)


def merge_totals(report: MergeReport) -> str:
    failed = f", {report.failed} failed ({report.parked} parked)" if report.failed else ""
    return (
        f"{report.finished + report.continuing:,} jobs{failed}, {report.objects_in:,} small objects, "
        f"{report.rows_out:,} rows"
    )


def publish_work(report: PublishReport) -> str | None:
    parts = [
        f"{count} {what}"
        for count, what in (
            (len(report.switched), "switched"),
            (len(report.closed), "closed"),
            (len(report.live_versions), "live versions"),
            (len(report.merged_versions), "merged versions"),
            (report.skipped_merged, "left for the next run"),
        )
        if count
    ]
    return ", ".join(parts) or None


def derived_work(report: RegenerateReport) -> str | None:
    if not (report.built or report.failed):
        return None
    parts = [f"{b.table} {b.kind} {len(b.dates)} dates" for b in report.built]
    parts += [f"{table} failed" for table, _ in report.failed]
    return ", ".join(parts)


class SingleHost:
    """The stream, merge, publish, reap and derived-table loops of one deployment, sharing its SparkSession.

    on_report(name, report) hears each round that did something; on_error(name, exc, wait) each failure.
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        on_report: Callable[[str, object], None] | None = None,
        on_error: ErrorHandler | None = None,
    ) -> None:
        self.deployment = deployment
        self.on_report = on_report or (lambda name, report: None)
        self.on_error = on_error or (lambda name, exc, wait: None)
        config = deployment.config
        self.loops = [
            Loop("stream", config.stream.poll_interval, self._stream),
            Loop("merge", config.merge.poll_interval, self._merge),
            Loop("publish", config.publish.interval, self._publish),
            Loop("reap", config.reap.interval, self._reap),
            Loop("derived", config.derived.interval, self._derived),
        ]
        self.status = {loop.name: loop.status for loop in self.loops}
        self.stop_event = threading.Event()
        # Set by a stream round that committed objects: publish shows them at once, not a publish.interval later.
        self.publish_wake = threading.Event()
        self.threads: list[threading.Thread] = []
        self.fatal: BaseException | None = None  # what stopped every loop (the catalog file replaced), if anything
        self.connect_url: str | None = None  # the Spark Connect server held in the session (spark.connect), if any
        # One worker for the whole run: its report adds up over restarts after errors.
        self.worker = MergeWorker(deployment, progress=_MergeStatus(self.status["merge"]))
        self._stream_totals = StreamReport()
        self._publish_totals = [0, 0, 0, 0]  # switched, closed, live versions, merged versions
        self._reap_totals = [0, 0]  # objects, bytes
        self._derived_totals = [0, 0, 0]  # builds, dates, failed builds
        self._merge_seen = dict.fromkeys(("claimed", "jobs", "objects", "rows"), 0)

    # --- control ------------------------------------------------------------------------------------

    def start_spark(self) -> None:
        """Check the catalog and start the one SparkSession every loop uses.

        Started here, once: the stream and merge threads would otherwise race to create it. PySpark
        installs its own SIGINT handler as it starts; a caller handling signals installs its own after.
        With spark.connect, the session also serves Spark Connect there (connect_url).
        """
        self.deployment.catalog.check_ready()  # not initialised: a SiltError for the user, before anything runs
        for status in self.status.values():
            status.detail = "starting Spark"
        spark = self.deployment.spark()
        if self.deployment.config.spark.connect and self.connect_url is None:
            from siltlake.spark import start_connect_server

            self.connect_url = start_connect_server(spark, self.deployment.config.spark)
        for status in self.status.values():
            status.detail = ""

    def start(self) -> None:
        """Start the loops (and Spark first, if start_spark was not called)."""
        self.start_spark()
        self.threads = run_loops(self.loops, self.stop_event, self.on_error, self._fatal)
        HistorySampler(self.deployment, self.stop_event).start()  # the dashboard's history, every interval

    def stop(self) -> None:
        """Ask every loop to stop after its current work (safe to call from a signal handler)."""
        self.stop_event.set()
        self.publish_wake.set()  # a publish loop waiting for work ends now
        for status in self.status.values():
            if status.state != "stopped":
                status.state, status.next_at = "stopping", None

    def _fatal(self, exc: BaseException) -> None:
        self.fatal = self.fatal or exc
        self.stop()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to timeout for every loop to end; True once all have."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self.threads)

    # --- loop bodies --------------------------------------------------------------------------------

    def _stream(self, stop: threading.Event) -> None:
        status = self.status["stream"]
        totals = self._stream_totals

        def report(round_: StreamReport) -> None:
            totals.processed += round_.processed
            totals.records_loaded += round_.records_loaded
            totals.bad_records += round_.bad_records
            totals.unknown += round_.unknown
            observe_report("stream", round_)
            status.round_done(
                stream_work(round_),
                f"{totals.processed:,} objects, {totals.records_loaded:,} records"
                + (f", {totals.bad_records:,} bad" if totals.bad_records else "")
                + (f", {len(totals.unknown):,} unknown" if totals.unknown else ""),
            )
            if round_.processed:
                self.publish_wake.set()
            if stream_work(round_):
                self.on_report("stream", round_)

        stream_forever(
            self.deployment,
            stop,
            report,
            status.interval,
            progress=_StreamStatus(status),
            on_error=lambda exc, wait: self._failed(status, exc, wait),
        )

    def _merge(self, stop: threading.Event) -> None:
        status = self.status["merge"]
        before = self._merge_seen

        def on_round(report: MergeReport) -> None:
            # The worker's report adds up over the run; what changed since the last idle round is its work.
            now = {
                "claimed": report.claimed,
                "jobs": report.finished + report.continuing + report.failed,
                "objects": report.objects_in,
                "rows": report.rows_out,
            }
            work = None
            if now["claimed"] != before["claimed"]:
                work = (
                    f"{now['jobs'] - before['jobs']} jobs, {now['objects'] - before['objects']:,} small objects, "
                    f"{now['rows'] - before['rows']:,} rows"
                )
            before.update(now)
            observe_report("merge", report)
            status.round_done(work, merge_totals(report))
            if work:
                self.on_report("merge", report)

        self.worker.run(stop, on_round=on_round, on_error=lambda exc, wait: self._failed(status, exc, wait))

    def _publish(self, stop: threading.Event) -> None:
        status = self.status["publish"]
        totals = self._publish_totals

        def one_run() -> PublishReport:
            status.working()
            return publish_once(self.deployment)

        def report(run: PublishReport) -> None:
            observe_report("publish", run)
            for index, count in enumerate(
                (len(run.switched), len(run.closed), len(run.live_versions), len(run.merged_versions))
            ):
                totals[index] += count
            status.round_done(
                publish_work(run),
                f"{totals[0]} switched, {totals[1]} closed, {totals[2]} live and {totals[3]} merged versions",
            )
            if publish_work(run):
                self.on_report("publish", run)

        poll_forever(
            one_run,
            stop,
            status.interval,
            report,
            on_error=lambda exc, wait: self._failed(status, exc, wait),
            wake=self.publish_wake,
        )

    def _reap(self, stop: threading.Event) -> None:
        status = self.status["reap"]
        totals = self._reap_totals

        def one_run() -> ReapReport:
            status.working()
            return reap_once(self.deployment)

        def report(run: ReapReport) -> None:
            observe_report("reap", run)
            totals[0] += run.objects
            totals[1] += run.bytes
            work = f"{run.objects:,} objects, {run.bytes:,} bytes" if run.objects else None
            status.round_done(work, f"{totals[0]:,} objects, {totals[1]:,} bytes freed")
            if work:
                self.on_report("reap", run)

        poll_forever(one_run, stop, status.interval, report, on_error=lambda exc, wait: self._failed(status, exc, wait))

    def _derived(self, stop: threading.Event) -> None:
        status = self.status["derived"]
        totals = self._derived_totals

        def one_run() -> RegenerateReport:
            status.working("checking triggers")
            return regenerate(self.deployment)

        def report(run: RegenerateReport) -> None:
            totals[0] += len(run.built)
            totals[1] += sum(len(b.dates) for b in run.built)
            totals[2] += len(run.failed)
            status.round_done(
                derived_work(run),
                f"{totals[0]} builds, {totals[1]} dates" + (f", {totals[2]} failed" if totals[2] else ""),
            )
            if derived_work(run):
                self.on_report("derived", run)

        poll_forever(one_run, stop, status.interval, report, on_error=lambda exc, wait: self._failed(status, exc, wait))

    def _failed(self, status: LoopStatus, exc: Exception, wait: float) -> None:
        observe_error(status.name)
        status.failed(exc, wait)
        self.on_error(status.name, exc, wait)
