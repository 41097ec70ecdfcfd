"""The merge driver: claim due jobs, plan them, run their plans as Spark stages, commit or retry.

A worker holds up to `slots` jobs at once. Each batch of claimed jobs runs as one Spark stage with one
task per job plan, so hundreds of due partitions cost one stage, not hundreds of Spark jobs; a batch whose
inputs total at most merge.in_driver_bytes skips Spark and runs on the worker's own threads. A heartbeat
thread keeps the claims fresh; a job whose worker dies is taken over by another after merge.job_timeout,
or at once by a worker on the same host, which sees that the claim's process is gone.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siltlake.catalog import ClaimedJob, JobOutcome, LostMergeJob, MergeConflict, RangeWrite
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.hosts import default_owner, local_host
from siltlake.logs import event
from siltlake.merge.planner import MergedRange, MergeLimits, MergePlan, SmallObject, plan_merge
from siltlake.merge.scan import open_in_background, opened
from siltlake.merge.task import MergeTask, RangeTask, run_merge_task
from siltlake.spark import run_tasks

log = logging.getLogger(__name__)

UNQUEUED_CHECK_SECONDS = 600.0  # how often a merge worker looks for unmerged objects left without a job


@dataclass
class MergeReport:
    claimed: int = 0
    taken_over: int = 0
    finished: int = 0
    continuing: int = 0
    failed: int = 0
    parked: int = 0
    lost: int = 0
    conflicts: int = 0
    outages: int = 0  # attempts a storage outage stopped: retried after retry_backoff, never counted
    stages: int = 0
    in_driver: int = 0  # batches small enough to run in the worker's process (merge.in_driver_bytes)
    unqueued: int = 0  # partitions found with unmerged objects and no job, given one (MergeQueue.schedule_unqueued)
    objects_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_out: int = 0
    bytes_decoded: int = 0
    modes: dict[str, int] = field(default_factory=dict)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (table, date, error)
    seconds: float = 0.0
    spark_start_seconds: float = 0.0


class MergeProgress:
    """What the worker tells a progress display; the default shows nothing."""

    def found(self, jobs: int) -> None: ...

    def done(self, jobs: int) -> None: ...


@dataclass
class _Prepared:
    job: ClaimedJob
    plan: MergePlan
    base_upper: int | None
    task: MergeTask | None


def run_in_driver(tasks: list[MergeTask]) -> list[dict]:
    """Run small jobs on the worker's own threads: a Spark stage costs more than merging a few MB.

    The trade is isolation: a job that ran out of memory here would take the worker down with it (its
    claims go stale and are taken over), which merge.in_driver_bytes bounds.
    """
    if len(tasks) == 1:
        return [run_merge_task(tasks[0])]
    with ThreadPoolExecutor(min(len(tasks), os.cpu_count() or 1), thread_name_prefix="siltlake-merge") as pool:
        return list(pool.map(run_merge_task, tasks))


class MergeWorker:
    """Runs merge jobs of one deployment. Thread-safe to stop from another thread (stop event)."""

    def __init__(
        self,
        deployment: Deployment,
        *,
        owner: str | None = None,
        slots: int | None = None,
        clock: Callable[[], dt.datetime] = utcnow,
        progress: MergeProgress | None = None,
        table_ids: list[int] | None = None,
        partition_ids: list[int] | None = None,
    ) -> None:
        self.deployment = deployment
        self.catalog = deployment.catalog
        self.settings = deployment.config.merge
        self.owner = owner or default_owner()
        self.local = local_host()
        self.slots = slots or self.settings.slots
        self.clock = clock
        self.progress = progress or MergeProgress()
        self.table_ids = table_ids
        self.partition_ids = partition_ids  # None: any partition of the tables
        self.report = MergeReport()
        self._held: dict[int, ClaimedJob] = {}
        self._lock = threading.Lock()
        self._spark_lock = threading.Lock()
        self._wake = threading.Event()
        # Stages whose end may have made jobs claimable: a claim before them passed due jobs over (a busy
        # partition, a table at its cap, the slots full), or a job of theirs continued or was released.
        self._stages_freeing = 0
        self._passed_over = 0  # of the last claim
        self._requeued = False  # a job continued or was released since the last stage ended
        self._running_stages = 0
        self._next_unqueued_check = 0.0

    # --- planning ------------------------------------------------------------------------------------

    def _prepare(self, job: ClaimedJob) -> _Prepared:
        definition = job.table.definition
        limits = MergeLimits(
            merged_object_size=definition.merged_object_size,
            merge_batch_size=definition.merge_batch_size,
            single_range=definition.keyed,
        )
        last, base_upper, pending = self.catalog.merge_queue.unmerged_objects(
            job.partition_id, limits.merge_batch_size + 1
        )
        # The catalog gives a last range only with its lower bound (the sentinel alone is None).
        last_range = (
            MergedRange(last.lower, last.upper, last.content_length, last.row_count)
            if last is not None and last.lower is not None
            else None
        )
        objects = [SmallObject(o.id, o.content_length, o.row_count, o.delayed) for o in pending]
        plan = plan_merge(objects, last_range, limits)
        if not plan.ranges:
            return _Prepared(job, plan, base_upper, None)
        layout = job.table.layout(self.deployment.instance_key)
        date, values = job.partition_date, job.partition_values
        ranges = tuple(
            RangeTask(
                lower=planned.lower,
                upper=planned.upper,
                output_key=layout.merged_object(date, planned.lower, planned.upper, values),
                small_keys=tuple(layout.small_object(date, o.id, o.delayed, values) for o in planned.objects),
                small_bytes=planned.new_bytes,
                existing_key=last.key(layout, date, values) if planned.extends and last else None,
                existing_bytes=planned.extends.content_length if planned.extends else 0,
            )
            for planned in plan.ranges
        )
        task = MergeTask(
            job_id=job.id,
            lake=self.deployment.lake,
            table_json=definition.to_json(),
            partition_date=date,
            ranges=ranges,
            row_group_bytes=definition.row_group_bytes,
        )
        return _Prepared(job, plan, base_upper, task)

    # --- finishing -----------------------------------------------------------------------------------

    def _finish(self, prepared: _Prepared, result: dict | None, started) -> None:
        job = prepared.job
        report = self.report
        now = self.clock()
        plan = prepared.plan
        try:
            if result is not None and result["status"] != "ok":
                if result.get("outage"):
                    self._outage(prepared, result["error"], started, now)
                else:
                    self._fail(prepared, result["error"], started, now)
                return
            ranges = result["ranges"] if result else []
            # A keyed table's merge drops the rows that lost to a later row of their key (and deleted keys):
            # its object may hold fewer rows than its inputs, never more.
            keyed = job.table.definition.keyed
            for planned, written in zip(plan.ranges, ranges, strict=True):
                if written["rows"] > planned.row_count or (written["rows"] < planned.row_count and not keyed):
                    self._fail(
                        prepared,
                        f"range ({planned.lower}, {planned.upper}] holds {written['rows']} rows, "
                        f"its inputs {planned.row_count}; not committed",
                        started,
                        now,
                    )
                    return
            writes = [
                RangeWrite(
                    lower=planned.lower,
                    upper=planned.upper,
                    old_upper=planned.extends.upper if planned.extends else None,
                    content_length=written["bytes_out"],
                    row_count=written["rows"],
                )
                for planned, written in zip(plan.ranges, ranges, strict=True)
            ]
            modes = sorted({written["mode"] for written in ranges})
            notes = [note for written in ranges for note in written["notes"]]
            outcome = JobOutcome(
                mode="+".join(modes) or None,
                objects_in=len(plan.objects),
                bytes_in=sum(o.content_length for o in plan.objects),
                bytes_out=sum(w["bytes_out"] for w in ranges),
                rows_out=sum(w["rows"] for w in ranges),
                bytes_decoded=sum(w["bytes_decoded"] for w in ranges),
                start_time=started,
                note="; ".join(notes) or None,
            )
            self.catalog.merge_queue.commit(
                job,
                self.owner,
                base_upper=prepared.base_upper,
                writes=writes,
                continuing=plan.continuing,
                result=outcome,
                now=now,
            )
            with self._lock:
                self._requeued = self._requeued or plan.continuing
                report.continuing += plan.continuing
                report.finished += not plan.continuing
                report.objects_in += outcome.objects_in
                report.bytes_in += outcome.bytes_in
                report.bytes_out += outcome.bytes_out
                report.rows_out += outcome.rows_out
                report.bytes_decoded += outcome.bytes_decoded
                for mode in modes:
                    report.modes[mode] = report.modes.get(mode, 0) + 1
            event(
                log,
                "merge.job",
                job=job.id,
                table=job.table.qualified_name,
                date=job.partition_date,
                mode=outcome.mode,
                continuing=plan.continuing,
                objects_in=outcome.objects_in,
                bytes_in=outcome.bytes_in,
                bytes_out=outcome.bytes_out,
                rows_out=outcome.rows_out,
                seconds=(now - started).total_seconds(),
            )
        except LostMergeJob:
            with self._lock:
                report.lost += 1  # its output is the new holder's to write again; reap removes strays
        except MergeConflict as exc:
            with self._lock:
                report.conflicts += 1
                report.errors.append((job.table.qualified_name, job.partition_date.isoformat(), str(exc)))
                self._requeued = True
            self.catalog.merge_queue.release(job, self.owner, now)
        except Exception as exc:  # the catalog went away mid-commit: the claim goes stale and is taken over
            with self._lock:
                report.errors.append(
                    (
                        job.table.qualified_name,
                        job.partition_date.isoformat(),
                        f"commit failed: {type(exc).__name__}: {exc}",
                    )
                )
        finally:
            with self._lock:
                self._held.pop(job.id, None)
            self.progress.done(1)

    def _fail(self, prepared: _Prepared, error: str, started, now) -> None:
        job = prepared.job
        parked = self.catalog.merge_queue.fail(
            job,
            self.owner,
            error,
            result=JobOutcome(mode=None, objects_in=len(prepared.plan.objects), start_time=started),
            now=now,
            max_attempts=self.settings.max_attempts,
            backoff=self.settings.retry_backoff,
        )
        event(
            log,
            "merge.job_failed",
            logging.WARNING,
            job=job.id,
            table=job.table.qualified_name,
            date=job.partition_date,
            parked=bool(parked),
            reason=error,
        )
        with self._lock:
            self.report.failed += 1
            self.report.parked += parked
            self.report.errors.append((job.table.qualified_name, job.partition_date.isoformat(), error))

    def _outage(self, prepared: _Prepared, error: str, started, now) -> None:
        """A storage outage (full, read-only, unreachable) stopped the job: the surroundings' failure, as in the
        stream, so the attempt is not counted. It waits merge.retry_backoff, not doubled: no attempt grew."""
        job = prepared.job
        retry = now + dt.timedelta(seconds=self.settings.retry_backoff)
        reason = f"storage outage, not counted as an attempt: {error}"
        self.catalog.merge_queue.release(
            job,
            self.owner,
            now,
            due=retry,
            error=reason,
            result=JobOutcome(mode=None, objects_in=len(prepared.plan.objects), start_time=started),
        )
        event(
            log,
            "merge.job_outage",
            logging.WARNING,
            job=job.id,
            table=job.table.qualified_name,
            date=job.partition_date,
            retry=retry,
            reason=error,
        )
        with self._lock:
            self.report.outages += 1
            self.report.errors.append((job.table.qualified_name, job.partition_date.isoformat(), reason))

    # --- running -------------------------------------------------------------------------------------

    def _run_batch(self, jobs: list[ClaimedJob]) -> None:
        started = self.clock()
        prepared: list[_Prepared] = []
        for job in jobs:
            try:
                prepared.append(self._prepare(job))
            except Exception as exc:  # a catalog row the planner refuses: fail this job, keep the others
                self._fail(
                    _Prepared(job, MergePlan(ranges=(), continuing=False, needs_sentinel=False), None, None),
                    f"planning failed: {type(exc).__name__}: {exc}",
                    started,
                    self.clock(),
                )
                with self._lock:
                    self._held.pop(job.id, None)
                self.progress.done(1)
        runnable = [(p, p.task) for p in prepared if p.task is not None]
        tasks = [task for _, task in runnable]
        results: list[dict] = []
        if tasks and sum(task.input_bytes for task in tasks) <= self.settings.in_driver_bytes:
            results = run_in_driver(tasks)
            with self._lock:
                self.report.in_driver += 1
        elif tasks:
            spark = self._spark()
            try:
                results = run_tasks(
                    spark, run_merge_task, tasks, weights=[task.weight for task in tasks], tasks=len(tasks)
                )
            except Exception as exc:  # the stage itself failed (lost executors): every job retries
                results = [
                    {"status": "failed", "error": f"Spark stage failed: {type(exc).__name__}: {exc}"} for _ in tasks
                ]
            with self._lock:
                self.report.stages += 1
        by_job = {p.job.id: r for (p, _), r in zip(runnable, results, strict=True)}
        for item in prepared:
            self._finish(item, by_job.get(item.job.id), started)

    def _spark(self):  # a SparkSession
        with self._spark_lock:  # stage threads may ask at once: start (and time) the session once
            if self.deployment._spark is None:
                spark_started = time.monotonic()
                self.deployment.spark()
                self.report.spark_start_seconds += time.monotonic() - spark_started
            return self.deployment.spark()

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.settings.heartbeat_interval):
            with self._lock:
                held = list(self._held)
            try:
                self.catalog.merge_queue.heartbeat(held, self.owner, self.clock())
            except Exception:  # the catalog is briefly unreachable: try again next beat
                continue

    def claim(self, limit: int) -> list[ClaimedJob]:
        if time.monotonic() >= self._next_unqueued_check:
            self._schedule_unqueued()
        claimed = self.catalog.merge_queue.claim(
            self.owner,
            limit=limit,
            now=self.clock(),
            timeout=self.settings.job_timeout,
            per_table_limit=self.settings.per_table_limit,
            table_ids=self.table_ids,
            local=self.local,
            partition_ids=self.partition_ids,
            fair_levels=self.settings.fair_shares,
            per_schema_limit=self.settings.slots_per_schema,
        )
        with self._lock:
            self._passed_over = claimed.passed_over
            for job in claimed:
                self._held[job.id] = job
            self.report.claimed += len(claimed)
            self.report.taken_over += sum(job.taken_over for job in claimed)
        return claimed

    def _schedule_unqueued(self) -> None:
        """At the worker's first claim and every UNQUEUED_CHECK_SECONDS: no partition's objects wait without a job."""
        found = self.catalog.merge_queue.schedule_unqueued(self.clock(), self.table_ids)
        self._next_unqueued_check = time.monotonic() + UNQUEUED_CHECK_SECONDS
        if found:
            with self._lock:
                self.report.unqueued += len(found)
            event(
                log,
                "merge.unqueued",
                logging.WARNING,
                partitions=len(found),
                ids=",".join(map(str, found[:20])),
                note="small objects were waiting with no merge job; each partition has one now",
            )

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        once: bool = False,
        on_round: Callable[[MergeReport], None] | None = None,
        on_error: Callable[[Exception, float], None] | None = None,
    ) -> MergeReport:
        """Claim and run jobs until stop is set, or (once) until no due job is left.

        Stages run in background threads so freed slots are refilled while long jobs run. Catalog
        outages are retried with backoff; configuration problems (SiltError) stop the worker.
        """
        stop = stop or threading.Event()
        started = time.monotonic()
        self.catalog.check_ready()
        self.deployment.check_instance("merge")
        beat_stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat_loop, args=(beat_stop,), daemon=True, name="merge-heartbeat")
        beat.start()
        stages: list[threading.Thread] = []
        failures = 0
        # A claim that came back short found no more due jobs: claim again only once a stage whose end may have
        # made jobs due has finished since, or the poll interval has passed.
        drained_at: int | None = None  # self._stages_freeing before the last short claim
        try:
            while True:
                stages = [t for t in stages if t.is_alive()]  # kept to be joined
                with self._lock:
                    running = self._running_stages
                claimed: list[ClaimedJob] = []
                free = self.slots - len(self._held)
                if free > 0 and drained_at != self._stages_freeing and not stop.is_set():
                    try:
                        before = self._stages_freeing
                        claimed = self.claim(free)
                        drained_at = before if len(claimed) < free else None
                        failures = 0
                    except SiltError:
                        raise
                    except Exception as exc:  # catalog unreachable: back off, keep running jobs going
                        failures += 1
                        wait = min(2.0**failures, 60.0)
                        if on_error is not None:
                            on_error(exc, wait)
                        stop.wait(wait)
                        continue
                if claimed:
                    if not self.deployment.lake.is_object_store:
                        open_in_background()
                    self.progress.found(len(claimed))
                    self._wake.clear()
                    stage = threading.Thread(target=self._stage, args=(claimed,), daemon=True, name="merge-stage")
                    with self._lock:
                        self._running_stages += 1
                    stage.start()
                    stages.append(stage)
                    continue
                if not running and (stop.is_set() or (once and drained_at == self._stages_freeing)):
                    break
                self.report.seconds = time.monotonic() - started
                if on_round is not None and not running:
                    on_round(self.report)
                # Wake when a stage finishes (slots freed) or the poll interval passes.
                if not self._wake.wait(0.5 if once or running else self.settings.poll_interval):
                    drained_at = None
                self._wake.clear()
        finally:
            for stage in stages:
                stage.join()
            opened()
            beat_stop.set()
            beat.join()
            self.report.seconds = time.monotonic() - started
        return self.report

    def _stage(self, jobs: list[ClaimedJob]) -> None:
        try:
            self._run_batch(jobs)
        finally:
            with self._lock:
                if self._passed_over or self._requeued:
                    self._stages_freeing += 1
                    self._requeued = False
                # Counted as ended here, before the wake: a thread still alive while it returns would otherwise
                # look like a running stage to the woken loop, which then waited out a whole poll.
                self._running_stages -= 1
            self._wake.set()


def merge_once(deployment: Deployment, progress: MergeProgress | None = None, **options) -> MergeReport:
    """Drain every due merge job and return what happened."""
    return MergeWorker(deployment, progress=progress, **options).run(once=True)
